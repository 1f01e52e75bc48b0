"""The cost model: predicted step time, memory and parameter-server sync of one model-parallel group.

A group is an ordered list of DeviceProfiles (the ring order of its collectives). Per split dim l
(U units, device i holding s_i >= 1 of them; k devices; batch b; profile batch b0):

  compute_i,l = layer_ms_i,l * b/b0 * s_i/U            (replicated: layer_ms_i,l * b/b0 on every device)
  gather_i,l  = L_direct + (k-1) * o_i + max(recv_i,l, send_i,l)    the forward gather is direct: device
                i receives the other shares straight from their owners over its own link,
                recv_i,l = 8 * b * out_l * (U - s_i)/U / bw_i, while it sends its own share to each of its
                k-1 peers over the same link's other direction, send_i,l = (k-1) * 8 * b * out_l * s_i/U / bw_i
                (a large share's owner is the bottleneck); L_direct = the two largest lat summed (a hop a
                -> b costs lat_a + lat_b, ``collectives``); o_i: what each peer adds to a split layer on
                device i beyond that (its messages' and slices' CPU on the device: ``calibrate`` fits it to
                a measured split step, in proportion to the device's compute time; 0 else)
  reduce_l    = L_direct + max_i 8 * b * in_l * max((k-1) * s'_i, U' - s'_i)/U' / bw_i   backward direct
                reduce-scatter of the input gradient's partial sums to the previous layer's shares s'
                (U' units): device i receives k-1 partial sums of its own share and sends its partial
                sums of the others'; (k-1)/k * 8 * b * in_l / bw_min when the shares are even (the layer
                solver's constant, ``LayerCoeffs.reduce_ms``). 0 for the first layer (the image needs no
                gradient). When the previous layer is replicated the lowering must allreduce instead
                (mtf's ring: allreduce_ms = 2(k-1)/k * bytes / bw_min + its critical path); the
                simulation charges that, the layer-by-layer bound below charges the even reduce-scatter
  layer_ms_l  = max_i compute_i,l + max_i gather_i,l + reduce_l   (each split layer ends in a collective)
  base_ms     = max_i (2 * step_overhead_ms_i + 8 * b * image / bw_i)   per step the master starts the
                device (a round trip, step_overhead_ms = measured round trip of an empty run), the device
                fetches its input batch (a round trip + the bytes)
  step_ms     = sum_l layer_ms_l + base_ms
  ps_sync_ms  = 2 * max(max_i 8 * master_i / bw_i, 8 * model_bytes / ps_bw) + 2 * lat_max
                (push + pull of the whole model: each device moves the whole tensors it masters,
                master_i bytes as the engine places them (``masters``), over its own link, all of it
                through the PS's; lat_max: the group's largest link latency, the PS's own link is not
                profiled)
  copy_ms     = 2 * (max_i max(recv_i, send_i) / bw_i + 2 * lat_max)   a round's masters <-> slices copies
                of every weight and state tensor (a split one's shares, a replicated one whole to each
                device; momentum stays in the slices; ``masters.copied_bytes``)
  memory_i    = runtime + w * 4 * sum_l params_per_unit_l * s_i,l + m * model_bytes / k
                + a * b * (image + sum_l in_l + sum_l act_l * s_i,l/U) + 2 * model_bytes / k
                (``memory.MemoryModel``: weights and their optimizer copies, the device's part of the
                whole tensors, inputs kept for backward, own pre-pool outputs, a replica's anchors
                and residuals; the coefficients fitted to measured peaks)

Shared media (devices on one Wi-Fi channel, ``media``): every collective, input batch and push/pull
also takes at least the medium's bytes over its rate (the gather's and reduce-scatter's link term
is then max(own link, medium)).

Bytes are per example (``model_stats``); bandwidths in Mbit/s (8 * bytes / (Mbit/s * 1e3) = ms);
latencies in ms. A replicated layer has s_i = U and no communication.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

from edgemesh_tf.planner import masters, media
from edgemesh_tf.planner import memory as memory_lib
from edgemesh_tf.planner.collectives import allreduce_latency_ms, direct_latency_ms
from edgemesh_tf.planner.model_stats import FLOAT_BYTES, DimStats, ModelStats
from edgemesh_tf.profiling.types import DeviceProfile

Shares = masters.Shares
"""Units of a split dim per device, in group order; None = replicated (every device computes all)."""
MEMORY = memory_lib.FITTED  # the memory model every prediction uses (memory_fit.json)


def transfer_ms(nbytes: float, bandwidth_mbit: float) -> float:
    """ms to move ``nbytes`` over a link of ``bandwidth_mbit`` Mbit/s."""
    return 8.0 * nbytes / (bandwidth_mbit * 1e3)


def busier_direction_ms(whole_ms: float, share: int, units: int, k: int) -> float:
    """A direct exchange (gather or reduce-scatter) over a device's full-duplex link: it moves the
    other devices' parts one way ((units - share) / units of the tensor) and its own part to or from
    each of its k - 1 peers the other way; ms of the busier direction, ``whole_ms`` the whole tensor's."""
    return whole_ms * max(units - share, (k - 1) * share) / units


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_group(group: Sequence[DeviceProfile]) -> None:
    """Raises ValueError naming the device and field if a profile cannot be planned with."""
    if not group:
        raise ValueError("a group needs at least one device")
    names = [d.name for d in group]
    if len(set(names)) != len(names):
        raise ValueError("device names must be unique, got %s" % names)
    for d in group:
        for field, ok, expected in (("bandwidth_mbit", lambda v: v > 0, "a number > 0 (Mbit/s)"),
                                    ("latency_ms", lambda v: v >= 0, "a number >= 0 (ms)"),
                                    ("memory_bytes", lambda v: v > 0, "a number > 0 (bytes)"),
                                    ("step_overhead_ms", lambda v: v >= 0, "a number >= 0 (ms)")):
            value = getattr(d, field)
            if not (_number(value) and ok(value)):
                raise ValueError("device %s: %s must be %s, got %r" % (d.name, field, expected, value))
        if bool(d.medium) != (_number(d.medium_mbit) and d.medium_mbit > 0):
            raise ValueError("device %s: medium %r needs medium_mbit > 0 (Mbit/s) and the other way round, got %r"
                             % (d.name, d.medium, d.medium_mbit))
        for t in d.layers:
            if not (_number(t.compute_ms) and t.compute_ms >= 0):
                raise ValueError("device %s: layer %s compute_ms must be a number >= 0 (ms), got %r"
                                 % (d.name, t.name, t.compute_ms))
    rates: dict[str, tuple[str, float]] = {}
    for d in group:
        if d.medium and rates.setdefault(d.medium, (d.name, d.medium_mbit))[1] != d.medium_mbit:
            raise ValueError("devices %s and %s share medium %r but give it different rates: %r and %r Mbit/s"
                             % (rates[d.medium][0], d.name, d.medium, rates[d.medium][1], d.medium_mbit))


