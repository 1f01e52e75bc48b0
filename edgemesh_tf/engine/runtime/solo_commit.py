"""A group alone commits in the background: its copy to the ps runs while it trains on.

A job of one group (rules.solo) has nothing between groups to coordinate: the ps keeps a copy of the
group's model only for the chief's evaluations and checkpoints. With `SyncConfig.solo_overlap`, the
group hands each round's commit (the slices gathered into the masters, then `ReplicaGraph.publish`: a
dense push that moves the anchors by the same delta) to a thread of its own and trains the next round
meanwhile, so that no round trip to the ps is on the step's path. The group waits for a commit only
when it has trained a whole round before that commit ended, and after its last round.

A commit that runs beside a step reads slices the step may be writing: the ps may then hold, for
some tensors, values between two consecutive iterates, and the chief evaluates it as it is. Nothing is
lost: `publish` moves the ps and the anchors by the same values, so the ps equals the anchors, and
the next commit moves it to the next snapshot. The commit after the last round runs with no step
beside it, so the ps ends holding the group's final model exactly.
"""
from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable


class BackgroundCommit:
    """At most one commit in flight, run on a thread of its own; `settle` waits for it."""

    def __init__(self, name: str):
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="commit-%s" % name)
        self._future: Future | None = None
        self._context: Any = None

    @property
    def pending(self) -> bool:
        return self._future is not None

    def start(self, commit: Callable[[], dict], context: Any) -> None:
        """Runs ``commit()`` in the background; ``context`` (the round it commits) comes back from `settle`."""
        if self._future is not None:
            raise RuntimeError("a commit is already in flight: settle it first")

        def timed():
            t0 = time.monotonic()
            out = commit()
            return out, time.monotonic() - t0

        self._future, self._context = self._pool.submit(timed), context

    def settle(self) -> tuple[Any, dict, float] | None:
        """Waits for the commit in flight (its session runs carry their own timeouts): (its context, what
        ``commit()`` returned, the seconds it ran), or None when none is in flight. A commit that raised
        raises here."""
        if self._future is None:
            return None
        future, context, self._future, self._context = self._future, self._context, None, None
        out, seconds = future.result()
        return context, out, seconds

    def close(self) -> None:
        """Waits for a commit in flight to end (raised or not) and stops the thread: the session it runs
        in must not close under it."""
        if self._future is not None:
            self._future.exception()
            self._future = None
        self._pool.shutdown(wait=True)
