"""Calibrating the profile's layer times by one measured whole-model step (pure).

The profiler times each layer alone (its own run, its input generated on the device). Summed, these
over-predict the real training step, which runs the layers back to back in one executor: on the
Pi-class cluster by ~1.2x for VGG-16, alone and in split groups alike (`bench/edgemesh_claims.py`,
predicted over measured 1.22 and 1.26 before this calibration). So the profiler also times a few
real steps of the whole model on one device (`DeviceProfile.whole_step_ms`), and every device's
layer times can be scaled by the factor that makes the cost model predict that step:

    scale = (whole_step_ms - base_ms) / compute_ms     (the device alone, at the profile's batch)

base_ms is the cost model's per-step cost outside the layers (`cost.base_ms`). One factor for all
devices: the overhead is the runtime's, not the device's (the two measured groups above agree
within 3%). With no device measured the profile is left as measured.

Measured on pi4 (VGG-16, batch 32) the factor makes a device alone exact but a split group
under-predicted (0.75x its measured step): a slice of a layer costs more than its share of the
whole layer's time, which the layer-by-layer times happened to include. So `plan` uses it only when
asked (`plan(..., calibrate=True)`); the benchmarks report both predictions beside the measurement.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Mapping

from edgemesh_tf.models.spec import ModelSpec
from edgemesh_tf.planner import cost
from edgemesh_tf.planner.model_stats import ModelStats, model_stats
from edgemesh_tf.profile.types import LayerTiming, Profile

SCALE_RANGE = (0.25, 4.0)  # a factor outside this is a failed measurement, not an overhead


def alone_memory_bytes(stats: ModelStats) -> int:
    """Bytes the cost model predicts one device needs to train the whole model alone (the session
    hosted on it)."""
    return cost.fixed_memory_bytes(stats, 1)[0] + sum(
        int(math.ceil(cost.MEMORY.per_unit_bytes(d, stats.batch))) * d.units for d in stats.dims)


def whole_step_device(budgets: Mapping[str, int], spec: ModelSpec, batch: int) -> str | None:
    """The device to time whole-model steps on: the largest memory budget (bytes; ties: the first),
    if the memory model predicts the model fits it alone; else None (nothing is timed)."""
    if not budgets:
        return None
    name = max(budgets, key=lambda n: budgets[n])
    return name if alone_memory_bytes(model_stats(spec, batch)) <= budgets[name] else None


def compute_scale(profile: Profile, spec: ModelSpec) -> float | None:
    """The factor (see the module docstring): the median over the devices with a whole step timed;
    None when none was, or the factor is outside SCALE_RANGE."""
    stats = model_stats(spec, profile.batch)
    factors = []
    for d in profile.devices:
        if d.whole_step_ms > 0:
            pred = cost.predict([d], stats, {})
            compute = pred.compute_ms[0]
            if compute > 0:
                factors.append((d.whole_step_ms - (pred.step_ms - compute)) / compute)
    if not factors:
        return None
    f = statistics.median(factors)
    return f if SCALE_RANGE[0] <= f <= SCALE_RANGE[1] else None


def calibrated(profile: Profile, spec: ModelSpec) -> Profile:
    """The profile with every layer time multiplied by `compute_scale` (and the factor recorded in
    `Profile.compute_scale`); unchanged when already calibrated or when there is no factor."""
    if profile.compute_scale != 1.0:
        return profile
    f = compute_scale(profile, spec)
    if f is None:
        return profile
    devices = tuple(dataclasses.replace(d, layers=tuple(LayerTiming(t.name, t.compute_ms * f, t.spread_ms * f)
                                                        for t in d.layers)) for d in profile.devices)
    return dataclasses.replace(profile, devices=devices, compute_scale=round(f, 4))
