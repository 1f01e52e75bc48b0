"""Reach the TF servers of a cluster file: the emulated testbed (started for the duration) or
servers already running at the file's addresses (`edgemesh server` on each host)."""
from __future__ import annotations

import contextlib

from edgemesh_tf.cluster.spec import ClusterFile, load_cluster
from edgemesh_tf.cluster.tf_config import cluster_spec_dict


@contextlib.contextmanager
def reachable_cluster(cluster: ClusterFile | str, emulate: bool, **up_kwargs):
    """Yields (cluster_spec dict, session target, {device name: server pid or None})."""
    cluster = load_cluster(cluster) if isinstance(cluster, str) else cluster
    if emulate:
        from edgemesh_tf.cluster.emulator import emulated_cluster
        with emulated_cluster(cluster, **up_kwargs) as em:
            yield em.cluster_spec(), em.session_target, {n: d.pid for n, d in em.devices.items()}
    else:
        yield cluster_spec_dict(cluster), "grpc://" + cluster.master.address, {d.name: None for d in cluster.devices}
