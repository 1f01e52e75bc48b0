"""Batch normalisation and dropout: per channel, they run on split channels and keep the split."""
from __future__ import annotations

import math

from edgemesh_tf.layers.graph import Tensor, add_layer
from edgemesh_tf.layers.kind import LayerKind, Weight, register


class BatchNorm(LayerKind):
    """y = gamma·(x − mean)/sqrt(var + eps) + beta per channel. Training uses the batch's mean and
    variance over batch, height and width (summed across devices when the batch is split) and moves
    the running statistics toward them (``momentum`` of the old value kept); evaluation uses the
    running statistics."""

    kind, follows, has_modes = "batch_norm", True, True

    def output_shape(self, layer, in_shapes):
        m = layer.get("momentum")
        if not 0.0 <= m < 1.0:
            raise ValueError("momentum must be in [0, 1), got %r" % m)
        if layer.get("epsilon") <= 0:
            raise ValueError("epsilon must be positive, got %r" % layer.get("epsilon"))
        return in_shapes[0]

    def weights(self, layer, in_shapes):
        c = (in_shapes[0][-1],)
        return (Weight("gamma", c, "ones"), Weight("beta", c, "zeros"),
                Weight("moving_mean", c, "zeros", trainable=False), Weight("moving_variance", c, "ones", trainable=False))

    def flops(self, layer, in_shapes):
        return 4 * math.prod(in_shapes[0])

    def tf_forward(self, tf, layer, xs, w, ctx):
        x, eps, m = xs[0], layer.get("epsilon"), layer.get("momentum")
        if not ctx.training:
            return tf.nn.batch_normalization(x, w["moving_mean"], w["moving_variance"], w["beta"], w["gamma"], eps)
        mean, var = tf.nn.moments(x, axes=list(range(len(x.shape) - 1)))
        ctx.update(layer, "moving_mean", m * w["moving_mean"] + (1 - m) * tf.stop_gradient(mean))
        ctx.update(layer, "moving_variance", m * w["moving_variance"] + (1 - m) * tf.stop_gradient(var))
        return tf.nn.batch_normalization(x, mean, var, w["beta"], w["gamma"], eps)

    def mtf_forward(self, ctx, layer, xs):
        mtf, x = ctx.mtf, xs[0]
        eps, m = layer.get("epsilon"), layer.get("momentum")
        channels = x.shape.dims[-1]
        w = {wt.name: ctx.variable(layer, wt, [channels])
             for wt in self.weights(layer, [tuple(d.size for d in x.shape.dims[1:])])}
        if ctx.training:
            mean = mtf.reduce_mean(x, output_shape=[channels])
            var = mtf.reduce_mean(mtf.square(x - mean), output_shape=[channels])
            ctx.update(w["moving_mean"], w["moving_mean"] * m + mtf.stop_gradient(mean) * (1 - m))
            ctx.update(w["moving_variance"], w["moving_variance"] * m + mtf.stop_gradient(var) * (1 - m))
        else:
            mean, var = w["moving_mean"], w["moving_variance"]
        return (x - mean) * mtf.rsqrt(var + eps) * w["gamma"] + w["beta"]


class Dropout(LayerKind):
    """Zeroes each element with probability ``rate`` while training and scales the rest by
    1/(1 − rate); the identity at evaluation."""

    kind, follows, has_modes = "dropout", True, True

    def flops(self, layer, in_shapes):
        return 2 * sum(math.prod(s) for s in in_shapes)

    def output_shape(self, layer, in_shapes):
        if not 0.0 <= layer.get("rate") < 1.0:
            raise ValueError("rate must be in [0, 1), got %r" % layer.get("rate"))
        return in_shapes[0]

    def tf_forward(self, tf, layer, xs, w, ctx):
        return tf.nn.dropout(xs[0], rate=layer.get("rate")) if ctx.training and layer.get("rate") else xs[0]

    def mtf_forward(self, ctx, layer, xs):
        if not ctx.training or not layer.get("rate"):
            return xs[0]
        return ctx.mtf.dropout(xs[0], True, rate=layer.get("rate"), name=layer.name)


register(BatchNorm())
register(Dropout())


def batch_norm(x: Tensor, *, momentum: float = 0.9, epsilon: float = 1e-3, name: str | None = None) -> Tensor:
    """Batch normalisation per channel (see ``BatchNorm``); variables ``name/gamma``, ``name/beta``
    and the running ``name/moving_mean`` and ``name/moving_variance``, all [C], split with the
    channels they follow."""
    return add_layer("batch_norm", [x], name, momentum=float(momentum), epsilon=float(epsilon))


def dropout(x: Tensor, rate: float, *, name: str | None = None) -> Tensor:
    """Dropout of ``rate`` while training (see ``Dropout``); per element."""
    return add_layer("dropout", [x], name, rate=float(rate))
