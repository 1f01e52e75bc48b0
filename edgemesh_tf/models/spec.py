"""Architectures as plain data, interpreted by the mtf builder (``mesh_model``) and the plain-TF
builder (``plain_tf``), so both build exactly the same network with the same initial weights."""
from __future__ import annotations

import dataclasses
import zlib


@dataclasses.dataclass(frozen=True)
class LayerSpec:
    """One layer.

    kind: "conv" (3x3 SAME conv + bias + ReLU, then 2x2 max-pool if ``pool``), "res" (residual
      block of two 3x3 convs with ``units`` equal to its input channels), "dense" (+ bias, ReLU
      unless ``relu`` is False). The first dense layer flattens its input.
    name: the layer's name; it is also the name of its splittable output dim (filters or units).
      A "res" block has two splittable dims, ``name + "a"`` and ``name + "b"``.
    """

    kind: str
    name: str
    units: int
    pool: bool = False
    relu: bool = True


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A CNN for ``image_shape`` = (H, W, C) inputs and ``num_classes`` outputs."""

    name: str
    image_shape: tuple[int, int, int]
    num_classes: int
    layers: tuple[LayerSpec, ...]

    def split_dims(self) -> dict[str, int]:
        """Dims a layout may split (besides "batch"): {dim name: size}."""
        dims = {}
        for layer in self.layers:
            if layer.kind == "res":
                dims[layer.name + "a"] = layer.units
                dims[layer.name + "b"] = layer.units
            else:
                dims[layer.name] = layer.units
        return dims

    def dims(self, batch_size: int) -> dict[str, int]:
        return {"batch": batch_size, **self.split_dims()}


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


def initializer(tf, seed: int, var_name: str, fan_in: int | None, gain: float = RELU_GAIN):
    """The TF initializer of variable ``var_name`` ("layer/kernel"): zeros for a bias (``fan_in``
    None), else normal with ``kernel_stddev`` and a name-derived seed. ``tf`` is tf.compat.v1."""
    if fan_in is None:
        return tf.zeros_initializer()
    return tf.random_normal_initializer(stddev=kernel_stddev(fan_in, gain), seed=init_seed(seed, var_name))
