"""Child processes that die with their launcher, identified by (pid, start time)."""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: SIGKILL us when the launching thread dies, so a
    # SIGKILLed launcher leaves no servers behind (`ip netns exec` execs, keeping this setting).
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    os.setpgrp()  # Ctrl-C in the launcher's terminal goes to the launcher only; it tears down


def spawn(cmd: list[str], **kwargs) -> subprocess.Popen:
    """Popen whose child is killed when the calling thread exits (call from a long-lived thread)."""
    return subprocess.Popen(cmd, preexec_fn=_die_with_parent, **kwargs)


def start_time(pid: int) -> int | None:
    """Kernel start time of `pid` (clock ticks since boot), or None if it does not exist."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int, start: int | None) -> bool:
    """True if `pid` runs and is the same process as when `start` was recorded (no pid reuse)."""
    now = start_time(pid)
    if now is None:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return False
    except OSError:
        return False
    return start is None or now == start


def kill(pid: int, start: int | None, timeout_s: float = 5.0) -> bool:
    """SIGTERM, then SIGKILL after `timeout_s`, the process recorded as (pid, start); True if gone."""
    for sig, wait in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        if not alive(pid, start):
            return True
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:  # reap it if it is our child
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return True
            except ChildProcessError:
                pass
            if not alive(pid, start):
                return True
            time.sleep(0.02)
    return not alive(pid, start)


def terminate(p: subprocess.Popen, timeout_s: float = 5.0) -> None:
    """Stops our own child: SIGTERM, SIGKILL after `timeout_s`, then reaps it."""
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5.0)


def read_vm_kb(pid: int, field: str) -> int:
    """VmHWM / VmRSS of a process, in KiB (0 if unreadable)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
