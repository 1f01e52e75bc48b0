"""Faults on the emulated edge2 testbed (fast + slow worker, ps, chief): a device killed during
ASHL's SHL is declared lost by name and the other group trains on, nothing hangs; a device's server
dead before its group connects is named at once. The jobs run on one testbed, a killed device's
server started again at its address after each (as a device that comes back), and set up with the
quotas lifted (run_job's fast_setup): only what is timed runs under them. The same faults on real
servers (a worker killed during BSP, the ps killed and the job resumed, SIGINT) are in
test_real_server_faults.py; SIGTERM and SIGINT's handler in test_stop_signals.py."""
import json
import os
import signal
import time

import pytest

from edgemesh_tf.engine.core import records
from edgemesh_tf.engine.config import SyncConfig
from edgemesh_tf.engine.runtime.job import default_groups, job_config, run_job
from edgemesh_tf.engine.core.records import read

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


def test_device_killed_in_shl_is_declared_lost_and_the_other_group_trains_on(edge2, tmp_path):
    cluster, em = edge2
    sync = SyncConfig(strategy="ashl", shl_loss=1.5)
    when = lambda r: isinstance(r, records.Phase) and r.new == "shl"  # noqa: E731
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
