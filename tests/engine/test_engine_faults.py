"""Faults on the emulated edge2 testbed (fast + slow worker, ps, chief): a device killed during BSP
and during ASHL's SHL is declared lost by name and the other group trains on, nothing hangs; the
ps killed stops the job within bounded time naming the ps task, and a restart resumes from the
checkpoint; SIGTERM to the chief saves a checkpoint before it exits. The jobs run on one testbed, a
killed device's server started again at its address after each (as a device that comes back), and
set up with the quotas lifted (run_job's fast_setup): only what is timed runs under them."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from edgemesh_tf.engine import records
from edgemesh_tf.engine.chief import PSLost
from edgemesh_tf.engine.config import SyncConfig
from edgemesh_tf.engine.job import default_groups, job_config, run_job
from edgemesh_tf.engine.records import read

pytestmark = [pytest.mark.emulator, pytest.mark.subprocess]

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CLUSTER = os.path.join(ROOT, "layouts", "edge2.yaml")


def _rounds(logdir, group):
    """A group's round log (<logdir>/groups/<group>.jsonl)."""
    with open(os.path.join(logdir, "groups", group + ".jsonl")) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def _kill_when(em, device, predicate):
    """An emit callback that SIGKILLs `device`'s server the first time predicate(record) holds."""
    killed = {}

    def emit(rec):
        if not killed and predicate(rec):
            os.kill(em.devices[device].pid, signal.SIGKILL)
            killed["t"] = getattr(rec, "t", None)
            killed["at"] = time.monotonic()
    return emit, killed


def _cfg(cluster, logdir, sync, **kw):
    kw = {"time_budget_s": 14.0, "eval_interval_s": 0.5, "checkpoint_interval_s": 2.0, "lost_after_s": 3.0,
          "wait_timeout_s": 30.0, **kw}
    return job_config(cluster, default_groups(cluster, 16), sync=sync, logdir=logdir, **kw)


@pytest.mark.parametrize("sync,when", [
    (SyncConfig(strategy="bsp"), lambda r: isinstance(r, records.Eval) and r.global_steps >= 6),
    (SyncConfig(strategy="ashl", shl_loss=1.5), lambda r: isinstance(r, records.Phase) and r.new == "shl"),
], ids=["bsp", "shl"])
def test_device_killed_is_declared_lost_and_the_other_group_trains_on(edge2, tmp_path, sync, when):
    cluster, em = edge2
    logdir = str(tmp_path)
    emit, killed = _kill_when(em, "slow", when)
    t0 = time.monotonic()
    try:
        final = run_job(_cfg(cluster, logdir, sync), cluster, testbed=em, emit=emit, fast_setup=True)
    finally:
        wall = time.monotonic() - t0
        em.restart_dead()
    assert killed, "the kill never happened"
    assert final["lost_groups"] == ["slow"]
    assert final["why"].startswith("time budget")
    assert wall < 14.0 + 60, "the job took %.0f s" % wall
    lost = read(logdir, records.Lost)
    assert len(lost) == 1 and lost[0].group == "slow" and lost[0].devices == ["slow"]
    assert lost[0].live == ["fast"]
    # the fast group kept committing after the loss (barrier / staleness gate stopped counting slow)
    fast = _rounds(logdir, "fast")
    evals = read(logdir, records.Eval)
    after = [e for e in evals if e.t > lost[0].t]
    assert after and after[-1].global_steps > max(e.global_steps for e in evals if e.t <= lost[0].t) + 5
    assert fast[-1]["round"] > 5
    assert final["group_exit_codes"]["fast"] == 0 and final["group_exit_codes"]["slow"] != 0


def test_a_server_dead_before_its_group_connects_is_named_at_once(edge2, tmp_path):
    """A device's server killed before the job (as the kernel does past its memory budget while the
    group builds its graph) stops the start-up wait naming the device, not after startup_timeout_s."""
    cluster, em = edge2
    os.kill(em.devices["slow"].pid, signal.SIGKILL)
    t0 = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match=r"server died while the groups started: .*slow \(pid"):
            run_job(_cfg(cluster, str(tmp_path), SyncConfig(strategy="asp"), startup_timeout_s=120.0), cluster,
                    testbed=em, fast_setup=True)
    finally:
        em.restart_dead()
    assert time.monotonic() - t0 < 60


def test_ps_killed_stops_the_job_naming_the_ps_then_restart_resumes(edge2, tmp_path):
    cluster, em = edge2
    logdir = str(tmp_path)
    sync = SyncConfig(strategy="asp")
    emit, killed = _kill_when(em, "ps0", lambda r: isinstance(r, records.Checkpoint) and r.global_steps > 0)
    try:
        with pytest.raises(PSLost, match=r"/job:ps/task:0 \(ps0\)") as err:
            run_job(_cfg(cluster, logdir, sync, time_budget_s=60.0), cluster, testbed=em, emit=emit,
                    fast_setup=True)
        stopped_after = time.monotonic() - killed["at"]
    finally:
        em.restart_dead()  # the ps comes back at its address, its variables gone
    assert stopped_after < 30, "the job stopped %.1f s after the ps was killed" % stopped_after
    assert "checkpoint" in str(err.value)
    ckpts = read(logdir, records.Checkpoint)
    final = run_job(_cfg(cluster, logdir, sync, time_budget_s=ckpts[-1].t + 3.0), cluster, testbed=em,
                    fast_setup=True)
    resume = read(logdir, records.Resume)
    assert len(resume) == 1 and resume[0].global_steps == ckpts[-1].global_steps
    assert resume[0].elapsed_s == pytest.approx(ckpts[-1].t, abs=0.01)
    assert final["global_steps"] > ckpts[-1].global_steps


def test_sigterm_to_the_chief_saves_a_checkpoint_before_exit(tmp_path):
    logdir = str(tmp_path / "run")
    cmd = [sys.executable, "-m", "edgemesh_tf.cli.main", "train", "--cluster", CLUSTER, "--sync", "asp",
           "--logdir", logdir, "--time_budget_s", "120", "--checkpoint_interval_s", "60", "--eval_interval_s", "0.5"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            path = os.path.join(logdir, "chief.jsonl")
            if os.path.exists(path) and len(read(logdir, records.Eval)) >= 3:
                break
            time.sleep(0.2)
        assert proc.poll() is None, "training ended before the signal:\n" + proc.stdout.read()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    recs = read(logdir)
    final = records.of_kind(recs, records.Final)
    assert final and final[0].why.startswith("SIGTERM"), out[-2000:]
    ckpt = records.of_kind(recs, records.Checkpoint)
    assert ckpt and ckpt[-1].t == final[0].t and os.path.exists(ckpt[-1].path + ".npz")
    assert final[0].t < 60, "the checkpoint at SIGTERM is not the periodic one"
