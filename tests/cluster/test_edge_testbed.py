"""The realistic-edge testbed: enforced memory budgets (OOM kill naming the device), direct routing
without the delay forwarder at <= 0.5 ms, one shared medium, and nothing left behind.

Runs for real (root, network namespaces, cgroup v1 cpu + memory), as CI does on this machine.
"""
import os

import pytest

from edgemesh_tf.cluster import cgroup, emulated_cluster, measure, netns, parse_cluster, procs
from edgemesh_tf.cluster import memory as memory_lib

from test_emulator import LINEAR, _run_ops_on_every_device, leftovers

pytestmark = [pytest.mark.emulator]

MEDIUM_MBIT = 40.0


def _spec():
    return parse_cluster({"name": "tiny", "cpu_budget_cores": 0.6, "media": {"air": {"bandwidth_mbit": MEDIUM_MBIT}},
                          "devices": [
        {"name": "w0", "role": "worker", "port": 2400, "cpu_cores": 0.3, "memory_mib": 48, "bandwidth_mbit": 100,
         "latency_ms": 0.3, "medium": "air"},
        {"name": "w1", "role": "worker", "port": 2401, "cpu_cores": 0.3, "memory_mib": 256, "bandwidth_mbit": 100,
         "latency_ms": 0.3, "medium": "air"},
        {"name": "ps0", "role": "ps", "port": 2410},
    ]}, "tiny.yaml")


def _allocate(tf, cluster, name, mib, deadline_s=60):
    """Makes device `name`'s server hold a `mib` MiB tensor (and sum it). The master is ps0 and the
    step has a deadline (s): a session whose master is the device that dies waits for it forever, and
    ps0's master waits for the killed device until the deadline."""
    graph = tf.Graph()
    with graph.as_default(), tf.device(cluster.device(name)):
        total = tf.reduce_sum(tf.fill([mib << 18], tf.random.uniform([])))
    config = tf.compat.v1.ConfigProto(operation_timeout_in_ms=int(deadline_s * 1000))
    with tf.compat.v1.Session(cluster.target("ps0"), graph=graph, config=config) as sess:
        return sess.run(total)


@pytest.mark.skipif(os.geteuid() != 0 or not cgroup.memory_available(), reason="needs root and cgroup v1 memory")
def test_memory_budget_direct_routing_shared_medium():
    import tensorflow as tf

    with emulated_cluster(_spec(), calib=LINEAR, timeout_s=240) as cluster:
        run_id = cluster.run.run_id
        summary = cluster.summary()
        # Direct routing: no forwarder, devices at their namespace ends; server-to-server ops work.
        assert summary["latency"] == "direct" and "forwarder" not in cluster._procs
        value, _ = _run_ops_on_every_device(tf, cluster, cluster.session_target)
        assert value == pytest.approx(33.0)
        assert measure.latency_ms(cluster.devices["w1"].address) <= 0.3 + 0.25
        # Absolute quotas as the file says.
        assert cluster.devices["w0"].cpu_cores == pytest.approx(0.3)
        # One medium: each member alone gets the medium's rate, two at once share it.
        assert summary["media"]["air"]["devices"] == ["w0", "w1"]
        assert netns.medium_name(run_id, 0) in netns.list_media()
        sinks = measure.LinkSinks(cluster, ["w0", "w1"])
        try:
            # each send is 0.4 s of a device's own 100 Mbit/s: 1 s on the 40 Mbit/s medium alone, 2 s both
            alone = sinks.mbit(["w0"], seconds=0.4)["w0"]
            both, together = sinks.together(["w0", "w1"], seconds=0.4)
        finally:
            sinks.close()
        assert alone == pytest.approx(MEDIUM_MBIT, rel=0.15)
        assert together == pytest.approx(MEDIUM_MBIT, rel=0.15) and min(both.values()) > 0.25 * MEDIUM_MBIT
        # The members' veths hand the medium's tbf segments of a quarter of its bucket, not their own.
        w0_if = netns.link_for(run_id, cluster.run.data["slot"], 0, "w0", None).host_if
        shown = netns.run("ip", "-d", "link", "show", "dev", w0_if).stdout
        assert "gso_max_size %d " % netns.gso_max_bytes(MEDIUM_MBIT) in shown
        # Memory: the limit is recorded in the summary; within budget the device survives...
        assert summary["memory"] == "cgroup-v1"
        group_of = lambda name: cgroup.MemoryGroup(os.path.basename(summary["devices"][name]["memory"]["cgroup"]))  # noqa: E731
        for name, budget in (("w0", 48), ("w1", 256)):
            mem = summary["devices"][name]["memory"]
            assert mem["budget_mib"] == budget and mem["idle_rss_mib"] > 100
            lean = max(0.0, memory_lib.IDLE_REFERENCE_MIB - mem["idle_rss_mib"])  # cluster/memory.py
            assert mem["limit_mib"] == pytest.approx(mem["charged_at_join_mib"] + budget + lean, abs=0.2)
            group = cgroup.MemoryGroup(os.path.basename(mem["cgroup"]))
            assert cluster.devices[name].pid in group.pids()
        assert summary["devices"]["ps0"]["memory"] is None
        cluster.reset_memory_peaks()
        assert cluster.memory_peaks()["w1"] < 64 << 20 and "ps0" not in cluster.memory_peaks()  # ps0: no budget
        assert _allocate(tf, cluster, "w1", 64) != 0  # 64 MiB of 256
        cluster.check()
        assert cluster.memory_peaks()["w1"] >= 64 << 20  # the peak since the reset holds the tensor
        # a fresh server in its place: a new process, idle in the same memory group, answering at the address
        old_pid = cluster.devices["w1"].pid
        cluster.fresh_servers(["w1"])
        assert cluster.devices["w1"].pid != old_pid and not procs.alive(old_pid, None)
        assert cluster.devices["w1"].pid in group_of("w1").pids() and old_pid not in group_of("w1").pids()
        assert group_of("w1").read("memory.usage_in_bytes") < 32 << 20  # what the old server held went with it
        assert _allocate(tf, cluster, "w1", 64) != 0
        # ...and past it the kernel kills its server; the error names the device and says why.
        with pytest.raises(tf.errors.OpError):
            _allocate(tf, cluster, "w0", 256, deadline_s=10)  # 256 MiB of 48: killed at once
        with pytest.raises(RuntimeError, match=r"w0 \(pid \d+, exit code -9.*out of memory.*48 MiB"):
            cluster.check()
        assert procs.alive(cluster.devices["w1"].pid, None)
        groups = [summary["devices"][n]["memory"]["cgroup"] for n in ("w0", "w1")]
        assert all(os.path.isdir(g) for g in groups)
    assert leftovers(run_id) == []
    assert not any(os.path.exists(g) for g in groups)
    assert netns.medium_name(run_id, 0) not in netns.list_media()
