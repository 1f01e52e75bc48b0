"""Calibrating the cost model by real training steps timed while profiling (pure).

The profiler times each layer alone (its own run, its input generated on the device). Summed, these
over-predict a device training alone, which runs the layers back to back in one executor: on the
Pi-class cluster by ~1.2x for VGG-16 (`bench/edgemesh_claims.py`). So the profiler also times a few
real steps of the whole model on every device the memory model says holds it
(`DeviceProfile.whole_step_ms`), and each such device's layer times are scaled by the factor that
makes the cost model predict its step:

    scale_i = (whole_step_ms_i - base_ms_i) / compute_ms_i     (device i alone, at the profile's batch)

base_ms is the cost model's per-step cost outside the layers (`cost.base_ms`). A device with no step
timed (it cannot hold the model) takes the factor of the timed device nearest to it in `slowness`.
The factor is per device: a throttled device runs a layer of a few ms within one or two CFS periods,
so its layers alone time faster than its share of the quota allows over a step (lan4's 0.4-core edge1
was predicted at 0.75-0.96x its measured step alone with one factor fitted on the 0.8-core edge0).
`Profile.compute_scale` records the median factor.

Scaled alone, a split group was then under-predicted (0.75x its measured step on pi4): a slice
of a layer costs more than its share of the layer (its ops' fixed costs, the lowering's slicing and
concatenation, one more message per layer). So the profiler also times a split over the three
largest budgets (`split_step`: even, or as even as a short budget allows; two if three do not hold
it; `Profile.split_step_ms`), and the ms it takes beyond the scaled model's prediction
become `split_overhead_ms`: per split layer and per peer (each peer is one more message to send,
receive and concatenate), on each device in proportion to its compute time (it is CPU work on a
device as throttled as its compute), so that the model predicts the timed split. A constant per
split layer, fitted on lan4's two fastest devices, predicted the even split over all four at 0.55-0.66x
its measured step: there the slowest device has three peers at a quarter of the fastest's speed.
Per peer and device: 0.85x, and 0.88x over the three fastest (docs/DESIGN.md); but over four runs
that fit on two devices moved, and the even split over four with it (0.71-0.95x): now it is fitted
where each device has two peers.

`plan` calibrates by default (`plan(..., calibrate=False)`: the layer times as measured); the
benchmarks report the uncalibrated prediction beside the plan's own. With nothing timed the profile
is left as measured.
"""
from __future__ import annotations

import dataclasses
import statistics
from typing import Mapping, Sequence

from edgemesh_tf.mesh.layout import even_split_layout
from edgemesh_tf.layers import ModelSpec
from edgemesh_tf.planner import cost, masters
from edgemesh_tf.planner.predict import predict
from edgemesh_tf.planner.model_stats import ModelStats, model_stats
from edgemesh_tf.profiling.types import LayerTiming, Profile

SCALE_RANGE = (0.25, 4.0)  # a factor outside this is a failed measurement, not an overhead
# Devices of the timed split step: three, so that the per-peer overhead is fitted where a device has
# two peers (a fit on a two-way split under-predicts wider splits: docs/DESIGN.md, "Figures behind the
# code's constants").
SPLIT_STEP_DEVICES = 3


def alone_memory_bytes(stats: ModelStats) -> int:
    """Bytes the memory model predicts a device needs to train the whole model alone in a step the
    profiler times: plain training (no engine replica's anchors), its session hosted by the master."""
    return plain_memory_bytes(stats, [[d.units for d in stats.dims]])[0]


def plain_memory_bytes(stats: ModelStats, held, ranks: Sequence[int] | None = None) -> list[int]:
    """Per device of a ``len(held)``-device group, the bytes of a plain training step of its shares
    (``held[i][l]`` units of each dim), as the profiler times it; ``ranks``: each device's rank for the
    masters it holds (``masters.ranks``; default: the devices in rank order)."""
    ranks = range(len(held)) if ranks is None else ranks
    return [cost.MEMORY.device_bytes(stats, h, len(held), rank=r) for h, r in zip(held, ranks)]


