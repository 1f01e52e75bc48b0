"""Per-layer workloads of a model: the forward+backward pass of each splittable layer dim alone.

Each layer's input is generated on the device itself (stateful random op, so grappler cannot fold
it), the layer runs forward, then backward to its weights and (except for the first layer) to its
input, as one slice of the real training step does. ``reps`` copies are chained in one op so that a
remote device's network round trip is paid once per run, not once per layer execution.
"""
from __future__ import annotations

import dataclasses
import math

from edgemesh_tf.models.spec import ModelSpec


@dataclasses.dataclass(frozen=True)
class LayerShape:
    """A splittable dim's layer. in_shape: [batch, H, W, C] (conv) or [batch, features] (dense)."""

    name: str
    kind: str            # "conv" or "dense"
    in_shape: tuple[int, ...]
    units: int
    pool: bool
    first: bool          # the model's first layer: no gradient to its input


def layer_shapes(spec: ModelSpec, batch: int) -> list[LayerShape]:
    """The layer of every splittable dim of ``spec``, in order, with its input shape at ``batch``."""
    h, w, c = spec.image_shape
    shape: tuple[int, ...] = (batch, h, w, c)
    out = []
    for layer in spec.layers:
        if layer.kind == "conv":
            out.append(LayerShape(layer.name, "conv", shape, layer.units, layer.pool, not out))
            hh, ww = (shape[1] // 2, shape[2] // 2) if layer.pool else (shape[1], shape[2])
            shape = (batch, hh, ww, layer.units)
        elif layer.kind == "res":
            out.append(LayerShape(layer.name + "a", "conv", shape, layer.units, False, not out))
            out.append(LayerShape(layer.name + "b", "conv", shape, layer.units, False, False))
        else:
            if len(shape) > 2:
                shape = (batch, math.prod(shape[1:]))
            out.append(LayerShape(layer.name, "dense", shape, layer.units, False, not out))
            shape = (batch, layer.units)
    return out


def build_layer_op(tf, layer: LayerShape, device: str, reps: int):
    """An op (scalar) that runs ``reps`` forward+backward passes of ``layer`` on ``device``."""
    with tf.device(device):
        total = tf.constant(0.0)
        cin = layer.in_shape[-1]
        kshape = [3, 3, cin, layer.units] if layer.kind == "conv" else [cin, layer.units]
        for _ in range(reps):
            x = tf.random.uniform(layer.in_shape) + 0.0 * total  # chains the reps in sequence
            k = tf.random.normal(kshape, stddev=0.05)
            b = tf.zeros([layer.units])
            if layer.kind == "conv":
                y = tf.nn.relu(tf.nn.conv2d(x, k, [1, 1, 1, 1], "SAME") + b)
                if layer.pool:
                    y = tf.nn.max_pool2d(y, 2, 2, "VALID")
            else:
                y = tf.nn.relu(tf.matmul(x, k) + b)
            wrt = [k, b] if layer.first else [k, b, x]
            grads = tf.gradients(tf.reduce_sum(y * 1e-3), wrt)
            total = total + tf.add_n([tf.reduce_sum(g) for g in grads])
        return total


def build_transfer_op(tf, nbytes: int, src: str, dst: str):
    """An op on ``dst`` that needs ``nbytes`` of float32 made on ``src``: one transfer src -> dst."""
    with tf.device(src):
        x = tf.random.uniform([max(1, nbytes // 4)])
    with tf.device(dst):
        return tf.reduce_sum(x)


def build_noop_op(tf, device: str):
    """A trivial op on ``device``: the fixed cost of one run there (round trip, scheduling)."""
    with tf.device(device):
        return tf.random.uniform([])
