"""EdgeMesh's adaptive grid: data-parallel groups x model-parallel width, shaped by measured capability.

For every number of groups K = 1..n (or the one asked for), the devices are dealt into K groups of
about equal capability (LPT: fastest first, each to the group with the least total speed, where
speed = 1 / sum of the device's layer ms), each group's filters are divided by ``division.divide``, and
the candidate is scored by its predicted cluster throughput (examples/s):

    throughput = sum_g batch * 1000 / (step_ms_g + sync_ms_g / commit_interval)

Every group processes the same ``batch`` per step (its own data share). sync_ms_g is the group's
push + pull to the parameter server (``cost.ps_sync_ms``), paid once per commit; a single group
needs no parameter server, so its sync is 0. Candidates that do not fit in memory are skipped.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from edgemesh_tf.mesh.layout import Layout
from edgemesh_tf.models.spec import ModelSpec
from edgemesh_tf.planner.cost import GroupPrediction
from edgemesh_tf.planner.division import PlanError, divide
from edgemesh_tf.planner.model_stats import model_stats
from edgemesh_tf.profile.types import DeviceProfile, Profile


@dataclasses.dataclass(frozen=True)
class GroupPlan:
    """One data-parallel group: its devices (profile names, ring order), Layout, prediction, batch."""

    names: tuple[str, ...]
    layout: Layout
    prediction: GroupPrediction
    batch: int


@dataclasses.dataclass(frozen=True)
class Plan:
    """The chosen grid. examples_per_sec: predicted cluster throughput; candidates: (K, examples/s)
    of every number of groups that fit in memory; commit_interval: local steps per PS commit."""

    model: str
    groups: tuple[GroupPlan, ...]
    examples_per_sec: float
    commit_interval: int
    candidates: tuple[tuple[int, float], ...] = ()


def speed(device: DeviceProfile) -> float:
    """Steps per ms of the whole model on ``device`` alone (1 / sum of its layer ms)."""
    total = sum(t.compute_ms for t in device.layers)
    return 1.0 / total if total > 0 else math.inf


def capability_groups(devices: Sequence[DeviceProfile], k: int) -> list[list[DeviceProfile]]:
    """Deals ``devices`` into k groups of about equal total speed (LPT); each group fastest first."""
    if not 1 <= k <= len(devices):
        raise ValueError("number of groups must be in 1..%d (the number of devices), got %r" % (len(devices), k))
    groups: list[list[DeviceProfile]] = [[] for _ in range(k)]
    totals = [0.0] * k
    for d in sorted(devices, key=lambda d: (-speed(d), d.name)):
        g = min(range(k), key=lambda g: (totals[g], len(groups[g]), g))
        groups[g].append(d)
        totals[g] += speed(d)
    return groups


def throughput(preds: Sequence[GroupPrediction], batch: int, commit_interval: int) -> float:
    """Predicted examples/s of groups that each process ``batch`` examples per step."""
    sync = len(preds) > 1
    return sum(batch * 1000.0 / (p.step_ms + (p.ps_sync_ms / commit_interval if sync else 0.0)) for p in preds)


def plan(profile: Profile, spec: ModelSpec, *, groups: int | None = None, batch: int | None = None,
         chunks: int | None = None, commit_interval: int = 1) -> Plan:
    """Plans the grid and the filter division of ``spec`` on the devices of ``profile``.

    groups: force this many data-parallel groups (default: the best of 1..n).
    batch: examples per group per step (default: the profile's batch; compute scales linearly).
    chunks: coarse share granularity (see ``division.quantum``).
    Raises PlanError when no candidate fits in memory (the error of the fewest-groups candidate).
    """
    if not profile.devices:
        raise ValueError("profile has no devices")
    if not (isinstance(profile.batch, int) and profile.batch >= 1):
        raise ValueError("profile: batch must be a positive integer (examples per step), got %r" % (profile.batch,))
    if commit_interval < 1:
        raise ValueError("commit_interval must be >= 1 local steps, got %r" % commit_interval)
    batch = batch or profile.batch
    stats = model_stats(spec, batch)
    ks = [groups] if groups else range(1, len(profile.devices) + 1)
    best, candidates, first_error = None, [], None
    def divide_all(k, polish):
        return [divide(g, stats, chunks=chunks, profile_batch=profile.batch,
                       ps_bandwidth_mbit=profile.ps_bandwidth_mbit, polish=polish)
                for g in capability_groups(profile.devices, k)]

    for k in ks:  # candidates compared unpolished (fast), the winner polished
        try:
            divs = divide_all(k, polish=False)
        except PlanError as e:
            first_error = first_error or e
            continue
        rate = throughput([d.prediction for d in divs], batch, commit_interval)
        candidates.append((k, rate))
        if best is None or rate > best[0]:
            best = (rate, divs, k)
    if best is None:
        raise first_error
    divs = divide_all(best[2], polish=True)
    best = (throughput([d.prediction for d in divs], batch, commit_interval), divs)
    gp = tuple(GroupPlan(d.names, d.layout().validate(spec.dims(batch)), d.prediction, batch) for d in best[1])
    return Plan(spec.name, gp, best[0], commit_interval, tuple(candidates))
