"""A bounded wait on work that runs on a cluster's servers.

A TF session whose server died (past its memory budget the kernel OOM-kills it) waits on the dead
server's RPCs for minutes. ``watched`` runs the work in a daemon thread and polls the cluster's own
liveness check (``EmulatedCluster.check``: raises RuntimeError naming a device whose process
exited), so a dead device ends the wait at once, named; a live but stuck cluster ends it at the
deadline, with what was waited for.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Callable, TypeVar

T = TypeVar("T")


class DeviceDied(RuntimeError):
    """A device's server exited while work ran on it; the message names it (and an OOM kill)."""


def watched(fn: Callable[[], T], check: Callable[[], None], timeout_s: float, what: str,
            poll_s: float = 0.5, reap_s: float = 1.0) -> T:
    """fn() in a daemon thread: its result, or its exception re-raised; DeviceDied as soon as check()
    raises RuntimeError; TimeoutError naming ``what`` after ``timeout_s`` seconds. A thread stuck on a
    dead server is left behind (it ends when the cluster is torn down, or with the process).
    reap_s: how long an exception of fn() waits before check() is asked whether a device died."""
    done: queue.Queue = queue.Queue(1)

    def run():
        try:
            done.put((True, fn()))
        except BaseException as e:  # noqa: BLE001  (re-raised in the caller's thread)
            done.put((False, e))

    threading.Thread(target=run, name="watched: " + what, daemon=True).start()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            ok, value = done.get(timeout=poll_s)
        except queue.Empty:
            _raise_if_dead(check)
            if time.monotonic() > deadline:
                raise TimeoutError("%s: no result after %.0f s and no device died" % (what, timeout_s)) from None
            continue
        if ok:
            return value
        time.sleep(reap_s)  # an OOM kill may reach the client as an RPC error first; let the process be reaped
        _raise_if_dead(check)
        raise value


def _raise_if_dead(check: Callable[[], None]) -> None:
    try:
        check()
    except RuntimeError as e:
        raise DeviceDied(str(e)) from None
