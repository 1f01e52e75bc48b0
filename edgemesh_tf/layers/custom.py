"""Plain mtf in a model: ``mtf_op`` wraps an element-wise mtf function (and its TF twin, which the
profiler and the plain-TF reference run) as a layer. It has no split dim: its input is gathered
whole and it runs replicated on every device of the group."""
from __future__ import annotations

import math
from typing import Callable

from edgemesh_tf.layers.graph import Tensor, add_layer
from edgemesh_tf.layers.kind import LayerKind, register


class MtfOp(LayerKind):
    kind = "mtf_op"

    def output_shape(self, layer, in_shapes):
        if not callable(layer.get("mtf_fn")) or not callable(layer.get("tf_fn")):
            raise ValueError("mtf_fn and tf_fn must be functions (mtf.Tensor -> mtf.Tensor, tf.Tensor -> tf.Tensor)")
        return in_shapes[0]

    def flops(self, layer, in_shapes):
        return int(layer.get("flops_per_element") * math.prod(in_shapes[0]))

    def tf_forward(self, tf, layer, xs, w, ctx):
        return layer.get("tf_fn")(xs[0])

    def mtf_forward(self, ctx, layer, xs):
        x = ctx.gathered(xs[0])
        y = layer.get("mtf_fn")(x)
        if not isinstance(y, ctx.mtf.Tensor) or y.shape != x.shape:
            raise ValueError("mtf_op %r: mtf_fn must return an mtf.Tensor of its input's shape %s, got %r"
                             % (layer.name, x.shape, y))
        return y


register(MtfOp())


def mtf_op(x: Tensor, mtf_fn: Callable, tf_fn: Callable, flops_per_element: float = 1.0,
           name: str | None = None) -> Tensor:
    """Plain Mesh TensorFlow inside a model: ``mtf_fn(x)`` on the mtf tensor (x gathered whole,
    replicated on every device; it must keep x's shape, e.g. ``lambda t: mtf.square(t) * 0.5``),
    ``tf_fn`` the same in TF for the profiler and the reference. A layout cannot split it (the
    error names it). Such a model is loaded from its file by every process of a job (its functions
    cannot be saved as JSON)."""
    return add_layer("mtf_op", [x], name, mtf_fn=mtf_fn, tf_fn=tf_fn, flops_per_element=float(flops_per_element))
