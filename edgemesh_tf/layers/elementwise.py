"""Per-element and merging layers: activation, add (residual), concat (channels)."""
from __future__ import annotations

from typing import Sequence

from edgemesh_tf.layers.graph import Tensor, add_layer
from edgemesh_tf.layers.kind import LayerKind, Shape, elementwise_flops, register

ACTIVATIONS = {
    "relu": lambda tf, x: tf.nn.relu(x),
    "relu6": lambda tf, x: tf.nn.relu6(x),
    "leaky_relu": lambda tf, x: tf.nn.leaky_relu(x, alpha=0.2),
    "elu": lambda tf, x: tf.nn.elu(x),
    "selu": lambda tf, x: tf.nn.selu(x),
    "gelu": lambda tf, x: 0.5 * x * (1.0 + tf.math.erf(x / 1.4142135623730951)),  # tf.compat.v1.nn has no gelu
    "swish": lambda tf, x: tf.nn.silu(x),
    "silu": lambda tf, x: tf.nn.silu(x),
    "sigmoid": lambda tf, x: tf.sigmoid(x),
    "tanh": lambda tf, x: tf.tanh(x),
    "softplus": lambda tf, x: tf.nn.softplus(x),
    "linear": lambda tf, x: x,
}
"""Activation name -> fn(tf, x). Keras's names; leaky_relu's slope is 0.2 (Keras's default)."""


def check_activation(name) -> str | None:
    if name is None or name == "linear":
        return None
    if name not in ACTIVATIONS:
        raise ValueError("unknown activation %r; expected one of %s" % (name, sorted(ACTIVATIONS)))
    return name


def apply_tf(tf, name: str | None, x):
    return x if name is None else ACTIVATIONS[name](tf, x)


def apply_mtf(ctx, name: str | None, x, label: str):
    """The activation on an mtf tensor, slice by slice (any layout)."""
    if name is None:
        return x
    tf = ctx.tf
    return ctx.slice_op(lambda t: ACTIVATIONS[name](tf, t), [x], x.shape, label)


class Activation(LayerKind):
    kind, follows = "activation", True
    flops = staticmethod(elementwise_flops)

    def output_shape(self, layer, in_shapes: Sequence[Shape]) -> Shape:
        check_activation(layer.get("fn"))
        return in_shapes[0]

    def tf_forward(self, tf, layer, xs, w, ctx):
        return apply_tf(tf, check_activation(layer.get("fn")), xs[0])

    def mtf_forward(self, ctx, layer, xs):
        return apply_mtf(ctx, check_activation(layer.get("fn")), xs[0], layer.name)


class Add(LayerKind):
    kind = "add"
    flops = staticmethod(elementwise_flops)

    def output_shape(self, layer, in_shapes):
        if len(in_shapes) < 2 or any(s != in_shapes[0] for s in in_shapes):
            raise ValueError("needs two or more inputs of one shape, got %s" % list(in_shapes))
        return in_shapes[0]

    def tf_forward(self, tf, layer, xs, w, ctx):
        return tf.add_n(xs)

    def mtf_forward(self, ctx, layer, xs):
        xs = ctx.common_channels(xs, None)
        out = xs[0]
        for x in xs[1:]:
            out = out + x
        return out


class Concat(LayerKind):
    kind = "concat"

    def flops(self, layer, in_shapes):
        return 0  # a copy

    def output_shape(self, layer, in_shapes):
        if len(in_shapes) < 2 or any(s[:-1] != in_shapes[0][:-1] for s in in_shapes):
            raise ValueError("needs two or more inputs that differ only in channels, got %s" % list(in_shapes))
        return in_shapes[0][:-1] + (sum(s[-1] for s in in_shapes),)

    def tf_forward(self, tf, layer, xs, w, ctx):
        return tf.concat(xs, axis=-1)

    def mtf_forward(self, ctx, layer, xs):
        dim = layer.name + "_all"
        return ctx.mtf.concat(ctx.common_channels(xs, dim), dim, name=layer.name)


register(Activation())
register(Add())
register(Concat())


def activation(x: Tensor, fn: str, name: str | None = None) -> Tensor:
    """``fn`` (a name in ``ACTIVATIONS``: relu, relu6, leaky_relu, elu, selu, gelu, swish, sigmoid,
    tanh, softplus, linear) applied to every element; runs on split channels without a gather."""
    return add_layer("activation", [x], name, fn=fn)


def relu(x: Tensor, name: str | None = None) -> Tensor:
    """max(x, 0) element-wise."""
    return activation(x, "relu", name)


def add(xs: Sequence[Tensor], name: str | None = None) -> Tensor:
    """Element-wise sum of tensors of one shape (a residual connection). Each input is gathered
    whole first; the sum runs on every device."""
    return add_layer("add", list(xs), name)


def concat(xs: Sequence[Tensor], name: str | None = None) -> Tensor:
    """The inputs' channels side by side (same spatial shape); inputs are gathered whole first."""
    return add_layer("concat", list(xs), name)
