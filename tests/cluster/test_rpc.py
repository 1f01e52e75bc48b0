"""run_idempotent: which errors of a session run are run again, and the bound on the retries."""
import pytest

from edgemesh_tf.cluster.rpc import run_idempotent
from edgemesh_tf.mesh.compat import tf


class FailingSession:
    """A session whose first `failures` runs raise the given errors, then answers 42."""

    def __init__(self, *errors):
        self.errors, self.calls = list(errors), 0

    def run(self, fetches, feeds=None, options=None):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return 42


DUPLICATE = ("From /job:ps/replica:0/task:0:\nThe same RunGraph (Worker) request was received twice. "
             "graph_handle: \"0000000000000008\"")


def test_a_duplicate_request_cancellation_and_transient_errors_are_run_again():
    sess = FailingSession(tf.errors.CancelledError(None, None, "RecvFromRemoteAsync is cancelled.\n" + DUPLICATE),
                          tf.errors.AbortedError(None, None, DUPLICATE),
                          tf.errors.UnavailableError(None, None, "Socket closed"))
    assert run_idempotent(sess, "x", timeout_s=10, what="reading the board") == 42 and sess.calls == 4


def test_other_cancellations_and_errors_are_not():
    for e in (tf.errors.CancelledError(None, None, "Session was closed"),
              tf.errors.InvalidArgumentError(None, None, "bad feed")):
        sess = FailingSession(e)
        with pytest.raises(type(e)):
            run_idempotent(sess, "x", timeout_s=10, what="reading the board")
        assert sess.calls == 1


def test_retries_end_at_the_timeout_naming_what_was_run():
    sess = FailingSession(*[tf.errors.UnavailableError(None, None, "Socket closed")] * 100)
    with pytest.raises(TimeoutError, match="reading the board: no answer within 0 s; last error: Socket closed"):
        run_idempotent(sess, "x", timeout_s=0.3, what="reading the board")
    with pytest.raises(TimeoutError, match="group g starting up: no answer within 5 s"):
        run_idempotent(FailingSession(tf.errors.DeadlineExceededError(None, None, "late")), "x", timeout_s=5,
                       what="group g starting up")
