"""EdgeMesh's adaptive grid: data-parallel groups x model-parallel width, compared with its alternatives.

A grid is a partition of the devices into groups; each group's filters are divided by
``division.divide`` over its fastest m devices (m chosen per group; the rest of the group is idle).
Every group processes ``batch`` examples per step (its own data share). The objective is the
**effective** cluster throughput (examples/s at equal statistical progress):

    rate = batch * 1000 * sum_g 1 / (step_ms_g + sync_ms_g / commit_interval)  /  (1 + s * (G - 1))

sync_ms_g is the group's push + pull to the parameter server (``cost.ps_sync_ms``) and its copies
between masters and slices (``cost.copy_ms``): ``GroupPrediction.commit_ms``, paid once per commit;
one group (G = 1) needs no parameter server and is not stale. The divisor is the staleness
charge: G groups committing asynchronously apply updates computed on weights about G - 1 commits
old, and asynchronous SGD needs a learning rate smaller by about 1 + s * staleness to converge
(stale gradients are partly redundant: Dutta et al., AISTATS 2018; Zhang et al., IJCAI 2016), so an
asynchronous example counts 1 / (1 + s * (G - 1)) of a synchronous one. s = ``staleness_penalty``
(default STALENESS_PENALTY = 0.1 per stale commit). Without it K single-device groups are always
credited K x batch per step at no cost, and mixed grids (model-parallel groups beside
single-device ones) could never win.

Search (each group's division is cached by its devices; candidates are screened with coarse shares,
``SCREEN_CHUNKS``, and the best is divided again at full granularity and polished, its groups then
offered the devices it leaves idle, ``_finish``):
  seeds   for K groups (every K up to 16 devices, else about x1.4 apart): the devices dealt into K
          groups of about equal capability (LPT: fastest first, to the group of least total speed);
          the fastest j devices alone and the rest one group (mixed grids)
  moves   from the best seed, best improvement: an idle device becomes its own group; two groups
          merge; a device moves to another group or leaves for a group of its own (up to
          LOCAL_SEARCH_DEVICES devices; above that only the first two kinds)

Memory: every plan keeps the memory model's headroom (``memory.MemoryModel.headroom_for``: 1 + the
largest factor by which a measured peak of the model exceeded the fit, or of any model when the
planned one was not measured) below each device's budget: a device's predicted bytes times the
headroom must fit (``memory_margin``). Without it the grid packed pi4's weakest devices to
their budgets exactly (predicted 192.0 of 192 MiB), and the kernel OOM-killed one.

The result is compared with the alternatives of ``alternatives`` (the fastest device alone, every
device alone and asynchronous, synchronous data parallelism at the same global batch) by the same
objective; the best is returned, so a plan is never predicted slower than any of them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from typing import Callable, Sequence

from edgemesh_tf.mesh.layout import Layout
from edgemesh_tf.layers import ModelSpec
from edgemesh_tf.planner import alternatives as alt
from edgemesh_tf.planner import cost
from edgemesh_tf.planner.calibrate import calibrated
from edgemesh_tf.planner.cost import GroupPrediction
from edgemesh_tf.planner.division import Division, PlanError, divide, speed
from edgemesh_tf.planner.grid_search import LOCAL_SEARCH_DEVICES, Grid, SummedRate, capability_groups, search
from edgemesh_tf.planner.model_stats import model_stats
from edgemesh_tf.planner.shared_divisions import DivisionPool, SharedDivisions, fork_safe
from edgemesh_tf.profiling.types import Profile

STALENESS_PENALTY = 0.1
SCREEN_CHUNKS = 16
PARALLEL_DEVICES = 128  # from this many devices up, groups are divided in worker processes by default
MAX_WORKERS = 8

__all__ = ["GroupPlan", "Plan", "STALENESS_PENALTY", "capability_groups", "group_rate", "plan", "speed",
           "staleness_charge", "throughput", "within_margin", "memory_capped"]


@dataclasses.dataclass(frozen=True)
class GroupPlan:
    """One data-parallel group: its devices (profile names, ring order), Layout, prediction, batch."""

    names: tuple[str, ...]
    layout: Layout
    prediction: GroupPrediction
    batch: int


@dataclasses.dataclass(frozen=True)
class Plan:
    """The chosen plan.

    examples_per_sec: its effective throughput (the module docstring's objective, examples/s).
    candidates: (K, examples/s) of the best grid found with K groups, at the search's coarse shares (the chosen
      grid's shares are then refined, so examples_per_sec may exceed its candidate's figure).
    kind: "grid", or the alternative it is: "fastest_device", "all_replicated", "sync_data_parallel".
    alternatives: (kind, examples/s) of each alternative that fits in memory, by the same objective.
    idle: devices of the profile that no group uses.
    engine: planned for the engine's replicas (True) or for one plain layout without a ps (False;
      ``plan(engine=False)``).
    priced_as: what the objective priced ("": one commit every commit_interval steps; else the
      objective's own ``describes``, e.g. the phases of a strategy's job).
    """

    model: str
    groups: tuple[GroupPlan, ...]
    examples_per_sec: float
    commit_interval: int
    candidates: tuple[tuple[int, float], ...] = ()
    kind: str = "grid"
    alternatives: tuple[tuple[str, float], ...] = ()
    idle: tuple[str, ...] = ()
    staleness_penalty: float = STALENESS_PENALTY
    engine: bool = True
    priced_as: str = ""


def group_rate(p: GroupPrediction, batch: int, commit_interval: int, several: bool) -> float:
    """Examples/s of one group of ``batch`` examples per step: its step and, among ``several`` groups,
    its commit spread over ``commit_interval`` steps (see above)."""
    return batch * 1000.0 / (p.step_ms + (p.commit_ms / commit_interval if several else 0.0))


def throughput(preds: Sequence[GroupPrediction], batch: int, commit_interval: int,
               staleness_penalty: float = STALENESS_PENALTY) -> float:
    """Effective examples/s of groups that each process ``batch`` examples per step (see above)."""
    g = len(preds)
    return sum(group_rate(p, batch, commit_interval, g > 1) for p in preds) / staleness_charge(g, staleness_penalty)


def staleness_charge(groups: int, staleness_penalty: float = STALENESS_PENALTY) -> float:
    """What an asynchronous example of ``groups`` committing groups costs in synchronous ones: 1 + s (G - 1)."""
    return 1.0 + staleness_penalty * (groups - 1)


def within_margin(profile: Profile, margin: float) -> Profile:
    """``profile`` with every device's memory budget divided by ``margin`` (what a plan may predict;
    the memory model's ``headroom_for`` the planned model)."""
    return profile if margin == 1 else _budgets(profile, lambda b: int(b / margin))


