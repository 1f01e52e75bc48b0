"""Layouts as plain data: which tensor dim maps to which mesh dim, on which devices, in what sizes.

A layout file (YAML or JSON) looks like::

    # Two devices, conv2's 64 filters split 40:24 (a fast and a slow device).
    mesh: {model: 2}                  # mesh dims and their sizes (row-major over `devices`)
    devices: [cpu:0, cpu:1]           # one per mesh position; "cpu:N" or a full TF device name
    rules: {conv1: model, conv2: model, fc1: model}   # tensor dim -> mesh dim
    sizes: {conv2: [40, 24]}          # per-position sizes of a split dim; absent = even split

Anything not in ``rules`` is replicated. Even splits and full replication are special cases.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from typing import Mapping, Sequence

import yaml

from edgemesh_tf.errors import InputError

_LAYOUT_KEYS = {"mesh", "devices", "rules", "sizes", "comment", "predicted"}


@dataclasses.dataclass(frozen=True)
class Layout:
    """A mesh layout.

    Attributes:
      mesh: ((mesh_dim, size), ...) in row-major order over ``devices``.
      devices: one TF device name per mesh position (len = product of mesh sizes).
      rules: ((tensor_dim, mesh_dim), ...): split dims; all other dims are replicated.
      sizes: ((tensor_dim, (size_0, size_1, ...)), ...): per-coordinate slice sizes of a split dim
        along its mesh dim; a split dim not listed here is split evenly.
    """

    mesh: tuple[tuple[str, int], ...]
    devices: tuple[str, ...]
    rules: tuple[tuple[str, str], ...] = ()
    sizes: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @property
    def mesh_sizes(self) -> dict[str, int]:
        return dict(self.mesh)

    @property
    def rule_map(self) -> dict[str, str]:
        return dict(self.rules)

    @property
    def size_map(self) -> dict[str, tuple[int, ...]]:
        return dict(self.sizes)

    @property
    def num_devices(self) -> int:
        return math.prod(s for _, s in self.mesh)

    def split_sizes(self, tensor_dim: str, dim_size: int) -> tuple[int, ...] | None:
        """Per-coordinate sizes of ``tensor_dim`` (total ``dim_size``), or None if replicated."""
        mesh_dim = self.rule_map.get(tensor_dim)
        if mesh_dim is None:
            return None
        if tensor_dim in self.size_map:
            return self.size_map[tensor_dim]
        n = self.mesh_sizes[mesh_dim]
        if dim_size % n:
            raise ValueError(
                "layout: dimension %r of size %d cannot be split evenly over mesh dim %r of size %d; "
                "give its sizes explicitly, e.g. sizes: {%s: %s}"
                % (tensor_dim, dim_size, mesh_dim, n, tensor_dim, list(even_split(dim_size, n))))
        return (dim_size // n,) * n

    def validate(self, dims: Mapping[str, int] | None = None,
                 available_devices: Sequence[str] | None = None) -> "Layout":
        """Checks the layout; raises ValueError naming the dim/device and the expected value.

        Args:
          dims: the model's tensor dims {name: size}; enables the checks of names and sizes.
          available_devices: device names that exist; enables the unknown-device check.
        """
        mesh = self.mesh_sizes
        if len(mesh) != len(self.mesh):
            raise ValueError("layout: mesh dims must be unique, got %s" % [m for m, _ in self.mesh])
        for name, size in self.mesh:
            if not isinstance(size, int) or size < 1:
                raise ValueError("layout: mesh dim %r must have a positive integer size, got %r" % (name, size))
        if len(self.devices) != self.num_devices:
            raise ValueError("layout: mesh %s needs %d devices, got %d: %s"
                             % (dict(self.mesh), self.num_devices, len(self.devices), list(self.devices)))
        if len(set(self.devices)) != len(self.devices):
            dup = sorted({d for d in self.devices if self.devices.count(d) > 1})
            raise ValueError("layout: device(s) %s appear more than once; each mesh position needs its own "
                             "device (uneven sizes replace repeated devices)" % dup)
        if available_devices is not None:
            for d in self.devices:
                if d not in available_devices:
                    raise ValueError("layout: unknown device %r; expected one of %s" % (d, list(available_devices)))
        for tensor_dim, mesh_dim in self.rules:
            if mesh_dim not in mesh:
                raise ValueError("layout: rule %s -> %r names an unknown mesh dim; expected one of %s"
                                 % (tensor_dim, mesh_dim, sorted(mesh)))
            if dims is not None and tensor_dim not in dims:
                raise ValueError("layout: rule names unknown dimension %r; the model's dimensions are %s"
                                 % (tensor_dim, sorted(dims)))
        rules = self.rule_map
        for tensor_dim, sizes in self.sizes:
            if tensor_dim not in rules:
                raise ValueError("layout: sizes given for dimension %r, which no rule splits; add a rule "
                                 "%s: <mesh dim>" % (tensor_dim, tensor_dim))
            n = mesh[rules[tensor_dim]]
            if len(sizes) != n:
                raise ValueError("layout: sizes of %r have %d entries, expected %d (size of mesh dim %r)"
                                 % (tensor_dim, len(sizes), n, rules[tensor_dim]))
            for i, s in enumerate(sizes):
                if not isinstance(s, int) or s < 1:
                    raise ValueError("layout: dimension %r gives %r to mesh position %d (device %s); every "
                                     "device needs a positive integer share of a split dim"
                                     % (tensor_dim, s, i, self._device_at(rules[tensor_dim], i)))
            if dims is not None and tensor_dim in dims and sum(sizes) != dims[tensor_dim]:
                raise ValueError("layout: sizes of %r add up to %d, expected %d"
                                 % (tensor_dim, sum(sizes), dims[tensor_dim]))
        if dims is not None:
            for tensor_dim in rules:
                if tensor_dim not in self.size_map:
                    self.split_sizes(tensor_dim, dims[tensor_dim])
        return self

    def shares(self, dims: Mapping[str, int]) -> dict[str, dict[str, int]]:
        """{split dim: {device: units it computes}} for the dims of ``dims`` ({name: size}) that this
        layout splits: which device holds which part of each layer's filters or units."""
        out = {}
        for name, size in dims.items():
            sizes = self.split_sizes(name, size) if name != "batch" else None
            if sizes:
                mesh_dim = self.rule_map[name]
                out[name] = {self._device_at(mesh_dim, i): int(n) for i, n in enumerate(sizes)}
        return out

    def _device_at(self, mesh_dim: str, coord: int) -> str:
        """The first device whose coordinate along ``mesh_dim`` is ``coord``."""
        names = [m for m, _ in self.mesh]
        axis = names.index(mesh_dim)
        stride = math.prod(s for _, s in self.mesh[axis + 1:])
        return self.devices[coord * stride]

    def to_dict(self) -> dict:
        return {"mesh": dict(self.mesh), "devices": list(self.devices), "rules": dict(self.rules),
                "sizes": {k: list(v) for k, v in self.sizes}}