@dataclasses.dataclass(frozen=True)
class LayerCoeffs:
    """The cost terms of one split dim on one group (see the module docstring).

    full_ms: per device, ms of the whole layer at the planned batch.
    recv_ms_per_unit: per device, ms to move one unit's output activations (whole batch) over its link
      (either direction: it receives the others' units and sends its own to each peer).
    hop_ms: latency of the direct gather.
    in_ms: per device, ms to move the whole input tensor (whole batch) over its link (0: the first layer).
    medium_out, medium_in: shared media's weights (``media``) for the output's gather and the input
      gradient's reduce-scatter; () when no device of the group is on a shared medium.
    reduce_ms: the backward reduce-scatter of the input gradient with the previous layer split evenly
      (``reduce_scatter_ms`` for given shares).
    allreduce_ms: the backward ring allreduce of the input gradient (the previous layer replicated).
    mem_per_unit: bytes one unit costs a device: 12 * params_per_unit + batch * out / U.
    split_ms: per device, what splitting the layer adds beyond compute and transfers: (k-1) x its
      ``DeviceProfile.split_overhead_ms`` (0 unless calibrated, and alone), charged with its gather.
    """

    name: str
    units: int
    full_ms: tuple[float, ...]
    recv_ms_per_unit: tuple[float, ...]
    hop_ms: float
    reduce_ms: float
    allreduce_ms: float
    mem_per_unit: int
    split_ms: tuple[float, ...]
    in_ms: tuple[float, ...]
    medium_out: media.Weights = ()
    medium_in: media.Weights = ()

    def compute_ms(self, shares: Shares) -> tuple[float, ...]:
        if shares is None:
            return self.full_ms
        return tuple(f * s / self.units for f, s in zip(self.full_ms, shares))

    def gather_ms(self, shares: Shares) -> tuple[float, ...]:
        """Per device forward allconcat ms: the hop, its split overhead and the busier direction of its
        link (receiving the others' units, sending its own to k-1 peers); 0 when replicated or alone."""
        if shares is None or len(shares) == 1:
            return (0.0,) * len(self.full_ms)
        k, medium = len(shares), media.exchange_ms(self.medium_out, shares, self.units)
        return tuple(self.hop_ms + o + max(busier_direction_ms(r * self.units, s, self.units, k), medium)
                     for r, s, o in zip(self.recv_ms_per_unit, shares, self.split_ms))

    def reduce_scatter_ms(self, previous: Shares, previous_units: int) -> float:
        """The backward direct reduce-scatter of this layer's input gradient to the previous layer's
        ``previous`` shares (of ``previous_units``): the busiest link; ``reduce_ms`` when None."""
        if previous is None or not any(self.in_ms):
            return self.reduce_ms
        k = len(previous)
        links = max(busier_direction_ms(m, s, previous_units, k) for m, s in zip(self.in_ms, previous))
        return self.hop_ms + max(links, media.exchange_ms(self.medium_in, previous, previous_units))

    def comm_ms(self, shares: Shares) -> float:
        """Group communication of the layer: slowest allconcat + allreduce (0 when replicated)."""
        if shares is None or len(shares) == 1:
            return 0.0
        return max(self.gather_ms(shares)) + self.reduce_ms

    def layer_ms(self, shares: Shares) -> float:
        return max(self.compute_ms(shares)) + self.comm_ms(shares)


