"""cluster/watch.py: a bounded wait that names a dead device (no TF, no testbed: check() stands in for
EmulatedCluster.check, which raises RuntimeError naming an exited process)."""
import time

import pytest

from edgemesh_tf.cluster.watch import DeviceDied, watched


def _dies_after(seconds: float, message: str):
    dead_at = time.monotonic() + seconds

    def check():
        if time.monotonic() > dead_at:
            raise RuntimeError(message)
    return check


def test_a_dead_device_ends_the_wait_at_once_and_is_named():
    start = time.monotonic()
    check = _dies_after(0.3, "emulated cluster x: process exited: pi3 (pid 1, exit code -9, ...) out of memory")
    with pytest.raises(DeviceDied, match="pi3 .*out of memory"):
        watched(lambda: time.sleep(30), check, 60, "mode alone:pi3", poll_s=0.05)
    assert time.monotonic() - start < 5  # not the work's own wait on the dead server


def test_the_result_and_the_work_s_own_error_come_back():
    assert watched(lambda: 7, lambda: None, 5, "x") == 7

    def fails():
        raise ValueError("bad shape")
    with pytest.raises(ValueError, match="bad shape"):  # after reap_s (default 1 s): no device died
        watched(fails, lambda: None, 5, "x", reap_s=0.05)


def test_an_error_from_a_device_that_died_is_reported_as_its_death():
    # an OOM kill may reach the client as an RPC error before check() sees the exited process
    check = _dies_after(0.2, "process exited: pi2 (pid 2, exit code -9)")

    def rpc_fails():
        raise ConnectionError("socket closed")
    with pytest.raises(DeviceDied, match="pi2"):  # check() sees the death within reap_s of the error
        watched(rpc_fails, check, 5, "round 1 of 3", reap_s=0.4)


def test_a_stuck_wait_ends_at_its_deadline_naming_what_it_waited_for():
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="round 2 of 3 .*: no result after 0 s and no device died"):
        watched(lambda: time.sleep(30), lambda: None, 0.2, "round 2 of 3 (profile, plan, measure)", poll_s=0.05)
    assert time.monotonic() - start < 5


def test_a_thread_given_up_on_is_left_behind_until_it_ends():
    # the CLI leaves by os._exit while one runs: back from TF's C++ runtime at exit, it would abort the process
    import threading

    from edgemesh_tf.cluster.watch import left_behind
    release = threading.Event()
    with pytest.raises(DeviceDied, match="pi1"):
        watched(lambda: release.wait(30), _dies_after(0.1, "process exited: pi1 (pid 3, exit code -9)"), 60,
                "profiling", poll_s=0.05)
    ours = [t for t in left_behind() if t.name == "watched: profiling"]  # the other tests' may run on
    assert len(ours) == 1
    release.set()
    ours[0].join(5)
    assert ours[0] not in left_behind()
    assert watched(lambda: 7, lambda: None, 5, "x") == 7 and all(t.name != "watched: x" for t in left_behind())


def test_raise_if_died_names_the_dead_device_else_lets_the_error_stand():
    from edgemesh_tf.cluster.watch import raise_if_died
    with pytest.raises(DeviceDied, match="pi2 .*out of memory"):
        raise_if_died(_dies_after(0.05, "process exited: pi2 (pid 2, exit code -9) (out of memory: ...)"), reap_s=0.2)
    raise_if_died(lambda: None, reap_s=0.01)  # no device died: nothing raised
