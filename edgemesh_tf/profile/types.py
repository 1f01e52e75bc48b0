"""Profiles as plain data (JSON files). Units are in the field names."""
from __future__ import annotations

import dataclasses
import json
import os


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
    """

    name: str
    device: str
    layers: tuple[LayerTiming, ...]
    memory_bytes: int
    bandwidth_mbit: float
    latency_ms: float
    step_overhead_ms: float = 0.0
    peak_memory_bytes: int = 0

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

    def device(self, name: str) -> DeviceProfile:
        for d in self.devices:
            if d.name == name:
                return d
        raise ValueError("profile has no device %r; devices: %s" % (name, [d.name for d in self.devices]))

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)


def profile_from_dict(d: dict, source: str = "<profile>") -> Profile:
    try:
        devices = tuple(DeviceProfile(**{**dev, "layers": tuple(LayerTiming(**t) for t in dev["layers"])})
                        for dev in d["devices"])
        return Profile(**{**d, "image_shape": tuple(d["image_shape"]), "devices": devices})
    except (KeyError, TypeError) as e:
        raise ValueError("%s: not a valid profile: %s" % (source, e)) from None


def load_profile(path: str) -> Profile:
    if not os.path.exists(path):
        raise ValueError("profile file %s does not exist" % path)
    try:
        with open(path) as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError("%s: not valid JSON: %s" % (path, e)) from None
    return profile_from_dict(data, path)


def save_profile(profile: Profile, path: str) -> None:
    with open(path, "w") as f:
        f.write(profile.to_json())
