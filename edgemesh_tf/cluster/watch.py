"""A bounded wait on work that runs on a cluster's servers.

A TF session whose server died (past its memory budget the kernel OOM-kills it) waits on the dead
server's RPCs for minutes. ``watched`` runs the work in a daemon thread and polls the cluster's own
liveness check (``EmulatedCluster.check``: raises RuntimeError naming a device whose process
exited), so a dead device ends the wait at once, named; a live but stuck cluster ends it at the
deadline, with what was waited for.

A thread the wait gave up on is still inside TF's C++ runtime: a session's run, or its close (TF runs
it in a thread of its own, "SessionCloseThread", when a session's ``with`` block ends on an error, and
leaves it after 30 s). A close waits for its master to answer (gRPC's wait-for-ready), so once the
servers are stopped it returns only if something answers at the master's address, at any time. If
that happens while the interpreter exits, the thread is ended by a forced unwind that TF's C++ frames
catch without rethrowing, and the process aborts (SIGABRT, "terminate called after throwing an
instance of ..."). No call cancels such a close, so ``watched`` keeps its threads and ``left_behind``
names the ones still running: a process that ends with any leaves by ``os._exit`` once its clean-up
has run (the CLI's entry point, ``cli/main.py``).
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Callable, TypeVar

T = TypeVar("T")

_threads: list[threading.Thread] = []  # every thread of ``watched`` not yet seen ended
_threads_lock = threading.Lock()


class DeviceDied(RuntimeError):
    """A device's server exited while work ran on it; the message names it (and an OOM kill)."""


def watched(fn: Callable[[], T], check: Callable[[], None], timeout_s: float, what: str,
            poll_s: float = 0.5, reap_s: float = 1.0) -> T:
    """fn() in a daemon thread: its result, or its exception re-raised; DeviceDied as soon as check()
    raises RuntimeError; TimeoutError naming ``what`` after ``timeout_s`` seconds. A thread stuck on a
    dead server is left behind (``left_behind``).
    reap_s: how long an exception of fn() waits before check() is asked whether a device died."""
    done: queue.Queue = queue.Queue(1)

    def run():
        try:
            done.put((True, fn()))
        except BaseException as e:  # noqa: BLE001  (re-raised in the caller's thread)
            done.put((False, e))

    thread = threading.Thread(target=run, name="watched: " + what, daemon=True)
    with _threads_lock:
        _threads.append(thread)
    thread.start()
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
        raise_if_died(check, reap_s)
        raise value


def raise_if_died(check: Callable[[], None], reap_s: float = 1.0) -> None:
    """After work on the servers failed: DeviceDied if check() names a device whose server exited,
    asked at once and again after ``reap_s`` (an OOM kill may reach the client as an RPC error
    before the killed process is reaped); else nothing (the work's own error stands)."""
    _raise_if_dead(check)
    time.sleep(reap_s)
    _raise_if_dead(check)


def left_behind() -> list[threading.Thread]:
    """The threads still inside TF's runtime on servers that may be gone: those of ``watched`` still
    running (once its wait ended, the ones it gave up on) and TF's session close threads still
    running (a session's ``__exit__`` on an error gives its close 30 s, then leaves it)."""
    with _threads_lock:
        _threads[:] = [t for t in _threads if t.is_alive()]
        ours = list(_threads)
    closes = [t for t in threading.enumerate() if t.name == "SessionCloseThread" and t not in ours]
    return [t for t in ours + closes if t.is_alive() and t is not threading.current_thread()]


def _raise_if_dead(check: Callable[[], None]) -> None:
    try:
        check()
    except RuntimeError as e:
        raise DeviceDied(str(e)) from None
