"""The layout of a job as a person looks at it: for each group and layer, each device's share of the
layer's filters (units), with each device's speed, memory and predicted vs measured step time.

`layout_rows` computes the plain data; `markdown_table` and `render_png` present it (matplotlib,
Agg backend, imported only here). `render_png` draws one bar per layer, split by device, at a fixed
700 px width so TensorBoard's image card shows it unscaled; `bar_segments` holds its drawing
decisions as plain data. FLOPs follow planner.model_stats (forward FLOPs x 3 for forward plus
backward).
"""
from __future__ import annotations

import dataclasses
import io
import math
from typing import Mapping, NamedTuple, Sequence

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


FIG_WIDTH_IN, DPI = 7.0, 100  # 700 px: TensorBoard's image card shows it without scaling it down
BAR_IN = 0.3  # height of one bar (or group heading) slot
MIN_TEXT_SHARE = 0.08  # narrower segments have no room for their percentage
REPLICATED_COLOR = "#c8c8c8"


class Segment(NamedTuple):
    device: str | None  # device name; None: every device of the group (a replicated layer)
    width: float  # fraction of the bar, 0..1
    text: str  # written inside the segment ('' when too narrow)


class Bar(NamedTuple):
    group: str
    layer: str
    segments: list[Segment]
    note: str  # shown next to the layer name ('' if none), e.g. "x2 replicated"


def bar_segments(rows: Sequence[DeviceRow]) -> list[Bar]:
    """One bar per (group, layer), groups in the order of `rows`, layers as in rows[0].shares.

    A single-device group is one bar ("all layers"). A split layer's shares sum to ~1, so they are
    the segment widths. A layer every device of a
    multi-device group holds whole is one grey bar, not N x 100%. Shares summing to more than 1
    otherwise (partly replicated, e.g. a batch split on a 2-D mesh) are normalised and noted."""
    if not rows:
        return []
    layers = list(rows[0].shares)
    groups = list(dict.fromkeys(r.group for r in rows))
    bars = []
    for group in groups:
        devs = [r for r in rows if r.group == group]
        if len(devs) == 1:  # a data-parallel replica: one bar, so many of them stay short
            bars.append(Bar(group, "all layers", [Segment(devs[0].name, 1.0, "whole model on " + devs[0].name)], ""))
            continue
        for layer in layers:
            shares = [r.shares.get(layer, 0.0) for r in devs]
            total = sum(shares)
            if all(abs(s - 1.0) <= 1e-6 for s in shares):
                bars.append(Bar(group, layer, [Segment(None, 1.0, "replicated on all %d" % len(devs))], ""))
                continue
            scale, note = 1.0, ""
            if total > 1.0 + 1e-6:
                scale, note = 1.0 / total, "x%.3g replicated" % total
            segs = [Segment(r.name, s * scale, "%.0f%%" % (100 * s * scale) if s * scale >= MIN_TEXT_SHARE else "")
                    for r, s in zip(devs, shares) if s > 0]
            bars.append(Bar(group, layer, segs, note))
    return bars


def _device_colors(rows: Sequence[DeviceRow]) -> dict[str, tuple]:
    """One colour per device name for the whole picture; greys left out (they mean replicated)."""
    import matplotlib
    names = list(dict.fromkeys(r.name for r in rows))
    if len(names) <= 9:
        palette = [c for i, c in enumerate(matplotlib.colormaps["tab10"].colors) if i != 7]
    else:
        palette = [c for i, c in enumerate(matplotlib.colormaps["tab20"].colors) if i not in (14, 15)]
    return {n: palette[i % len(palette)] for i, n in enumerate(names)}


def render_png(rows: Sequence[DeviceRow], title: str = "layout") -> bytes:
    """Per group, one horizontal bar per layer split into the devices' shares of its filters,
    with a legend of the devices' speed, memory and step times; 700 px wide whatever the number
    of devices; PNG bytes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Patch

    bars = bar_segments(rows)
    colors = _device_colors(rows)
    groups = list(dict.fromkeys(b.group for b in bars))
    devices = list(dict.fromkeys(r.name for r in rows))
    ncol = 2 if len(devices) > 1 else 1
    legend_rows = math.ceil(len(devices) / ncol)
    slots = max(1, len(groups) + len(bars))  # one heading slot per group, one per bar
    top_in, bars_in, axis_in = 0.45, BAR_IN * slots, 0.35
    legend_in = 0.3 + 0.2 * legend_rows
    height_in = top_in + bars_in + axis_in + legend_in
    fig = plt.figure(figsize=(FIG_WIDTH_IN, height_in), dpi=DPI)
    left_in, right_in = 1.5, 0.2
    ax = fig.add_axes([left_in / FIG_WIDTH_IN, (axis_in + legend_in) / height_in,
                       (FIG_WIDTH_IN - left_in - right_in) / FIG_WIDTH_IN, bars_in / height_in])

    ticks, labels, y = [], [], 0  # y grows downwards (axis inverted below)
    for group in groups:
        names = ", ".join(r.name for r in rows if r.group == group)
        if len(names) > 70:  # keep the heading within the width
            names = "%d devices" % sum(r.group == group for r in rows)
        ax.text(0.0, y, "group %s (%s)" % (group, names), ha="left", va="center", fontsize=8, fontweight="bold")
        y += 1
        for bar in (b for b in bars if b.group == group):
            left = 0.0
            for seg in bar.segments:
                color = REPLICATED_COLOR if seg.device is None else colors[seg.device]
                ax.barh(y, seg.width, left=left, height=0.8, color=color, edgecolor="white", linewidth=0.8)
                if seg.text:
                    r, g, b = to_rgb(color)
                    dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.55
                    ax.text(left + seg.width / 2, y, seg.text, ha="center", va="center", fontsize=7,
                            color="white" if dark else "black")
                left += seg.width
            ticks.append(y)
            labels.append(bar.layer + (" (%s)" % bar.note if bar.note else ""))
            y += 1
    ax.set_ylim(slots - 0.5, -0.5)
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.set_xlim(0.0, 1.0)
    ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0], ["0%", "25%", "50%", "75%", "100%"], fontsize=7)
    ax.tick_params(axis="y", length=0)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    fig.suptitle("%s: share of each layer's filters per device" % title, fontsize=10,
                 y=1.0 - 0.12 / height_in, va="top")

    handles = [Patch(color=colors[r.name], label="%s · speed %s · mem %s/%s MiB · step %s/%s ms" % (
        r.name, _fmt(r.speed, "", 2), _fmt(r.predicted_memory_mib, "", 0), _fmt(r.measured_memory_mib, "", 0),
        _fmt(r.predicted_step_ms), _fmt(r.measured_step_ms))) for r in {r.name: r for r in rows}.values()]
    if handles:
        fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, legend_in / height_in), ncol=ncol,
                   fontsize=7, title="memory and step time: predicted / measured", title_fontsize=7,
                   frameon=False, handlelength=1.2, columnspacing=1.2)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)  # no bbox_inches="tight": it would change the width
    plt.close(fig)
    return buf.getvalue()
