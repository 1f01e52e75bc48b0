"""Cluster files: the devices of a cluster, their roles and (for emulation) their limits.

A cluster file is YAML::

    name: edge4
    cpu_budget_cores: 1.7        # emulation: cores shared by all devices that have a `speed`
    devices:
      - {name: edge0, role: worker, host: 127.0.0.1, port: 2300,
         speed: 1.0, memory_mib: 2048, bandwidth_mbit: 100, latency_ms: 2}
      - {name: ps0, role: ps, host: 127.0.0.1, port: 2310}

Roles map to TF jobs (`worker`, `ps`, `chief`); a device's task index is its position among the
devices of its role, in file order. Emulation fields are optional: a device without `speed` gets
no CPU limit, without `bandwidth_mbit` no rate limit, without `latency_ms` no added delay.
"""
from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Mapping, Sequence

import yaml

from edgemesh_tf.errors import InputError

ROLES = ("chief", "worker", "ps")
_DEVICE_KEYS = ("name", "role", "host", "port", "speed", "memory_mib", "bandwidth_mbit", "latency_ms")
_TOP_KEYS = ("name", "devices", "cpu_budget_cores")
DEFAULT_CPU_BUDGET_CORES = 1.7


class ClusterFileError(InputError):
    """A cluster file is malformed; the message names the file, the device and the field."""


@dataclasses.dataclass(frozen=True)
class Device:
    """One device: a TF task plus its emulated limits.

    speed: relative compute speed (only ratios matter; None = unlimited).
    memory_mib: memory budget for the planner (MiB; not enforced by the emulator).
    bandwidth_mbit: rate of the device's link to the rest of the cluster (Mbit/s, each direction).
    latency_ms: one-way delay of that link (ms); a path between two devices crosses both links.
    """

    name: str
    role: str
    host: str
    port: int
    task_index: int
    speed: float | None = None
    memory_mib: int | None = None
    bandwidth_mbit: float | None = None
    latency_ms: float = 0.0

    @property
    def address(self) -> str:
        """host:port for real deployments."""
        return "%s:%d" % (self.host, self.port)

    @property
    def device_string(self) -> str:
        """TF device prefix, e.g. `/job:worker/task:1`."""
        return "/job:%s/task:%d" % (self.role, self.task_index)


@dataclasses.dataclass(frozen=True)
class ClusterFile:
    """A validated cluster file."""

    name: str
    devices: tuple[Device, ...]
    path: str = "<memory>"
    cpu_budget_cores: float = DEFAULT_CPU_BUDGET_CORES

    def device(self, name: str) -> Device:
        for d in self.devices:
            if d.name == name:
                return d
        raise KeyError("%s: no device named %r (have %s)" % (self.path, name, [d.name for d in self.devices]))

    def by_role(self, role: str) -> tuple[Device, ...]:
        return tuple(d for d in self.devices if d.role == role)

    @property
    def workers(self) -> tuple[Device, ...]:
        return self.by_role("worker")

    @property
    def chief(self) -> Device | None:
        chiefs = self.by_role("chief")
        return chiefs[0] if chiefs else None

    @property
    def master(self) -> Device:
        """The device a client session uses as master (and where whole variables live): the
        chief, else the first worker."""
        return self.chief or self.workers[0]


def _err(path: str, device: str | None, field: str | None, msg: str) -> ClusterFileError:
    where = [path]
    if device is not None:
        where.append("device %r" % device)
    if field is not None:
        where.append("field %r" % field)
    return ClusterFileError("%s: %s" % (": ".join(where), msg))


def _number(path, dev, field, value, *, positive: bool, integer: bool = False):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise _err(path, dev, field, "must be a%s number, got %r" % ("n integer" if integer else "", value))
    if not math.isfinite(value):
        raise _err(path, dev, field, "must be a finite number, got %r" % (value,))
    if positive and value <= 0:
        raise _err(path, dev, field, "must be > 0, got %r" % (value,))
    if not positive and value < 0:
        raise _err(path, dev, field, "must be >= 0, got %r" % (value,))
    return value