def layer_coeffs(group: Sequence[DeviceProfile], dim: DimStats, batch: int, profile_batch: int) -> LayerCoeffs:
    """The cost terms of ``dim`` on ``group``; compute scales linearly from the profile batch."""
    k = len(group)
    lat = [d.latency_ms for d in group]
    bw_min = min(d.bandwidth_mbit for d in group)
    scale = batch / profile_batch
    # The gather is direct: device i receives the other shares over its own link.
    recv = tuple(transfer_ms(batch * dim.out_bytes / dim.units, d.bandwidth_mbit) for d in group)
    in_elements = batch * dim.in_bytes // FLOAT_BYTES
    medium_in = media.exchange_weights(group, batch * dim.in_bytes)
    reduce_ms = max((k - 1) / k * transfer_ms(batch * dim.in_bytes, bw_min),
                    media.exchange_ms(medium_in, None, 1)) + direct_latency_ms(lat)
    allreduce_ms = (max(2 * (k - 1) / k * transfer_ms(batch * dim.in_bytes, bw_min),
                        media.ring_ms(group, batch * dim.in_bytes))
                    + allreduce_latency_ms(lat, in_elements))
    in_ms = tuple(transfer_ms(batch * dim.in_bytes, d.bandwidth_mbit) for d in group)
    if dim.in_bytes == 0:  # the first layer: its input (the image) has no gradient, no allreduce at all
        reduce_ms = allreduce_ms = 0.0
    mem = int(math.ceil(MEMORY.per_unit_bytes(dim, batch)))
    return LayerCoeffs(dim.name, dim.units, tuple(d.layer_ms(dim.name) * scale for d in group), recv,
                       direct_latency_ms(lat), reduce_ms, allreduce_ms, mem,
                       tuple((k - 1) * d.split_overhead_ms for d in group), in_ms,
                       media.exchange_weights(group, batch * dim.out_bytes), medium_in)


def base_ms(group: Sequence[DeviceProfile], stats: ModelStats) -> float:
    """Per-step cost outside the layers: start the device, fetch its input batch (see above)."""
    own = max(2 * d.step_overhead_ms + transfer_ms(stats.batch * stats.image_bytes, d.bandwidth_mbit) for d in group)
    return max(own, max(2 * d.step_overhead_ms for d in group) + input_medium_ms(group, stats))


def input_medium_ms(group: Sequence[DeviceProfile], stats: ModelStats) -> float:
    """ms the busiest shared medium needs for every device's input batch (0 without media)."""
    return media.each_once_ms(group, [stats.batch * stats.image_bytes] * len(group))


def fixed_memory_bytes(stats: ModelStats, k: int, ranks: Sequence[int] | None = None) -> list[int]:
    """Bytes each device of a ``k``-device group holds whatever the shares: the runtime, the (gathered)
    inputs of all layers and the whole tensors the engine's placer puts on it (by its rank,
    ``masters.ranks``; default: the devices in rank order), an engine replica's anchors and residuals
    included when the step is an engine replica's (``stats.engine``); the first device also hosts
    the group's session (``session_bytes``)."""
    by_rank = MEMORY.fixed_bytes_by_rank(stats, k, replica=stats.engine)
    fixed = by_rank if ranks is None else [by_rank[r] for r in ranks]
    return [fixed[0] + session_bytes(stats, k)] + fixed[1:]


def group_fixed_memory_bytes(stats: ModelStats, group: Sequence[DeviceProfile]) -> list[int]:
    """``fixed_memory_bytes`` of ``group``'s devices, each at its rank (``masters.ranks``)."""
    return fixed_memory_bytes(stats, len(group), masters.ranks(group))


