"""Planning with worker processes (``plan(workers=...)``, ``shared_divisions.DivisionPool``): the same plan as
planning in turn; a process that may not fork plans in turn."""
import json
import os
import subprocess
import sys

import pytest
from planner_util import profile, random_cluster

from edgemesh_tf.models.zoo import get_model
from edgemesh_tf.planner import grid, model_stats, plan

HERE = os.path.dirname(os.path.abspath(__file__))
VGG32 = get_model("vgg", (32, 32, 3), 10)

# Run in a fresh process: the test process runs other threads (pytest-xdist) and may hold TensorFlow,
# so it would plan in turn whatever it asks.
SCRIPT = """
import json, sys
sys.path.insert(0, %r)
from planner_util import profile, random_cluster
from edgemesh_tf.models.zoo import get_model
from edgemesh_tf.planner import model_stats, plan
from edgemesh_tf.planner import shared_divisions
spec = get_model("vgg", (32, 32, 3), 10)
prof = profile(spec, random_cluster(model_stats(spec, 32), 160, seed=5), 32)
mapped = []
pool_map = shared_divisions.DivisionPool.map
shared_divisions.DivisionPool.map = lambda self, groups, options: mapped.append(len(groups)) or pool_map(
    self, groups, options)
out = {}
for workers in (1, 2):
    p = plan(prof, spec, workers=workers)
    out[workers] = {"rate": repr(p.examples_per_sec), "candidates": repr(p.candidates), "kind": p.kind,
                    "groups": [[list(g.names), repr(g.layout.sizes)] for g in p.groups], "idle": list(p.idle)}
print(json.dumps({"plans": out, "mapped": sum(mapped)}))
""" % HERE


@pytest.mark.subprocess
def test_two_workers_plan_what_one_plans():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert found["plans"]["1"] == found["plans"]["2"]
    assert len(found["plans"]["1"]["groups"]) > 1
    assert found["mapped"] > 160  # the workers divided the seeds' groups, the rounds' and the final ones


def test_a_process_that_may_not_fork_plans_in_turn(monkeypatch):
    def no_pool(*args, **kwargs):
        raise AssertionError("a pool was started in a process that may not fork")

    monkeypatch.setattr(grid, "fork_safe", lambda: False)
    monkeypatch.setattr(grid, "DivisionPool", no_pool)
    stats = model_stats(VGG32, 32)
    result = plan(profile(VGG32, random_cluster(stats, 20, seed=1), 32), VGG32, workers=2)
    assert result.groups


# A pool whose workers die, or outlast the bound: the groups are divided in this process, the same answers.
FAILING = """
import functools, json, os, sys, time
sys.path.insert(0, %r)
from planner_util import random_cluster
from edgemesh_tf.models.zoo import get_model
from edgemesh_tf.planner import divide, model_stats
from edgemesh_tf.planner.shared_divisions import DivisionPool, SharedDivisions
PARENT = os.getpid()
stats = model_stats(get_model("vgg", (32, 32, 3), 10), 32)

def failing(group, how, **options):
    if os.getpid() != PARENT:
        if how == "die":
            os._exit(3)
        time.sleep(60)
    return divide(group, stats, **options)

groups = [[d] for d in random_cluster(stats, 6, seed=2)] + [random_cluster(stats, 3, seed=4)]
out = {}
for how in ("die", "hang"):
    t0 = time.monotonic()
    with DivisionPool(functools.partial(failing, how=how), 2, timeout_s=2.0) as pool:
        pids = [p.pid for p in pool._executor._processes.values()]
        got = SharedDivisions(functools.partial(failing, how=how), pool).many(groups, chunks=16)
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
            alive.append(pid)
        except ProcessLookupError:
            pass
    out[how] = {"same": got == SharedDivisions(functools.partial(divide, stats=stats)).many(groups, chunks=16),
                "alive": alive, "seconds": time.monotonic() - t0}
print(json.dumps(out))
""" % HERE


@pytest.mark.subprocess
def test_a_pool_that_dies_or_hangs_leaves_the_work_to_this_process_and_no_process_behind():
    done = subprocess.run([sys.executable, "-c", FAILING], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    for how in ("die", "hang"):
        assert found[how]["same"] and found[how]["alive"] == [], (how, found[how])
    assert found["hang"]["seconds"] < 30  # the bound (2 s) and the close (5 s), not the workers' 60 s
    assert done.stderr.count("dividing in this process instead") == 2
