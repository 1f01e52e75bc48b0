"""What a layer kind is: one object per kind that knows its shapes, weights, FLOPs and how to build
itself in plain TensorFlow and in Mesh TensorFlow. Everything that reads a model (the mtf builder,
the plain-TF reference, the profiler, the cost and memory model) asks the kind; nothing else
branches on a layer's kind.

Kinds are registered in ``KINDS`` by the modules that define them (``conv``, ``dense``, ``pool``,
``norm``, ``elementwise``); ``edgemesh_tf.layers`` imports them all. This module imports no
TensorFlow: builders receive the ``tf`` (tf.compat.v1) or mtf context they build in.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

Shape = tuple[int, ...]
"""A per-example shape: (H, W, C) for a feature map, (F,) for features."""


@dataclasses.dataclass(frozen=True)
class Weight:
    """A variable of a layer, named ``<layer>/<name>``.

    shape: full shape; its last axis runs over the layer's channels (its split dim, or the channels
      of the split input a per-channel layer follows), so a split divides it along that axis.
    init: "normal" (std sqrt(gain / fan_in), He's for gain 2), "zeros" or "ones".
    trainable: False for state a layer updates itself (batch norm's moving statistics); such
      state travels with the model (checkpoints, the parameter server) but gets no gradient.
    """

    name: str
    shape: Shape
    init: str = "normal"
    fan_in: int = 0
    gain: float = 2.0
    trainable: bool = True

    @property
    def size(self) -> int:
        return math.prod(self.shape)


class LayerKind:
    """One kind of layer. Subclasses set ``kind`` and the two flags and override the methods.

    splits: the layer owns a split dim named after it (a conv's filters, a dense layer's units):
      a layout may divide it unevenly over a group's devices; its input is gathered whole first.
    follows: the layer works per channel (batch norm, activations, pooling, dropout, depthwise
      conv): it runs on the slices of a split input and keeps its dim, so the gather waits for it.
    Neither: the layer needs whole inputs (flatten, add, concat) and runs replicated.
    """

    kind = ""
    splits = False
    follows = False
    has_modes = False  # behaves differently in training and evaluation (batch norm, dropout)

    def output_shape(self, layer, in_shapes: Sequence[Shape]) -> Shape:
        raise NotImplementedError

    def units(self, layer, in_shapes: Sequence[Shape]) -> int:
        """Size of the split dim (``splits`` kinds only)."""
        raise NotImplementedError

    def weights(self, layer, in_shapes: Sequence[Shape]) -> tuple[Weight, ...]:
        return ()

    def flops(self, layer, in_shapes: Sequence[Shape]) -> int:
        """Forward FLOPs per example (2 per multiply-add; 1 per element for cheap element-wise work).
        Every kind must say: the planner prices a model by it (``NoCost`` otherwise)."""
        raise NoCost("layer %r: its kind %r defines no cost (flops); the planner cannot price it"
                     % (layer.name, self.kind))

    def tf_forward(self, tf, layer, xs: list, w: dict, ctx) -> Any:
        """The layer in plain TF: ``xs`` [batch, ...] tensors, ``w`` {weight name: tensor} (a split
        layer may get a slice of its channels), ``ctx``: ``.training`` (bool) and
        ``.update(layer, weight name, new value)`` for state."""
        raise NotImplementedError

    def mtf_forward(self, ctx, layer, xs: list) -> Any:
        """The layer in mtf: ``xs`` mtf tensors [batch, ..., channels]; ``ctx`` (models/mesh_model.py)
        gathers split inputs, makes variables and records state updates."""
        raise NotImplementedError


class NoCost(ValueError):
    """A layer kind without a cost: the planner cannot price a model that holds it."""


def elementwise_flops(layer, in_shapes: Sequence[Shape]) -> int:
    """One FLOP per input element: activations, sums, pooling's cheap cousins."""
    return sum(math.prod(s) for s in in_shapes)


KINDS: dict[str, LayerKind] = {}


def register(kind: LayerKind) -> LayerKind:
    if kind.kind in KINDS:
        raise ValueError("layer kind %r is defined twice" % kind.kind)
    KINDS[kind.kind] = kind
    return kind


# -- shared arithmetic ---------------------------------------------------------------------------

def pair(value, what: str) -> tuple[int, int]:
    """An int or a pair of ints -> (a, b), each >= 1; ValueError naming ``what`` otherwise."""
    v = (value, value) if isinstance(value, int) else tuple(value) if isinstance(value, (tuple, list)) else None
    if v is None or len(v) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in v):
        raise ValueError("%s must be a positive int or a pair of them, got %r" % (what, value))
    return v


def padding_of(value) -> str:
    p = str(value).upper()
    if p not in ("SAME", "VALID"):
        raise ValueError("padding must be 'same' or 'valid', got %r" % (value,))
    return p


def window_out(size: int, window: int, stride: int, padding: str, dilation: int = 1) -> int:
    """Output length of a sliding window over ``size`` positions (TensorFlow's rule)."""
    span = (window - 1) * dilation + 1
    return -(-size // stride) if padding == "SAME" else -(-(size - span + 1) // stride)


def spatial(in_shape: Shape, what: str) -> tuple[int, int, int]:
    if len(in_shape) != 3:
        raise ValueError("%s needs a feature map (H, W, C) per example, got shape %s" % (what, in_shape))
    return in_shape