def _ranks(group: Sequence[str], budgets: Mapping[str, int]) -> tuple[int, ...]:
    """Each device's rank in ``group`` by its place in ``budgets`` (the cluster file's order, which
    numbers the workers' TF tasks)."""
    place = {n: i for i, n in enumerate(budgets)}
    return masters.ranks_of([place[n] for n in group])


def _fits(need: int, budget: int, spec: ModelSpec) -> bool:
    """What the profiler may run on a device: the memory model's bytes times the headroom a plan of
    ``spec`` keeps (``MemoryModel.headroom_for``) at most its budget: a device past its budget is
    killed, as a real one would be."""
    return need * cost.MEMORY.headroom_for(spec.name) <= budget


def whole_step_devices(budgets: Mapping[str, int], spec: ModelSpec, batch: int) -> tuple[str, ...]:
    """The devices to time whole-model steps on: every one whose memory budget (bytes) holds the
    model alone by the memory model, with its headroom to spare (``_fits``), largest budget first
    (ties: in order); () when none does."""
    need = alone_memory_bytes(model_stats(spec, batch))
    return tuple(n for n in sorted(budgets, key=lambda n: -budgets[n]) if _fits(need, budgets[n], spec))


def split_step(budgets: Mapping[str, int], spec: ModelSpec, batch: int
               ) -> tuple[tuple[str, ...], dict[str, tuple[int, ...]]]:
    """The split to time while profiling: the SPLIT_STEP_DEVICES largest memory budgets (bytes;
    ties: in order) and each split dim's units over them (the dims ``even_split_layout`` splits):
    even if the memory model predicts each device holds its part (with its headroom, ``_fits``),
    else as even as their budgets allow (``memory_fractions``); else the fewer largest, down to two;
    ((), {}) when not even two hold a split. An uneven split over three keeps the per-peer fit where
    an even one does not fit (docs/DESIGN.md, "Figures behind the code's constants")."""
    order = sorted(budgets, key=lambda n: -budgets[n])
    stats = model_stats(spec, batch)
    headroom = cost.MEMORY.headroom_for(spec.name)
    for k in range(min(SPLIT_STEP_DEVICES, len(budgets)), 1, -1):
        group = tuple(order[:k])
        _, even = even_split_layout(spec.split_dims(), group)
        if _holds(stats, spec, group, even, budgets):
            return group, even
        # a plain step's bytes are linear in the units held: fixed + fraction x (whole - fixed)
        ranks = _ranks(group, budgets)
        fixed = plain_memory_bytes(stats, _held(stats, {n: (0,) * k for n in even}, k), ranks)
        whole = plain_memory_bytes(stats, _held(stats, {}, k), ranks)
        fractions = memory_fractions([(budgets[n] / headroom - f) / (w - f) for n, f, w in zip(group, fixed, whole)])
        if fractions is not None:
            shares = {name: apportion(sum(units), fractions) for name, units in even.items()}
            if _holds(stats, spec, group, shares, budgets):
                return group, shares
    return (), {}


def _held(stats: ModelStats, shares: Mapping[str, Sequence[int]], k: int) -> list[list[int]]:
    """Per device of a k-device group, the units it holds of each dim: its share, else the whole dim."""
    return [[shares[d.name][i] if d.name in shares else d.units for d in stats.dims] for i in range(k)]


def _holds(stats: ModelStats, spec: ModelSpec, group: Sequence[str], shares: Mapping[str, Sequence[int]],
           budgets: Mapping[str, int]) -> bool:
    held = _held(stats, shares, len(group))
    return all(_fits(b, budgets[n], spec) for n, b in zip(group, plain_memory_bytes(stats, held,
                                                                                      _ranks(group, budgets))))


