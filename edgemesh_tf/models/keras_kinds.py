"""Keras layers and the mesh API's layer kinds, one entry per supported Keras class: how its config
becomes a layer of the mesh API (``to_spec``), how that layer becomes a Keras layer again
(``to_keras``), and how its weights move between the two (Keras's ``get_weights()`` order, arrays by
our names ``kernel``, ``bias``, ``gamma``, ``beta``, ``moving_mean``, ``moving_variance``).

``keras_in`` reads a Keras model through ``IN``; ``keras_out`` writes one through ``OUT``. No
TensorFlow or Keras is imported here: ``to_keras`` receives the ``keras`` module.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from edgemesh_tf.layers import ACTIVATIONS, Layer


class Unsupported(ValueError):
    """A Keras layer (or one of its settings) the mesh API has no layer for."""


def _pair(v) -> tuple[int, int]:
    return tuple(int(x) for x in v) if isinstance(v, (list, tuple)) else (int(v), int(v))


def _activation(name: Any) -> str | None:
    if name is None or name == "linear":
        return None
    if not isinstance(name, str) or name not in ACTIVATIONS:
        raise Unsupported("activation %r (expected one of %s, or softmax on the output layer)"
                          % (name, sorted(ACTIVATIONS)))
    return name


def _require(cfg: dict, **expected) -> None:
    for key, allowed in expected.items():
        if key in cfg and cfg[key] not in allowed:
            raise Unsupported("%s=%r (supported: %s)" % (key, cfg[key], " or ".join(repr(a) for a in allowed)))


def _channels_last(cfg: dict) -> None:
    _require(cfg, data_format=(None, "channels_last"))


@dataclasses.dataclass(frozen=True)
class KerasKind:
    """One Keras class and the mesh-API kind it maps to.

    to_spec(cfg) -> config of our layer (keyword arguments of ``layers.add_layer``); raises Unsupported.
    to_keras(keras, layer) -> the Keras layer for our ``layer``, named as it.
    weights_in(arrays) -> {our weight name: array}, from Keras's get_weights() list.
    weights_out(named) -> the list Keras's set_weights() takes.
    """

    keras_class: str
    kind: str
    to_spec: Callable[[dict], dict]
    to_keras: Callable[[Any, Layer], Any]
    weight_names: Callable[[Layer], tuple[str, ...]] = lambda layer: ()
    reshape_in: Callable[[str, np.ndarray], np.ndarray] = lambda name, a: a
    reshape_out: Callable[[str, np.ndarray], np.ndarray] = lambda name, a: a


def _kernel_bias(layer: Layer) -> tuple[str, ...]:
    return ("kernel", "bias") if layer.get("use_bias") else ("kernel",)


def _conv_in(cfg):
    _channels_last(cfg)
    _require(cfg, groups=(1,))
    return dict(filters=int(cfg["filters"]), kernel=_pair(cfg["kernel_size"]), strides=_pair(cfg["strides"]),
                padding=cfg["padding"], dilation=_pair(cfg.get("dilation_rate", 1)),
                activation=_activation(cfg.get("activation")), use_bias=bool(cfg.get("use_bias", True)), gain=2.0)


def _conv_out(keras, layer):
    return keras.layers.Conv2D(layer.get("filters"), _pair(layer.get("kernel")), strides=_pair(layer.get("strides")),
                               padding=layer.get("padding"), dilation_rate=_pair(layer.get("dilation")),
                               activation=layer.get("activation"), use_bias=layer.get("use_bias"), name=layer.name)


def _depthwise_in(cfg):
    _channels_last(cfg)
    _require(cfg, depth_multiplier=(1,))
    return dict(kernel=_pair(cfg["kernel_size"]), strides=_pair(cfg["strides"]), padding=cfg["padding"],
                dilation=_pair(cfg.get("dilation_rate", 1)), activation=_activation(cfg.get("activation")),
                use_bias=bool(cfg.get("use_bias", True)), gain=2.0)


def _depthwise_out(keras, layer):
    return keras.layers.DepthwiseConv2D(_pair(layer.get("kernel")), strides=_pair(layer.get("strides")),
                                        padding=layer.get("padding"), dilation_rate=_pair(layer.get("dilation")),
                                        activation=layer.get("activation"), use_bias=layer.get("use_bias"),
                                        name=layer.name)


def _dense_in(cfg):
    return dict(units=int(cfg["units"]), activation=_activation(cfg.get("activation")),
                use_bias=bool(cfg.get("use_bias", True)), gain=2.0)


def _pool_in(cfg):
    _channels_last(cfg)
    strides = cfg.get("strides")
    return dict(pool=_pair(cfg["pool_size"]), strides=None if strides is None else _pair(strides),
                padding=cfg["padding"])


def _pool_out(cls):
    def build(keras, layer):
        strides = layer.get("strides")
        return getattr(keras.layers, cls)(_pair(layer.get("pool")), strides=None if strides is None else _pair(strides),
                                          padding=layer.get("padding"), name=layer.name)
    return build


def _global_pool_in(cfg):
    _channels_last(cfg)
    _require(cfg, keepdims=(False,))
    return {}


def _bn_in(cfg):
    axis = cfg.get("axis", -1)
    if axis not in (-1, 3, [-1], [3]):
        raise Unsupported("axis=%r (supported: the channel axis, -1)" % (axis,))
    _require(cfg, center=(True,), scale=(True,), renorm=(False,), synchronized=(False,))
    return dict(momentum=float(cfg["momentum"]), epsilon=float(cfg["epsilon"]))


def _dropout_in(cfg):
    if cfg.get("noise_shape") is not None:
        raise Unsupported("noise_shape=%r (supported: None)" % (cfg["noise_shape"],))
    return dict(rate=float(cfg["rate"]))


def _relu_in(cfg):
    _require(cfg, negative_slope=(0, 0.0), threshold=(0, 0.0), max_value=(None, 6, 6.0))
    return dict(fn="relu" if cfg.get("max_value") is None else "relu6")


def _relu_out(keras, layer):
    return keras.layers.ReLU(max_value=6.0 if layer.get("fn") == "relu6" else None, name=layer.name)


def _flatten_in(cfg):
    _channels_last(cfg)
    return {}


def _concat_in(cfg):
    _require(cfg, axis=(-1, 3))
    return {}


def _simple(cls, **kw):
    return lambda keras, layer: getattr(keras.layers, cls)(name=layer.name, **kw)


def _depthwise_reshape_in(name, a):
    return a[..., 0] if name == "kernel" else a     # Keras: [kh, kw, C, 1]; ours: [kh, kw, C]


def _depthwise_reshape_out(name, a):
    return a[..., None] if name == "kernel" else a


_BN_WEIGHTS = ("gamma", "beta", "moving_mean", "moving_variance")

ENTRIES = (
    KerasKind("Conv2D", "conv2d", _conv_in, _conv_out, _kernel_bias),
    KerasKind("DepthwiseConv2D", "depthwise_conv2d", _depthwise_in, _depthwise_out, _kernel_bias,
              _depthwise_reshape_in, _depthwise_reshape_out),
    KerasKind("Dense", "dense", _dense_in,
              lambda keras, layer: keras.layers.Dense(layer.get("units"), activation=layer.get("activation"),
                                                      use_bias=layer.get("use_bias"), name=layer.name), _kernel_bias),
    KerasKind("MaxPooling2D", "max_pool2d", _pool_in, _pool_out("MaxPooling2D")),
    KerasKind("AveragePooling2D", "avg_pool2d", _pool_in, _pool_out("AveragePooling2D")),
    KerasKind("GlobalAveragePooling2D", "global_avg_pool", _global_pool_in, _simple("GlobalAveragePooling2D")),
    KerasKind("Flatten", "flatten", _flatten_in, _simple("Flatten")),
    KerasKind("Dropout", "dropout", _dropout_in,
              lambda keras, layer: keras.layers.Dropout(layer.get("rate"), name=layer.name)),
    KerasKind("BatchNormalization", "batch_norm", _bn_in,
              lambda keras, layer: keras.layers.BatchNormalization(momentum=layer.get("momentum"),
                                                                   epsilon=layer.get("epsilon"), name=layer.name),
              lambda layer: _BN_WEIGHTS),
    KerasKind("Activation", "activation", lambda cfg: dict(fn=_activation(cfg["activation"]) or "linear"),
              lambda keras, layer: keras.layers.Activation(layer.get("fn"), name=layer.name)),
    KerasKind("ReLU", "activation", _relu_in, _relu_out),
    KerasKind("Add", "add", lambda cfg: {}, _simple("Add")),
    KerasKind("Concatenate", "concat", _concat_in, _simple("Concatenate", axis=-1)),
)

IN: dict[str, KerasKind] = {e.keras_class: e for e in ENTRIES}
"""Keras class name -> its entry (what ``keras_in`` reads)."""
OUT: dict[str, KerasKind] = {}
"""Our layer kind -> the entry ``keras_out`` writes it with (the first entry of that kind)."""
for _e in ENTRIES:
    OUT.setdefault(_e.kind, _e)

SUPPORTED = tuple(IN) + ("InputLayer", "Softmax (output only)")
"""Keras classes a model may hold, for error messages."""


def keras_entry_for(layer: Layer) -> KerasKind:
    """The entry that writes our ``layer`` as Keras (relu6 goes out as ReLU(max_value=6))."""
    if layer.kind == "activation" and layer.get("fn") == "relu6":
        return IN["ReLU"]
    if layer.kind not in OUT:
        raise Unsupported("layer %r: kind %r has no Keras equivalent (Keras export supports %s)"
                          % (layer.name, layer.kind, sorted(OUT)))
    return OUT[layer.kind]
