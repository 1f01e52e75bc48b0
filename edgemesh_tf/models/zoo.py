"""Reference CNNs (VGG-style and ResNet-style) for 8x8, 28x28 and 32x32 inputs (any channels),
written with the mesh API (``edgemesh_tf.layers``) as a user's own model would be."""
from __future__ import annotations

from typing import Callable

from edgemesh_tf import layers as L
from edgemesh_tf.layers import ModelSpec
from edgemesh_tf.layers.init import LINEAR_GAIN, RESIDUAL_GAIN

WIDTHS = {"vgg_m": ("vgg", 1.25)}
"""Registered width variants: name -> (family, multiplier of every hidden layer's filters/units).
``vgg_m`` on 32x32x1 (digits32): 1,039,490 parameters, a 4.16 MB dense float32 push (3.3 s at
10 Mbit/s); plain ``vgg`` there has 665,962 (2.1 s). Count them with
``edgemesh_tf.planner.model_stats.model_stats(spec, 1).param_bytes`` (bytes, 4 per parameter)."""
MODEL_NAMES = ("vgg", "vgg_wide", "resnet", "vgg16") + tuple(WIDTHS)
VGG16_CONVS = ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512))


def conv_block(x: L.Tensor, name: str, filters: int, pool: bool = False) -> L.Tensor:
    """3x3 SAME conv + ReLU, then a 2x2 max-pool if ``pool``."""
    x = L.conv2d(x, name, filters, activation="relu")
    return L.max_pool2d(x, 2, name=name + "_pool") if pool else x


def residual_block(x: L.Tensor, name: str) -> L.Tensor:
    """Two 3x3 convs (split dims ``name + "a"`` and ``name + "b"``, as many filters as x has
    channels), the second started small so the block starts close to the identity; relu(x + h)."""
    h = L.conv2d(x, name + "a", x.channels, activation="relu")
    h = L.conv2d(h, name + "b", x.channels, gain=RESIDUAL_GAIN)
    return L.relu(L.add([x, h], name=name + "_add"), name=name + "_relu")


def _vgg(x, w, small):
    if small:  # 8x8 -> 4 -> 2
        x = conv_block(x, "conv1", w(32), pool=True)
        x = conv_block(x, "conv2", w(64), pool=True)
        return [("fc1", w(128))], x
    for name, f, pool in (("conv1", 32, False), ("conv2", 32, True), ("conv3", 64, False), ("conv4", 64, True),
                          ("conv5", 128, True)):
        x = conv_block(x, name, w(f), pool)
    return [("fc1", w(256))], x


def _vgg_wide(x, w, small):
    """VGG's classifier shape: the conv stack of ``vgg`` and two wide dense layers, so that most of
    the memory is weights (as in VGG-16, whose dense layers hold ~90% of its parameters)."""
    _, x = _vgg(x, w, small)
    return [("fc1", w(2048)), ("fc2", w(2048))], x


def _vgg16(x, w, small):
    """VGG-16's thirteen 3x3 convs (64-512 filters, a 2x2 pool after each block) and a 512-unit dense
    layer, as VGG-16 is trained on 32x32 images: ~15 M parameters (~60 MB float32) in the convs, so
    the weights, not the activations, decide whether a device can hold it. 32x32 inputs only."""
    if x.shape[:2] != (32, 32):
        raise ValueError("model 'vgg16': needs 32x32 images (five 2x2 pools), got %dx%d" % x.shape[:2])
    for b, block in enumerate(VGG16_CONVS):
        for i, units in enumerate(block):
            x = conv_block(x, "conv%d_%d" % (b + 1, i + 1), w(units), pool=(i == len(block) - 1))
    return [("fc1", w(512))], x


def _resnet(x, w, small):
    x = conv_block(x, "stem", w(32), pool=not small)
    x = residual_block(x, "res1")
    x = conv_block(x, "conv2", w(64), pool=True)
    x = residual_block(x, "res2")
    if small:
        return [("fc1", w(128))], x
    x = conv_block(x, "conv3", w(128), pool=True)
    return [("fc1", w(256))], x


_FAMILIES: dict[str, Callable] = {"vgg": _vgg, "vgg_wide": _vgg_wide, "resnet": _resnet, "vgg16": _vgg16}


def get_model(name: str, image_shape: tuple[int, int, int], num_classes: int, width: float = 1.0) -> ModelSpec:
    """The reference model ``name`` (one of MODEL_NAMES) for images of (H, W, C).

    ``width`` multiplies the filters/units of every hidden layer (on top of a registered variant's
    own multiplier in WIDTHS; at least 2, so a layer can be split); the logits keep ``num_classes``.
    """
    h, w_, c = image_shape
    if (h, w_) not in ((8, 8), (28, 28), (32, 32)):
        raise ValueError("model %r: image shape %s not supported; expected 8x8, 28x28 or 32x32" % (name, image_shape))
    family, factor = WIDTHS.get(name, (name, 1.0))
    if family not in _FAMILIES:
        raise ValueError("unknown model %r; expected one of %s" % (name, list(MODEL_NAMES)))
    if not (isinstance(width, (int, float)) and 0 < width <= 16):
        raise ValueError("model %r: width must be a number in (0, 16], got %r" % (name, width))
    scale = factor * width

    def units(n: int) -> int:
        return n if scale == 1.0 else max(2, int(round(n * scale)))

    def model(images: L.Tensor, classes: int) -> L.Tensor:
        dense, x = _FAMILIES[family](images, units, h <= 8)
        x = L.flatten(x)
        for layer, n in dense:
            x = L.dense(x, layer, n, activation="relu")
        return L.dense(x, "logits", classes, gain=LINEAR_GAIN)

    return L.build_model(model, tuple(image_shape), num_classes, name=name)
