"""Memory limits of emulated devices with the cgroup v1 memory controller (/sys/fs/cgroup/memory).

A cluster file's `memory_mib` is what a device may use ABOVE its idle TF server: an idle server
(TF imported, gRPC up) holds ~500-600 MiB of this machine's memory that a real edge device's
runtime would not need in that form, and the planner's budgets are about the model (weights,
activations, gradients, buffers). A device past its budget fails as a real one would: the kernel's
OOM killer kills its server (the job then sees the device lost; `EmulatedCluster.check` names the
device and says it ran out of memory).

How the limit is set, and why it is `charged_at_join + budget` and not `VmRSS + budget`: a server
joins its group `em-<run>-<device>` once it answers (idle), as with the CPU quota. cgroup v1
charges a page to the group of the process that first faulted it in, and a process that joins a
group later brings no charges along (moving charges, `memory.move_charge_at_immigrate`, is
deprecated and refused with EINVAL by this kernel). So the idle server's memory stays charged to
the parent group and the device's group counts only what the server allocates from then on, which
is exactly "memory above idle": `memory.limit_in_bytes = memory.usage_in_bytes at join (~0) +
memory_mib MiB`, plus what the idle server is below ``IDLE_REFERENCE_MIB``. The idle server's
resident memory (VmRSS) is measured and recorded next to the limit (`MemoryLimit.idle_rss_mib`):
max(idle_rss_mib, IDLE_REFERENCE_MIB) + memory_mib is the device's RSS ceiling.
Approximations: idle pages the server frees and allocates again after joining count against the
budget (slightly stricter); code pages of TF kernels first run on the device count too (they are
file pages the kernel reclaims before it OOM-kills).
"""
from __future__ import annotations

import dataclasses

from absl import logging

from edgemesh_tf.cluster import cgroup, procs

MIB = 1 << 20
IDLE_REFERENCE_MIB = 500.0
"""The idle server the memory model was fitted against (MiB; docs/DESIGN.md). A server that joins leaner
allocates the model's tensors in fresh pages, charged to its group, where a fuller idle server reused
pages it already held, charged to the parent: its limit gets the difference, so that a budget buys the
same model on either."""


@dataclasses.dataclass(frozen=True)
class MemoryLimit:
    """The enforced limit of one device, in MiB: budget (the file's memory_mib), idle_rss (VmRSS of
    the idle server when it joined), charged_at_join (memory.usage_in_bytes then), limit
    (memory.limit_in_bytes = charged_at_join + budget)."""

    budget_mib: float
    idle_rss_mib: float
    charged_at_join_mib: float
    limit_mib: float
    cgroup: str

    def describe(self) -> str:
        lean = self.limit_mib - self.charged_at_join_mib - self.budget_mib
        return ("memory budget %d MiB above its idle server (idle RSS %.0f MiB; cgroup limit %.1f MiB = %.1f "
                "charged at join + budget%s)" % (self.budget_mib, self.idle_rss_mib, self.limit_mib,
                                                 self.charged_at_join_mib,
                                                 " + %.0f below the %.0f MiB reference idle server" % (
                                                     lean, IDLE_REFERENCE_MIB) if lean >= 0.5 else ""))


def group_name(run_id: str, device: str) -> str:
    return "%s%s-%s" % (cgroup.PREFIX, run_id, device)


def limit(group: cgroup.MemoryGroup, pid: int, budget_mib: int) -> MemoryLimit:
    """Moves the idle server `pid` into `group` (created by the caller) and sets its limit to what
    the group is charged now plus `budget_mib`."""
    idle = procs.read_vm_kb(pid, "VmRSS") / 1024  # MiB, 0 if it is gone
    group.add(pid)
    charged = group.read("memory.usage_in_bytes")
    group.set_limit(charged + int((budget_mib + max(0.0, IDLE_REFERENCE_MIB - idle)) * MIB))
    got = group.read("memory.limit_in_bytes")
    lim = MemoryLimit(budget_mib=budget_mib, idle_rss_mib=round(idle, 1), charged_at_join_mib=round(charged / MIB, 2),
                      limit_mib=round(got / MIB, 2), cgroup=group.path)
    logging.info("pid %d: %s", pid, lim.describe())
    return lim


def oom_note(group: cgroup.MemoryGroup, lim: MemoryLimit) -> str:
    """' (killed by the kernel's OOM killer: ...)' if the group saw an OOM kill, else ''."""
    if group.oom_kills() == 0:
        return ""
    return " (out of memory: killed by the kernel's OOM killer past its %s)" % lim.describe()
