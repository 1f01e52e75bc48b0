"""One group's predicted step (`predict`): the cost model's per-layer terms (`cost.py`) summed per
device, and the step simulated layer by layer with its transfers (`simulate.py`). Above both, so
that neither imports the other's user.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

from edgemesh_tf.planner import cost
from edgemesh_tf.planner.model_stats import DimStats, ModelStats
from edgemesh_tf.planner.simulate import simulate_step_ms
from edgemesh_tf.profiling.types import DeviceProfile


def _check_shares(dim: DimStats, shares: cost.Shares, k: int) -> None:
    if shares is None:
        return
    if len(shares) != k or any(not isinstance(s, int) or s < 1 for s in shares) or sum(shares) != dim.units:
        raise ValueError("shares of %r must be %d positive integers adding up to %d, got %s"
                         % (dim.name, k, dim.units, list(shares)))


def predict(group: Sequence[DeviceProfile], stats: ModelStats, assignment: Mapping[str, cost.Shares],
            *, profile_batch: int | None = None, ps_bandwidth_mbit: float = math.inf,
            coeffs: Sequence[cost.LayerCoeffs] | None = None) -> cost.GroupPrediction:
    """Predicts one step of ``group`` under ``assignment`` {dim: shares or None}; absent dims are replicated.

    profile_batch: the batch the layer timings were measured at (default: ``stats.batch``).
    coeffs: ``cost.layer_coeffs`` of every dim on ``group`` at that batch, when the caller has them.
    """
    cost.check_group(group)
    known = {d.name for d in stats.dims}
    unknown = set(assignment) - known
    if unknown:
        raise ValueError("assignment names unknown dim(s) %s; the model's dims are %s"
                         % (sorted(unknown), [d.name for d in stats.dims]))
    k = len(group)
    compute, comm, memory = [0.0] * k, [0.0] * k, cost.group_fixed_memory_bytes(stats, group)
    if coeffs is None:
        coeffs = [cost.layer_coeffs(group, dim, stats.batch, profile_batch or stats.batch) for dim in stats.dims]
    layers, previous = [], (None, 0)
    for dim, co in zip(stats.dims, coeffs):
        shares = assignment.get(dim.name)
        _check_shares(dim, shares, k)
        held = shares or (dim.units,) * k
        gather = co.gather_ms(shares)
        reduce_ms = co.reduce_scatter_ms(*previous) if shares is not None and k > 1 else 0.0
        lc = co.compute_ms(shares)
        for i in range(k):
            compute[i] += lc[i]
            comm[i] += gather[i] + reduce_ms
            memory[i] += co.mem_per_unit * held[i]
        layers.append(cost.LayerPrediction(dim.name, dim.units, None if shares is None else tuple(shares), lc,
                                           max(gather) + reduce_ms))
        previous = (shares if k > 1 else None, dim.units)
    step = simulate_step_ms(group, stats, assignment, profile_batch or stats.batch, coeffs)
    return cost.GroupPrediction(tuple(d.name for d in group), step, tuple(compute), tuple(comm),
                                tuple(memory), cost.ps_sync_ms(group, stats, ps_bandwidth_mbit),
                                tuple(layers), sum(lp.ms for lp in layers) + cost.base_ms(group, stats),
                                cost.copy_ms(group, stats, assignment), cost.ps_link_ms(stats, ps_bandwidth_mbit))