def session_bytes(stats: ModelStats, k: int = 1) -> int:
    """Bytes the session of a ``k``-device group's step adds to the group's first device: an engine
    replica's group process opens it there; a plain layout's is the chief's (`edgemesh train
    --cluster`), 0."""
    return MEMORY.session_host_bytes(stats, k) if stats.engine else 0


def held_memory_bytes(stats: ModelStats, held: Sequence[Sequence[int]], ranks: Sequence[int] | None = None
                      ) -> list[int]:
    """Predicted peak bytes of each device of a ``len(held)``-device group, device i holding
    ``held[i][l]`` units of ``stats.dims[l]`` (the memory terms of ``predict.predict``, without a
    profile; ``ranks`` as ``fixed_memory_bytes``)."""
    per_unit = [int(math.ceil(MEMORY.per_unit_bytes(d, stats.batch))) for d in stats.dims]
    fixed = fixed_memory_bytes(stats, len(held), ranks)
    return [f + sum(u * h for u, h in zip(per_unit, units)) for f, units in zip(fixed, held)]


def ps_sync_ms(group: Sequence[DeviceProfile], stats: ModelStats, ps_bandwidth_mbit: float = math.inf) -> float:
    """Push + pull of the whole model: each device moves the whole tensors it masters
    (``masters.pushed_bytes``) over its own link, the whole model through the PS's link."""
    parts = masters.pushed_bytes(group, stats)
    part = max(transfer_ms(b, d.bandwidth_mbit) for b, d in zip(parts, group))
    part = max(part, media.each_once_ms(group, parts))
    return 2 * max(part, transfer_ms(stats.param_bytes, ps_bandwidth_mbit)) + 2 * max(d.latency_ms for d in group)


def ps_link_ms(stats: ModelStats, ps_bandwidth_mbit: float = math.inf) -> float:
    """Push + pull of the whole model through the PS's own link alone (ms): what a group's commit puts on
    the link every group's commits cross (``engine.core.job_cost`` shares it between groups)."""
    return 2 * transfer_ms(stats.param_bytes, ps_bandwidth_mbit)


def copy_ms(group: Sequence[DeviceProfile], stats: ModelStats, assignment: Mapping[str, Shares]) -> float:
    """A round's masters <-> slices copies of a group of two or more devices (the engine's, after the pull
    and before the push; ``masters.copied_bytes``): each device sends the shares of the tensors it
    masters and receives its own shares of the others', over its full-duplex link; the busier direction
    of the busiest device sets each copy's time, paid twice. 0 for one device."""
    sent, received = masters.copied_bytes(group, stats, assignment)
    if not any(sent):
        return 0.0
    one = max(transfer_ms(max(r, t), d.bandwidth_mbit) for r, t, d in zip(received, sent, group))
    one = max(one, media.each_once_ms(group, [r + t for r, t in zip(received, sent)]))
    return 2 * (one + 2 * max(d.latency_ms for d in group))


@dataclasses.dataclass(frozen=True)
class LayerPrediction:
    """One split dim of ``units``: its shares (None = replicated), per device compute ms, group comm ms."""

    name: str
    units: int
    shares: tuple[int, ...] | None
    compute_ms: tuple[float, ...]
    comm_ms: float

    @property
    def ms(self) -> float:
        return max(self.compute_ms) + self.comm_ms


@dataclasses.dataclass(frozen=True)
class GroupPrediction:
    """Predicted cost of one group per step; per-device tuples are in group order.

    step_ms: the simulated step (``simulate``, by ``predict.predict``); ``separable_ms`` is the layer-by-layer bound.
    compute_ms / comm_ms: per device sums over layers (comm: own allconcat receive + allreduce).
    memory_bytes: per device, see the module docstring.
    ps_sync_ms: push + pull of the whole model to the parameter server (per commit).
    copy_ms: a round's masters <-> slices copies (``copy_ms``; 0 for a group that splits nothing).
    ps_link_ms: the push + pull of the whole model through the PS's own link alone (``ps_link_ms``):
      the part of a commit that groups committing at the same time share.
    """

    devices: tuple[str, ...]
    step_ms: float
    compute_ms: tuple[float, ...]
    comm_ms: tuple[float, ...]
    memory_bytes: tuple[int, ...]
    ps_sync_ms: float
    layers: tuple[LayerPrediction, ...]
    separable_ms: float = 0.0
    copy_ms: float = 0.0
    ps_link_ms: float = 0.0

    @property
    def commit_ms(self) -> float:
        """A commit's cost as the engine runs it (ms): the push and pull and the round's copies."""
        return self.ps_sync_ms + self.copy_ms
