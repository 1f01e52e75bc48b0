"""Where an engine replica's whole (master) tensors live, and what that makes a group move per commit.

The engine places each master variable with mtf's ``BalancedVariablePlacer`` (training/graph.py): in
the order the variables are created (``ModelStats.tensors``: each layer's weights, then the momentum
slot of every trainable weight), each goes to the device holding the fewest master bytes so far, ties
to the smallest TF device string. A model whose bytes sit in one tensor (vgg_wide's fc2 kernel)
therefore has one device holding most of them, whatever the group's size. That device moves them:

  push, pull   each weight and state tensor between its master and the parameter server
  copies       after a pull, masters -> slices, each weight and state tensor: a split one's master sends
               every other device its share (U - s_m)/U of it, a replicated one's the whole tensor to
               each of the k - 1 others; before a push, slices -> masters: the same bytes the other
               way (a replicated tensor comes back from the group's first device only, at most the
               same bytes). Momentum slots stay in the slices (``TrainGraph.copy_weights_to_slices``)

Pure: no TensorFlow. tests/training/test_master_placement.py checks the placement against the graph's.
"""
from __future__ import annotations

import functools
import heapq
from typing import Mapping, Sequence

from edgemesh_tf.planner.model_stats import ModelStats
from edgemesh_tf.profiling.types import DeviceProfile

Shares = tuple[int, ...] | None
"""Units of a split dim per device, in group order; None = replicated (every device computes all)."""


@functools.lru_cache(maxsize=256)
def placed_ranks(nbytes: tuple[int, ...], k: int) -> tuple[int, ...]:
    """For tensors of ``nbytes`` (in creation order) over ``k`` devices: each tensor's device, as the
    rank of that device's TF device string among the group's (``BalancedVariablePlacer``'s heap of
    (bytes so far, device string))."""
    heap = [(0, rank) for rank in range(k)]
    out = []
    for n in nbytes:
        held, rank = heapq.heappop(heap)
        out.append(rank)
        heapq.heappush(heap, (held + n, rank))
    return tuple(out)


def ranks(group: Sequence[DeviceProfile]) -> tuple[int, ...]:
    """Each device's rank in ``group``: its position among the group's TF device strings, sorted (the
    order ``BalancedVariablePlacer`` breaks ties in)."""
    return ranks_of([d.device for d in group])


def ranks_of(keys: Sequence) -> tuple[int, ...]:
    """Each key's position among ``keys`` sorted (ties in order)."""
    out = [0] * len(keys)
    for rank, i in enumerate(sorted(range(len(keys)), key=lambda i: keys[i])):
        out[i] = rank
    return tuple(out)


def master_devices(group: Sequence[DeviceProfile], stats: ModelStats) -> tuple[int, ...]:
    """For each of ``stats.tensors``: the index in ``group`` of the device its master lives on."""
    by_rank = sorted(range(len(group)), key=lambda i: group[i].device)
    return tuple(by_rank[r] for r in placed_ranks(stats.tensor_bytes, len(group)))


def rank_bytes(stats: ModelStats, k: int) -> tuple[tuple[float, float], ...]:
    """Per rank (``ranks``) of a ``k``-device group: (bytes of every master it holds: weights, state
    and momentum; bytes of the weight and state ones alone, which it pushes, pulls and anchors)."""
    return _rank_bytes(stats.tensor_bytes, stats.momentum_mask, k)


@functools.lru_cache(maxsize=256)
def _rank_bytes(nbytes: tuple[int, ...], momentum: tuple[bool, ...], k: int) -> tuple[tuple[float, float], ...]:
    held = [[0.0, 0.0] for _ in range(k)]
    for n, slot, r in zip(nbytes, momentum, placed_ranks(nbytes, k)):
        held[r][0] += n
        if not slot:
            held[r][1] += n
    return tuple((whole, pushed) for whole, pushed in held)


def pushed_bytes(group: Sequence[DeviceProfile], stats: ModelStats) -> list[float]:
    """Per device of ``group``: the bytes of the weight and state tensors it masters, which a push sends
    and a pull receives over its link."""
    held = rank_bytes(stats, len(group))
    return [held[r][1] for r in ranks(group)]


def copied_bytes(group: Sequence[DeviceProfile], stats: ModelStats, assignment: Mapping[str, Shares]
                 ) -> tuple[list[float], list[float]]:
    """(sent, received) bytes per device of ``group`` in one masters -> slices copy of the weights and
    state (the module docstring), under ``assignment`` {dim: shares}; both zero in a group of one device."""
    k = len(group)
    sent, received = [0.0] * k, [0.0] * k
    if k < 2:
        return sent, received
    units = {d.name: d.units for d in stats.dims}
    for t, m in zip(stats.tensors, master_devices(group, stats)):
        if t.kind == "momentum":
            continue
        shares = assignment.get(t.dim) if t.dim else None
        for i in range(k):
            if i != m:
                part = t.nbytes * shares[i] / units[t.dim] if shares else t.nbytes
                sent[m] += part
                received[i] += part
    return sent, received
