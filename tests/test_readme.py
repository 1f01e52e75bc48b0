"""The README a newcomer reads first: every command it shows is run by a named test, its first 60
lines hold what it is, the picture, `make run` / `make test` and where to look after a run, its
links lead somewhere, and it stays under 10 kB.

Fast and in-process: the README, the Makefile and the test files are read, nothing is run. The
commands are the lines of the README's shell blocks (```, ```sh, ```bash); ```text blocks are output.
"""
import ast
import os
import re

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
README = os.path.join(ROOT, "README.md")
SHELL_FENCES = ("", "sh", "bash", "shell", "console")
COMMAND_STARTS = ("make ", "edgemesh ", "python ", "python3 -m venv ", "tensorboard ", ".venv/bin/", "launch/")
MAX_BYTES = 10_000
FIRST = 60  # lines a newcomer reads before scrolling on

THIS = "tests/test_readme.py::"
MAIN_JOB = "tests/cli/test_run_main_job.py::"
EXAMPLES = "tests/examples/test_examples.py::"
LAUNCHED = "tests/cluster/test_launch.py::test_launched_servers_train_to_target_and_a_stopped_one_is_named_within_30_s"
FLAGS_OF_RUN = "tests/cli/test_flags_reach_config.py::test_every_flag_of_run_reaches_the_main_job_and_its_job_config"

# A README command, or its prefix (the longest that matches wins), -> the tests that run it.
RUN_BY = {
    # the make targets are checked here against the Makefile; what they run, by the tests after
    "make run": (THIS + "test_the_make_targets_the_readme_shows_run_what_it_says",
                 MAIN_JOB + "test_summary_is_printed_and_matches_the_event_files"),  # `edgemesh run`, its summary
    "make test": (THIS + "test_the_make_targets_the_readme_shows_run_what_it_says",
                  "tests/test_markers.py::test_markers_are_registered_and_strict"),
    "make test-fast": (THIS + "test_the_make_targets_the_readme_shows_run_what_it_says",
                       "tests/test_markers.py::test_every_test_that_starts_processes_carries_its_markers"),
    'make run RUN_ARGS="--sync': (FLAGS_OF_RUN,  # --sync reaches the job's SyncConfig
                                  "tests/engine/test_engine_sync.py::"
                                  "test_bsp_equals_single_process_sgd_on_the_concatenated_batches"),
    "make bench": (THIS + "test_the_make_targets_the_readme_shows_run_what_it_says",
                   "tests/bench/test_bench_report.py::test_make_bench_leaves_the_variant_table_to_its_own_target"),
    ".venv/bin/tensorboard --logdir": (MAIN_JOB + "test_tensorboard_shows_layout_and_throughput_in_headless_chromium",),
    # Your own model: the check command and the model file are the README's own (extracted by the test)
    ".venv/bin/python -c": (EXAMPLES + "test_readme_check_command_prints_the_models_layers",),
    ".venv/bin/edgemesh run --model my_model.py": (EXAMPLES + "test_readme_model_file_loads_for_digits32",
                                                   EXAMPLES + "test_edgemesh_run_my_cnn_reaches_its_target_and_splits"),
    # Bring a Keras model: the README's three lines, run as they are
    ".venv/bin/python examples/keras_cnn.py": (
        EXAMPLES + "test_readme_keras_commands_train_export_and_evaluate_with_plain_keras",),
    ".venv/bin/edgemesh run --model out/keras_cnn.keras": (
        EXAMPLES + "test_readme_keras_commands_train_export_and_evaluate_with_plain_keras",),
    # Real devices: no test has real devices; the emulator starts `edgemesh server` per device, and
    # --noemulate is checked to reach the job (real servers at the file's addresses) and the profiler
    ".venv/bin/edgemesh tf-config": ("tests/cluster/test_cluster_spec.py::test_tf_config_cli_writes_one_file_per_device",),
    "edgemesh server": ("tests/cluster/test_emulator.py::test_up_run_ops_and_down_leaves_nothing",),
    ".venv/bin/edgemesh run --cluster": (FLAGS_OF_RUN,
                                         "tests/profiling/test_profile_run.py::test_real_servers_are_profiled_directly",
                                         LAUNCHED),
    # Run on real devices: the install resolved for the boards; launch/cluster.sh on localhost servers
    "python3 -m venv .venv": ("tests/test_install_platforms.py::test_requirements_have_wheels_for_the_boards",
                              "tests/test_install_platforms.py::test_setup_py_installs_the_runtime_requirements"),
    ".venv/bin/edgemesh cluster check": ("tests/cluster/test_cluster_check.py::"
                                         "test_check_on_localhost_servers_measures_every_device_and_flags_the_far_figure",),
    "launch/cluster.sh": (LAUNCHED,  # start, wait, logs, stop as the README shows them; ssh through a stand-in
                          "tests/cluster/test_launch.py::"
                          "test_a_remote_device_is_started_waited_for_logged_and_stopped_over_ssh"),
    # Commands: `edgemesh --help` and `edgemesh SUBCOMMAND --help`
    ".venv/bin/edgemesh --help": ("tests/cli/test_help.py::test_help_lists_every_subcommand_and_exits_0",),
    ".venv/bin/edgemesh run --help": ("tests/cli/test_help.py::test_run_help_lists_its_flags_by_group_before_absl_flags",),
    # Python API
    ".venv/bin/python examples/train_python_api.py": (EXAMPLES + "test_train_python_api_reaches_its_target",),
    ".venv/bin/python examples/inspect_plan.py": (EXAMPLES + "test_inspect_plan_explains_a_saved_profile",),
}
# Test files another engineer is writing now: while the file does not exist yet, its check is skipped.
BEING_WRITTEN = {"tests/cli/test_help.py"}


