"""Event simulation of one training step of a group: when each device can start each layer.

The separable sum over layers (``cost``) charges every layer the slowest device's compute plus the
slowest collective. On a heterogeneous group the devices are out of step (a slow link delivers the
input batch late; parts from early devices wait at the receiver), and a collective only has to wait
for the parts that are actually late. Measured on the emulated edge4 testbed (a traced step), this
is what the step time follows; ``predict.predict`` reports this simulation as the group's step time.

Per device i (lat_i one-way ms, ov_i = round trip of an empty run, bw_i Mbit/s), per step:
  t_i       = 1.5 * ov_i + 8 * b * image / bw_i          started by the master, then its input batch (on a
                                                         shared medium: at least every member's batch over it)
  forward   : done_i = t_i + c_i,l / 3   (c: forward+backward ms of the device's share; backward ~ 2x forward)
              split layer: t_i = max(max(done_i, max_s (done_s + lat_s + lat_i)) + recv_i,l,
                                     max_s (done_s + send_s,l + lat_s) + lat_i) + o_i,l
              (the gather is direct; recv: the others' bytes over the device's link, send: its own
              part to its k-1 peers over the other direction, as in ``cost``; o: the layer's
              calibrated split overhead, 0 unless calibrated); with a shared medium also
              t_i >= the medium's queue of the parts (``queue_end``, ``media``) + hop
  backward  : t_i += 2 c_i,l / 3; a split layer with an input gradient ends in a collective that
              every device waits for: t_i = max_j t_j + reduce_l, a reduce-scatter to the previous
              layer's shares when it is split, else a ring allreduce (``cost``)
  step_ms   = max_i (t_i + ov_i / 2)                      the master learns that every device is done
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from edgemesh_tf.planner.cost import LayerCoeffs, Shares, input_medium_ms, layer_coeffs, transfer_ms
from edgemesh_tf.planner.model_stats import ModelStats
from edgemesh_tf.profiling.types import DeviceProfile

FORWARD_FRACTION = 1.0 / 3.0
BACKWARD_FRACTION = 1 - FORWARD_FRACTION


def simulate_step_ms(group: Sequence[DeviceProfile], stats: ModelStats, assignment: Mapping[str, Shares],
                     profile_batch: int, coeffs: Sequence[LayerCoeffs] | None = None) -> float:
    """Simulated ms of one step of ``group`` under ``assignment`` (see the module docstring).

    coeffs: ``layer_coeffs`` of every dim of ``stats`` on ``group``, when the caller has them
    (they depend on the group only, not on the assignment: the planner's search reuses them).
    Each value is the same float expression, in the same order, as the formulas of the module
    docstring; ``simulate_steps_ms`` computes the same floats for many divisions at once.
    """
    k = len(group)
    if coeffs is None:
        coeffs = [layer_coeffs(group, dim, stats.batch, profile_batch) for dim in stats.dims]
    lat = [d.latency_ms for d in group]
    t = _start_ms(group, stats)
    layers = []  # per layer: (its backward compute ms per device, its collective's ms or 0: none)
    previous_shares, previous_units = None, 0
    for dim, co in zip(stats.dims, coeffs):
        shares = assignment.get(dim.name) if k > 1 else None
        fwd, back, reduce_ms = _layer_terms(co, shares, previous_shares, previous_units)
        if not shares:
            t = [x + f for x, f in zip(t, fwd)]
        else:
            units = co.units
            done = [x + f for x, f in zip(t, fwd)]
            # device i has its input once its own link has received the others' parts, the last
            # owner's link has sent its part to all of its k - 1 peers and a shared medium has
            # carried every part (from when each is ready); then its split overhead
            rpu = co.recv_ms_per_unit
            sent = _latest_other([d + (k - 1) * r * s + l for d, r, s, l in zip(done, rpu, shares, lat)])
            arrive = _latest_other([d + l for d, l in zip(done, lat)])
            if co.medium_out:
                aired = max(queue_end(done, [w * s / units for w, s in zip(ws, shares)])
                            for ws in co.medium_out) + co.hop_ms
            else:
                aired = 0.0 + co.hop_ms
            t = [max(max(l + a, d) + r * (units - s), l + st, aired) + o
                 for d, l, a, r, s, st, o in zip(done, lat, arrive, rpu, shares, sent, co.split_ms)]
        layers.append((back, reduce_ms))
        previous_shares, previous_units = shares, dim.units
    for back, reduce_ms in reversed(layers):
        t = [x + b for x, b in zip(t, back)]
        if reduce_ms > 0:  # a split layer's backward collective: every device waits for it
            t = [max(t) + reduce_ms] * k
    return max(x + d.step_overhead_ms / 2 for x, d in zip(t, group))


def simulate_steps_ms(group: Sequence[DeviceProfile], stats: ModelStats, divisions: Sequence[Sequence[Shares]],
                      coeffs: Sequence[LayerCoeffs]) -> np.ndarray:
    """``simulate_step_ms`` of each of ``divisions`` (shares per dim of ``stats``, in order) on
    ``group`` (k >= 2, no device on a shared medium), as one array of M values, bit for bit the
    same (``simulate_share_arrays`` of the divisions as arrays).
    """
    _check_batchable(group)
    k, layers = len(group), len(coeffs)
    zero = (0,) * k
    shares = np.array([x or zero for d in divisions for x in d], dtype=np.int64).reshape(len(divisions), layers, k)
    split = np.array([bool(x) for d in divisions for x in d], dtype=bool).reshape(len(divisions), layers)
    return simulate_share_arrays(group, stats, shares, split, coeffs)


def simulate_share_arrays(group: Sequence[DeviceProfile], stats: ModelStats, shares: np.ndarray, split: np.ndarray,
                          coeffs: Sequence[LayerCoeffs]) -> np.ndarray:
    """``simulate_step_ms`` of M divisions given as arrays, on ``group`` (k >= 2, no device on a shared
    medium): ``shares`` (M, L, k) units per dim of ``stats`` and device (any values where the dim is
    replicated), ``split`` (M, L) whether each dim is split. Bit for bit the same as the single
    simulation: the same float operations, in the same order, on (M, k) arrays. The planner's search
    simulates every neighbour of its current division at once this way.
    """
    _check_batchable(group)
    k, m = len(group), len(shares)
    lat = np.array([d.latency_ms for d in group])
    t = np.tile(np.array(_start_ms(group, stats)), (m, 1))
    backward = []  # per layer: (M, k) backward compute ms, (M,) the collective's ms (0: none)
    previous, previous_split, previous_units = np.zeros((m, k), dtype=np.int64), np.zeros(m, dtype=bool), 0
    for index, co in enumerate(coeffs):
        split_here = split[:, index]
        s = np.where(split_here[:, None], shares[:, index, :], 0)
        units, full = co.units, np.array(co.full_ms)
        # _layer_terms, per division: compute, forward and backward ms, the backward collective's ms
        compute = np.where(split_here[:, None], full * s / units, full)
        fwd, back = FORWARD_FRACTION * compute, BACKWARD_FRACTION * compute
        if any(co.in_ms):  # reduce_scatter_ms to the previous layer's shares (no medium: its term is 0.0)
            whole = np.array(co.in_ms)
            links = (whole * np.maximum(previous_units - previous, (k - 1) * previous) / max(previous_units, 1)).max(1)
            scatter = co.hop_ms + np.maximum(links, 0.0)
        else:
            scatter = np.full(m, co.reduce_ms)
        reduce_ms = np.where(split_here, np.where(previous_split, scatter, co.allreduce_ms), 0.0)
        backward.append((back, reduce_ms))
        done = t + fwd
        if split_here.any():
            rpu, o = np.array(co.recv_ms_per_unit), np.array(co.split_ms)
            sent = _latest_others(done + (k - 1) * rpu * s + lat)
            arrive = _latest_others(done + lat)
            aired = 0.0 + co.hop_ms
            gathered = np.maximum(np.maximum(np.maximum(lat + arrive, done) + rpu * (units - s), lat + sent),
                                  aired) + o
            t = np.where(split_here[:, None], gathered, done)
        else:
            t = done
        previous, previous_split, previous_units = s, split_here, units
    for back, reduce_ms in reversed(backward):
        t = t + back
        t = np.where((reduce_ms > 0)[:, None], t.max(axis=1, keepdims=True) + reduce_ms[:, None], t)
    return (t + np.array([d.step_overhead_ms for d in group]) / 2).max(axis=1)


def _check_batchable(group: Sequence[DeviceProfile]) -> None:
    """Raises ValueError unless ``group`` can be simulated in arrays: 2 or more devices, none on a shared medium."""
    if len(group) < 2 or any(d.medium for d in group):
        raise ValueError("the simulation in arrays takes groups of 2 or more devices on their own links, got %d "
                         "devices, media %s" % (len(group), sorted({d.medium for d in group})))


def _start_ms(group: Sequence[DeviceProfile], stats: ModelStats) -> list[float]:
    """Per device: when its step starts (the master's start and its input batch, see above)."""
    medium_input = input_medium_ms(group, stats)
    return [1.5 * d.step_overhead_ms + max(transfer_ms(stats.batch * stats.image_bytes, d.bandwidth_mbit),
                                           medium_input if d.medium else 0.0) for d in group]


def _layer_terms(co: LayerCoeffs, shares: Shares, previous_shares: Shares,
                 previous_units: int) -> tuple[list[float], list[float], float]:
    """(forward ms, backward ms per device, the backward collective's ms: 0 when the layer is not split)
    of one layer given its shares and the previous layer's."""
    compute = co.compute_ms(shares)
    forward = [FORWARD_FRACTION * c for c in compute]
    backward = [BACKWARD_FRACTION * c for c in compute]
    if not shares:
        return forward, backward, 0.0
    return forward, backward, (co.reduce_scatter_ms(previous_shares, previous_units) if previous_shares
                               else co.allreduce_ms)


def queue_end(ready: Sequence[float], work: Sequence[float]) -> float:
    """When one shared channel has carried every part, part j (``work[j]`` ms of its time) ready at
    ``ready[j]``: a work-conserving fluid queue ends at max_j ready_j + the work of the parts ready
    no earlier than j."""
    end, left = 0.0, 0.0
    for r, w in sorted(zip(ready, work), reverse=True):
        left += w
        end = max(end, r + left)
    return end


def _latest_other(sent: list[float]) -> list[float]:
    """Per device i: the max over the other devices s of ``sent[s]`` (``sent[s]`` = done_s + lat_s: when
    the last part for i leaves its owner's link), from the two largest values: O(k) instead of O(k^2).
    The first largest (the one ``max`` returns) is the one the others see. Needs k >= 2."""
    top = max(sent)
    first = sent.index(top)
    out = [top] * len(sent)
    out[first] = sent[1 - first] if len(sent) == 2 else max(sent[:first] + sent[first + 1:])
    return out


def _latest_others(sent: np.ndarray) -> np.ndarray:
    """``_latest_other`` of each row of ``sent`` (M, k)."""
    rows = np.arange(len(sent))
    first = sent.argmax(axis=1)
    top = sent[rows, first]
    rest = sent.copy()
    rest[rows, first] = -np.inf
    out = np.repeat(top[:, None], sent.shape[1], axis=1)
    out[rows, first] = rest.max(axis=1)
    return out
