"""Cluster files: the devices of a cluster, their roles and (for emulation) their limits.

A cluster file is YAML::

    name: edge4
    cpu_budget_cores: 1.7        # emulation: cores of this machine for all devices together
    media: {wifi: {bandwidth_mbit: 150}}   # optional: shared media (one channel), by name
    devices:
      - {name: edge0, role: worker, host: 127.0.0.1, port: 2300,
         speed: 1.0, memory_mib: 2048, bandwidth_mbit: 100, latency_ms: 2}
      - {name: pi0, role: worker, port: 2301, cpu_cores: 0.3, memory_mib: 384, medium: wifi}
      - {name: ps0, role: ps, host: 127.0.0.1, port: 2310}

Roles map to TF jobs (`worker`, `ps`, `chief`); a device's task index is its position among the
devices of its role, in file order. Emulation fields are optional: a device without `speed` or
`cpu_cores` gets no CPU limit, without `memory_mib` no memory limit, without `bandwidth_mbit` no
rate limit of its own, without `latency_ms` no added delay, without `medium` no shared channel.

CPU: `cpu_cores` is an absolute cgroup quota (cores of this machine, e.g. 0.25 for a
Raspberry-Pi-class board: one core here does ~70 GFLOP/s of fp32 conv); `speed` is relative and
the emulator calibrates quotas so that the devices with a speed share what the `cpu_cores`
devices leave of `cpu_budget_cores` in proportion to their speeds. A device has one or the other.
Σ cpu_cores must not exceed cpu_budget_cores.

Launch fields (optional, per device; `edgemesh launch` reads them, nothing else does):
`ssh_user` the login on the device's host, `workdir` the directory the server runs in there
(absolute, or relative to the login's home) and `edgemesh` the command that runs edgemesh there
(relative to workdir, e.g. `.venv/bin/edgemesh`). They live in `ClusterFile.launch`, not in
`Device`, so they do not change a device's profile cache key.
"""
from __future__ import annotations

import dataclasses
import math
import os
import shlex
from typing import Any, Mapping, Sequence

import yaml

from edgemesh_tf.cluster.simd import ONEDNN_ISA
from edgemesh_tf.errors import InputError

ROLES = ("chief", "worker", "ps")
LAUNCH_KEYS = ("ssh_user", "workdir", "edgemesh")
_DEVICE_KEYS = ("name", "role", "host", "port", "speed", "cpu_cores", "memory_mib", "bandwidth_mbit", "latency_ms",
                "medium", "simd_bits") + LAUNCH_KEYS
_TOP_KEYS = ("name", "devices", "cpu_budget_cores", "media")
_MEDIUM_KEYS = ("bandwidth_mbit",)
MIN_SPEED_SHARE_CORES = 0.1  # what devices with a `speed` need at least, together (calibration floor)
DEFAULT_CPU_BUDGET_CORES = 1.7


class ClusterFileError(InputError):
    """A cluster file is malformed; the message names the file, the device and the field."""