def _readme() -> str:
    with open(README, encoding="utf-8") as f:
        return f.read()


def _shell_blocks(text: str) -> list[tuple[int, list[str]]]:
    """(line number of the first line, lines) of every shell block: ``` with no language, sh or bash."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        assert end is not None, "README.md line %d: a code block that is never closed" % (i + 1)
        if m.group(1) in SHELL_FENCES:
            blocks.append((i + 2, lines[i + 1:end]))
        i = end + 1
    return blocks


def _without_comment(line: str) -> str:
    """The command of a line: a `#` after a space and outside quotes starts a comment."""
    quote = None
    for k, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k].strip()
    return line.strip()


def readme_commands(text: str | None = None) -> list[tuple[int, str]]:
    """(line number, command) of every command line in the README's shell blocks."""
    out = []
    for first, block in _shell_blocks(_readme() if text is None else text):
        for n, raw in enumerate(block, first):
            command = " ".join(_without_comment(raw).removeprefix("$ ").split())
            if command:
                out.append((n, command))
    return out


def _matches(command: str, key: str) -> bool:
    return command == key or command.startswith(key + " ")


def _run_by(command: str) -> tuple[str, ...]:
    keys = [k for k in RUN_BY if _matches(command, k)]
    return RUN_BY[max(keys, key=len)] if keys else ()


