"""Profile the workers of a cluster file: on the emulated testbed (started for the duration) or on
servers already running at the file's addresses."""
from __future__ import annotations

import contextlib

from edgemesh_tf.cluster.spec import ClusterFile, load_cluster
from edgemesh_tf.cluster.tf_config import cluster_spec_dict
from edgemesh_tf.models.spec import ModelSpec
from edgemesh_tf.profile.profiler import DeviceToProfile, profile_devices
from edgemesh_tf.profile.types import Profile

DEFAULT_MEMORY_MIB = 1024


@contextlib.contextmanager
def reachable_cluster(cluster: ClusterFile | str, emulate: bool, **up_kwargs):
    """Yields (cluster_spec dict, session target, {device name: server pid or None})."""
    cluster = load_cluster(cluster) if isinstance(cluster, str) else cluster
    if emulate:
        from edgemesh_tf.cluster.emulator import emulated_cluster
        with emulated_cluster(cluster, **up_kwargs) as em:
            yield em.cluster_spec(), em.session_target, {n: d.pid for n, d in em.devices.items()}
    else:
        master = cluster.chief or cluster.workers[0]
        yield cluster_spec_dict(cluster), "grpc://" + master.address, {d.name: None for d in cluster.devices}


def profile_cluster(cluster: ClusterFile | str, spec: ModelSpec, batch: int, *, emulate: bool = True,
                    repeats: int = 5, **up_kwargs) -> Profile:
    """Measures every worker of ``cluster`` for ``spec`` at ``batch`` examples per device step."""
    cluster = load_cluster(cluster) if isinstance(cluster, str) else cluster
    master = cluster.chief or cluster.workers[0]
    with reachable_cluster(cluster, emulate, **up_kwargs) as (_, target, pids):
        devices = [DeviceToProfile(d.name, d.device_string, (d.memory_mib or DEFAULT_MEMORY_MIB) << 20, pids[d.name])
                   for d in cluster.workers]
        return profile_devices(spec, batch, devices, target, master.device_string, repeats=repeats)
