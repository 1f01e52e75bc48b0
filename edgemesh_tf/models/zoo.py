"""Reference CNNs (VGG-style and ResNet-style) for 8x8x1, 28x28x1 and 32x32x3 inputs."""
from __future__ import annotations

from edgemesh_tf.models.spec import LayerSpec, ModelSpec

MODEL_NAMES = ("vgg", "vgg_wide", "resnet")


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


def _resnet_layers(h: int) -> tuple[LayerSpec, ...]:
    if h <= 8:
        return (LayerSpec("conv", "stem", 32), LayerSpec("res", "res1", 32),
                LayerSpec("conv", "conv2", 64, pool=True), LayerSpec("res", "res2", 64),
                LayerSpec("dense", "fc1", 128))
    return (LayerSpec("conv", "stem", 32, pool=True), LayerSpec("res", "res1", 32),
            LayerSpec("conv", "conv2", 64, pool=True), LayerSpec("res", "res2", 64),
            LayerSpec("conv", "conv3", 128, pool=True), LayerSpec("dense", "fc1", 256))


def get_model(name: str, image_shape: tuple[int, int, int], num_classes: int) -> ModelSpec:
    """The reference model ``name`` ("vgg" or "resnet") for images of (H, W, C)."""
    h, w, c = image_shape
    if (h, w) not in ((8, 8), (28, 28), (32, 32)):
        raise ValueError("model %r: image shape %s not supported; expected 8x8, 28x28 or 32x32" % (name, image_shape))
    if name == "vgg":
        layers = _vgg_layers(h)
    elif name == "vgg_wide":
        layers = _vgg_wide_layers(h)
    elif name == "resnet":
        layers = _resnet_layers(h)
    else:
        raise ValueError("unknown model %r; expected one of %s" % (name, list(MODEL_NAMES)))
    return ModelSpec(name, (h, w, c), num_classes, layers + (LayerSpec("dense", "logits", num_classes, relu=False),))
