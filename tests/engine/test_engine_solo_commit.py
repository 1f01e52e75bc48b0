"""engine/runtime/solo_commit.py: one commit in flight at a time, run beside the caller; settle returns
what it committed and how long it ran, raises what it raised; close waits for it (no TensorFlow)."""
import threading
import time

import pytest

from edgemesh_tf.engine.runtime.solo_commit import BackgroundCommit


def test_a_commit_runs_beside_the_caller_and_settles_with_its_round():
    bg = BackgroundCommit("g")
    release, ran = threading.Event(), []

    def commit():
        release.wait(5)
        ran.append(threading.current_thread().name)
        return {"accepted": True}

    try:
        assert bg.settle() is None and not bg.pending
        bg.start(commit, {"round": 1})
        assert bg.pending and not ran  # the caller goes on while the commit waits
        with pytest.raises(RuntimeError, match="already in flight"):
            bg.start(commit, {"round": 2})
        time.sleep(0.05)
        release.set()
        rec, out, seconds = bg.settle()
        assert rec == {"round": 1} and out == {"accepted": True} and seconds >= 0.05
        assert ran == [ran[0]] and ran[0].startswith("commit-g") and not bg.pending
    finally:
        bg.close()


def test_a_commit_that_raised_raises_at_settle_and_close_waits_for_one_in_flight():
    bg = BackgroundCommit("g")
    bg.start(lambda: 1 / 0, "r1")
    with pytest.raises(ZeroDivisionError):
        bg.settle()
    done = []
    bg.start(lambda: (time.sleep(0.2), done.append(True)), "r2")
    bg.close()  # the session must not close under it: close returns once it ended
    assert done == [True]
    bg2 = BackgroundCommit("h")
    bg2.start(lambda: 1 / 0, "r")
    bg2.close()  # a failed commit in flight does not raise from close (the caller is already failing)