def memory_fractions(caps: Sequence[float]) -> tuple[float, ...] | None:
    """Fractions of the split units per device, summing to 1, each at most its cap (the fraction its
    memory holds) and otherwise as even as possible (water-filling: the devices under the even
    fraction hold their cap, the others share the rest evenly); None when the caps sum below 1 or a
    cap is not positive."""
    if sum(caps) < 1 or min(caps) <= 0:
        return None
    out, free, rest = [0.0] * len(caps), set(range(len(caps))), 1.0
    while free:
        even = rest / len(free)
        capped = {i for i in free if caps[i] < even}
        if not capped:
            for i in free:
                out[i] = even
            break
        for i in capped:
            out[i] = caps[i]
        rest -= sum(caps[i] for i in capped)
        free -= capped
    return tuple(out)


def apportion(total: int, fractions: Sequence[float]) -> tuple[int, ...]:
    """``total`` units over len(fractions) positions, at least one each, by ``fractions``: each its
    floor, the rest one each to the largest fractions first (``memory_fractions`` gives a device at
    its memory cap less than the others, so it is the last to get a unit above its cap)."""
    k = len(fractions)
    if total < k:
        raise ValueError("cannot give %d positions at least one of %d units" % (k, total))
    out = [max(1, int(total * f)) for f in fractions]
    while sum(out) > total:  # the minimum of one took units from the others
        out[max(range(k), key=lambda j: out[j] - total * fractions[j])] -= 1
    order = sorted(range(k), key=lambda j: -fractions[j])
    for i in range(total - sum(out)):
        out[order[i % k]] += 1
    return tuple(out)


def beside_split_step(budgets: Mapping[str, int], spec: ModelSpec, batch: int, whole: Sequence[str],
                      devices: Sequence[str], sizes: Mapping[str, Sequence[int]]) -> tuple[str, ...]:
    """The devices of ``whole`` whose whole-model step the profiler times interleaved with the split
    step (over ``devices``, ``sizes`` its units; {}: even): those whose budget holds both graphs at
    once (the two steps' memory summed, with the model's headroom, ``_fits``). Interleaved, the
    ratio of the two steps, which decides between a split and the fastest device alone, holds
    when the machine's speed moves between minutes (on pi4 a profile's whole step of jetson0 was
    1.5x and 0.77x the same layout measured minutes later)."""
    if not devices:
        return ()
    stats = model_stats(spec, batch)
    shares = sizes or even_split_layout(spec.split_dims(), devices)[1]
    part = dict(zip(devices, plain_memory_bytes(stats, _held(stats, shares, len(devices)),
                                                _ranks(devices, budgets))))
    alone = alone_memory_bytes(stats)
    return tuple(n for n in whole if _fits(alone + part.get(n, 0), budgets[n], spec))


def steps_to_time(budgets: Mapping[str, int], spec: ModelSpec, batch: int) -> dict:
    """The profiler's keyword arguments of what to time for calibration (``profile.run.profile_workers``):
    also ``whole_step_bytes``, what a whole step needs with its headroom, which the profiler checks
    against what each device still holds when the step's turn comes."""
    devices, sizes = split_step(budgets, spec, batch)
    whole = whole_step_devices(budgets, spec, batch)
    need = alone_memory_bytes(model_stats(spec, batch)) * cost.MEMORY.headroom_for(spec.name)
    return {"whole_step_devices": whole, "split_step_devices": devices, "split_step_sizes": sizes,
            "whole_beside_split": beside_split_step(budgets, spec, batch, whole, devices, sizes),
            "whole_step_bytes": int(need)}


