"""Convolutions: conv2d (its filters are a split dim) and depthwise_conv2d (per channel)."""
from __future__ import annotations

from edgemesh_tf.layers import elementwise
from edgemesh_tf.layers.graph import Tensor, add_layer
from edgemesh_tf.layers.kind import LayerKind, Weight, padding_of, pair, register, spatial, window_out


def _geometry(layer, in_shape, what):
    h, w, c = spatial(in_shape, what)
    kh, kw = pair(layer.get("kernel"), "kernel size")
    sh, sw = pair(layer.get("strides"), "strides")
    dh, dw = pair(layer.get("dilation"), "dilation")
    pad = padding_of(layer.get("padding"))
    if (sh, sw) != (1, 1) and (dh, dw) != (1, 1):
        raise ValueError("strides %s with dilation %s: TensorFlow's CPU convolution takes one or the other"
                         % ((sh, sw), (dh, dw)))
    if what == "depthwise_conv2d" and sh != sw:
        raise ValueError("strides %s: TensorFlow's depthwise convolution takes the same stride in rows and "
                         "columns" % ((sh, sw),))
    oh, ow = window_out(h, kh, sh, pad, dh), window_out(w, kw, sw, pad, dw)
    return (h, w, c), (kh, kw), [1, sh, sw, 1], [1, dh, dw, 1], pad, (oh, ow)


def _conv2d(tf, x, kernel, strides, pad, dilations):
    """``tf.nn.conv2d``; a dilated one through ``tf.nn.convolution`` (space to batch), since the CPU
    kernel of the conv2d op's input gradient refuses any dilation above 1 (TF 2.21) and that one does not."""
    if dilations == [1, 1, 1, 1]:
        return tf.nn.conv2d(x, kernel, strides, pad)
    return tf.nn.convolution(x, kernel, strides=strides[1:3], padding=pad, dilations=dilations[1:3])


class Conv2D(LayerKind):
    kind, splits = "conv2d", True

    def output_shape(self, layer, in_shapes):
        _, _, _, _, _, (oh, ow) = _geometry(layer, in_shapes[0], "conv2d")
        elementwise.check_activation(layer.get("activation"))
        return (oh, ow, layer.get("filters"))

    def units(self, layer, in_shapes):
        return layer.get("filters")

    def weights(self, layer, in_shapes):
        (_, _, c), (kh, kw), *_ = _geometry(layer, in_shapes[0], "conv2d")
        f = layer.get("filters")
        kernel = Weight("kernel", (kh, kw, c, f), fan_in=kh * kw * c, gain=layer.get("gain"))
        return (kernel, Weight("bias", (f,), "zeros")) if layer.get("use_bias") else (kernel,)

    def flops(self, layer, in_shapes):
        (_, _, c), (kh, kw), _, _, _, (oh, ow) = _geometry(layer, in_shapes[0], "conv2d")
        return 2 * kh * kw * c * layer.get("filters") * oh * ow

    def tf_forward(self, tf, layer, xs, w, ctx):
        _, _, strides, dilations, pad, _ = _geometry(layer, xs[0].shape.as_list()[1:], "conv2d")
        y = _conv2d(tf, xs[0], w["kernel"], strides, pad, dilations)
        if "bias" in w:
            y = y + w["bias"]
        return elementwise.apply_tf(tf, layer.get("activation"), y)

    def mtf_forward(self, ctx, layer, xs):
        mtf = ctx.mtf
        x = ctx.gathered(xs[0])
        in_shape = tuple(d.size for d in x.shape.dims[-3:])
        _, (kh, kw), strides, dilations, pad, (oh, ow) = _geometry(layer, in_shape, "conv2d")
        out_dim = mtf.Dimension(layer.name, layer.get("filters"))
        weights = {wt.name: wt for wt in self.weights(layer, [in_shape])}
        kernel = ctx.variable(layer, weights["kernel"], [mtf.Dimension("fh", kh), mtf.Dimension("fw", kw),
                                                          x.shape.dims[-1], out_dim])
        tf = ctx.tf
        shape = x.shape.dims[:-3] + [mtf.Dimension("h", oh), mtf.Dimension("w", ow), out_dim]
        y = ctx.slice_op(lambda t, k: _conv2d(tf, t, k, strides, pad, dilations),
                         [x, kernel], shape, layer.name)
        if "bias" in weights:
            y = y + ctx.variable(layer, weights["bias"], [out_dim])
        return elementwise.apply_mtf(ctx, layer.get("activation"), y, layer.name + "_act")


def _depthwise(tf, x, kernel, strides, pad, dilations):
    """A depthwise convolution of x [..., C] with kernel [kh, kw, C]. On one channel (a device's
    slice of an uneven split can hold one) it is the same convolution done by ``conv2d``: oneDNN's
    depthwise kernel aborts there ("could not create a primitive descriptor for the reorder
    primitive") on a 1x1 kernel when x comes from another oneDNN op (TF 2.21)."""
    if x.shape[-1] == 1:
        return _conv2d(tf, x, kernel[..., None], strides, pad, dilations)
    return tf.nn.depthwise_conv2d(x, kernel[..., None], strides, pad, dilations=dilations[1:3])


