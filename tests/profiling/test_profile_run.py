"""Profiling reached servers: on the testbed the wait ends when a device dies (named) or at a deadline."""
import threading
import time

import pytest

from edgemesh_tf.cluster.reach import Servers
from edgemesh_tf.cluster.spec import parse_cluster
from edgemesh_tf.cluster.watch import DeviceDied
from edgemesh_tf.profiling import run

CLUSTER = parse_cluster({"name": "t", "devices": [
    {"name": "w0", "role": "worker", "port": 2300, "cpu_cores": 0.3, "memory_mib": 256},
    {"name": "ps0", "role": "ps", "port": 2310}]}, "t.yaml")


class _Testbed:
    def __init__(self, dead_after_s):
        self.t0, self.dead_after_s = time.monotonic(), dead_after_s

    def check(self):
        if self.dead_after_s is not None and time.monotonic() - self.t0 > self.dead_after_s:
            raise RuntimeError("emulated cluster x: process exited: w0 (pid 1, exit code -9); OOM-killed")


def _stuck(monkeypatch):
    """profile_workers waiting for good, as a session on a dead server does."""
    release = threading.Event()
    monkeypatch.setattr(run, "profile_workers", lambda *a, **k: release.wait(60))
    return release


def _servers(testbed):
    return Servers("grpc://x", {}, {"w0": None, "ps0": None}, {}, {}, testbed)


def test_a_device_dying_while_profiled_ends_the_wait_naming_it(monkeypatch):
    release = _stuck(monkeypatch)
    t0 = time.monotonic()
    with pytest.raises(DeviceDied, match="w0 .*OOM"):
        run.profile_servers(CLUSTER, None, 32, _servers(_Testbed(dead_after_s=0.2)), timeout_s=30)
    assert time.monotonic() - t0 < 5
    release.set()


def test_a_testbed_that_answers_nothing_ends_at_the_deadline_saying_what_waited(monkeypatch):
    release = _stuck(monkeypatch)
    with pytest.raises(TimeoutError, match="profiling the workers of t.yaml: no result after 1 s"):
        run.profile_servers(CLUSTER, None, 32, _servers(_Testbed(dead_after_s=None)), timeout_s=1.0)
    release.set()


def test_real_servers_are_profiled_directly(monkeypatch):
    monkeypatch.setattr(run, "profile_workers", lambda cluster, spec, batch, target, pids, **k: (target, pids, k))
    # real servers have no testbed limits to lift, fast_setup or not
    for fast in (False, True):
        assert run.profile_servers(CLUSTER, None, 32, _servers(None), fast_setup=fast, repeats=3) == (
            "grpc://x", {"w0": None, "ps0": None}, {"testbed_limits": None, "repeats": 3})
