"""Event simulation of one training step of a group: when each device can start each layer.

The separable sum over layers (``cost``) charges every layer the slowest device's compute plus the
slowest collective. On a heterogeneous group the devices are out of step (a slow link delivers the
input batch late; parts from early devices wait at the receiver), and a collective only has to wait
for the parts that are actually late. Measured on the emulated edge4 testbed (a traced step), this
is what the step time follows; ``predict`` reports this simulation as the group's step time.

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

from edgemesh_tf.planner.cost import LayerCoeffs, Shares, input_medium_ms, layer_coeffs, transfer_ms
from edgemesh_tf.planner.model_stats import ModelStats
from edgemesh_tf.profiling.types import DeviceProfile

FORWARD_FRACTION = 1.0 / 3.0


def simulate_step_ms(group: Sequence[DeviceProfile], stats: ModelStats, assignment: Mapping[str, Shares],
                     profile_batch: int, coeffs: Sequence[LayerCoeffs] | None = None) -> float:
    """Simulated ms of one step of ``group`` under ``assignment`` (see the module docstring).

    coeffs: ``layer_coeffs`` of every dim of ``stats`` on ``group``, when the caller has them
    (they depend on the group only, not on the assignment: the planner's search reuses them).
    """
    k = len(group)
    if coeffs is None:
        coeffs = [layer_coeffs(group, dim, stats.batch, profile_batch) for dim in stats.dims]
    lat = [d.latency_ms for d in group]
    medium_input = input_medium_ms(group, stats)
    t = [1.5 * d.step_overhead_ms + max(transfer_ms(stats.batch * stats.image_bytes, d.bandwidth_mbit),
                                        medium_input if d.medium else 0.0) for d in group]
    layers = []
    previous: tuple[Shares, int] = (None, 0)
    for dim, co in zip(stats.dims, coeffs):
        shares = assignment.get(dim.name) if k > 1 else None
        compute = co.compute_ms(shares)
        recv = send = None
        if shares:
            recv = [r * (co.units - s) for r, s in zip(co.recv_ms_per_unit, shares)]
            send = [(k - 1) * r * s for r, s in zip(co.recv_ms_per_unit, shares)]
        reduce_ms = (co.reduce_scatter_ms(*previous) if previous[0] else co.allreduce_ms) if shares else 0.0
        layers.append((compute, recv, send, co, shares, reduce_ms))
        previous = (shares, dim.units)
    for compute, recv, send, co, shares, _ in layers:
        done = [t[i] + FORWARD_FRACTION * compute[i] for i in range(k)]
        if recv is None:
            t = done
        else:
            # device i has its input once its own link has received the others' parts, the last
            # owner's link has sent its part to all of its k - 1 peers and a shared medium has
            # carried every part (from when each is ready); then its split overhead
            sent = _latest_other([d + s for d, s in zip(done, send)], lat)
            aired = max((queue_end(done, [w * s / co.units for w, s in zip(ws, shares)]) for ws in co.medium_out),
                        default=0.0) + co.hop_ms
            t = [max(max(done[i], lat[i] + arrive) + recv[i], lat[i] + sent[i], aired) + co.split_ms[i]
                 for i, arrive in enumerate(_latest_other(done, lat))]
    for compute, recv, _, _, _, reduce_ms in reversed(layers):
        t = [t[i] + (1 - FORWARD_FRACTION) * compute[i] for i in range(k)]
        if recv is not None and reduce_ms > 0:
            t = [max(t) + reduce_ms] * k
    return max(t[i] + group[i].step_overhead_ms / 2 for i in range(k))


def queue_end(ready: Sequence[float], work: Sequence[float]) -> float:
    """When one shared channel has carried every part, part j (``work[j]`` ms of its time) ready at
    ``ready[j]``: a work-conserving fluid queue ends at max_j ready_j + the work of the parts ready
    no earlier than j."""
    end, left = 0.0, 0.0
    for r, w in sorted(zip(ready, work), reverse=True):
        left += w
        end = max(end, r + left)
    return end


def _latest_other(done: Sequence[float], lat: Sequence[float]) -> list[float]:
    """Per device i: max over the other devices s of done_s + lat_s (when the last part for i leaves
    its owner's link), from the two largest values: O(k) instead of O(k^2)."""
    sent = [d + l for d, l in zip(done, lat)]
    if len(sent) < 2:
        return [-float("inf")] * len(sent)
    first = max(range(len(sent)), key=sent.__getitem__)
    second = max(v for j, v in enumerate(sent) if j != first)
    return [second if i == first else sent[first] for i in range(len(sent))]
