"""Warm group processes (engine/runtime/warm.py): one process serves job after job, each job's output in
its own log; a stopped one is replaced; two identical BSP jobs in the same warm processes end
with the same weights (nothing of the first job leaks into the second), also when the second sets up
with the devices' CPU quotas and link rates lifted (fast_setup: restored before training starts and
kept through the stop, since the rounds in flight at the stop count in the totals)."""
import json
import os

import numpy as np
import pytest

from edgemesh_tf.cluster import emulated_cluster, netns
from edgemesh_tf.cluster.spec import load_cluster
from edgemesh_tf.engine.core import records
from edgemesh_tf.training import checkpoint
from edgemesh_tf.engine.config import GroupSpec, SyncConfig
from edgemesh_tf.engine.runtime.job import job_config, run_job
from edgemesh_tf.engine.runtime.warm import WarmGroups
from edgemesh_tf.mesh.layout import single_device_layout

pytestmark = [pytest.mark.subprocess]
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_one_process_serves_jobs_in_turn_and_a_stopped_one_is_replaced(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    with WarmGroups() as pool:
        logs = [str(tmp_path / ("job%d.log" % i)) for i in range(3)]
        missing = str(tmp_path / "no-such-job.json")
        first = pool.run(None, ["--config", missing, "--group", "0", "--target", "grpc://127.0.0.1:1"], logs[0], env)
        assert first.wait(120) != 0  # group.main could not read its config: the job fails, the process serves on
        second = pool.run(None, ["--config", missing, "--group", "0", "--target", "x"], logs[1], env)
        assert second.wait(30) != 0 and second.pid == first.pid
        for log in logs[:2]:
            with open(log) as f:
                assert "no-such-job.json" in f.read()  # each job's error in its own log
        second.terminate()  # a stopped process is not reused
        second.proc.wait(10)
        third = pool.run(None, ["--config", missing, "--group", "0", "--target", "x"], logs[2], env)
        assert third.wait(120) != 0 and third.pid != first.pid
        procs = [third.proc]
    assert all(p.poll() is not None for p in procs)  # close() ended them


@pytest.mark.emulator
def test_two_identical_bsp_jobs_in_warm_processes_end_with_the_same_weights(tmp_path):
    cluster = load_cluster(os.path.join(ROOT, "layouts", "edge2.yaml"))
    groups = tuple(GroupSpec(w.name, single_device_layout(w.device_string).to_dict(), 16) for w in cluster.workers)
    weights, pids = [], []
    with emulated_cluster(cluster) as em, WarmGroups() as pool:
        for i in range(2):
            cfg = job_config(cluster, groups, sync=SyncConfig(strategy="bsp"), learning_rate=0.05, max_rounds=3,
                             time_budget_s=120, eval_interval_s=1.0, logdir=str(tmp_path / str(i)))
            quotas, rates = [], []  # the devices' CPU quotas (µs) and link rates at each evaluation

            def emit(rec, quotas=quotas, rates=rates):
                if isinstance(rec, records.Eval):
                    quotas.append({n: g.quota_us() for n, (g, _, _) in em._cpu.items()})
                    rates.append(_link_rates(em))
            # the second job sets up with the limits lifted (fast_setup): the same training, started sooner
            final = run_job(cfg, cluster, testbed=em, pool=pool, fast_setup=bool(i), emit=emit)
            assert final["group_exit_codes"] == {"fast": 0, "slow": 0}
            calibrated = {n: round(cores * period) for n, (_, cores, period) in em._cpu.items()}
            # every evaluation, the one at the stop included, at the limits
            assert len(quotas) >= 2 and all(q == calibrated for q in quotas), (quotas, calibrated)
            assert all(r == rates[0] for r in rates) and min(rates[0]) < 1000, rates
            assert em._cpu["fast"][0].quota_us() == calibrated["fast"] and _link_rates(em) == rates[0]  # restored
            weights.append(checkpoint.load(final["checkpoint"])[0])
            pids.append(pool.pids())
            with open(tmp_path / str(i) / "groups" / "fast.jsonl") as f:
                assert [json.loads(line)["round"] for line in f] == [1, 2, 3]  # this job's rounds only
    assert pids[0] == pids[1]  # the same processes ran both jobs
    for name in ("fast", "slow"):  # ... and the second reused the first one's graphs (graph.replica_graph)
        assert "graph reused" in (tmp_path / "1" / "groups" / (name + ".log")).read_text()
    for name, w in weights[0].items():  # up to the order in which the ps sums the two pushes
        np.testing.assert_allclose(weights[1][name], w, atol=1e-5, rtol=0, err_msg=name)


def _link_rates(em) -> list[float]:
    """The rate (Mbit/s) of every tbf of the testbed, as `tc` shows it."""
    out = []
    for ns, interface, _ in em.rate_limits:
        shown = netns.run("tc", "qdisc", "show", "dev", interface, netns=ns).stdout
        out.append(_mbit(shown.split(" rate ")[1].split()[0]))
    return out


def _mbit(rate: str) -> float:
    for unit, scale in (("Gbit", 1000.0), ("Mbit", 1.0), ("Kbit", 0.001), ("bit", 1e-6)):
        if rate.endswith(unit):
            return float(rate[:-len(unit)]) * scale
    raise ValueError("tc rate %r" % rate)
