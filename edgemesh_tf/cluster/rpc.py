"""Session runs with bounded retries of idempotent requests.

Under load TF's gRPC layer sometimes retries a request the server already received and answers
"The same RunGraph request was received twice" (AbortedError), or reports a server briefly
unreachable (UnavailableError). Reads and whole-value assigns can simply be run again; pushes and
training steps must never be (an update would be applied twice), so they use plain `sess.run`.
"""
from __future__ import annotations

import time

from edgemesh_tf.mesh.compat import tf

TRANSIENT = (tf.errors.AbortedError, tf.errors.UnavailableError)
DUPLICATE = "request was received twice"  # also surfaces as a CancelledError of the step's other partitions


def transient(e: tf.errors.OpError) -> bool:
    """Whether running the same idempotent request again may succeed."""
    return isinstance(e, TRANSIENT) or (isinstance(e, tf.errors.CancelledError) and DUPLICATE in (e.message or ""))


def run_idempotent(sess, fetches, feeds=None, *, timeout_s: float, what: str):
    """sess.run(fetches, feeds) retried on transient errors for at most timeout_s seconds in all;
    raises TimeoutError naming `what` and the last error after that."""
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
        remaining = deadline - time.monotonic()
        try:
            return sess.run(fetches, feeds, options=tf.RunOptions(timeout_in_ms=max(1, int(remaining * 1000))))
        except tf.errors.DeadlineExceededError:
            raise TimeoutError("%s: no answer within %.0f s" % (what, timeout_s)) from None
        except tf.errors.OpError as e:
            if not transient(e):
                raise
            if time.monotonic() + delay > deadline:
                raise TimeoutError("%s: no answer within %.0f s; last error: %s"
                                   % (what, timeout_s, e.message.splitlines()[0])) from None
            time.sleep(delay)
            delay = min(1.0, delay * 2)
