"""Builds a ``ModelSpec`` with mtf named dimensions.

Every layer's output channels (or units) is its own dim, named after the layer, so a layout can
split each layer's filters with its own sizes. After ReLU and pooling the output is gathered
(renamed to ``<name>_all``, which no layout splits): the next layer then reads every channel. This
is EdgeMesh's filter division: each device computes a subset of the filters on the full input.
"""
from __future__ import annotations

import math

from edgemesh_tf.mesh.compat import mtf, tf
from edgemesh_tf.models.spec import LINEAR_GAIN, RELU_GAIN, RESIDUAL_GAIN, LayerSpec, ModelSpec, initializer


def _variable(mesh, scope: str, name: str, dims, seed: int, fan_in: int | None, gain: float = RELU_GAIN):
    init = initializer(tf, seed, "%s/%s" % (scope, name), fan_in, gain)
    with tf.variable_scope(scope, reuse=tf.AUTO_REUSE):
        return mtf.get_variable(mesh, name, mtf.Shape(dims), initializer=init)


def _gather(x, dim_name: str):
    return mtf.rename_dimension(x, dim_name, dim_name + "_all")


def _conv(x, name: str, units: int, seed: int, gain: float = RELU_GAIN):
    """3x3 SAME conv + bias, output channels in dim ``name``."""
    in_dim = x.shape.dims[-1]
    out_dim = mtf.Dimension(name, units)
    kernel = _variable(x.mesh, name, "kernel", [mtf.Dimension("fh", 3), mtf.Dimension("fw", 3), in_dim, out_dim],
                       seed, 9 * in_dim.size, gain)
    bias = _variable(x.mesh, name, "bias", [out_dim], seed, None)
    y = mtf.Conv2dOperation(x, kernel, [1, 1, 1, 1], "SAME", name=name + "/conv").outputs[0]
    return y + bias


def _dense(x, name: str, units: int, seed: int, gain: float):
    in_dim = x.shape.dims[-1]
    out_dim = mtf.Dimension(name, units)
    w = _variable(x.mesh, name, "kernel", [in_dim, out_dim], seed, in_dim.size, gain)
    b = _variable(x.mesh, name, "bias", [out_dim], seed, None)
    return mtf.einsum([x, w], output_shape=x.shape.dims[:-1] + [out_dim], name=name + "/matmul") + b


def _flatten(x):
    batch, rest = x.shape.dims[0], x.shape.dims[1:]
    return mtf.reshape(x, mtf.Shape([batch, mtf.Dimension("flat", math.prod(d.size for d in rest))]))


def _layer(x, layer: LayerSpec, seed: int):
    if layer.kind == "conv":
        y = mtf.relu(_conv(x, layer.name, layer.units, seed))
        if layer.pool:
            y = mtf.layers.max_pool2d(y, ksize=(2, 2), name=layer.name + "/pool")
        return _gather(y, layer.name)
    if layer.kind == "res":
        channel = x.shape.dims[-1].name
        if x.shape.dims[-1].size != layer.units:
            raise ValueError("res block %r: input has %d channels, block has %d" % (layer.name, x.shape.dims[-1].size, layer.units))
        h = _gather(mtf.relu(_conv(x, layer.name + "a", layer.units, seed)), layer.name + "a")
        h = mtf.rename_dimension(_conv(h, layer.name + "b", layer.units, seed, RESIDUAL_GAIN), layer.name + "b", channel)
        return mtf.relu(x + h)
    if layer.kind == "dense":
        if x.shape.ndims > 2:
            x = _flatten(x)
        y = _dense(x, layer.name, layer.units, seed, RELU_GAIN if layer.relu else LINEAR_GAIN)
        return _gather(mtf.relu(y) if layer.relu else y, layer.name)
    raise ValueError("layer %r: unknown kind %r; expected conv, res or dense" % (layer.name, layer.kind))


def logits(spec: ModelSpec, images, seed: int):
    """mtf logits [batch, logits_all] for ``images`` [batch, h, w, c]."""
    x = images
    for layer in spec.layers:
        x = _layer(x, layer, seed)
    return x


def loss_and_logits(spec: ModelSpec, mesh, tf_images, tf_labels, batch_size: int, seed: int):
    """Imports a batch and returns (mean cross-entropy scalar, logits), both mtf tensors.

    tf_images: float32 [batch, H, W, C]; tf_labels: int32 [batch].
    """
    h, w, c = spec.image_shape
    batch = mtf.Dimension("batch", batch_size)
    images = mtf.import_tf_tensor(mesh, tf_images, mtf.Shape(
        [batch, mtf.Dimension("h", h), mtf.Dimension("w", w), mtf.Dimension("c_in", c)]))
    labels = mtf.import_tf_tensor(mesh, tf_labels, mtf.Shape([batch]))
    out = logits(spec, images, seed)
    classes = out.shape.dims[-1]
    xent = mtf.layers.softmax_cross_entropy_with_logits(out, mtf.one_hot(labels, classes, dtype=out.dtype), classes)
    return mtf.reduce_mean(xent), out
