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


def server_command(cluster: ClusterFile, device: str | Device, addresses: Mapping[str, str] | None = None) -> str:
    """A shell command that starts the device's server on its host."""
    config = json.dumps(tf_config(cluster, device, addresses), separators=(",", ":"))
    return "TF_CONFIG=%s edgemesh server" % shlex.quote(config)
