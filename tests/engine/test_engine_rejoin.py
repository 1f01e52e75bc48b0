"""Devices that come back, on the emulated edge4 testbed with two model-parallel groups of two
devices: edge1 killed -> its group edge0-edge1 is lost, re-planned over edge0 alone and re-admitted;
edge1's server restarted -> the group is restarted on both devices and re-admitted again. The
chief's totals carry over restarts and the group trains after each re-admission."""
import json
import os
import signal
import threading
import time

import pytest

from edgemesh_tf.cluster import emulated_cluster
from edgemesh_tf.cluster.spec import load_cluster
from edgemesh_tf.engine.core import records
from edgemesh_tf.engine.config import GroupSpec, SyncConfig
from edgemesh_tf.engine.runtime.job import STOP_REQUESTED, job_config, run_job
from edgemesh_tf.engine.core.records import read

pytestmark = [pytest.mark.emulator, pytest.mark.subprocess]

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CLUSTER = os.path.join(ROOT, "layouts", "edge4.yaml")
W = "/job:worker/task:%d"


def _group(name, a, b, split):
    return GroupSpec(name, {"mesh": {"model": 2}, "devices": [W % a, W % b],
                            "rules": {"conv1": "model", "conv2": "model"},
                            "sizes": {"conv1": split(32), "conv2": split(64)}}, 16)


def _wait_for(logdir, predicate, what, timeout_s, job):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        hits = [r for r in read(logdir) if predicate(r)]
        if hits:
            return hits[0]
        assert job.is_alive(), "the job ended while waiting for %s: %s %s" % (what, job.out, read(logdir)[-3:])
        time.sleep(0.2)
    pytest.fail("no %s within %.0f s; last records %s" % (what, timeout_s, read(logdir)[-5:]))


def test_lost_device_group_is_replanned_then_readmitted_whole(tmp_path):
    cluster = load_cluster(CLUSTER)
    logdir = str(tmp_path)
    groups = (_group("edge0-edge1", 0, 1, lambda n: [n * 2 // 3, n - n * 2 // 3]),
              _group("edge2-edge3", 2, 3, lambda n: [n // 2, n - n // 2]))
    cfg = job_config(cluster, groups, sync=SyncConfig(strategy="asp"), logdir=logdir, time_budget_s=60.0,
                     eval_interval_s=0.5, checkpoint_interval_s=30.0, lost_after_s=3.0, wait_timeout_s=30.0)
    out = {}
    with emulated_cluster(cluster) as em:
        with pytest.raises(ValueError, match="edge1 is still running"):
            em.restart_device("edge1")
        stop = threading.Event()  # set once the group trains whole again (the budget is the bound)

        def train():
            try:
                out["final"] = run_job(cfg, cluster, testbed=em, fast_setup=True, stop=stop)
            except Exception as e:  # shown by _wait_for
                out["error"] = repr(e)
        job = threading.Thread(target=train, daemon=True)
        job.out = out
        job.start()
        _wait_for(logdir, lambda r: isinstance(r, records.Eval) and r.global_steps >= 10, "10 steps", 120, job)
        os.kill(em.devices["edge1"].pid, signal.SIGKILL)
        lost = _wait_for(logdir, lambda r: isinstance(r, records.Lost), "the loss of edge0-edge1", 30, job)
        restarted = _wait_for(logdir, lambda r: isinstance(r, records.Restarted), "a restart on edge0", 30, job)
        readmitted = _wait_for(logdir, lambda r: isinstance(r, records.Readmitted), "the re-admission", 60, job)
        old_pid = em.devices["edge1"].pid
        assert not em.is_running("edge1") and em.is_running("edge0")
        em.restart_device("edge1")
        assert em.devices["edge1"].pid != old_pid and em.is_running("edge1")
        again = _wait_for(logdir, lambda r: isinstance(r, records.Readmitted) and r.t > readmitted.t,
                          "the re-admission on both devices", 60, job)
        _wait_for(logdir, lambda r: isinstance(r, records.Eval) and r.t > again.t
                  and r.group_examples_per_sec["edge0-edge1"] > 0, "training after coming back whole", 30, job)
        stop.set()
        job.join(120)
        assert not job.is_alive(), "the job did not end"
    assert "final" in out, out
    final = out["final"]
    recs = read(logdir)
    assert lost.group == "edge0-edge1" and lost.devices == ["edge0", "edge1"]
    assert readmitted.devices == ["edge0"] and again.devices == ["edge0", "edge1"]
    assert restarted.group == "edge0-edge1" and restarted.devices == ["edge0"], restarted
    assert "whole model on edge0" in restarted.layout
    with open(os.path.join(logdir, "groups", "edge0-edge1.layout.json")) as f:
        assert json.load(f)["devices"] == [W % 0]
    restarting = records.of_kind(recs, records.Restarting)
    assert restarting and "edge1" in restarting[0].why, recs
    whole = [r for r in recs if isinstance(r, records.Restarted) and r.t > readmitted.t]
    assert whole and whole[0].devices == ["edge0", "edge1"] and whole[0].layout == "its own layout"
    assert final["lost_groups"] == [] and final["why"] == STOP_REQUESTED
    # the chief's totals carry over the restarts, and the group trained after each re-admission
    evals = records.of_kind(recs, records.Eval)
    assert all(b.global_steps >= a.global_steps for a, b in zip(evals, evals[1:])), "totals went back"
    rate = lambda e: e.group_examples_per_sec["edge0-edge1"]
    assert any(rate(e) > 0 for e in evals if readmitted.t < e.t <= again.t), "no training on edge0 alone"
    assert any(rate(e) > 0 for e in evals if e.t > again.t), "no training after coming back whole"
    assert final["groups"]["edge0-edge1"]["steps"] > sum(rate(e) > 0 for e in evals) > 0
    assert final["group_exit_codes"]["edge0-edge1"] == 0
