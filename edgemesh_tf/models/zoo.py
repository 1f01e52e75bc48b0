"""Reference CNNs (VGG-style and ResNet-style) for 8x8, 28x28 and 32x32 inputs (any channels)."""
from __future__ import annotations

import dataclasses

from edgemesh_tf.models.spec import LayerSpec, ModelSpec

WIDTHS = {"vgg_m": ("vgg", 1.25)}
"""Registered width variants: name -> (family, multiplier of every hidden layer's filters/units).
``vgg_m`` on 32x32x1 (digits32): 1,039,490 parameters, a 4.16 MB dense float32 push (3.3 s at
10 Mbit/s); plain ``vgg`` there has 665,962 (2.1 s). Count them with
``edgemesh_tf.planner.model_stats.model_stats(spec, 1).param_bytes`` (bytes, 4 per parameter)."""
MODEL_NAMES = ("vgg", "vgg_wide", "resnet", "vgg16") + tuple(WIDTHS)


def _vgg_layers(h: int) -> tuple[LayerSpec, ...]:
    if h <= 8:  # 8x8 -> 4 -> 2
        return (LayerSpec("conv", "conv1", 32, pool=True), LayerSpec("conv", "conv2", 64, pool=True),
                LayerSpec("dense", "fc1", 128))
    return (LayerSpec("conv", "conv1", 32), LayerSpec("conv", "conv2", 32, pool=True),
            LayerSpec("conv", "conv3", 64), LayerSpec("conv", "conv4", 64, pool=True),
            LayerSpec("conv", "conv5", 128, pool=True), LayerSpec("dense", "fc1", 256))


def _vgg_wide_layers(h: int) -> tuple[LayerSpec, ...]:
    """VGG's classifier shape: the conv stack of ``vgg`` and two wide dense layers, so that most of
    the memory is weights (as in VGG-16, whose dense layers hold ~90% of its parameters)."""
    convs = tuple(layer for layer in _vgg_layers(h) if layer.kind == "conv")
    return convs + (LayerSpec("dense", "fc1", 2048), LayerSpec("dense", "fc2", 2048))


VGG16_CONVS = ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512))


def _vgg16_layers(h: int) -> tuple[LayerSpec, ...]:
    """VGG-16's thirteen 3x3 convs (64-512 filters, a 2x2 pool after each block) and a 512-unit dense
    layer, as VGG-16 is trained on 32x32 images: ~15 M parameters (~60 MB float32) in the convs, so
    the weights, not the activations, decide whether a device can hold it. 32x32 inputs only (five
    pools)."""
    if h != 32:
        raise ValueError("model 'vgg16': needs 32x32 images (five 2x2 pools), got %dx%d" % (h, h))
    convs = tuple(LayerSpec("conv", "conv%d_%d" % (b + 1, i + 1), units, pool=(i == len(block) - 1))
                  for b, block in enumerate(VGG16_CONVS) for i, units in enumerate(block))
    return convs + (LayerSpec("dense", "fc1", 512),)


def _resnet_layers(h: int) -> tuple[LayerSpec, ...]:
    if h <= 8:
        return (LayerSpec("conv", "stem", 32), LayerSpec("res", "res1", 32),
                LayerSpec("conv", "conv2", 64, pool=True), LayerSpec("res", "res2", 64),
                LayerSpec("dense", "fc1", 128))
    return (LayerSpec("conv", "stem", 32, pool=True), LayerSpec("res", "res1", 32),
            LayerSpec("conv", "conv2", 64, pool=True), LayerSpec("res", "res2", 64),
            LayerSpec("conv", "conv3", 128, pool=True), LayerSpec("dense", "fc1", 256))


_FAMILIES = {"vgg": _vgg_layers, "vgg_wide": _vgg_wide_layers, "resnet": _resnet_layers, "vgg16": _vgg16_layers}


def _widen(layers: tuple[LayerSpec, ...], width: float) -> tuple[LayerSpec, ...]:
    """Every layer's filters/units times ``width``, rounded (at least 2, so a layer can be split)."""
    return tuple(dataclasses.replace(layer, units=max(2, int(round(layer.units * width)))) for layer in layers)


def get_model(name: str, image_shape: tuple[int, int, int], num_classes: int, width: float = 1.0) -> ModelSpec:
    """The reference model ``name`` (one of MODEL_NAMES) for images of (H, W, C).

    ``width`` multiplies the filters/units of every hidden layer (on top of a registered variant's
    own multiplier in WIDTHS); the logits layer keeps ``num_classes``.
    """
    h, w, c = image_shape
    if (h, w) not in ((8, 8), (28, 28), (32, 32)):
        raise ValueError("model %r: image shape %s not supported; expected 8x8, 28x28 or 32x32" % (name, image_shape))
    family, factor = WIDTHS.get(name, (name, 1.0))
    if family not in _FAMILIES:
        raise ValueError("unknown model %r; expected one of %s" % (name, list(MODEL_NAMES)))
    if not (isinstance(width, (int, float)) and 0 < width <= 16):
        raise ValueError("model %r: width must be a number in (0, 16], got %r" % (name, width))
    layers = _FAMILIES[family](h)
    if factor * width != 1.0:
        layers = _widen(layers, factor * width)
    return ModelSpec(name, (h, w, c), num_classes, layers + (LayerSpec("dense", "logits", num_classes, relu=False),))

