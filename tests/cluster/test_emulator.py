"""The emulated testbed: TF ops on every device, limits applied, nothing left behind, crash recovery.

Runs for real (root, network namespaces, cgroup v1), as CI does on this machine.
"""
import os
import signal
import subprocess
import sys
import time

import pytest

from edgemesh_tf.cluster import calibration, cgroup, emulated_cluster, measure, netns, parse_cluster, procs, state

pytestmark = [pytest.mark.emulator, pytest.mark.subprocess]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Proportional quota -> speed: skips the 20 s calibration (bench/emulation.py checks the real one).
LINEAR = calibration.CpuCalibration(key="test", period_us=10000, points=((0.1, 1.0), (1.0, 10.0)))


def _spec(path="test.yaml"):
    return parse_cluster({"name": "t", "cpu_budget_cores": 0.9, "devices": [
        {"name": "w0", "role": "worker", "port": 2400, "speed": 1.0, "bandwidth_mbit": 50, "latency_ms": 3},
        {"name": "w1", "role": "worker", "port": 2401, "speed": 0.5, "bandwidth_mbit": 20, "latency_ms": 8},
        {"name": "ps0", "role": "ps", "port": 2410, "simd_bits": 128},
    ]}, path)


def leftovers(run_id):
    """Every trace of a run on this machine."""
    found = [n for n in netns.list_namespaces() if n.startswith("em-%s-" % run_id)]
    found += [l for l in netns.list_links() if l.startswith("em" + run_id)]
    found += [g for g in cgroup.list_groups() if os.path.basename(g).startswith("em-%s-" % run_id)]
    run_dir = os.path.join(state.run_root(), run_id)
    if os.path.exists(run_dir):
        found.append(run_dir)
    return found


def _run_ops_on_every_device(tf, cluster, target):
    """Each device adds its own constant; w0 consumes w1's and ps0's results (server-to-server)."""
    graph = tf.Graph()
    with graph.as_default():
        parts = []
        for i, name in enumerate(cluster.devices):
            with tf.device(cluster.device(name)):
                # A stateful op, so that grappler cannot fold it into a constant on the master.
                parts.append(tf.random.uniform([]) * 0.0 + float(i) + 10.0)
        with tf.device(cluster.device("w0")):
            total = tf.add_n(parts)
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    meta = tf.compat.v1.RunMetadata()
    config = tf.compat.v1.ConfigProto(allow_soft_placement=False)
    with tf.compat.v1.Session(target, graph=graph, config=config) as sess:
        value = sess.run(total, options=options, run_metadata=meta)
    tf.compat.v1.Session.reset(target)
    return value, {s.device for s in meta.step_stats.dev_stats}


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")  # CI runs as root
def test_up_run_ops_and_down_leaves_nothing():
    import tensorflow as tf

    spec = _spec()
    with emulated_cluster(spec, calib=LINEAR, timeout_s=240) as cluster:
        run_id = cluster.run.run_id
        assert cluster.network == "netns" and cluster.compute == "cgroup-v1"
        cs = cluster.cluster_spec()
        assert set(cs) == {"worker", "ps"} and len(cs["worker"]) == 2
        assert all(a.startswith("10.213.") for addrs in cs.values() for a in addrs)
        assert cluster.device("w1") == "/job:worker/task:1" and cluster.target("ps0").startswith("grpc://10.213.")
        value, devices = _run_ops_on_every_device(tf, cluster, cluster.session_target)
        assert value == pytest.approx(10 + 11 + 12)
        for job_task in ("job:worker/replica:0/task:0", "job:worker/replica:0/task:1", "job:ps/replica:0/task:0"):
            assert any(job_task in d for d in devices), devices
        # Limits as the file says: calibrated quotas (0.6 : 0.3 cores), period <= 10 ms, tbf, latency.
        for name, cores in (("w0", 0.6), ("w1", 0.3)):
            d = cluster.devices[name]
            group = os.path.join(cgroup.V1_ROOT, "em-%s-%s" % (run_id, name))
            period = int(open(os.path.join(group, "cpu.cfs_period_us")).read())
            quota = int(open(os.path.join(group, "cpu.cfs_quota_us")).read())
            assert period <= 10000 and quota / period == pytest.approx(cores, rel=0.01)
            assert d.pid in [int(x) for x in open(os.path.join(group, "cgroup.procs")).read().split()]
            # a device slowed (and restored) mid-run: its quota scales, its period stays
            assert cluster.set_slowdown(name, 3.0) == pytest.approx(cores / 3, rel=0.01)
            assert cluster.slowed() == {name: 3.0}
            quota3 = int(open(os.path.join(group, "cpu.cfs_quota_us")).read())
            assert quota3 / period == pytest.approx(cores / 3, rel=0.01)
            cluster.set_slowdown(name, 1.0)
            assert cluster.slowed() == {}
            assert int(open(os.path.join(group, "cpu.cfs_quota_us")).read()) == quota
            # lifted for a job's set-up, then restored
            cluster.lift_quotas()
            assert cluster._cpu[name][0].quota_us() == -1
            cluster.restore_quotas()
            assert int(open(os.path.join(group, "cpu.cfs_quota_us")).read()) == quota
            # a slowed device stays slowed through a set-up with the quotas lifted
            cluster.set_slowdown(name, 2.0)
            cluster.lift_quotas()
            cluster.restore_quotas()
            assert cluster._cpu[name][0].quota_us() / period == pytest.approx(cores / 2, rel=0.01)
            cluster.set_slowdown(name, 1.0)
            link = netns.link_for(run_id, cluster.run.data["slot"], 0 if name == "w0" else 1, name, None)
            shown = lambda: (netns.run("tc", "qdisc", "show", "dev", link.host_if).stdout  # noqa: E731
                             + netns.run("tc", "qdisc", "show", "dev", link.ns_if, netns=link.netns).stdout)
            limited = shown()
            assert limited.count("tbf") == 2, limited
            # both directions lifted for a job's set-up, then back at the file's rate
            cluster.lift_links()
            assert limited != shown() and shown().count("rate 10Gbit") == 2, shown()
            cluster.restore_links()
            assert shown() == limited
        # Delay applied (not missing, not doubled); the margin absorbs scheduling on a busy 2-core machine.
        assert 0.9 * 8.0 <= measure.latency_ms(cluster.devices["w1"].address) <= 8.0 + 3.0
        assert measure.latency_ms(cluster.devices["ps0"].address) < 1.0
        with pytest.raises(ValueError, match="device ps0 has no CPU quota"):
            cluster.set_slowdown("ps0", 2.0)
        with pytest.raises(ValueError, match="factor of w0 must be > 0"):
            cluster.set_slowdown("w0", 0)
        with open(cluster.devices["w0"].log) as f:
            log = f.read()
            assert "server ready: /job:worker/task:0" in log and "security: a TensorFlow server runs any graph" in log
        # ps0 computes with 128-bit vectors (oneDNN capped), the others with the machine's own
        environ = {n: open("/proc/%d/environ" % cluster.devices[n].pid, "rb").read().split(b"\0") for n in ("w0", "ps0")}
        assert b"ONEDNN_MAX_CPU_ISA=SSE41" in environ["ps0"]
        assert not any(v.startswith(b"ONEDNN_MAX_CPU_ISA=") for v in environ["w0"])
        pids = [d.pid for d in cluster.devices.values()]
        assert leftovers(run_id)
    assert leftovers(run_id) == []
    assert not any(procs.alive(pid, None) for pid in pids)
    assert cluster.exit_codes == {"forwarder": 0, "w0": 0, "w1": 0, "ps0": 0}  # clean exit on SIGTERM


