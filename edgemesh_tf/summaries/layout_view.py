"""The layout of a job as a person looks at it: devices x layers, each cell the device's share of the
layer's filters (units), with each device's speed, memory and predicted vs measured step time.

`layout_rows` computes the plain data; `markdown_table` and `render_png` present it (matplotlib,
Agg backend, imported only here). FLOPs follow planner.model_stats (forward FLOPs x 3 for forward
plus backward).
"""
from __future__ import annotations

import dataclasses
import io
import math
from typing import Mapping, Sequence

from edgemesh_tf.mesh.layout import Layout
from edgemesh_tf.planner.model_stats import ModelStats

TRAIN_FLOPS_PER_FORWARD = 3  # backward ~ 2x forward


@dataclasses.dataclass(frozen=True)
class DeviceRow:
    """One device of the job. shares: {layer: fraction of its filters on this device (1.0 when
    replicated)}; flops_per_step: FLOPs of one local iteration of its group on this device;
    speed: relative speed from the cluster file (None if unknown); memory_mib: predicted and
    measured peak (MiB, None if unknown); step_ms: predicted and measured group iteration (ms)."""

    device: str
    name: str
    group: str
    shares: Mapping[str, float]
    flops_per_step: float
    speed: float | None = None
    predicted_memory_mib: float | None = None
    measured_memory_mib: float | None = None
    predicted_step_ms: float | None = None
    measured_step_ms: float | None = None


def _coords(layout: Layout, index: int) -> dict[str, int]:
    coords, rest = {}, index
    for dim, size in reversed(layout.mesh):
        coords[dim] = rest % size
        rest //= size
    return coords


def device_shares(layout: Layout, stats: ModelStats) -> list[dict[str, float]]:
    """Per device of `layout` (in order): {layer: share of its units}; a batch split scales every
    layer's work, so it multiplies in."""
    out = []
    for i in range(len(layout.devices)):
        coords = _coords(layout, i)
        batch = 1.0
        sizes = layout.split_sizes("batch", stats.batch) if "batch" in layout.rule_map else None
        if sizes:
            batch = sizes[coords[layout.rule_map["batch"]]] / stats.batch
        shares = {}
        for d in stats.dims:
            sizes = layout.split_sizes(d.name, d.units)
            share = 1.0 if sizes is None else sizes[coords[layout.rule_map[d.name]]] / d.units
            shares[d.name] = share * batch
        out.append(shares)
    return out


def flops_per_step(shares: Mapping[str, float], stats: ModelStats) -> float:
    """Training FLOPs of one iteration of `stats.batch` examples for a device holding `shares`."""
    return TRAIN_FLOPS_PER_FORWARD * stats.batch * sum(d.flops * shares.get(d.name, 0.0) for d in stats.dims)


def layout_rows(groups: Sequence[tuple[str, Layout, ModelStats]], names: Mapping[str, str],
                speeds: Mapping[str, float | None] = {}, predicted: Mapping[str, Mapping] = {},
                measured: Mapping[str, Mapping] = {}) -> list[DeviceRow]:
    """Rows for every device of every (group name, layout, stats at the group's batch).

    names: device string -> device name; predicted / measured: {device name: {"memory_mib",
    "step_ms"}} where known."""
    rows = []
    for group, layout, stats in groups:
        for dev, shares in zip(layout.devices, device_shares(layout, stats)):
            name = names.get(dev, dev)
            p, m = predicted.get(name, {}), measured.get(name, {})
            rows.append(DeviceRow(device=dev, name=name, group=group, shares=shares,
                                  flops_per_step=flops_per_step(shares, stats), speed=speeds.get(name),
                                  predicted_memory_mib=p.get("memory_mib"), measured_memory_mib=m.get("memory_mib"),
                                  predicted_step_ms=p.get("step_ms"), measured_step_ms=m.get("step_ms")))
    return rows


def _fmt(v, unit="", digits=1) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else ("%.*f%s" % (digits, v, unit))


def markdown_table(rows: Sequence[DeviceRow]) -> str:
    """Layers x devices (percent of each layer's filters) plus speed, memory and step time rows."""
    layers = list(rows[0].shares) if rows else []
    head = "| | " + " | ".join("%s (%s)" % (r.name, r.group) for r in rows) + " |"
    lines = [head, "|---" * (len(rows) + 1) + "|"]
    for layer in layers:
        lines.append("| %s | " % layer + " | ".join("%.0f%%" % (100 * r.shares[layer]) for r in rows) + " |")
    lines.append("| speed | " + " | ".join(_fmt(r.speed, "", 3) for r in rows) + " |")
    lines.append("| memory MiB (pred / meas) | " + " | ".join(
        "%s / %s" % (_fmt(r.predicted_memory_mib, "", 0), _fmt(r.measured_memory_mib, "", 0)) for r in rows) + " |")
    lines.append("| step ms (pred / meas) | " + " | ".join(
        "%s / %s" % (_fmt(r.predicted_step_ms), _fmt(r.measured_step_ms)) for r in rows) + " |")
    lines.append("| GFLOP per step | " + " | ".join("%.3f" % (r.flops_per_step / 1e9) for r in rows) + " |")
    return "\n".join(lines)


def render_png(rows: Sequence[DeviceRow], title: str = "layout") -> bytes:
    """A heat map (layers x devices, cell = share of the layer's filters) with the devices'
    speed, memory and step times under their names; PNG bytes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    layers = list(rows[0].shares)
    grid = np.array([[r.shares[l] for r in rows] for l in layers])
    fig, ax = plt.subplots(figsize=(max(6.0, 2.0 + 1.9 * len(rows)), 1.6 + 0.55 * len(layers)), dpi=100)
    ax.imshow(grid, cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
    for i in range(len(layers)):
        for j in range(len(rows)):
            ax.text(j, i, "%.0f%%" % (100 * grid[i, j]), ha="center", va="center",
                    color="white" if grid[i, j] > 0.6 else "black", fontsize=9)
    ax.set_yticks(range(len(layers)), layers)
    labels = ["%s [%s]\nspeed %s\nmem %s/%s MiB\nstep %s/%s ms" % (
        r.name, r.group, _fmt(r.speed, "", 2), _fmt(r.predicted_memory_mib, "", 0), _fmt(r.measured_memory_mib, "", 0),
        _fmt(r.predicted_step_ms), _fmt(r.measured_step_ms)) for r in rows]
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.xaxis.tick_top()
    ax.set_title("%s: share of each layer's filters per device\n(memory and step time: predicted / measured)" % title,
                 fontsize=9, pad=78)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