@dataclasses.dataclass(frozen=True)
class Device:
    """One device: a TF task plus its emulated limits.

    speed: relative compute speed (only ratios matter; None = unlimited, or `cpu_cores`).
    cpu_cores: absolute CPU quota of the emulated device (cores of this machine; None = `speed`).
    memory_mib: memory the device may use above its idle TF server (MiB): the planner's budget,
        enforced by the emulator with a cgroup memory limit (see cluster/memory.py).
    bandwidth_mbit: rate of the device's link to the rest of the cluster (Mbit/s, each direction).
    latency_ms: one-way delay of that link (ms); a path between two devices crosses both links.
    medium: name of the shared medium (ClusterFile.media) the device's link goes through, or None.
    simd_bits: width of the vector unit the emulated device computes with (128 = ARM NEON, a Pi's or
        a Jetson's CPU; None = this machine's own; see cluster/simd.py). Not with `speed`.
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
    cpu_cores: float | None = None
    medium: str | None = None
    simd_bits: int | None = None

    @property
    def address(self) -> str:
        """host:port for real deployments."""
        return "%s:%d" % (self.host, self.port)

    @property
    def device_string(self) -> str:
        """TF device prefix, e.g. `/job:worker/task:1`."""
        return "/job:%s/task:%d" % (self.role, self.task_index)


@dataclasses.dataclass(frozen=True)
class Launch:
    """How `edgemesh launch` reaches a device's host (None: the flag's value, else the default).

    ssh_user: the login on the host; workdir: the directory the server runs in (absolute, or relative
    to the login's home); edgemesh: the command that runs edgemesh there (relative to workdir).
    """

    ssh_user: str | None = None
    workdir: str | None = None
    edgemesh: str | None = None


@dataclasses.dataclass(frozen=True)
class ClusterFile:
    """A validated cluster file. media: {medium name: its rate in Mbit/s, shared by all its devices'
    transfers in both directions (one radio channel)}."""

    name: str
    devices: tuple[Device, ...]
    path: str = "<memory>"
    cpu_budget_cores: float = DEFAULT_CPU_BUDGET_CORES
    media: tuple[tuple[str, float], ...] = ()
    launch: tuple[tuple[str, Launch], ...] = ()  # (device name, its launch fields), devices that give any

    def launch_of(self, name: str) -> Launch:
        """The launch fields of device `name` (all None if it gives none)."""
        return dict(self.launch).get(name, Launch())

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
    media = _media(path, data.get("media", {}))
    devices, names, addresses, counts, launch = [], {}, {}, {r: 0 for r in ROLES}, []
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
            cpu_cores=_number(path, name, "cpu_cores", raw.get("cpu_cores"), positive=True),
            medium=_medium_of(path, name, raw.get("medium"), media),
            simd_bits=_simd_bits(path, name, raw),
        ))
        if devices[-1].speed is not None and devices[-1].cpu_cores is not None:
            raise _err(path, name, "cpu_cores", "give either speed (relative, calibrated) or cpu_cores (absolute), "
                       "not both")
        counts[role] += 1
        if any(k in raw for k in LAUNCH_KEYS):
            launch.append((name, Launch(**{k: launch_field(path, name, k, raw.get(k)) for k in LAUNCH_KEYS})))
    if counts["ps"] == 0:
        raise _err(path, None, "role", "no device has role 'ps' (a parameter-server task is required)")
    if counts["worker"] == 0:
        raise _err(path, None, "role", "no device has role 'worker'")
    if counts["chief"] > 1:
        raise _err(path, [d.name for d in devices if d.role == "chief"][1], "role", "at most one device may be 'chief'")
    _check_cpu(path, devices, budget)
    unused = sorted(set(media) - {d.medium for d in devices})
    if unused:
        raise _err(path, None, "media", "medium %r is used by no device (give a device `medium: %s`)"
                   % (unused[0], unused[0]))
    name = data.get("name", os.path.splitext(os.path.basename(path))[0])
    if not isinstance(name, str) or not name:
        raise _err(path, None, "name", "must be a non-empty string, got %r" % (name,))
    return ClusterFile(name=name, devices=tuple(devices), path=path, cpu_budget_cores=float(budget),
                       media=tuple(sorted(media.items())), launch=tuple(launch))


_USER_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def launch_field(path: str, device: str | None, field: str, value: Any) -> str | None:
    """A launch field's value (LAUNCH_KEYS; None stays None) checked, else ClusterFileError naming
    the file (or flag), the device and the field, and what was expected."""
    if value is None:
        return None
    if field == "ssh_user":
        if not isinstance(value, str) or not value or value[0] in "-." or not set(value) <= _USER_CHARS:
            raise _err(path, device, field, "must be a login name of [A-Za-z0-9._-] (the user ssh logs in as on "
                       "the device's host), got %r" % (value,))
    elif field == "workdir":
        if not isinstance(value, str) or not value.strip() or any(c in value for c in "\n\r\0"):
            raise _err(path, device, field, "must be a directory on the device's host (absolute, or relative to "
                       "the login's home), got %r" % (value,))
    elif field == "edgemesh":
        try:
            words = shlex.split(value) if isinstance(value, str) and "\n" not in value else []
        except ValueError:
            words = []
        if not words:
            raise _err(path, device, field, "must be the command that runs edgemesh on the device's host "
                       "(relative to workdir), e.g. '.venv/bin/edgemesh', got %r" % (value,))
    else:
        raise KeyError("not a launch field: %r (they are %s)" % (field, list(LAUNCH_KEYS)))
    return value


def _media(path: str, raw: Any) -> dict[str, float]:
    """{medium name: Mbit/s} from the top-level `media` mapping."""
    if not isinstance(raw, Mapping):
        raise _err(path, None, "media", "must be a mapping {name: {bandwidth_mbit: N}}, got %r" % (raw,))
    media = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not key or not all(c.isalnum() or c in "-_" for c in key):
            raise _err(path, None, "media", "medium names must be strings of [A-Za-z0-9_-], got %r" % (key,))
        if not isinstance(value, Mapping) or set(value) != set(_MEDIUM_KEYS):
            raise _err(path, None, "media", "medium %r must be {bandwidth_mbit: N}, got %r" % (key, value))
        media[key] = float(_number(path, None, "media.%s.bandwidth_mbit" % key, value["bandwidth_mbit"], positive=True))
    return media


def _medium_of(path: str, device: str, value: Any, media: Mapping[str, float]) -> str | None:
    if value is not None and (not isinstance(value, str) or value not in media):
        raise _err(path, device, "medium", "unknown medium %r (the file's media: %s)" % (value, sorted(media) or "none"))
    return value


def _simd_bits(path: str, device: str, raw: Mapping) -> int | None:
    value = raw.get("simd_bits")
    if value is None:
        return None
    if isinstance(value, bool) or value not in ONEDNN_ISA:
        raise _err(path, device, "simd_bits", "must be one of %s (bits of the device's vector unit: 128 for "
                   "ARM NEON), got %r" % (sorted(ONEDNN_ISA), value))
    if raw.get("speed") is not None:
        raise _err(path, device, "simd_bits", "give cpu_cores (an absolute quota) with it, not speed: a "
                   "relative speed is calibrated at this machine's own SIMD width")
    return value


def _check_cpu(path: str, devices: Sequence[Device], budget: float) -> None:
    """Absolute quotas fit the budget, and leave the devices with a relative speed their share."""
    fixed = sum(d.cpu_cores for d in devices if d.cpu_cores)
    if fixed > budget + 1e-9:
        raise _err(path, None, "cpu_budget_cores", "%.3g cores is less than the devices' cpu_cores together (%.3g)"
                   % (budget, fixed))
    if any(d.speed for d in devices) and fixed and budget - fixed < MIN_SPEED_SHARE_CORES:
        raise _err(path, None, "cpu_budget_cores", "%.3g cores leaves %.3g for the devices with a speed after the "
                   "cpu_cores devices (need >= %.2g)" % (budget, budget - fixed, MIN_SPEED_SHARE_CORES))


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