def _defined(path: str, name: str) -> bool:
    """`name` (a function, or Class::method) is defined in the test file at `path`."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    scope = tree.body
    *classes, function = name.split("::")
    for cls in classes:
        scope = next((n.body for n in scope if isinstance(n, ast.ClassDef) and n.name == cls), [])
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function for n in scope)


def test_every_command_line_is_one_this_test_knows_how_to_check():
    commands = readme_commands()
    assert len(commands) >= 10, commands  # the extraction finds the README's commands
    odd = [(n, c) for n, c in commands if not c.startswith(COMMAND_STARTS)]
    assert not odd, ("README.md: shell blocks hold only commands starting with %s (put output in ```text "
                     "blocks): %s" % (", ".join(COMMAND_STARTS), odd))


def test_every_command_the_readme_shows_is_run_by_a_named_test():
    missing = [(n, c) for n, c in readme_commands() if not _run_by(c)]
    assert not missing, ("README.md commands without a test in tests/test_readme.py's RUN_BY (add the command, "
                         "or its prefix, and the test that runs it): %s" % missing)


def test_the_table_names_only_commands_the_readme_shows():
    commands = [c for _, c in readme_commands()]
    stale = [k for k in RUN_BY if not any(_matches(c, k) for c in commands)]
    assert not stale, "RUN_BY keys that match no README command (remove them): %s" % stale


@pytest.mark.parametrize("node", sorted({node for nodes in RUN_BY.values() for node in nodes}))
def test_each_named_test_exists(node):
    path, _, name = node.partition("::")
    assert path.startswith("tests/") and path.endswith(".py"), node
    if path in BEING_WRITTEN and not os.path.exists(os.path.join(ROOT, path)):
        pytest.skip("%s is being written; check the README's commands it maps once it exists" % path)
    assert os.path.exists(os.path.join(ROOT, path)), "%s: no such test file" % node
    assert name.split("::")[-1].startswith("test_"), "%s: name the test function (file::test_name)" % node
    assert _defined(path, name), "%s: no such test in %s" % (node, path)


def _make_recipes() -> dict[str, str]:
    """Makefile target -> its recipe (the tab-indented lines after `target:`)."""
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    recipes, target = {}, None
    for line in lines:
        m = re.match(r"^([A-Za-z][\w-]*):", line)
        if m:
            target = m.group(1)
            recipes[target] = ""
        elif line.startswith("\t") and target:
            recipes[target] += line.strip() + "\n"
        elif not line.strip():
            target = None
    return recipes


def _markers() -> list:
    """The markers pytest.ini declares."""
    with open(os.path.join(ROOT, "pytest.ini"), encoding="utf-8") as f:
        return re.findall(r"^\s+(\w+): ", f.read().partition("markers =")[2], re.M)


MARKERS = _markers()


def _selects(expression: str, marks: set) -> bool:
    """Whether pytest's `-m expression` (names, and/or/not, parentheses) selects a test with `marks`."""
    code = re.sub(r"\b(?!and\b|or\b|not\b)(\w+)\b", lambda m: str(m.group(1) in marks), expression)
    return eval(code, {"__builtins__": {}})  # only True/False, and, or, not and parentheses remain


def _assert_the_passes_select_every_test_once(recipe: str):
    """`make test`'s pytest commands each select tests by `-m` (none: every test); every combination of
    the markers is selected by exactly one of them, so every test runs, and runs once."""
    passes = [line for line in recipe.splitlines() if "pytest" in line]
    assert passes and all(line.rstrip().endswith(" tests") for line in passes), recipe
    expressions = [re.search(r'-m "([^"]+)"', line) for line in passes]
    expressions = [m.group(1) if m else None for m in expressions]
    for k in range(2 ** len(MARKERS)):
        marks = {m for i, m in enumerate(MARKERS) if k >> i & 1}
        chosen = [e for e in expressions if e is None or _selects(e, marks)]
        assert len(chosen) == 1, "make test: a test marked %s is run by %d passes (%s)" % (
            sorted(marks), len(chosen), expressions)


def test_make_tests_passes_are_checked_for_tests_run_twice_or_never():
    _assert_the_passes_select_every_test_once('pytest -q -m "not emulator" tests\npytest -q -m "emulator" tests')
    _assert_the_passes_select_every_test_once("pytest -q tests")
    for wrong in ('pytest -q -m "not emulator" tests\npytest -q -m "browser" tests',
                  'pytest -q -m "not emulator" tests\npytest -q tests'):
        with pytest.raises(AssertionError):
            _assert_the_passes_select_every_test_once(wrong)