def compute_scales(profile: Profile, spec: ModelSpec) -> dict[str, float]:
    """Per device, the factor (see the module docstring): its own where its whole step was timed,
    else the factor of the timed device nearest in ``slowness``; {} when none was timed. A factor
    outside SCALE_RANGE is a failed measurement and is left out."""
    stats = model_stats(spec, profile.batch)
    own = {}
    for d in profile.devices:
        if d.whole_step_ms > 0:
            pred = predict([d], stats, {})
            compute = pred.compute_ms[0]
            f = (d.whole_step_ms - (pred.step_ms - compute)) / compute if compute > 0 else 0.0
            if SCALE_RANGE[0] <= f <= SCALE_RANGE[1]:
                own[d.name] = f
    if not own:
        return {}
    slow = slowness(profile)

    def nearest(name: str) -> str:
        return name if name in own else min(own, key=lambda n: abs(slow[n] - slow[name]))
    return {d.name: own[nearest(d.name)] for d in profile.devices}


def compute_scale(profile: Profile, spec: ModelSpec) -> float | None:
    """The median of the timed devices' factors (``compute_scales``); None when none was timed."""
    return _median_timed(profile, compute_scales(profile, spec))


def _median_timed(profile: Profile, scales: Mapping[str, float]) -> float | None:
    timed = [f for n, f in scales.items() if profile.device(n).whole_step_ms > 0]
    return statistics.median(timed) if timed else None


def calibrated(profile: Profile, spec: ModelSpec) -> Profile:
    """The profile with each device's layer times multiplied by its ``compute_scales`` factor (the
    median recorded in `Profile.compute_scale`) and the split overhead fitted; unchanged when already
    calibrated or when there is no factor."""
    if profile.compute_scale != 1.0:
        return profile
    scales = compute_scales(profile, spec)
    if not scales:
        return profile
    devices = tuple(dataclasses.replace(d, layers=tuple(LayerTiming(t.name, t.compute_ms * scales[d.name],
                                                                    t.spread_ms * scales[d.name])
                                                        for t in d.layers)) for d in profile.devices)
    scaled = dataclasses.replace(profile, devices=devices, compute_scale=round(_median_timed(profile, scales), 4))
    o = split_overhead_ms(scaled, spec)
    if any(o.values()):
        scaled = dataclasses.replace(scaled, devices=tuple(dataclasses.replace(d, split_overhead_ms=round(o[d.name], 3))
                                                           for d in scaled.devices))
    return scaled


def slowness(profile: Profile) -> dict[str, float]:
    """Per device, its layer times summed over the fastest device's (>= 1; 1 when its layers are
    not timed)."""
    total = {d.name: sum(t.compute_ms for t in d.layers) for d in profile.devices}
    fastest = min((t for t in total.values() if t > 0), default=0.0)
    return {n: (t / fastest if t > 0 else 1.0) for n, t in total.items()}


def split_overhead_ms(profile: Profile, spec: ModelSpec) -> dict[str, float]:
    """Per device, what each peer adds to a split layer on it (ms per peer, >= 0): o x its
    ``slowness``, o such that the cost model predicts the measured even split step
    (``Profile.split_step_ms``; times already scaled by ``compute_scale``); all 0 when no split step
    was timed or it was no slower than modelled. The prediction grows with o (a maximum of
    increasing terms): o is found by bisection, between 0 and the excess over the split layers."""
    zero = {d.name: 0.0 for d in profile.devices}
    if profile.split_step_ms <= 0 or len(profile.split_step_devices) < 2:
        return zero
    stats = model_stats(spec, profile.batch)
    shares = profile.split_step_sizes or even_split_layout(spec.split_dims(), profile.split_step_devices)[1]
    slow = slowness(profile)

    def predicted(o: float) -> float:
        group = [dataclasses.replace(profile.device(n), split_overhead_ms=o * slow[n])
                 for n in profile.split_step_devices]
        return predict(group, stats, shares).step_ms

    excess = profile.split_step_ms - predicted(0.0)
    if not shares or excess <= 0:
        return zero
    lo, hi = 0.0, excess / len(shares)  # each split layer charges at least o (k - 1 >= 1, slowness >= 1)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if predicted(mid) < profile.split_step_ms else (lo, mid)
    return {n: lo * s for n, s in slow.items()}