def memory_capped(profile: Profile, stats, fraction: float) -> Profile:
    """``profile`` with every device's budget at most ``fraction`` of the bytes the whole model's
    step is predicted to take on one device (``cost.held_memory_bytes``, every unit held): a plan
    of it holds no device above that share of single-device training, whatever it costs in time."""
    whole = cost.held_memory_bytes(stats, [[d.units for d in stats.dims]])[0]
    cap = int(fraction * whole)
    return _budgets(profile, lambda b: min(b, cap))


def _budgets(profile: Profile, budget) -> Profile:
    """``profile`` with each device's memory_bytes replaced by ``budget(memory_bytes)``."""
    return dataclasses.replace(profile, devices=tuple(
        dataclasses.replace(d, memory_bytes=budget(d.memory_bytes)) for d in profile.devices))


def _finish(profile: Profile, shared: SharedDivisions, chunks, partition, rate) -> list[Division]:
    """The screened ``partition`` divided again at full granularity and polished; then (up to
    LOCAL_SEARCH_DEVICES devices) each group in turn is offered the devices no group uses, keeping
    the fastest of them it pays to use (``divide(subsets=True)``), if the grid's rate rises. Coarse
    shares give a slow device too large a smallest share, so screening leaves idle devices that pay
    once shares are fine (a case in docs/DESIGN.md, "Figures behind the code's constants")."""
    by_name = {d.name: d for d in profile.devices}

    def division(names, subsets):
        return shared([by_name[n] for n in names], chunks=chunks, subsets=subsets)

    final = shared.many([[by_name[n] for n in g] for g in partition], chunks=chunks, subsets=False)
    error = next((d for d in final if isinstance(d, PlanError)), None)
    if error is not None:
        raise error
    free = [d.name for d in profile.devices if not any(d.name in g for g in partition)]
    if len(profile.devices) > LOCAL_SEARCH_DEVICES:
        return final
    for i, g in enumerate(partition):
        if not free:
            break
        try:
            offered = division(tuple(g) + tuple(free), True)
        except PlanError:
            continue
        trial = final[:i] + [offered] + final[i + 1:]
        if rate(trial) > rate(final) * (1 + 1e-9):
            final, free = trial, [n for n in free if n not in offered.names]
    return final