def test_the_make_targets_the_readme_shows_run_what_it_says():
    recipes = _make_recipes()
    shown = {c.split()[1] for _, c in readme_commands() if c.startswith("make ")}
    assert {"run", "test", "test-fast"} <= shown, shown
    for target in shown:
        assert target in recipes, "README.md shows `make %s`; the Makefile has no such target" % target
    assert "edgemesh run $(RUN_ARGS)" in recipes["run"], recipes["run"]  # RUN_ARGS="--sync bsp" reaches it
    _assert_the_passes_select_every_test_once(recipes["test"])
    fast = re.search(r'-m "([^"]+)"', recipes["test-fast"])
    assert fast, recipes["test-fast"]
    assert set(re.findall(r"not (\w+)", fast.group(1))) == set(MARKERS) == {"emulator", "browser", "subprocess", "slow"}
    if "bench" in shown:
        assert "-m bench.suite" in recipes["bench"], recipes["bench"]


def test_the_first_60_lines_hold_the_picture_the_two_commands_and_where_to_look():
    head = "\n".join(_readme().splitlines()[:FIRST])
    pictures = re.findall(r"!\[[^\]]*\]\(([^)\s]+\.png)\)", head)
    assert pictures, "README.md: no picture (![...](docs/....png)) in its first %d lines" % FIRST
    with open(os.path.join(ROOT, pictures[0]), "rb") as f:
        png = f.read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000, pictures[0]
    commands = [c for n, c in readme_commands() if n <= FIRST]
    for command in ("make run", "make test", "make test-fast"):
        assert command in commands, "README.md: `%s` not in a shell block of its first %d lines" % (command, FIRST)
    for where in ("<run>/plan.yaml", "<run>/profile.json", "<run>/summary.json", "tensorboard --logdir <run>/tb",
                  "layouts/pi4.yaml"):
        assert where in head, "README.md: %s not in its first %d lines" % (where, FIRST)
    for tab in ("Images", "Text", "Scalars", "Custom Scalars", "HParams"):
        assert re.search(r"^\| %s \|" % tab, head, re.M), "README.md: TensorBoard tab %s not explained" % tab


def test_the_readme_is_short():
    size = os.path.getsize(README)
    assert size < MAX_BYTES, "README.md is %d bytes; keep it under %d (details go to docs/USER_GUIDE.md)" % (
        size, MAX_BYTES)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_leads_to_a_file_and_heading():
    links = re.findall(r"\]\(([^)\s]+)\)", _readme())
    local = [link for link in links if not re.match(r"^[a-z]+://", link)]
    assert any(link.startswith("docs/USER_GUIDE.md") for link in local), local
    for link in local:
        path, _, anchor = link.partition("#")
        full = os.path.join(ROOT, path)
        assert os.path.exists(full), "README.md links to %s: no such file" % link
        if anchor:
            with open(full, encoding="utf-8") as f:
                slugs = {_slug(h) for h in re.findall(r"^#+ (.+)$", f.read(), re.M)}
            assert anchor in slugs, "README.md links to %s: no heading with that anchor in %s" % (link, path)


def test_the_extraction_reads_fences_comments_and_quotes():
    text = ("intro\n```sh\nmake run   # a comment\n$ edgemesh run --x 'a # b'\n\n```\n```text\nmake not_a_command\n"
            "```\n```python\nimport os\n```\n```\n.venv/bin/python -c \"print('#')\"  # why\n```\n")
    assert readme_commands(text) == [(3, "make run"), (4, "edgemesh run --x 'a # b'"),
                                     (14, ".venv/bin/python -c \"print('#')\"")]
    assert _run_by('make run RUN_ARGS="--sync bsp"') == RUN_BY['make run RUN_ARGS="--sync']
    assert _run_by("make test-fast") == RUN_BY["make test-fast"] and _run_by("make testing") == ()
