"""CPU limits through the cgroup cpu controller: v1 (`cpu.cfs_quota_us`) or v2 (`cpu.max`), and
memory limits through the v1 memory controller (`memory.limit_in_bytes`; see memory.py).

Groups are named `em-<run>-<device>` directly under the controller's root, so a later launcher can
find and remove them. Quotas are in cores (1.0 = one CPU for the whole period), limits in bytes.
"""
from __future__ import annotations

import errno
import os
import re
import time

V1_ROOT = "/sys/fs/cgroup/cpu"
V2_ROOT = "/sys/fs/cgroup"
MEMORY_ROOT = "/sys/fs/cgroup/memory"
PREFIX = "em-"
_NAME_RE = re.compile(r"^em-([0-9a-f]{4}|calib)-")
DEFAULT_PERIOD_US = 10_000  # short period: a throttled process waits at most ~10 ms


def detect() -> str | None:
    """'v1', 'v2' or None (no writable cpu controller)."""
    if os.path.exists(os.path.join(V1_ROOT, "cpu.cfs_quota_us")) and os.access(V1_ROOT, os.W_OK):
        return "v1"
    controllers = os.path.join(V2_ROOT, "cgroup.controllers")
    if os.path.exists(controllers) and os.access(V2_ROOT, os.W_OK):
        with open(controllers) as f:
            if "cpu" in f.read().split():
                return "v2"
    return None


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


class CpuGroup:
    """One cgroup with a CPU quota (cores) over a period (µs)."""

    def __init__(self, name: str, version: str):
        if not name.startswith(PREFIX):
            raise ValueError("cgroup names must start with %r: %r" % (PREFIX, name))
        self.name, self.version = name, version
        self.path = os.path.join(V1_ROOT if version == "v1" else V2_ROOT, name)

    def create(self) -> "CpuGroup":
        if self.version == "v2":
            # The cpu controller must be enabled for children of the root group.
            try:
                _write(os.path.join(V2_ROOT, "cgroup.subtree_control"), "+cpu")
            except OSError:
                pass
        os.makedirs(self.path, exist_ok=True)
        return self

    def set_quota(self, cores: float | None, period_us: int = DEFAULT_PERIOD_US) -> None:
        """Limits the group to `cores` CPUs (None = unlimited)."""
        quota = -1 if cores is None else max(1000, int(round(cores * period_us)))
        if self.version == "v1":
            # Lower the quota before shortening the period: the kernel rejects quota > parent's.
            _write(os.path.join(self.path, "cpu.cfs_quota_us"), "-1")
            _write(os.path.join(self.path, "cpu.cfs_period_us"), str(period_us))
            _write(os.path.join(self.path, "cpu.cfs_quota_us"), str(quota))
        else:
            _write(os.path.join(self.path, "cpu.max"), "%s %d" % ("max" if quota < 0 else quota, period_us))

    def quota_us(self) -> int:
        """The CPU time the group may use per period (µs); -1 = unlimited."""
        if self.version == "v1":
            with open(os.path.join(self.path, "cpu.cfs_quota_us")) as f:
                return int(f.read())
        with open(os.path.join(self.path, "cpu.max")) as f:
            quota = f.read().split()[0]
        return -1 if quota == "max" else int(quota)

    def set_priority(self, weight: float = 8.0) -> None:
        """`weight` x the default CPU weight: the device gets its whole quota even when unrelated
        processes keep the machine busy (the quota still caps it)."""
        if self.version == "v1":
            _write(os.path.join(self.path, "cpu.shares"), str(int(1024 * weight)))
        else:
            _write(os.path.join(self.path, "cpu.weight"), str(min(10000, int(100 * weight))))

    def add(self, pid: int) -> None:
        """Moves a whole process (all its threads) into the group."""
        _write(os.path.join(self.path, "cgroup.procs"), str(pid))

    def pids(self) -> list[int]:
        return pids_of(self.path)


def memory_available() -> bool:
    """True if the cgroup v1 memory controller is mounted and writable."""
    return os.path.exists(os.path.join(MEMORY_ROOT, "memory.limit_in_bytes")) and os.access(MEMORY_ROOT, os.W_OK)


class MemoryGroup:
    """One cgroup of the v1 memory controller. The kernel OOM-kills a process of the group when
    the group's charged memory cannot stay under its limit (no swap accounting beyond it)."""

    def __init__(self, name: str):
        if not name.startswith(PREFIX):
            raise ValueError("cgroup names must start with %r: %r" % (PREFIX, name))
        self.name, self.path = name, os.path.join(MEMORY_ROOT, name)

    def create(self) -> "MemoryGroup":
        os.makedirs(self.path, exist_ok=True)
        return self

    def read(self, field: str) -> int:
        with open(os.path.join(self.path, field)) as f:
            return int(f.read().split()[0])

    def set_limit(self, limit_bytes: int) -> None:
        """memory.limit_in_bytes (and memsw, where swap accounting exists, so that a machine with
        swap cannot page the device out instead of failing it). The kernel refuses a memory limit above
        the memsw one (EINVAL): raising a limit (e.g. a restarted device) sets memsw first."""
        mem = os.path.join(self.path, "memory.limit_in_bytes")
        memsw = os.path.join(self.path, "memory.memsw.limit_in_bytes")
        order = [mem]
        if os.path.exists(memsw):
            order = [memsw, mem] if limit_bytes > self.read("memory.limit_in_bytes") else [mem, memsw]
        for path in order:
            try:
                _write(path, str(int(limit_bytes)))
            except OSError:
                if path == mem:
                    raise

    def peak(self) -> int:
        """The most the group has been charged since it was made or ``reset_peak`` (bytes;
        memory.max_usage_in_bytes)."""
        return self.read("memory.max_usage_in_bytes")

    def reset_peak(self) -> None:
        """Starts ``peak`` again from what the group is charged now."""
        _write(os.path.join(self.path, "memory.max_usage_in_bytes"), "0")

    def oom_kills(self) -> int:
        """Processes of the group the kernel's OOM killer has killed (memory.oom_control)."""
        try:
            with open(os.path.join(self.path, "memory.oom_control")) as f:
                fields = dict(line.split() for line in f if line.strip())
            return int(fields.get("oom_kill", 0))
        except (OSError, ValueError):
            return 0

    def add(self, pid: int) -> None:
        _write(os.path.join(self.path, "cgroup.procs"), str(pid))

    def pids(self) -> list[int]:
        return pids_of(self.path)


def pids_of(path: str) -> list[int]:
    """Processes in the cgroup at `path` (any controller)."""
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return []


def remove(path: str, timeout_s: float = 10.0) -> str | None:
    """rmdir a cgroup once its processes have exited; returns an error message or None."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.rmdir(path)
            return None
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() > deadline:
                return "rmdir %s: %s (waited %.0f s for its processes to exit)" % (path, e, timeout_s)
            time.sleep(0.05)


def list_groups() -> list[str]:
    """Paths of all `em-` groups under the v1 cpu and memory roots and the v2 root."""
    out = []
    for root in (V1_ROOT, MEMORY_ROOT, V2_ROOT):
        if os.path.isdir(root):
            out += [os.path.join(root, n) for n in sorted(os.listdir(root)) if _NAME_RE.match(n)]
    return out