def test_userspace_fallback_and_step_delay():
    import tensorflow as tf

    with emulated_cluster(_spec(), network="userspace", compute="step-delay", timeout_s=240) as cluster:
        run_id = cluster.run.run_id
        assert all(a.startswith("127.0.0.1:") for addrs in cluster.cluster_spec().values() for a in addrs)
        assert cluster.step_delay_s("w1", 0.1) == pytest.approx(0.1)  # speed 1/2: sleep one more step
        assert cluster.step_delay_s("w0", 0.1) == 0.0 and cluster.step_delay_s("ps0", 0.1) == 0.0
        value, _ = _run_ops_on_every_device(tf, cluster, cluster.session_target)
        assert value == pytest.approx(33.0)
        assert 0.9 * 3.0 <= measure.latency_ms(cluster.devices["w0"].address) <= 3.0 + 3.0
    assert leftovers(run_id) == []


def _launch(path):
    return subprocess.Popen([sys.executable, "-m", "edgemesh_tf.cli.main", "cluster", "up", "--cluster", path],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wait_for_run(launcher, timeout_s=240):
    """The run of `launcher` once it is up (its cluster.json exists)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert launcher.poll() is None, "launcher exited early: %s" % launcher.stderr.read()[-3000:]
        for run in state.all_runs(state.run_root()):
            if run.data["owner_pid"] == launcher.pid and os.path.exists(os.path.join(run.run_dir, "cluster.json")):
                return run
        time.sleep(0.2)
    raise TimeoutError("launcher pid %d not up after %.0f s" % (launcher.pid, timeout_s))


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")  # CI runs as root
def test_sigkilled_launcher_recovers_and_child_crash_tears_down(tmp_path):
    path = tmp_path / "one.yaml"
    path.write_text("devices:\n"
                    "  - {name: w0, role: worker, port: 2400, speed: 1.0, bandwidth_mbit: 50, latency_ms: 2}\n"
                    "  - {name: ps0, role: ps, port: 2410}\n"
                    "cpu_budget_cores: 0.5\n")
    # The cached calibration is used if present; otherwise this calibrates once (~20 s).
    first = _launch(str(path))
    try:
        run1 = _wait_for_run(first)
        servers1 = [p for p in run1.data["processes"]]
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        # Children die with the launcher (PDEATHSIG); namespaces, veths and cgroups stay behind.
        deadline = time.monotonic() + 10
        while any(procs.alive(p["pid"], p["start"]) for p in servers1) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(procs.alive(p["pid"], p["start"]) for p in servers1)
        assert leftovers(run1.run_id)
    finally:
        procs.terminate(first)
    second = _launch(str(path))
    try:
        run2 = _wait_for_run(second)
        assert leftovers(run1.run_id) == []  # the second `up` removed the first one's leftovers
        # A crashing server tears the whole run down; the launcher exits with 1.
        w0 = next(p for p in run2.data["processes"] if p["name"] == "w0")
        os.kill(w0["pid"], signal.SIGKILL)
        assert second.wait(60) == 1
        assert "w0" in second.stderr.read()
        assert leftovers(run2.run_id) == []
    finally:
        procs.terminate(second)
