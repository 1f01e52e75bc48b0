"""Plans as files and tables.

One group is written as a plain layout (loadable by ``mesh.layout.load_layout``) plus a
``predicted:`` block; several groups as a top-level ``groups:`` list of such layouts, read back by
``load_plan``. Times in ms, memory in bytes, throughput in examples/s.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Mapping

import yaml

from edgemesh_tf.mesh.layout import Layout, layout_from_dict, load_layout
from edgemesh_tf.planner.grid import GroupPlan, Plan

_MIB = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class LoadedGroup:
    """One group read from a plan file; ``predicted`` is the file's block as it is (may be empty)."""

    layout: Layout
    batch: int | None
    predicted: Mapping


@dataclasses.dataclass(frozen=True)
class LoadedPlan:
    groups: tuple[LoadedGroup, ...]
    predicted: Mapping


def _group_dict(g: GroupPlan) -> dict:
    p = g.prediction
    per_device = lambda values, nd: {n: round(float(v), nd) if nd else int(v) for n, v in zip(g.names, values)}
    return {**g.layout.to_dict(), "predicted": {
        "batch": int(g.batch), "step_ms": round(float(p.step_ms), 3), "ps_sync_ms": round(float(p.ps_sync_ms), 3),
        "copy_ms": round(float(p.copy_ms), 3), "names": list(g.names), "memory_bytes": per_device(p.memory_bytes, 0),
        "compute_ms": per_device(p.compute_ms, 3), "comm_ms": per_device(p.comm_ms, 3)}}


def _header(plan: Plan) -> str:
    lines = ["Written by `edgemesh plan` for model %s: %d data-parallel group(s) (%s), predicted %.1f effective "
             "examples/s" % (plan.model, len(plan.groups), plan.kind, plan.examples_per_sec),
             "(%s). The `predicted:` blocks are the cost model's" % (
                 "priced as " + plan.priced_as if plan.priced_as else
                 "commit to the parameter server every %d step(s)" % plan.commit_interval),
             "estimates (ms per step, bytes per device); the trainer ignores them."]
    if not plan.engine:
        lines.append("Planned for one plain layout without a parameter server (`edgemesh train --layout`): the engine's "
                     "replicas (`edgemesh run`) need more memory per device.")
    if plan.alternatives:
        lines.append("alternatives (effective examples/s): " + _alternatives(plan))
    if plan.idle:
        lines.append("idle devices (in no group): " + ", ".join(plan.idle))
    for j, g in enumerate(plan.groups):
        lines.append("group %d, ring order: %s" % (j, ", ".join("%s=%s" % nd for nd in zip(g.names, g.layout.devices))))
    return "\n".join("# " + line for line in lines) + "\n"


def _dump(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=110)


def write_plan(plan: Plan, path: str) -> None:
    """Writes ``plan`` as commented YAML (see the module docstring)."""
    if len(plan.groups) == 1:
        body = _dump(_group_dict(plan.groups[0]))
    else:
        body = _dump({"predicted": {"examples_per_sec": round(float(plan.examples_per_sec), 3),
                                    "commit_interval": int(plan.commit_interval), "kind": plan.kind,
                                    "alternatives": {k: round(float(v), 3) for k, v in plan.alternatives}},
                      "groups": [_group_dict(g) for g in plan.groups]})
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(_header(plan) + body)


def load_plan(path: str) -> LoadedPlan:
    """Reads a plan file: a ``groups:`` list, or a single layout (any ``load_layout`` file)."""
    if not os.path.exists(path):
        raise ValueError("plan file %s does not exist" % path)
    with open(path) as f:
        try:
            data = yaml.safe_load(f)
        except yaml.YAMLError as e:
            raise ValueError("%s: not valid YAML: %s" % (path, e)) from None
    if not (isinstance(data, dict) and "groups" in data):
        layout = load_layout(path)
        predicted = (data.get("predicted") if isinstance(data, dict) else None) or {}
        return LoadedPlan((LoadedGroup(layout, predicted.get("batch"), predicted),), predicted)
    if set(data) - {"groups", "predicted"} or not isinstance(data["groups"], list) or not data["groups"]:
        raise ValueError("%s: a plan file with `groups:` has only the keys groups (a non-empty list of layouts) and "
                         "predicted; got keys %s" % (path, sorted(data)))
    groups = []
    for j, g in enumerate(data["groups"]):
        layout = layout_from_dict(g, source="%s: group %d" % (path, j))
        predicted = g.get("predicted") or {}
        groups.append(LoadedGroup(layout, predicted.get("batch"), predicted))
    return LoadedPlan(tuple(groups), data.get("predicted") or {})


def _alternatives(plan: Plan) -> str:
    return ", ".join("%s %.1f" % kv for kv in plan.alternatives)


def format_table(plan: Plan) -> str:
    """Layers x devices (filters per device, or "all" if replicated) with predicted ms, per group."""
    out = ["predicted %.1f effective examples/s with %d group(s) (%s; staleness charge %g per extra group); "
           "candidates at coarse shares, before the chosen one's shares are refined (groups: examples/s): %s"
           % (plan.examples_per_sec, len(plan.groups), plan.kind, plan.staleness_penalty,
              ", ".join("%d: %.1f" % c for c in plan.candidates)),
           "alternatives (examples/s): %s" % _alternatives(plan)]
    if plan.idle:
        out.append("idle devices (in no group): %s" % ", ".join(plan.idle))
    for j, g in enumerate(plan.groups):
        p = g.prediction
        out.append("")
        out.append("group %d (batch %d%s): step %.2f ms, PS push+pull %.2f ms%s"
                   % (j, g.batch, "".join(", examples per device %s" % list(s) for d, s in g.layout.sizes
                                         if d == "batch"), p.step_ms, p.ps_sync_ms,
                      ", copies to and from the masters %.2f ms" % p.copy_ms if p.copy_ms else ""))
        width = max([8] + [len(n) + 1 for n in g.names])
        head = "%-10s%6s" % ("layer", "units") + "".join("%*s" % (width, n) for n in g.names)
        out.append(head + "%12s%10s%10s" % ("compute ms", "comm ms", "layer ms"))
        for lp in p.layers:
            cells = (lp.shares if lp.shares is not None else ["all"] * len(g.names))
            out.append("%-10s%6d" % (lp.name, lp.units) + "".join("%*s" % (width, c) for c in cells)
                       + "%12.2f%10.2f%10.2f" % (max(lp.compute_ms), lp.comm_ms, lp.ms))
        for label, values, fmt in (("compute ms", p.compute_ms, "%*.2f"), ("comm ms", p.comm_ms, "%*.2f"),
                                   ("memory MiB", [m / _MIB for m in p.memory_bytes], "%*.1f")):
            out.append("%-16s" % label + "".join(fmt % (width, v) for v in values))
    return "\n".join(out)
