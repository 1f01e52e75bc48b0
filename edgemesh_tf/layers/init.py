"""Initial values of a layer's variables, identical in every layout and in the plain-TF model."""
from __future__ import annotations

import zlib

from edgemesh_tf.layers.kind import Weight


def init_seed(seed: int, var_name: str) -> int:
    """Op-level seed of a variable's initializer: depends on the name only, never on op order, so
    every layout (and the plain-TF model) starts from identical weights."""
    return (zlib.crc32(var_name.encode()) + 7919 * seed) % (2 ** 31 - 1)


def kernel_stddev(fan_in: int, gain: float) -> float:
    """Std-dev of a kernel's normal initializer: sqrt(gain / fan_in).

    gain 2 (He) before a ReLU, 1 for the logits, small for the last conv of a residual block so
    that each block starts close to the identity (deep stacks otherwise start with huge logits).
    """
    return (gain / fan_in) ** 0.5


RELU_GAIN, LINEAR_GAIN, RESIDUAL_GAIN = 2.0, 1.0, 0.1


def initializer(tf, seed: int, var_name: str, weight: Weight):
    """The TF initializer of ``weight`` named ``var_name`` ("layer/kernel"). ``tf`` is tf.compat.v1."""
    if weight.init == "zeros":
        return tf.zeros_initializer()
    if weight.init == "ones":
        return tf.ones_initializer()
    return tf.random_normal_initializer(stddev=kernel_stddev(weight.fan_in, weight.gain),
                                        seed=init_seed(seed, var_name))
