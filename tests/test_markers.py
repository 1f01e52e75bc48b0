"""The fast loop stays fast: a test that starts the emulated testbed, another process or Chromium
carries the marker that `make test-fast` deselects (markers: pytest.ini).

Each test function is read with what it reaches in its own module and in conftest.py: the
module-level functions, fixtures and constants it names, transitively (comments and docstrings
do not count). What it reaches must not start

  emulator    the emulated testbed: emulated_cluster, EmulatedCluster, up(), reach_servers,
              profile_cluster, run_main_job, `edgemesh cluster up`, `edgemesh run`
  subprocess  another process: subprocess, Popen, procs.spawn, multiprocessing, os.fork/system,
              a tf.distribute.Server, start_server, run_job, GroupProcesses, WarmGroups, calibration.calibrate
  browser     headless Chromium

without the marker, on the test, its module (`pytestmark = [...]`). A test of several kinds
carries each marker. `slow` (over ~3 s otherwise) is not detectable here: `pytest --durations`.
"""
import ast
import glob
import os
import re

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))

PATTERNS = {
    "emulator": re.compile(r"\b(emulated_cluster|EmulatedCluster|emulator\.up|reach_servers|reachable_cluster|"
                           r"profile_cluster|run_main_job)\b|'cluster', 'up'|'edgemesh_tf\.cli\.main', 'run'"),
    "subprocess": re.compile(r"\bsubprocess\.|\b(Popen|spawn|start_server|run_job|GroupProcesses|WarmGroups|calibrate|"
                             r"load_or_calibrate)\(|\bmultiprocessing\b|\bos\.(fork|system|exec\w*|posix_spawn\w*)\(|"
                             r"\bdistribute\.Server\(|\bserver\.start\("),
    "browser": re.compile(r"\bChromium\b|'chromium'"),
}


def _unparse_without_docstrings(node) -> str:
    """The code of `node` without its docstrings: they are taken out in place for the unparse and put
    back (a deep copy of every tree reached took most of this test's time)."""
    saved = []
    for n in ast.walk(node):
        body = getattr(n, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            saved.append((n, body))
    try:
        for n, body in saved:
            n.body = body[1:] or [ast.Pass()]
        return ast.unparse(node)
    finally:
        for n, body in saved:
            n.body = body


def _definitions(tree) -> dict:
    """{name: node} of a module's top-level functions, classes and assigned names."""
    out = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        out[n.id] = node
    return out


def _marks(decorators) -> set:
    """Marker names in decorators or a pytestmark value: pytest.mark.NAME, pytest.mark.NAME(...)."""
    out = set()
    for d in decorators:
        for n in ast.walk(d):
            if (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute) and n.value.attr == "mark"
                    and isinstance(n.value.value, ast.Name) and n.value.value.id == "pytest"):
                out.add(n.attr)
    return out


def _reached_code(test, defs: dict, memo: dict | None = None) -> str:
    """The code (without comments or docstrings) of `test` and of every definition it reaches.
    memo: {id(node): (its code, the names it uses)} shared by the tests of one module (its helpers and
    fixtures are reached from many tests)."""
    memo = {} if memo is None else memo
    seen, todo, code = set(), [test], []
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if id(node) not in memo:
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names |= {a.arg for a in node.args.args + node.args.kwonlyargs}  # fixtures
            memo[id(node)] = (_unparse_without_docstrings(node), names)
        text, names = memo[id(node)]
        code.append(text)
        todo += [defs[n] for n in names if n in defs]
    return "\n".join(code)


def needed_markers(source: str, conftest_sources=()) -> dict:
    """{test name: (markers its code needs, markers it carries)} of a test module's source."""
    tree = ast.parse(source)
    defs = {}
    for s in conftest_sources:
        defs.update(_definitions(ast.parse(s)))
    defs.update(_definitions(tree))
    module_marks = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                for t in node.targets):
            module_marks |= _marks([node.value])
    out, memo = {}, {}
    for node in tree.body:
        if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")
                and not any("fixture" in ast.unparse(d) for d in node.decorator_list)):
            code = _reached_code(node, defs, memo)
            need = {m for m, pattern in PATTERNS.items() if pattern.search(code)}
            out[node.name] = (need, module_marks | _marks(node.decorator_list))
    return out


def _test_files():
    return sorted(p for p in glob.glob(os.path.join(TESTS, "**", "test_*.py"), recursive=True)
                  if os.path.abspath(p) != os.path.abspath(__file__))  # its patterns are no test code


def _conftests(path):
    """conftest.py sources from tests/ down to the directory of `path`."""
    out, d = [], os.path.dirname(path)
    while d.startswith(TESTS):
        c = os.path.join(d, "conftest.py")
        if os.path.exists(c):
            with open(c) as f:
                out.insert(0, f.read())
        d = os.path.dirname(d)
    return out


def test_every_test_that_starts_processes_carries_its_markers():
    missing = []
    for path in _test_files():
        with open(path) as f:
            source = f.read()
        for test, (need, have) in needed_markers(source, _conftests(path)).items():
            if need - have:
                missing.append("%s::%s needs %s" % (os.path.relpath(path, TESTS), test, sorted(need - have)))
    assert not missing, ("tests that start the testbed, processes or Chromium without their marker (add "
                         "`pytestmark = [pytest.mark.X, ...]` after the imports, or @pytest.mark.X):\n  "
                         + "\n  ".join(missing))


def test_markers_are_registered_and_strict():
    with open(os.path.join(os.path.dirname(TESTS), "pytest.ini")) as f:
        ini = f.read()
    assert "--strict-markers" in ini
    for marker in ("emulator", "browser", "subprocess", "slow"):
        assert re.search(r"^\s+%s:" % marker, ini, re.M), marker


CHECKED = '''
import subprocess
import pytest
from edgemesh_tf.cluster import emulated_cluster

HELPER_CODE = "print(1)"


def _cli(*args):
    return subprocess.run(["edgemesh", *args])  # a helper reached through a call


@pytest.fixture
def testbed():
    with emulated_cluster("layouts/edge2.yaml") as em:
        yield em


def test_plain():
    """Mentions subprocess.run and emulated_cluster only in its docstring."""
    assert HELPER_CODE  # subprocess.Popen in a comment does not count


def test_cli():
    _cli("plan")


@pytest.mark.subprocess
def test_cli_marked():
    _cli("plan")


def test_fixture(testbed):
    pass


@pytest.mark.parametrize("x", [1])
def test_browser(x):
    Chromium().goto("about:blank")
'''


@pytest.mark.parametrize("marks, expect", [
    ("", {"test_plain": (set(), set()), "test_cli": ({"subprocess"}, set()),
          "test_cli_marked": ({"subprocess"}, {"subprocess"}), "test_fixture": ({"emulator"}, set()),
          "test_browser": ({"browser"}, {"parametrize"})}),
    ("pytestmark = [pytest.mark.emulator, pytest.mark.subprocess]\n",
     {"test_plain": (set(), {"emulator", "subprocess"}), "test_cli": ({"subprocess"}, {"emulator", "subprocess"}),
      "test_cli_marked": ({"subprocess"}, {"emulator", "subprocess"}),
      "test_fixture": ({"emulator"}, {"emulator", "subprocess"}),
      "test_browser": ({"browser"}, {"emulator", "subprocess", "parametrize"})}),
])
def test_the_check_follows_helpers_and_fixtures_and_reads_module_marks(marks, expect):
    assert needed_markers(CHECKED + marks) == expect
