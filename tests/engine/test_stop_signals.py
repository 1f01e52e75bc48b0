"""SIGTERM and SIGINT (Ctrl-C) to the process running a job (engine/runtime/job.py's handler): the first asks
the chief to stop at its next tick with a checkpoint, naming the signal; a second exits at once; the
previous handlers come back after the job. (The whole path on real servers, SIGINT to `edgemesh
train` through to the resumed rerun: test_real_server_faults.py.)"""
import os
import signal
import threading
import time

import pytest

from edgemesh_tf.engine.runtime.job import STOP_REQUESTED, _stop_on_signals, _stop_when_set


class _Chief:
    def __init__(self):
        self.stop_request = None

    def request_stop(self, why):
        self.stop_request = why


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_asks_the_chief_to_stop_and_a_second_exits(sig):
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    chief = _Chief()
    with pytest.raises(SystemExit) as second:
        with _stop_on_signals(chief):
            os.kill(os.getpid(), sig)
            signal.sigtimedwait([], 0)  # lets the handler run
            assert chief.stop_request == "%s received: stopping with a checkpoint" % sig.name
            os.kill(os.getpid(), sig)
            signal.sigtimedwait([], 0)
    assert second.value.code == 128 + sig
    assert {s: signal.getsignal(s) for s in before} == before


def test_an_event_set_by_another_thread_asks_the_chief_to_stop_and_its_watcher_ends_with_the_job():
    chief, stop = _Chief(), threading.Event()
    with _stop_when_set(chief, stop, poll_s=0.01):
        time.sleep(0.05)
        assert chief.stop_request is None  # not set: nothing asked
        threading.Timer(0.02, stop.set).start()
        deadline = time.monotonic() + 5
        while chief.stop_request is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert chief.stop_request == STOP_REQUESTED
    chief = _Chief()
    with _stop_when_set(chief, threading.Event(), poll_s=0.01):
        pass
    assert chief.stop_request is None and not [t for t in threading.enumerate() if t.name == "stop-when-set"]
