"""The same ``ModelSpec`` in plain TensorFlow: the reference for correctness tests and benchmarks.

``splits`` writes a filter split by hand, as a user would without edgemesh: for a split layer the
kernel is split by sizes, the layer runs once per device on its part, and the outputs are
concatenated.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from edgemesh_tf.layers import INPUT, KINDS, Layer, ModelSpec
from edgemesh_tf.layers.init import initializer
from edgemesh_tf.mesh.compat import tf


class PlainModel:
    """Variables and forward pass of ``spec``; variables are named like the mtf model's masters
    (``<layer>/<weight>``). ``training``: batch statistics and dropout; ``updates`` then holds the
    state assignments (batch norm's running statistics) a training step must run."""

    def __init__(self, spec: ModelSpec, seed: int,
                 splits: Mapping[str, Sequence[int]] | None = None, devices: Sequence[str] = ()):
        self.spec = spec
        self.seed = seed
        self.splits = dict(splits or {})
        self.devices = list(devices)
        self.variables: dict[str, tf.Variable] = {}
        self.training = True
        self.updates: list = []

    def _weights(self, layer: Layer) -> dict:
        out = {}
        for w in KINDS[layer.kind].weights(layer, self.spec.input_shapes(layer)):
            full = "%s/%s" % (layer.name, w.name)
            if full not in self.variables:
                with tf.variable_scope(layer.name, reuse=tf.AUTO_REUSE):
                    self.variables[full] = tf.get_variable(w.name, list(w.shape), trainable=w.trainable,
                                                           initializer=initializer(tf, self.seed, full, w))
            out[w.name] = self.variables[full]
        return out

    def update(self, layer: Layer, weight: str, value) -> None:
        self.updates.append(self.variables["%s/%s" % (layer.name, weight)].assign(value))

    def _layer(self, layer: Layer, xs: list):
        kind, w = KINDS[layer.kind], self._weights(layer)
        sizes = self.splits.get(layer.name)
        if not sizes:
            return kind.tf_forward(tf, layer, xs, w, self)
        parts = {n: tf.split(v, list(sizes), axis=-1) for n, v in w.items()}
        outs = []
        for i, dev in enumerate(self.devices):
            with tf.device(dev):
                outs.append(kind.tf_forward(tf, layer, xs, {n: p[i] for n, p in parts.items()}, self))
        return tf.concat(outs, axis=-1)

    def logits(self, images, training: bool = True):
        self.training = training
        values = {INPUT: images}
        for layer in self.spec.layers:
            values[layer.name] = self._layer(layer, [values[i] for i in layer.inputs])
        return values[self.spec.layers[-1].name]

    def loss(self, images, labels):
        """Mean softmax cross-entropy (training mode); labels int32 [batch]."""
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=self.logits(images)))
