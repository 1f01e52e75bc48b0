"""The same ``ModelSpec`` in plain TensorFlow: the reference for correctness tests and benchmarks.

``splits`` writes a filter split by hand, as a user would without edgemesh: for a split layer the
kernel is split by sizes, one conv (or matmul) runs per device, and the outputs are concatenated.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

from edgemesh_tf.mesh.compat import tf
from edgemesh_tf.models.spec import LINEAR_GAIN, RELU_GAIN, RESIDUAL_GAIN, ModelSpec, initializer


class PlainModel:
    """Variables and forward pass of ``spec``; variables are named like the mtf model's masters."""

    def __init__(self, spec: ModelSpec, seed: int,
                 splits: Mapping[str, Sequence[int]] | None = None, devices: Sequence[str] = ()):
        self.spec = spec
        self.seed = seed
        self.splits = dict(splits or {})
        self.devices = list(devices)
        self.variables: dict[str, tf.Variable] = {}

    def _var(self, scope: str, name: str, shape, fan_in: int | None, gain: float = RELU_GAIN):
        full = "%s/%s" % (scope, name)
        if full not in self.variables:
            init = initializer(tf, self.seed, full, fan_in, gain)
            with tf.variable_scope(scope, reuse=tf.AUTO_REUSE):
                self.variables[full] = tf.get_variable(name, shape, initializer=init)
        return self.variables[full]

    def _split_apply(self, name: str, fn, kernel, bias):
        """fn(kernel_part) per device, concatenated on the last axis, plus bias."""
        sizes = self.splits.get(name)
        if not sizes:
            return fn(kernel) + bias
        parts = tf.split(kernel, list(sizes), axis=-1)
        outs = []
        for dev, part in zip(self.devices, parts):
            with tf.device(dev):
                outs.append(fn(part))
        return tf.concat(outs, axis=-1) + bias

    def _conv(self, x, name: str, units: int, gain: float = RELU_GAIN):
        cin = x.shape.as_list()[-1]
        k = self._var(name, "kernel", [3, 3, cin, units], 9 * cin, gain)
        b = self._var(name, "bias", [units], None)
        return self._split_apply(name, lambda kk: tf.nn.conv2d(x, kk, [1, 1, 1, 1], "SAME"), k, b)

    def _dense(self, x, name: str, units: int, gain: float):
        cin = x.shape.as_list()[-1]
        w = self._var(name, "kernel", [cin, units], cin, gain)
        b = self._var(name, "bias", [units], None)
        return self._split_apply(name, lambda ww: tf.matmul(x, ww), w, b)

    def logits(self, images):
        x = images
        for layer in self.spec.layers:
            if layer.kind == "conv":
                x = tf.nn.relu(self._conv(x, layer.name, layer.units))
                if layer.pool:
                    x = tf.nn.max_pool2d(x, 2, 2, "VALID")
            elif layer.kind == "res":
                h = tf.nn.relu(self._conv(x, layer.name + "a", layer.units))
                x = tf.nn.relu(x + self._conv(h, layer.name + "b", layer.units, RESIDUAL_GAIN))
            else:
                if x.shape.ndims > 2:
                    x = tf.reshape(x, [-1, math.prod(x.shape.as_list()[1:])])
                x = self._dense(x, layer.name, layer.units, RELU_GAIN if layer.relu else LINEAR_GAIN)
                if layer.relu:
                    x = tf.nn.relu(x)
        return x

    def loss(self, images, labels):
        """Mean softmax cross-entropy; labels int32 [batch]."""
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=self.logits(images)))