def plan(profile: Profile, spec: ModelSpec, *, groups: int | None = None, batch: int | None = None,
         chunks: int | None = None, commit_interval: int = 1,
         staleness_penalty: float = STALENESS_PENALTY, calibrate: bool = True,
         memory_margin: float | None = None, engine: bool = True, memory_fraction: float | None = None,
         objective: Callable[[Sequence[GroupPrediction], int], float] | None = None,
         workers: int | None = None) -> Plan:
    """Plans the grid and the filter division of ``spec`` on the devices of ``profile``.

    groups: force this many data-parallel groups (default: the best grid found, any number).
    batch: examples per group per step (default: the profile's batch; compute scales linearly).
    chunks: coarse share granularity (see ``division.quantum``).
    staleness_penalty: s of the objective (see the module docstring), >= 0.
    calibrate: calibrate the cost model by the steps timed while profiling (``calibrate``: the layer
      times scaled to a whole step, a split overhead fitted to a split step; a profile without them
      is used as measured). On by default: it predicted the measured steps better on every cluster
      measured (docs/DESIGN.md; bench/planner.py and bench/edgemesh_claims.py report both).
    memory_margin: predicted bytes times this must fit each budget (>= 1; default: the memory
      model's headroom, see the module docstring).
    engine: plan for the engine's replicas (the main job and hybrid training: every device also
      keeps anchors, residuals and ps buffers, ``ModelStats.engine``). False: one group trained as a
      single layout with no parameter server (`edgemesh train --layout`): it needs less memory, so
      devices too small for a replica's share may join; ``groups`` must then be None or 1 (several
      groups need a ps).
    memory_fraction: a named option, off by default (EdgeMesh's planner minimises time): no device
      may be predicted to use more than this fraction (0 < f <= 1) of the bytes the whole model's
      step takes on one device (``memory_capped``); the fastest device then holds fewer filters
      than its speed earns, and the alternatives that hold the whole model on a device drop out.
    objective: the effective examples/s of a candidate's groups (their predictions, each at ``batch``
      examples per step), which the search maximises; default: ``throughput`` at ``commit_interval``
      (the module docstring). The engine passes the cost of the job it runs (engine/core/job_cost.py: its
      phases' commit intervals and waits).
    workers: processes that divide groups at once (``shared_divisions.DivisionPool``; the plan is the
      same for any number); default: this machine's cores (at most MAX_WORKERS) from PARALLEL_DEVICES
      devices up, where dividing the groups is most of the time, else 1 (no process is started). A
      process that runs other threads or has imported TensorFlow divides in turn (``fork_safe``).
    Raises PlanError when nothing fits in memory.
    """
    if not profile.devices:
        raise ValueError("profile has no devices")
    if not (isinstance(profile.batch, int) and profile.batch >= 1):
        raise ValueError("profile: batch must be a positive integer (examples per step), got %r" % (profile.batch,))
    if commit_interval < 1:
        raise ValueError("commit_interval must be >= 1 local steps, got %r" % commit_interval)
    if not engine:
        if groups not in (None, 1):
            raise ValueError("groups=%r without the engine: several data-parallel groups need its parameter server; "
                             "a plan for one plain layout has one group" % (groups,))
        groups = 1
    if not (isinstance(staleness_penalty, (int, float)) and staleness_penalty >= 0):
        raise ValueError("staleness_penalty must be a number >= 0, got %r" % (staleness_penalty,))
    margin = cost.MEMORY.headroom_for(spec.name) if memory_margin is None else memory_margin
    if not (isinstance(margin, (int, float)) and margin >= 1):
        raise ValueError("memory_margin must be a number >= 1, got %r" % (margin,))
    if memory_fraction is not None and not (isinstance(memory_fraction, (int, float)) and 0 < memory_fraction <= 1):
        raise ValueError("memory_fraction must be a number in (0, 1], got %r" % (memory_fraction,))
    batch = batch or profile.batch
    if calibrate:
        profile = calibrated(profile, spec)
    profile = within_margin(profile, margin)
    stats = model_stats(spec, batch, engine)
    if memory_fraction is not None:
        profile = memory_capped(profile, stats, memory_fraction)
    devices, pb, ps_bw = profile.devices, profile.batch, profile.ps_bandwidth_mbit
    if objective is None:  # ``throughput``, summed group by group so that the search prices only what a move changes
        rate = SummedRate(lambda p, several: group_rate(p, batch, commit_interval, several),
                          lambda raw, g: raw / staleness_charge(g, staleness_penalty))
    else:
        rate = lambda divs: objective([d.prediction for d in divs], batch)
    screen = max(chunks or 0, SCREEN_CHUNKS)
    divide_group = functools.partial(divide, stats=stats, profile_batch=pb, ps_bandwidth_mbit=ps_bw)
    if workers is None:
        workers = min(os.cpu_count() or 1, MAX_WORKERS) if len(devices) >= PARALLEL_DEVICES else 1
    if workers > 1 and not fork_safe():
        workers = 1
    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(DivisionPool(divide_group, workers)) if workers > 1 else None
        shared = SharedDivisions(divide_group, pool)
        best, per_k, error = search(Grid(devices, shared, screen, rate), devices, groups)
        final = None if best is None else _finish(profile, shared, chunks, best[1], rate)
    options = []  # (kind, rate, divisions)
    if final is not None:
        options.append(("grid", rate(final), final))
    alone = alt.singles(devices, stats, pb, ps_bw)
    fastest = alt.fastest_device(alone)
    sync = alt.sync_data_parallel(devices, stats, pb, ps_bw)
    every = alt.all_replicated(alone)
    shown = [("fastest_device", [fastest] if fastest else []), ("all_replicated", every),
             ("sync_data_parallel", [sync] if sync else [])]
    recorded = tuple((kind, rate(divs)) for kind, divs in shown if divs)
    options += [(kind, rate(divs), divs) for kind, divs in shown if divs and groups in (None, len(divs))]
    if not options:
        note = " (each budget over the memory margin x%.3f)" % margin if margin > 1 else ""
        if memory_fraction is not None:
            note += " (each budget capped at %.2f of the whole model's step on one device)" % memory_fraction
        raise PlanError(str(error or "no device of the profile holds model %s" % spec.name) + note)
    kind, value, divs = max(options, key=lambda o: o[1])  # ties: the grid, then the simpler alternative
    dims = spec.dims(batch)
    gp = tuple(GroupPlan(d.names, d.layout().validate(dims), d.prediction, batch) for d in divs)
    used = {n for d in divs for n in d.names}
    return Plan(spec.name, gp, value, commit_interval, tuple(sorted(per_k.items())), kind, recorded,
                tuple(d.name for d in devices if d.name not in used), staleness_penalty, engine,
                getattr(objective, "describes", "") if objective is not None else "")
