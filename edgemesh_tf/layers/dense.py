"""Fully connected layers: dense (its units are a split dim) and flatten."""
from __future__ import annotations

import math

from edgemesh_tf.layers import elementwise
from edgemesh_tf.layers.graph import Tensor, add_layer
from edgemesh_tf.layers.kind import LayerKind, Weight, register


def _features(in_shape, what) -> int:
    if len(in_shape) != 1:
        raise ValueError("%s needs features (F,) per example, got shape %s: flatten() or global_avg_pool() first"
                         % (what, in_shape))
    return in_shape[0]


class Dense(LayerKind):
    kind, splits = "dense", True

    def output_shape(self, layer, in_shapes):
        _features(in_shapes[0], "dense")
        elementwise.check_activation(layer.get("activation"))
        return (layer.get("units"),)

    def units(self, layer, in_shapes):
        return layer.get("units")

    def weights(self, layer, in_shapes):
        f, u = _features(in_shapes[0], "dense"), layer.get("units")
        kernel = Weight("kernel", (f, u), fan_in=f, gain=layer.get("gain"))
        return (kernel, Weight("bias", (u,), "zeros")) if layer.get("use_bias") else (kernel,)

    def flops(self, layer, in_shapes):
        return 2 * _features(in_shapes[0], "dense") * layer.get("units")

    def tf_forward(self, tf, layer, xs, w, ctx):
        y = tf.matmul(xs[0], w["kernel"])
        if "bias" in w:
            y = y + w["bias"]
        return elementwise.apply_tf(tf, layer.get("activation"), y)

    def mtf_forward(self, ctx, layer, xs):
        mtf = ctx.mtf
        x = ctx.gathered(xs[0])
        out_dim = mtf.Dimension(layer.name, layer.get("units"))
        weights = {wt.name: wt for wt in self.weights(layer, [(x.shape.dims[-1].size,)])}
        kernel = ctx.variable(layer, weights["kernel"], [x.shape.dims[-1], out_dim])
        y = mtf.einsum([x, kernel], output_shape=x.shape.dims[:-1] + [out_dim], name=layer.name + "/matmul")
        if "bias" in weights:
            y = y + ctx.variable(layer, weights["bias"], [out_dim])
        return elementwise.apply_mtf(ctx, layer.get("activation"), y, layer.name + "_act")


class Flatten(LayerKind):
    kind = "flatten"

    def output_shape(self, layer, in_shapes):
        return (math.prod(in_shapes[0]),)

    def flops(self, layer, in_shapes):
        return 0

    def tf_forward(self, tf, layer, xs, w, ctx):
        return tf.reshape(xs[0], [-1, math.prod(xs[0].shape.as_list()[1:])])

    def mtf_forward(self, ctx, layer, xs):
        mtf = ctx.mtf
        x = ctx.gathered(xs[0])
        batch, rest = x.shape.dims[0], x.shape.dims[1:]
        if not rest or len(rest) == 1:
            return x
        return mtf.reshape(x, mtf.Shape([batch, mtf.Dimension("flat", math.prod(d.size for d in rest))]))


register(Dense())
register(Flatten())


def dense(x: Tensor, name: str, units: int, activation: str | None = None, use_bias: bool = True,
          gain: float = 2.0) -> Tensor:
    """A fully connected layer with ``units`` outputs: the split dim ``name`` (each device computes
    its units from the whole input, gathered first). Variables ``name/kernel`` [F, units] and
    ``name/bias`` [units]. ``x``: (F,) per example (``flatten`` a feature map first). ``activation``
    and ``gain`` as in ``conv2d``; for the logits use ``gain=1.0`` and no activation.
    Returns (units,) per example."""
    if not isinstance(units, int) or isinstance(units, bool) or units < 1:
        raise ValueError("dense %r: units must be a positive int, got %r" % (name, units))
    return add_layer("dense", [x], name, units=units, activation=activation, use_bias=bool(use_bias),
                     gain=float(gain))


def flatten(x: Tensor, name: str | None = None) -> Tensor:
    """(H, W, C) -> (H·W·C,) per example, in H, W, C order (as Keras's Flatten); gathers x first."""
    return add_layer("flatten", [x], name)
