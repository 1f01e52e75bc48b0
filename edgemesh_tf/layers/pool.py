"""Pooling: max and average over windows of any size and stride, and global average pooling.
All work per channel, so they run on the slices of a split input and keep its split."""
from __future__ import annotations

from edgemesh_tf.layers.graph import Tensor, add_layer
from edgemesh_tf.layers.kind import LayerKind, padding_of, pair, register, spatial, window_out


def _window(layer, in_shape):
    h, w, c = spatial(in_shape, layer.kind)
    kh, kw = pair(layer.get("pool"), "pool size")
    sh, sw = pair(layer.get("strides") or (kh, kw), "strides")
    pad = padding_of(layer.get("padding"))
    return (kh, kw), (sh, sw), pad, (window_out(h, kh, sh, pad), window_out(w, kw, sw, pad), c)


class Pool2D(LayerKind):
    follows = True

    def __init__(self, kind: str, tf_name: str):
        self.kind, self._tf_name = kind, tf_name

    def output_shape(self, layer, in_shapes):
        return _window(layer, in_shapes[0])[3]

    def flops(self, layer, in_shapes):
        (kh, kw), _, _, (oh, ow, c) = _window(layer, in_shapes[0])
        return kh * kw * oh * ow * c

    def _fn(self, tf, layer, in_shape):
        ksize, strides, pad, _ = _window(layer, in_shape)
        op = getattr(tf.nn, self._tf_name)
        return lambda t: op(t, list(ksize), list(strides), pad)

    def tf_forward(self, tf, layer, xs, w, ctx):
        return self._fn(tf, layer, tuple(xs[0].shape.as_list()[1:]))(xs[0])

    def mtf_forward(self, ctx, layer, xs):
        mtf, x = ctx.mtf, xs[0]
        in_shape = tuple(d.size for d in x.shape.dims[-3:])
        oh, ow, _ = _window(layer, in_shape)[3]
        shape = x.shape.dims[:-3] + [mtf.Dimension("h", oh), mtf.Dimension("w", ow), x.shape.dims[-1]]
        return ctx.slice_op(self._fn(ctx.tf, layer, in_shape), [x], shape, layer.name)


class GlobalAvgPool(LayerKind):
    kind, follows = "global_avg_pool", True

    def output_shape(self, layer, in_shapes):
        return (spatial(in_shapes[0], "global_avg_pool")[2],)

    def flops(self, layer, in_shapes):
        h, w, c = in_shapes[0]
        return h * w * c

    def tf_forward(self, tf, layer, xs, w, ctx):
        return tf.reduce_mean(xs[0], axis=[1, 2])

    def mtf_forward(self, ctx, layer, xs):
        x, tf = xs[0], ctx.tf
        return ctx.slice_op(lambda t: tf.reduce_mean(t, axis=[-3, -2]), [x], x.shape.dims[:-3] + x.shape.dims[-1:],
                            layer.name)


register(Pool2D("max_pool2d", "max_pool2d"))
register(Pool2D("avg_pool2d", "avg_pool2d"))
register(GlobalAvgPool())


def max_pool2d(x: Tensor, pool=2, strides=None, padding: str = "valid", name: str | None = None) -> Tensor:
    """Maximum over ``pool`` windows (an int or (h, w)) moved by ``strides`` (default: the window);
    padding "valid" or "same" as in TensorFlow. Per channel. Returns (H', W', C) per example."""
    return add_layer("max_pool2d", [x], name, pool=pool, strides=strides, padding=padding)


def avg_pool2d(x: Tensor, pool=2, strides=None, padding: str = "valid", name: str | None = None) -> Tensor:
    """Mean over windows, as ``max_pool2d`` (with "same", padding is left out of the mean, as in TF)."""
    return add_layer("avg_pool2d", [x], name, pool=pool, strides=strides, padding=padding)


def global_avg_pool(x: Tensor, name: str | None = None) -> Tensor:
    """Mean over height and width: (H, W, C) -> (C,) per example; per channel, keeps the split."""
    return add_layer("global_avg_pool", [x], name)
