"""Profile the workers of a cluster file, on the emulated testbed or on running servers."""
from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

from edgemesh_tf.cluster.reach import Servers, reach_servers
from edgemesh_tf.cluster.spec import ClusterFile, load_cluster
from edgemesh_tf.layers import ModelSpec
from edgemesh_tf.profiling.profiler import DeviceToProfile, profile_devices
from edgemesh_tf.profiling.types import Profile

DEFAULT_MEMORY_MIB = 1024
PROFILE_TIMEOUT_S = 1800.0
"""Longest a cluster's profiling may take (s): VGG-16 on pi4's 128-bit devices takes ~10 min."""


def budgets(cluster: ClusterFile) -> dict[str, int]:
    """{worker name: memory budget (bytes)}: the file's memory_mib, else DEFAULT_MEMORY_MIB."""
    return {d.name: (d.memory_mib or DEFAULT_MEMORY_MIB) << 20 for d in cluster.workers}


def profile_workers(cluster: ClusterFile, spec: ModelSpec, batch: int, session_target: str,
                    pids: Mapping[str, int | None], *, repeats: int = 5, whole_step_devices: Sequence[str] = (),
                    split_step_devices: Sequence[str] = (),
                    split_step_sizes: Mapping[str, Sequence[int]] | None = None,
                    whole_beside_split: Sequence[str] = (), whole_step_bytes: int = 0,
                    testbed_limits=None) -> Profile:
    """Measures every worker of a reachable ``cluster``; ``pids`` {device name: local server pid
    or None} enables the peak-memory reading; budgets come from the file's memory_mib.
    whole_step_devices, split_step_devices, split_step_sizes, whole_beside_split: workers to time
    whole-model training steps on, each alone, and workers to time steps of a split over, with its
    units per split dim (None: even), and the whole steps timed interleaved with it (they must hold
    the model, their parts; ``planner.calibrate.steps_to_time`` chooses them); whole_step_bytes: what a
    whole step needs (``profile_devices``). testbed_limits: the
    emulated testbed whose limits are lifted while the step graphs set up (``profile_devices``)."""
    memory = budgets(cluster)
    devices = [DeviceToProfile(d.name, d.device_string, memory[d.name], pids.get(d.name)) for d in cluster.workers]
    profile = profile_devices(spec, batch, devices, session_target, cluster.master.device_string, repeats=repeats,
                              whole_step_devices=whole_step_devices, split_step_devices=split_step_devices,
                              split_step_sizes=split_step_sizes, whole_beside_split=whole_beside_split,
                              whole_step_bytes=whole_step_bytes, testbed_limits=testbed_limits)
    return with_media(profile, cluster)


def profile_servers(cluster: ClusterFile, spec: ModelSpec, batch: int, servers: Servers,
                    timeout_s: float = PROFILE_TIMEOUT_S, fast_setup: bool = False, **kwargs) -> Profile:
    """``profile_workers`` on reached ``servers``. On the emulated testbed the wait is watched: a
    device whose server dies (past its memory budget the kernel kills it) ends it at once with
    ``cluster.watch.DeviceDied`` naming the device, where the session would wait on the dead server
    for good; a testbed that answers nothing ends it after ``timeout_s`` (TimeoutError). fast_setup:
    the testbed's limits are lifted while the step graphs set up (nothing is timed then)."""
    def run():
        return profile_workers(cluster, spec, batch, servers.target, servers.pids,
                               testbed_limits=servers.testbed if fast_setup else None, **kwargs)
    if servers.testbed is None:
        return run()
    from edgemesh_tf.cluster.watch import watched
    return watched(run, servers.testbed.check, timeout_s, "profiling the workers of %s" % cluster.path)


def with_media(profile: Profile, cluster: ClusterFile) -> Profile:
    """``profile`` with each device's shared medium and its rate from ``cluster`` (a device's own link
    is measured; sharing shows only when devices send at once, so the file says it)."""
    rates, on = dict(cluster.media), {d.name: d.medium for d in cluster.devices}
    return dataclasses.replace(profile, devices=tuple(
        dataclasses.replace(d, medium=on.get(d.name) or "", medium_mbit=float(rates.get(on.get(d.name), 0.0)))
        for d in profile.devices))


def profile_cluster(cluster: ClusterFile | str, spec: ModelSpec, batch: int, *, emulate: bool = True,
                    repeats: int = 5, whole_step_devices: Sequence[str] = (), split_step_devices: Sequence[str] = (),
                    split_step_sizes: Mapping[str, Sequence[int]] | None = None,
                    whole_beside_split: Sequence[str] = (), **up_kwargs) -> Profile:
    """Measures every worker of ``cluster`` for ``spec`` at ``batch`` examples per device step."""
    cluster = load_cluster(cluster) if isinstance(cluster, str) else cluster
    with reach_servers(cluster, emulate, up_kwargs) as servers:
        return profile_servers(cluster, spec, batch, servers, repeats=repeats,
                               whole_step_devices=whole_step_devices, split_step_devices=split_step_devices,
                               split_step_sizes=split_step_sizes, whole_beside_split=whole_beside_split)
