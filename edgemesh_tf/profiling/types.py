"""Profiles as plain data (JSON files). Units are in the field names."""
from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Mapping

from edgemesh_tf.errors import InputError


@dataclasses.dataclass(frozen=True)
class LayerTiming:
    """Forward+backward time of one splittable layer dim, all of its filters/units, on one device.

    name: the split dim (a layer name, or ``<res block>a`` / ``<res block>b``).
    compute_ms: median time of the whole layer at the profile's batch size.
    spread_ms: inter-quartile range of the repeats.
    """

    name: str
    compute_ms: float
    spread_ms: float = 0.0


@dataclasses.dataclass(frozen=True)
class DeviceProfile:
    """One device as measured.

    device: the TF device string the planner puts into layouts (e.g. "/job:worker/task:2/device:CPU:0").
    memory_bytes: the device's memory budget (from the cluster file).
    bandwidth_mbit: its link to the rest of the cluster, fitted from transfers of several sizes as
      time = a + bytes / bandwidth.
    latency_ms: one-way latency of its link (half the round trip of an empty run there).
    step_overhead_ms: the round trip of an empty run on the device (starting a step there).
    peak_memory_bytes: peak resident memory of the device's server during profiling, idle TF subtracted.
    whole_step_ms: median of a few real training steps of the whole model on this device alone at the
      profile's batch (ms; 0 = not measured). The planner calibrates every device's layer times by it
      (``planner.calibrate``).
    split_overhead_ms: what each other device of a group adds to a split layer on this device beyond
      its modelled compute and transfers (ms per peer; 0 = as profiled): fitted by
      ``planner.calibrate`` from the profile's split step, in proportion to the device's compute time.
    medium, medium_mbit: the shared channel (e.g. one Wi-Fi) the device's link goes through and its
      rate (Mbit/s), from the cluster file's `media`; "" and 0 when the link is its own.
    """

    name: str
    device: str
    layers: tuple[LayerTiming, ...]
    memory_bytes: int
    bandwidth_mbit: float
    latency_ms: float
    step_overhead_ms: float = 0.0
    peak_memory_bytes: int = 0
    whole_step_ms: float = 0.0
    split_overhead_ms: float = 0.0
    medium: str = ""
    medium_mbit: float = 0.0

    def layer_ms(self, name: str) -> float:
        for t in self.layers:
            if t.name == name:
                return t.compute_ms
        raise ValueError("profile of device %s has no timing for layer %r; layers: %s"
                         % (self.name, name, [t.name for t in self.layers]))


@dataclasses.dataclass(frozen=True)
class Profile:
    """All devices of a cluster for one model at one batch size (per device, per step)."""

    model: str
    batch: int
    image_shape: tuple[int, int, int]
    num_classes: int
    devices: tuple[DeviceProfile, ...]
    ps_bandwidth_mbit: float = 1000.0
    compute_scale: float = 1.0  # the median factor the devices' layer times were multiplied by (1.0: as measured)
    # a few real training steps of the model split over these devices (ms; 0: not measured), each
    # split dim's units as in split_step_sizes (in split_step_devices' order; {}: evenly)
    split_step_ms: float = 0.0
    split_step_devices: tuple[str, ...] = ()
    split_step_sizes: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)

    def device(self, name: str) -> DeviceProfile:
        for d in self.devices:
            if d.name == name:
                return d
        raise ValueError("profile has no device %r; devices: %s" % (name, [d.name for d in self.devices]))

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)


def _field(source, where, d, key, kind, *, positive=False, optional=False, default=None):
    """d[key] checked against ``kind`` ("str", "int", "number"); errors name source, where and key."""
    def err(msg):
        return InputError("%s: %sfield %r %s" % (source, where + ": " if where else "", key, msg))

    if key not in d:
        if optional:
            return default
        raise err("is missing")
    v = d[key]
    if kind == "str":
        if not isinstance(v, str) or not v:
            raise err("must be a non-empty string, got %r" % (v,))
        return v
    if isinstance(v, bool) or not isinstance(v, int if kind == "int" else (int, float)):
        raise err("must be a%s, got %r" % ("n integer" if kind == "int" else " number", v))
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise err("must be a finite number %s 0, got %r" % (">" if positive else ">=", v))
    return v


def _keys(source, where, d, allowed):
    if not isinstance(d, dict):
        raise InputError("%s: %sexpected a mapping, got %r" % (source, where + ": " if where else "", d))
    unknown = sorted(set(d) - set(allowed), key=str)
    if unknown:
        raise InputError("%s: %sunknown field %r (allowed: %s)" % (source, where + ": " if where else "", unknown[0],
                                                                    ", ".join(allowed)))


