"""TF cluster specs: the `cluster`/`task` dicts of `TF_CONFIG`, for real hosts or emulated addresses."""
from __future__ import annotations

import json
import shlex
from typing import Mapping

from edgemesh_tf.cluster.spec import ROLES, ClusterFile, Device


def cluster_spec_dict(cluster: ClusterFile, addresses: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """{job: [host:port per task]}; `addresses` maps device name -> host:port (default: the file's)."""
    spec: dict[str, list[str]] = {}
    for role in ROLES:
        devices = cluster.by_role(role)
        if devices:
            spec[role] = [addresses[d.name] if addresses else d.address for d in devices]
    return spec


def tf_config(cluster: ClusterFile, device: str | Device, addresses: Mapping[str, str] | None = None) -> dict:
    """The standard TF_CONFIG dict of one device."""
    d = device if isinstance(device, Device) else cluster.device(device)
    return {"cluster": cluster_spec_dict(cluster, addresses), "task": {"type": d.role, "index": d.task_index}}


# What each role's server is for, and so why it must run before a job on real servers starts (every
# task of the cluster file must answer: cluster/ready.py checks). `edgemesh tf-config` prints it
# beside each device's command, and the error of a missing server repeats it.
ROLE_NEEDS = {
    "chief": "needed: the job's client (edgemesh run, train or profile) connects to it as its session target, "
             "and the chief's evaluation runs on it",
    "ps": "needed: it holds the global model, the counters and the control board of hybrid training",
    "worker": "needed: the profiler measures it and the plan's groups compute on it",
}


def role_needs(cluster: ClusterFile, device: str | Device) -> str:
    """Why the device's server must run (ROLE_NEEDS of its role; a worker that is the session target
    of a cluster without a chief says that too)."""
    d = device if isinstance(device, Device) else cluster.device(device)
    note = ROLE_NEEDS[d.role]
    if d.role != "chief" and d.name == cluster.master.name:
        note += "; the cluster has no chief, so it is also the session target the job's client connects to"
    return note


def server_command(cluster: ClusterFile, device: str | Device, addresses: Mapping[str, str] | None = None) -> str:
    """A shell command that starts the device's server on its host."""
    config = json.dumps(tf_config(cluster, device, addresses), separators=(",", ":"))
    return "TF_CONFIG=%s edgemesh server" % shlex.quote(config)
