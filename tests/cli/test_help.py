"""`edgemesh --help` lists every subcommand with its summary; `edgemesh SUBCOMMAND --help` lists the
subcommand's own flags under their headings (cli/help.py) and exits 0; an unknown subcommand is
named.

`edgemesh` runs in this process (`main.run(argv)`) where it imports no subcommand module or only
`edgemesh run`'s (other tests import it too); the subcommands' modules define clashing absl flags,
so one test walks all of them, each in its own process.
"""
import os
import re
import subprocess
import sys

import pytest

from edgemesh_tf.cli import help as cli_help
from edgemesh_tf.cli import main

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# A flag of each subcommand and the heading it is listed under.
FLAG_UNDER = {"run": ("--sync", "Strategy (--sync and its parameters)"),
              "train": ("--steps", "Single-layout training (without --sync)"),
              "tf-config": ("--out_dir", "edgemesh tf-config flags"),
              "server": ("--ready_file", "edgemesh server flags"),
              "launch": ("--launch_dir", "edgemesh launch flags"),
              "cluster": ("--network", "edgemesh cluster flags"),
              "profile": ("--repeats", "edgemesh profile flags"),
              "plan": ("--memory_fraction", "edgemesh plan flags")}


def _edgemesh(capsys, *args):
    """(exit code, stdout, stderr) of `edgemesh ARGS` run in this process."""
    with pytest.raises(SystemExit) as exit_:
        main.run(["edgemesh", *args])
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


def _headings(text: str) -> list[str]:
    return re.findall(r"^(\S.*):$", text, flags=re.M)


def _heading_of(text: str, flag: str) -> str:
    """The heading the line `  --flag...` is listed under."""
    at = re.search(r"^  (--|--\[no\])%s[= ]" % re.escape(flag.lstrip("-")), text + " ", flags=re.M).start()
    return _headings(text[:at])[-1]


def _lists_every_subcommand(text: str) -> bool:
    return all(re.search(r"^  %s +%s$" % (re.escape(name), re.escape(cli_help.summary(module))), text, flags=re.M)
               for name, module in main.SUBCOMMANDS.items())


@pytest.mark.parametrize("ask", [["--help"], ["-h"], ["help"]])
def test_help_lists_every_subcommand_and_exits_0(capsys, ask):
    code, out, _ = _edgemesh(capsys, *ask)
    assert code == 0
    assert _lists_every_subcommand(out)
    assert "edgemesh SUBCOMMAND --help" in out


def test_no_arguments_prints_the_help_and_exits_2(capsys):
    code, out, err = _edgemesh(capsys)
    assert code == 2 and out == ""
    assert _lists_every_subcommand(err)


@pytest.mark.parametrize("args", [["trian"], ["help", "trian"]])
def test_an_unknown_subcommand_is_named_with_the_valid_ones(capsys, args):
    code, _, err = _edgemesh(capsys, *args)
    assert code not in (0, None)
    assert "'trian'" in err and all(name in err for name in main.SUBCOMMANDS)


def test_run_help_lists_its_flags_by_group_before_absl_flags(capsys):
    code, out, _ = _edgemesh(capsys, "run", "--help")
    assert code == 0
    assert _heading_of(out, "--cluster") == "Cluster and plan"
    assert _heading_of(out, "--model") == "Model, data and optimiser"
    assert _heading_of(out, "--sync") == "Strategy (--sync and its parameters)"
    assert "edgemesh run flags" not in _headings(out)  # every job flag has its dataclass's heading
    from absl import flags

    last_group = out.index(_headings(out)[-1])
    for module, defined in flags.FLAGS.flags_by_module_dict().items():
        if module.startswith("absl."):
            for flag in defined:
                at = out.find("--" + flag.name)
                assert at == -1 or at > last_group, "absl's --%s before the groups" % flag.name
    assert out.rstrip().splitlines()[-1].startswith("edgemesh run --helpfull")


def test_help_of_a_subcommand_by_name_and_after_its_arguments(capsys):
    by_name = _edgemesh(capsys, "help", "run")
    assert by_name[0] == 0
    assert _edgemesh(capsys, "run", "--model", "vgg", "-h") == by_name
    assert not cli_help.wants_help(["--", "--help"])


@pytest.mark.subprocess
def test_every_subcommand_help_lists_its_own_flags_and_exits_0():
    for name, (flag, heading) in FLAG_UNDER.items():
        for ask in ("--help", "-h"):
            p = subprocess.run([sys.executable, "-m", "edgemesh_tf.cli.main", name, ask], capture_output=True,
                               text=True, cwd=ROOT, timeout=60)
            assert p.returncode == 0, (name, ask, p.stderr)
            assert p.stdout.startswith("edgemesh %s: " % name)
            assert _heading_of(p.stdout, flag) == heading, (name, ask)
            assert "--verbosity" not in p.stdout  # absl's flags are left to --helpfull
    assert set(FLAG_UNDER) == set(main.SUBCOMMANDS)
