"""`edgemesh run --near_tie`: plans of another number of groups predicted within the tolerance are timed
on the cluster before training and the fastest as timed is the one trained (emulated edge2, where the
two-device cluster has a plan of one group and one of two; --near_tie 1.0 makes every plan a near tie)."""
import json
import os
import subprocess
import sys

import pytest

from edgemesh_tf.planner import load_plan

pytestmark = [pytest.mark.emulator, pytest.mark.subprocess]

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_near_ties_are_timed_and_the_fastest_as_timed_is_trained(tmp_path):
    logdir = str(tmp_path / "run")
    out = subprocess.run([sys.executable, "-m", "edgemesh_tf.cli.main", "run", "--cluster", "layouts/edge2.yaml",
                          "--model", "vgg", "--dataset", "digits", "--sync", "asp", "--near_tie", "1.0",
                          "--time_budget_s", "3", "--profile_cache", "", "--logdir", logdir],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    with open(os.path.join(logdir, "summary.json")) as f:
        tie = json.load(f)["near_tie"]
    rows = {c["groups"]: c for c in tie["candidates"]}
    assert set(rows) == {1, 2} and tie["tolerance"] == 1.0 and tie["seconds"] > 0
    for c in rows.values():  # every group of every candidate was timed on the cluster
        assert c["timed"] > 0 and all(timed > 0 for _, timed in c["step_ms"]) and len(c["step_ms"]) == c["groups"]
    assert tie["kept"] == max(rows, key=lambda k: (rows[k]["timed"], rows[k]["predicted"]))
    assert len(load_plan(os.path.join(logdir, "plan.yaml")).groups) == tie["kept"]
    assert "near tie (plans predicted within 100% of each other" in out.stdout