def parse_cluster(data: Any, path: str = "<memory>") -> ClusterFile:
    """Validates a parsed YAML document; raises ClusterFileError naming file, device and field."""
    if not isinstance(data, Mapping):
        raise _err(path, None, None, "expected a mapping with keys %s, got %s" % (list(_TOP_KEYS), type(data).__name__))
    unknown = sorted(set(data) - set(_TOP_KEYS))
    if unknown:
        raise _err(path, None, unknown[0], "unknown key (allowed: %s)" % ", ".join(_TOP_KEYS))
    raw_devices = data.get("devices")
    if not isinstance(raw_devices, Sequence) or isinstance(raw_devices, str) or not raw_devices:
        raise _err(path, None, "devices", "must be a non-empty list of devices")
    budget = _number(path, None, "cpu_budget_cores", data.get("cpu_budget_cores", DEFAULT_CPU_BUDGET_CORES), positive=True)
    devices, names, addresses, counts = [], {}, {}, {r: 0 for r in ROLES}
    for i, raw in enumerate(raw_devices):
        if not isinstance(raw, Mapping):
            raise _err(path, "#%d" % i, None, "must be a mapping, got %r" % (raw,))
        name = raw.get("name")
        if not isinstance(name, str) or not name or not all(c.isalnum() or c in "-_" for c in name):
            raise _err(path, "#%d" % i, "name", "must be a non-empty string of [A-Za-z0-9_-], got %r" % (name,))
        unknown = sorted(set(raw) - set(_DEVICE_KEYS))
        if unknown:
            raise _err(path, name, unknown[0], "unknown key (allowed: %s)" % ", ".join(_DEVICE_KEYS))
        if name in names:
            raise _err(path, name, "name", "duplicate device name (also device #%d)" % names[name])
        names[name] = i
        role = raw.get("role")
        if role not in ROLES:
            raise _err(path, name, "role", "must be one of %s, got %r" % (list(ROLES), role))
        host = raw.get("host", "127.0.0.1")
        if not isinstance(host, str) or not host or host in ("0.0.0.0", "::"):
            raise _err(path, name, "host", "must be a host name or address (not a wildcard), got %r" % (host,))
        port = _number(path, name, "port", raw.get("port"), positive=True, integer=True)
        if port is None or port > 65535:
            raise _err(path, name, "port", "must be an integer in 1..65535, got %r" % (raw.get("port"),))
        if (host, port) in addresses:
            raise _err(path, name, "port", "duplicate address %s:%d (also device %r)" % (host, port, addresses[(host, port)]))
        addresses[(host, port)] = name
        devices.append(Device(
            name=name, role=role, host=host, port=port, task_index=counts[role],
            speed=_number(path, name, "speed", raw.get("speed"), positive=True),
            memory_mib=_number(path, name, "memory_mib", raw.get("memory_mib"), positive=True, integer=True),
            bandwidth_mbit=_number(path, name, "bandwidth_mbit", raw.get("bandwidth_mbit"), positive=True),
            latency_ms=float(_number(path, name, "latency_ms", raw.get("latency_ms", 0.0), positive=False)),
        ))
        counts[role] += 1
    if counts["ps"] == 0:
        raise _err(path, None, "role", "no device has role 'ps' (a parameter-server task is required)")
    if counts["worker"] == 0:
        raise _err(path, None, "role", "no device has role 'worker'")
    if counts["chief"] > 1:
        raise _err(path, [d.name for d in devices if d.role == "chief"][1], "role", "at most one device may be 'chief'")
    name = data.get("name", os.path.splitext(os.path.basename(path))[0])
    if not isinstance(name, str) or not name:
        raise _err(path, None, "name", "must be a non-empty string, got %r" % (name,))
    return ClusterFile(name=name, devices=tuple(devices), path=path, cpu_budget_cores=float(budget))


def load_cluster(path: str) -> ClusterFile:
    """Reads and validates a cluster YAML file."""
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise ClusterFileError("%s: cannot read: %s" % (path, e)) from e
    except UnicodeDecodeError as e:
        raise ClusterFileError("%s: not UTF-8 text: %s" % (path, e)) from e
    except yaml.YAMLError as e:
        raise ClusterFileError("%s: not valid YAML: %s" % (path, e)) from e
    return parse_cluster(data, path)