class DepthwiseConv2D(LayerKind):
    kind, follows = "depthwise_conv2d", True

    def output_shape(self, layer, in_shapes):
        _, _, _, _, _, (oh, ow) = _geometry(layer, in_shapes[0], "depthwise_conv2d")
        elementwise.check_activation(layer.get("activation"))
        return (oh, ow, in_shapes[0][-1])

    def weights(self, layer, in_shapes):
        (_, _, c), (kh, kw), *_ = _geometry(layer, in_shapes[0], "depthwise_conv2d")
        kernel = Weight("kernel", (kh, kw, c), fan_in=kh * kw, gain=layer.get("gain"))
        return (kernel, Weight("bias", (c,), "zeros")) if layer.get("use_bias") else (kernel,)

    def flops(self, layer, in_shapes):
        (_, _, c), (kh, kw), _, _, _, (oh, ow) = _geometry(layer, in_shapes[0], "depthwise_conv2d")
        return 2 * kh * kw * c * oh * ow

    def tf_forward(self, tf, layer, xs, w, ctx):
        _, _, strides, dilations, pad, _ = _geometry(layer, xs[0].shape.as_list()[1:], "depthwise_conv2d")
        y = _depthwise(tf, xs[0], w["kernel"], strides, pad, dilations)
        if "bias" in w:
            y = y + w["bias"]
        return elementwise.apply_tf(tf, layer.get("activation"), y)

    def mtf_forward(self, ctx, layer, xs):
        mtf, tf, x = ctx.mtf, ctx.tf, xs[0]
        in_shape = tuple(d.size for d in x.shape.dims[-3:])
        _, (kh, kw), strides, dilations, pad, (oh, ow) = _geometry(layer, in_shape, "depthwise_conv2d")
        channels = x.shape.dims[-1]
        weights = {wt.name: wt for wt in self.weights(layer, [in_shape])}
        kernel = ctx.variable(layer, weights["kernel"], [mtf.Dimension("fh", kh), mtf.Dimension("fw", kw), channels])
        shape = x.shape.dims[:-3] + [mtf.Dimension("h", oh), mtf.Dimension("w", ow), channels]
        y = ctx.slice_op(lambda t, k: _depthwise(tf, t, k, strides, pad, dilations), [x, kernel], shape, layer.name)
        if "bias" in weights:
            y = y + ctx.variable(layer, weights["bias"], [channels])
        return elementwise.apply_mtf(ctx, layer.get("activation"), y, layer.name + "_act")


register(Conv2D())
register(DepthwiseConv2D())


def conv2d(x: Tensor, name: str, filters: int, kernel=3, strides=1, padding: str = "same", dilation=1,
           activation: str | None = None, use_bias: bool = True, gain: float = 2.0) -> Tensor:
    """A 2-D convolution with ``filters`` output channels: the split dim ``name``, which a layout may
    divide unevenly over a group's devices (each device computes its filters on the whole input).

    Args:
      x: a feature map (H, W, C) per example; gathered whole first if it is split.
      name: the layer's name and its split dim's; its variables are ``name/kernel`` [kh, kw, C,
        filters] and ``name/bias`` [filters].
      kernel, strides, dilation: an int or an (h, w) pair. Strides and dilation both above 1 is an error.
      padding: "same" (output ceil(H / stride)) or "valid" (no padding).
      activation: None or a name in ``ACTIVATIONS``, applied after the bias.
      gain: the kernel's initial std is sqrt(gain / fan_in) (2: He's, for ReLU).
    Returns:
      (H', W', filters) per example, split on ``name``.
    """
    if not isinstance(filters, int) or isinstance(filters, bool) or filters < 1:
        raise ValueError("conv2d %r: filters must be a positive int, got %r" % (name, filters))
    return add_layer("conv2d", [x], name, filters=filters, kernel=kernel, strides=strides, padding=padding,
                     dilation=dilation, activation=activation, use_bias=bool(use_bias), gain=float(gain))


def depthwise_conv2d(x: Tensor, kernel=3, strides=1, padding: str = "same", dilation=1,
                     activation: str | None = None, use_bias: bool = True, gain: float = 2.0,
                     name: str | None = None) -> Tensor:
    """One ``kernel`` filter per input channel (depth multiplier 1): per channel, so it runs on the
    slices of a split input and keeps its split. Variables ``name/kernel`` [kh, kw, C] and
    ``name/bias`` [C]; other arguments as ``conv2d``. Returns (H', W', C) per example."""
    return add_layer("depthwise_conv2d", [x], name, kernel=kernel, strides=strides, padding=padding,
                     dilation=dilation, activation=activation, use_bias=bool(use_bias), gain=float(gain))