def profile_from_dict(d: dict, source: str = "<profile>") -> Profile:
    """Validates parsed JSON; raises InputError naming ``source``, the device and the field."""
    _keys(source, "", d, [f.name for f in dataclasses.fields(Profile)])
    shape = d.get("image_shape")
    if not (isinstance(shape, list) and len(shape) == 3
            and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in shape)):
        raise InputError("%s: field 'image_shape' must be a list of 3 positive integers (h, w, c), got %r"
                         % (source, shape))
    raw_devices = d.get("devices")
    if not isinstance(raw_devices, list) or not raw_devices:
        raise InputError("%s: field 'devices' must be a non-empty list of devices, got %r" % (source, raw_devices))
    devices, names = [], set()
    for i, dev in enumerate(raw_devices):
        _keys(source, "device #%d" % i, dev, [f.name for f in dataclasses.fields(DeviceProfile)])
        name = _field(source, "device #%d" % i, dev, "name", "str")
        where = "device %r" % name
        if name in names:
            raise InputError("%s: %s: duplicate device name" % (source, where))
        names.add(name)
        layers = dev.get("layers")
        if not isinstance(layers, list) or not layers:
            raise InputError("%s: %s: field 'layers' must be a non-empty list of layer timings, got %r"
                             % (source, where, layers))
        timings = []
        for j, t in enumerate(layers):
            lw = "%s: layer #%d" % (where, j)
            _keys(source, lw, t, [f.name for f in dataclasses.fields(LayerTiming)])
            timings.append(LayerTiming(_field(source, lw, t, "name", "str"),
                                       _field(source, lw, t, "compute_ms", "number"),
                                       _field(source, lw, t, "spread_ms", "number", optional=True, default=0.0)))
        devices.append(DeviceProfile(
            name=name, device=_field(source, where, dev, "device", "str"), layers=tuple(timings),
            memory_bytes=_field(source, where, dev, "memory_bytes", "int", positive=True),
            bandwidth_mbit=_field(source, where, dev, "bandwidth_mbit", "number", positive=True),
            latency_ms=_field(source, where, dev, "latency_ms", "number"),
            step_overhead_ms=_field(source, where, dev, "step_overhead_ms", "number", optional=True, default=0.0),
            peak_memory_bytes=_field(source, where, dev, "peak_memory_bytes", "int", optional=True, default=0),
            whole_step_ms=_field(source, where, dev, "whole_step_ms", "number", optional=True, default=0.0),
            split_overhead_ms=_field(source, where, dev, "split_overhead_ms", "number", optional=True, default=0.0),
            medium="" if dev.get("medium") == "" else _field(source, where, dev, "medium", "str", optional=True,
                                                             default=""),
            medium_mbit=_field(source, where, dev, "medium_mbit", "number", optional=True, default=0.0)))
        if bool(devices[-1].medium) != (devices[-1].medium_mbit > 0):
            raise InputError("%s: %s: fields 'medium' and 'medium_mbit' go together (a shared channel's name and "
                             "its rate > 0 Mbit/s), got %r and %r" % (source, where, devices[-1].medium,
                                                                      devices[-1].medium_mbit))
    split_devices = d.get("split_step_devices", [])
    if not (isinstance(split_devices, list) and all(n in names for n in split_devices)):
        raise InputError("%s: field 'split_step_devices' must be a list of the profile's device names (%s), got %r"
                         % (source, sorted(names), split_devices))
    return Profile(model=_field(source, "", d, "model", "str"), batch=_field(source, "", d, "batch", "int", positive=True),
                   image_shape=tuple(shape), num_classes=_field(source, "", d, "num_classes", "int", positive=True),
                   devices=tuple(devices),
                   ps_bandwidth_mbit=_field(source, "", d, "ps_bandwidth_mbit", "number", positive=True, optional=True,
                                            default=1000.0),
                   compute_scale=_field(source, "", d, "compute_scale", "number", positive=True, optional=True,
                                        default=1.0),
                   split_step_ms=_field(source, "", d, "split_step_ms", "number", optional=True, default=0.0),
                   split_step_devices=tuple(split_devices),
                   split_step_sizes=_split_sizes(source, d.get("split_step_sizes", {}), len(split_devices)))


def _split_sizes(source: str, sizes, k: int) -> dict[str, tuple[int, ...]]:
    if not (isinstance(sizes, dict) and all(isinstance(v, list) and len(v) == k
                                            and all(isinstance(u, int) and u > 0 for u in v) for v in sizes.values())):
        raise InputError("%s: field 'split_step_sizes' must map each split layer to %d positive unit counts (one per "
                         "split step device), got %r" % (source, k, sizes))
    return {n: tuple(v) for n, v in sizes.items()}


def load_profile(path: str) -> Profile:
    if not os.path.exists(path):
        raise InputError("profile file %s does not exist" % path)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError) as e:
        raise InputError("%s: cannot read as UTF-8 text: %s" % (path, e)) from None
    except json.JSONDecodeError as e:
        raise InputError("%s: not valid JSON: %s" % (path, e)) from None
    return profile_from_dict(data, path)


def save_profile(profile: Profile, path: str) -> None:
    with open(path, "w") as f:
        f.write(profile.to_json())
