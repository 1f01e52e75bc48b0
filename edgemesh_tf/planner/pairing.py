"""Would pairing consecutive layers pay? Bytes a split group moves per example, with and without.

Today every split layer gathers its output (after ReLU and pooling) and its gradient is
reduce-scattered back: 2 * out_l bytes per example per layer (times (k-1)/k per device of a k-device
group, the same factor below). Pairing layers a, b (Megatron's column- then row-parallel) keeps a's
output split, lets b read its share of a's channels and sums b's partial outputs by an allreduce
before b's ReLU: 2 * act_b (b's output before pooling). The gradient of an allreduce is the identity,
so b's output gradient needs no collective, but a pair's output is then replicated on every device:
the layer after it computes only partial gradients of that input, which an allreduce must sum
(2 * in_l) where a gather's gradient was a reduce-scatter counted with the gather.

``best_pairing`` chooses the pairs exactly (a dynamic programme over the layers). For the zoo's
VGG-class models it saves a few per cent of the bytes at most (``tests/planner/test_planner_pairing.py``;
the figures in docs/DESIGN.md): a pair's allreduce moves b's output before pooling, which is as large
as the two gathers it replaces. Pairing is therefore not built.
Pure: bytes per example from ``ModelStats``, no profile.
"""
from __future__ import annotations

import functools
from typing import Sequence

from edgemesh_tf.planner.model_stats import DimStats


def unpaired_bytes(dims: Sequence[DimStats]) -> int:
    """Bytes per example every split layer's gather and its reduce-scatter move (the logits are not gathered)."""
    return sum(2 * d.out_bytes for d in dims[:-1])


def best_pairing(dims: Sequence[DimStats]) -> tuple[int, tuple[tuple[str, str], ...]]:
    """(bytes per example, pairs) of the cheapest choice of disjoint consecutive pairs (none: unpaired)."""
    dims = tuple(dims)

    @functools.lru_cache(maxsize=None)
    def cost(l: int, input_replicated: bool) -> tuple[int, tuple[tuple[str, str], ...]]:
        if l >= len(dims):
            return 0, ()
        d = dims[l]
        # a replicated input's gradient arrives as partial sums on every device: an allreduce
        in_grad = 2 * d.in_bytes if input_replicated else 0
        rest, pairs = cost(l + 1, False)
        best = (in_grad + (2 * d.out_bytes if l < len(dims) - 1 else 0) + rest, pairs)
        if l + 1 < len(dims):
            rest, pairs = cost(l + 2, True)
            best = min(best, (in_grad + 2 * dims[l + 1].act_bytes + rest, ((d.name, dims[l + 1].name),) + pairs))
        return best

    return cost(0, False)
