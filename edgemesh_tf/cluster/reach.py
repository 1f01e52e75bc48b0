"""Reach the TF servers of a cluster file: the emulated testbed (started for the duration) or
servers already running at the file's addresses (`edgemesh server` on each host), checked first
(cluster/ready.py: every task must answer within `server_timeout_s`).

    with reach_servers(load_cluster("layouts/edge4.yaml"), emulate=True) as servers:
        tf.compat.v1.Session(servers.target) ...
"""
from __future__ import annotations

import contextlib
import dataclasses

from edgemesh_tf.cluster.ready import SERVER_TIMEOUT_S, ServersNotAnswering, check_servers  # noqa: F401
from edgemesh_tf.cluster.spec import ClusterFile, load_cluster


@dataclasses.dataclass(frozen=True)
class Servers:
    """The TF servers of a job. target: the chief's grpc target; launch: {device name: (network
    namespace or None, grpc target for a client on the device, step delay factor)}; pids: {device
    name: local server pid or None}; summary: {"network", "compute"[, "memory"]}; addresses: {device name:
    host:port as reached from this process}; testbed: the EmulatedCluster if emulated."""

    target: str
    launch: dict
    pids: dict
    summary: dict
    addresses: dict = dataclasses.field(default_factory=dict)
    testbed: object = None


def of_testbed(em) -> Servers:
    """The `Servers` of a running `EmulatedCluster`."""
    return Servers(em.session_target,
                   {n: (d.netns, d.local_target, d.step_delay_factor) for n, d in em.devices.items()},
                   {n: d.pid for n, d in em.devices.items()},
                   {"network": em.network, "compute": em.compute, "memory": em.memory},
                   {n: d.address for n, d in em.devices.items()}, em)


@contextlib.contextmanager
def reach_servers(cluster: ClusterFile | str, emulate: bool, up_kwargs: dict | None = None,
                  server_timeout_s: float = SERVER_TIMEOUT_S):
    """Yields the `Servers` of `cluster` (a ClusterFile or its path): its emulated testbed (started
    for the duration, with `up_kwargs` for `emulated_cluster`; it checks its own servers) or the real
    servers at the file's addresses, once every one of them has answered: else raises
    `ready.ServersNotAnswering` after at most `server_timeout_s`, naming each missing task and the
    command that starts it (a session on a cluster with a task down would wait for it for good)."""
    cluster = load_cluster(cluster) if isinstance(cluster, str) else cluster
    if emulate:
        from edgemesh_tf.cluster.emulator import emulated_cluster
        with emulated_cluster(cluster, **(up_kwargs or {})) as em:
            yield of_testbed(em)
    else:
        check_servers(cluster, server_timeout_s)
        yield Servers("grpc://" + cluster.master.address,
                      {d.name: (None, "grpc://" + d.address, 1.0) for d in cluster.devices},
                      {d.name: None for d in cluster.devices}, {"network": "real", "compute": "real", "memory": "real"},
                      {d.name: d.address for d in cluster.devices})
