"""The plans every planned grid is compared with, by the same cost model (ms per step, bytes per device).

  fastest_device      the device whose predicted step (alone, the whole model) is the least
  all_replicated      every device that holds the model trains it alone: one asynchronous
                      data-parallel group per device (every layer whole on each device)
  sync_data_parallel  one synchronous group at the same global batch B: device i computes b_i of the
                      B examples (sum b_i = B, b_i >= 1) with the whole model, then the gradients are
                      summed over the devices (mtf's ring allreduce of every layer's weights); a layout
                      that splits the ``batch`` dim unevenly over a ``batch`` mesh dim

Synchronous data parallelism, per step (b0: the profile batch, ov_i: device i's empty round trip):

  time_i(b)   = 2 * ov_i + 8 * b * image / bw_i + b / b0 * sum_l layer_ms_i,l   start, input batch, compute
  allreduce   = sum_l 2(m-1)/m * 8 * 4 * params_l / bw_min + allreduce_latency_ms(lat, params_l)
                (the bandwidth term at least a shared medium's airtime for the ring: ``media.ring_ms``)
  step_ms     = max_i time_i(b_i) + allreduce
  memory_i    = runtime + w * 4 * params + a * b_i * (image + sum_l (in_l + act_l))   (bytes, ``memory``)

The b_i are water-filled (each example to the device that would finish it first, within memory:
exact for this min-max); the devices are the fastest m (per-example time) that hold the model at
b_i = 1, m chosen by ``division.min_over_sizes``.
"""
from __future__ import annotations

import heapq
import math
from typing import Sequence

from edgemesh_tf.planner.collectives import allreduce_latency_ms
from edgemesh_tf.planner import cost, media
from edgemesh_tf.planner.cost import (GroupPrediction, LayerPrediction, check_group, ps_link_ms, ps_sync_ms,
                                      transfer_ms)
from edgemesh_tf.planner.division import Division, PlanError, divide, min_over_sizes
from edgemesh_tf.planner.model_stats import FLOAT_BYTES, ModelStats
from edgemesh_tf.profiling.types import DeviceProfile


def singles(devices: Sequence[DeviceProfile], stats: ModelStats, profile_batch: int,
            ps_bandwidth_mbit: float = math.inf) -> dict[str, Division | PlanError]:
    """Every device alone with the whole model (its Division, or the PlanError if it does not fit)."""
    out: dict[str, Division | PlanError] = {}
    for d in devices:
        try:
            out[d.name] = divide([d], stats, profile_batch=profile_batch, ps_bandwidth_mbit=ps_bandwidth_mbit)
        except PlanError as e:
            out[d.name] = e
    return out


def fastest_device(alone: dict[str, Division | PlanError]) -> Division | None:
    """The single device with the least predicted step ms (None if no device holds the model)."""
    fits = [d for d in alone.values() if isinstance(d, Division)]
    return min(fits, key=lambda d: d.prediction.step_ms) if fits else None


def all_replicated(alone: dict[str, Division | PlanError]) -> list[Division]:
    """One group per device that holds the model."""
    return [d for d in alone.values() if isinstance(d, Division)]


def sync_data_parallel(devices: Sequence[DeviceProfile], stats: ModelStats, profile_batch: int,
                       ps_bandwidth_mbit: float = math.inf) -> Division | None:
    """The best synchronous data-parallel group at global batch ``stats.batch`` (see the module
    docstring); None if no device holds the model with one example."""
    check_group(devices)
    b0, B = profile_batch, stats.batch
    per_example = {d.name: transfer_ms(stats.image_bytes, d.bandwidth_mbit)
                   + sum(d.layer_ms(x.name) for x in stats.dims) / b0 for d in devices}
    weights, act = cost.MEMORY.whole_model_bytes(stats, B, replica=stats.engine)  # (batch-independent bytes, bytes per example)
    weights += cost.session_bytes(stats)  # a device alone is its group's first device
    fit = [d for d in devices if weights + act <= d.memory_bytes]
    if not fit:
        return None
    fit.sort(key=lambda d: (per_example[d.name] + 2 * d.step_overhead_ms, devices.index(d)))
    ring = lambda m: [d for d in devices if d in fit[:m]]
    tried: dict[int, Division] = {}

    def attempt(m: int) -> float:
        group = ring(m)
        shares = _water_fill(group, per_example, act, weights, B)
        if shares is None:
            return math.inf
        tried[m] = _division(group, stats, shares, per_example, act, weights, b0, ps_bandwidth_mbit)
        return tried[m].prediction.step_ms

    m = min_over_sizes(attempt, min(len(fit), B))
    return tried.get(m)


def _water_fill(group, per_example, act, weights, B) -> tuple[int, ...] | None:
    """Examples per device: one each, then each next one to the device that would finish first."""
    if len(group) > B:
        return None
    shares = [1] * len(group)
    cap = [(d.memory_bytes - weights) // act for d in group]
    finish = lambda i, b: 2 * group[i].step_overhead_ms + b * per_example[group[i].name]
    heap = [(finish(i, 2), i) for i in range(len(group)) if cap[i] >= 2]
    heapq.heapify(heap)
    for _ in range(B - len(group)):
        if not heap:
            return None
        _, i = heapq.heappop(heap)
        shares[i] += 1
        if shares[i] < cap[i]:
            heapq.heappush(heap, (finish(i, shares[i] + 1), i))
    return tuple(shares)


def _division(group, stats, shares, per_example, act, weights, b0, ps_bandwidth_mbit) -> Division:
    m = len(group)
    lat, bw_min = [d.latency_ms for d in group], min(d.bandwidth_mbit for d in group)
    grads = [FLOAT_BYTES * x.params_per_unit * x.units for x in stats.dims]
    reduce = [0.0 if m == 1 else max(2 * (m - 1) / m * transfer_ms(g, bw_min), media.ring_ms(group, g))
              + allreduce_latency_ms(lat, x.params_per_unit * x.units) for x, g in zip(stats.dims, grads)]
    compute = tuple(b * (per_example[d.name] - transfer_ms(stats.image_bytes, d.bandwidth_mbit))
                    for d, b in zip(group, shares))
    step = max(2 * d.step_overhead_ms + b * per_example[d.name] for d, b in zip(group, shares)) + sum(reduce)
    layers = tuple(LayerPrediction(x.name, x.units, None, tuple(d.layer_ms(x.name) * b / b0 for d, b in
                                                                 zip(group, shares)), r)
                   for x, r in zip(stats.dims, reduce))
    pred = GroupPrediction(tuple(d.name for d in group), step, compute, (sum(reduce),) * m,
                           tuple(int(math.ceil(weights + b * act)) for b in shares),
                           ps_sync_ms(group, stats, ps_bandwidth_mbit),
                           layers, step, ps_link_ms=ps_link_ms(stats, ps_bandwidth_mbit))
    return Division(tuple(d.name for d in group), tuple(d.device for d in group),
                    tuple((x.name, None) for x in stats.dims), pred, batch_shares=tuple(shares))