def even_split(total: int, n: int) -> tuple[int, ...]:
    """The most even split of ``total`` units over ``n`` positions, larger shares first."""
    return tuple(total // n + (1 if i < total % n else 0) for i in range(n))


def normalize_device(name: str) -> str:
    """"cpu:1" -> "/job:localhost/replica:0/task:0/device:CPU:1"; full names pass through."""
    m = re.fullmatch(r"/?(?:device:)?cpu:(\d+)", name.strip(), re.IGNORECASE)
    if m:
        return "/job:localhost/replica:0/task:0/device:CPU:%s" % m.group(1)
    return name.strip()


def local_devices(count: int) -> list[str]:
    """The names of ``count`` in-process CPU devices (see ``session_config``)."""
    return [normalize_device("cpu:%d" % i) for i in range(count)]


def layout_from_dict(d: Mapping, source: str = "<layout>") -> Layout:
    """Builds a Layout from parsed YAML/JSON; errors name ``source`` and the field."""
    if not isinstance(d, Mapping):
        raise InputError("%s: expected a mapping with keys mesh, devices, rules, sizes; got %r" % (source, type(d).__name__))
    unknown = set(d) - _LAYOUT_KEYS
    if unknown:
        raise InputError("%s: unknown key(s) %s; expected some of %s" % (source, sorted(unknown), sorted(_LAYOUT_KEYS)))
    for key, kind in (("mesh", Mapping), ("devices", list), ("rules", Mapping), ("sizes", Mapping)):
        if key in d and d[key] is not None and not isinstance(d[key], kind):
            raise InputError("%s: field %r must be a %s, got %r" % (source, key, "mapping" if kind is Mapping else "list", d[key]))
    if "mesh" not in d or "devices" not in d:
        raise InputError("%s: fields 'mesh' and 'devices' are required" % source)
    try:
        layout = Layout(
            mesh=tuple((str(k), v) for k, v in d["mesh"].items()),
            devices=tuple(normalize_device(str(x)) for x in d["devices"]),
            rules=tuple((str(k), str(v)) for k, v in (d.get("rules") or {}).items()),
            sizes=tuple((str(k), tuple(v)) for k, v in (d.get("sizes") or {}).items()),
        )
        return layout.validate()
    except (TypeError, ValueError) as e:
        raise InputError("%s: %s" % (source, e)) from None


def load_layout(path: str, dims: Mapping[str, int] | None = None) -> Layout:
    """Reads a YAML or JSON layout file; with ``dims`` ({tensor dim: size} of a model, e.g.
    ``spec.dims(batch)``) also checks the layout against the model. Raises InputError naming the file."""
    if not os.path.exists(path):
        raise InputError("layout file %s does not exist" % path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError("%s: cannot read as UTF-8 text: %s" % (path, e)) from None
    try:
        data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as e:
        raise InputError("%s: not valid %s: %s" % (path, "JSON" if path.endswith(".json") else "YAML", e)) from None
    layout = layout_from_dict(data, source=path)
    if dims is not None:
        try:
            layout.validate(dims)
        except ValueError as e:
            raise InputError("%s: %s" % (path, e)) from None
    return layout


def save_layout(layout: Layout, path: str, header: str = "") -> None:
    """Writes a layout as commented YAML."""
    lines = ["# " + line for line in header.splitlines()] if header else []
    with open(path, "w") as f:
        f.write("\n".join(lines + [yaml.safe_dump(layout.to_dict(), sort_keys=False, default_flow_style=None)]))


def single_device_layout(device: str = "cpu:0") -> Layout:
    """Everything replicated on one device (the unsplit model)."""
    return Layout(mesh=(("model", 1),), devices=(normalize_device(device),))


def even_split_layout(split_dims: Mapping[str, int], devices: Sequence[str]) -> tuple[Layout, dict[str, tuple[int, ...]]]:
    """Every split dim ({name: units}, a model's ``split_dims()``) with at least one unit per device
    split over ``devices`` as evenly as integers allow; (the layout, {dim: shares})."""
    shares = {n: even_split(u, len(devices)) for n, u in split_dims.items() if u >= len(devices)}
    return split_layout(shares, devices), shares


def split_layout(shares: Mapping[str, Sequence[int]], devices: Sequence[str]) -> Layout:
    """Each dim of ``shares`` ({name: units per device, in ``devices`` order}) split over ``devices``."""
    return Layout(mesh=(("model", len(devices)),), devices=tuple(devices), rules=tuple((n, "model") for n in shares),
                  sizes=tuple((n, tuple(v)) for n, v in shares.items()))
