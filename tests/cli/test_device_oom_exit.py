"""A device OOM-killed on the testbed ends the command with its clear error and exit code 1: no C++
abort at exit (a thread left waiting on the dead server inside TF's runtime), nothing left behind.

Runs for real (root, network namespaces, cgroup v1 memory limits), as CI does on this machine.
"""
import os
import re
import subprocess
import sys

import pytest
import yaml

from edgemesh_tf.cluster import cgroup, netns, state

pytestmark = [pytest.mark.emulator, pytest.mark.subprocess]

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")

# Loaded by the command's interpreter (PYTHONPATH): its finalization lasts 5 s more. A thread that
# comes back from TF's C++ runtime in those seconds (the close of a session on the dead device's
# cluster, once something answers at the stopped master's address) aborts the process unless the
# command left without finalizing; without it, only a late return on a loaded machine shows it.
SLOW_FINALIZATION = """
import time


class _Slow:
    def __del__(self, sleep=time.sleep):
        sleep(5)


_slow = _Slow()
"""


def _leftovers(run_id):
    """Every trace of testbed run ``run_id`` on this machine: namespaces, links, cgroups, its run directory."""
    found = [n for n in netns.list_namespaces() if n.startswith("em-%s-" % run_id)]
    found += [link for link in netns.list_links() if link.startswith("em" + run_id)]
    found += [g for g in cgroup.list_groups() if os.path.basename(g).startswith("em-%s-" % run_id)]
    if os.path.exists(os.path.join(state.run_root(), run_id)):
        found.append(os.path.join(state.run_root(), run_id))
    return found


@pytest.mark.skipif(os.geteuid() != 0, reason="the testbed's memory limits need root")
def test_a_device_killed_past_its_memory_budget_ends_the_command_with_its_name_and_exit_code_1(tmp_path):
    # 1 MiB above its idle server: profiling vgg_wide at batch 512 puts far more on it
    cluster = tmp_path / "tiny.yaml"
    cluster.write_text(yaml.safe_dump({"name": "tiny", "devices": [
        {"name": "tiny0", "role": "worker", "host": "127.0.0.1", "port": 2470, "cpu_cores": 0.5, "memory_mib": 1},
        {"name": "ps0", "role": "ps", "host": "127.0.0.1", "port": 2471},
        {"name": "chief", "role": "chief", "host": "127.0.0.1", "port": 2472}]}))
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SLOW_FINALIZATION)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path / "site"),
                                                                     os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-m", "edgemesh_tf.cli.main", "profile", "--cluster", str(cluster),
                          "--model", "vgg_wide", "--batch", "512", "--repeats", "3", "--out", str(tmp_path / "p.json")],
                         capture_output=True, text=True, timeout=240, cwd=ROOT, env=env)
    tail = out.stderr[-3000:]
    assert out.returncode == 1, (out.returncode, tail)
    assert "terminate called" not in out.stderr and "Fatal Python error" not in out.stderr, tail
    last = out.stderr.strip().splitlines()[-1]
    assert re.match(r"edgemesh profile: emulated cluster \w+: process exited: tiny0 .*out of memory", last), tail
    assert _leftovers(re.search(r"emulated cluster (\w+):", last).group(1)) == []
    assert not os.path.exists(tmp_path / "p.json")
