"""A saved Keras model (``.keras``) as a mesh-API model, read without TensorFlow or Keras.

A ``.keras`` file is a zip of ``config.json`` (the model's layers, their settings and, for a
Functional model, which layer reads which) and ``model.weights.h5`` (each layer's variables, under
``layers/<snake_case class name>[_<n>]/vars/<i>`` in the order Keras's ``get_weights()`` lists
them). ``read_keras`` reads both; ``spec_from_keras`` turns them, layer by layer
(``keras_kinds.IN``), into a ``ModelSpec`` and its weights. Being plain file reading, it runs in
every process of a job (whose TensorFlow runs in graph mode, where Keras itself does not).

Each Conv2D's filters and each Dense layer's units become a split dim named after the Keras layer;
every layer keeps its Keras name, so weights travel as ``<layer>/<weight>`` (``conv1/kernel``). A
softmax on the output (a Dense's activation or a last Softmax / Activation layer) is left out of the
spec: training reads logits and applies the softmax in its loss; ``keras_out`` writes the model
back from the original file, softmax included.
"""
from __future__ import annotations

import dataclasses
import functools
import io
import json
import os
import re
import zipfile

import numpy as np

from edgemesh_tf.layers import ModelSpec, build_model
from edgemesh_tf.layers.graph import add_layer
from edgemesh_tf.models.keras_kinds import IN, SUPPORTED, Unsupported

KerasWeights = dict[str, list[np.ndarray]]
"""A Keras model's weights: {Keras layer name: its arrays in ``get_weights()`` order}."""


def is_keras_file(ref: str) -> bool:
    return ref.endswith(".keras")


def _snake(name: str) -> str:
    """Keras's ``naming.to_snake_case``: the key a layer's variables are saved under."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def read_keras(path: str) -> tuple[dict, KerasWeights]:
    """(the model's config, its weights by layer name) of the ``.keras`` file at ``path``. Raises
    ValueError naming the file when it is not a Keras 3 model file."""
    import h5py

    try:
        with zipfile.ZipFile(path) as z:
            config = json.loads(z.read("config.json"))
            h5 = h5py.File(io.BytesIO(z.read("model.weights.h5")), "r")
    except (OSError, KeyError, zipfile.BadZipFile, json.JSONDecodeError) as e:
        raise ValueError("model file %s: not a Keras 3 model file (a zip holding config.json and model.weights.h5, "
                         "as keras.Model.save writes): %s" % (path, e)) from None
    weights, used = {}, {}
    with h5:
        for layer in config.get("config", {}).get("layers", []):
            if layer.get("class_name") == "InputLayer":
                continue
            key = _snake(layer["class_name"])
            used[key] = used.get(key, -1) + 1
            group = h5.get("layers/%s%s/vars" % (key, "_%d" % used[key] if used[key] else ""))
            if group is not None:
                weights[layer["config"]["name"]] = [np.asarray(group[k]) for k in sorted(group, key=int)]
    return config, weights


def _producers(layer: dict) -> list[str]:
    """The names of the layers a Functional model's ``layer`` reads."""
    nodes = layer.get("inbound_nodes") or []
    if len(nodes) != 1:
        raise Unsupported("it is called %d times (a shared layer); every layer must be called once" % len(nodes))
    args = nodes[0]["args"]
    tensors = args[0] if len(args) == 1 and isinstance(args[0], list) else args
    return [t["config"]["keras_history"][0] for t in tensors]


def _input_shape(config: dict) -> tuple[int, ...]:
    for layer in config["layers"]:
        if layer["class_name"] == "InputLayer":
            return tuple(layer["config"].get("batch_shape") or layer["config"].get("batch_input_shape"))[1:]
    shape = config.get("build_input_shape")
    if shape:
        return tuple(shape)[1:]
    raise ValueError("the model has no input shape (build it with keras.Input((H, W, C)) first)")


def _output_name(model: dict) -> str:
    if model["class_name"] == "Sequential":
        return model["config"]["layers"][-1]["config"]["name"]
    outs = model["config"]["output_layers"]
    if outs and isinstance(outs[0], list):
        if len(outs) != 1:
            raise ValueError("the model has %d outputs; expected one (the class scores)" % len(outs))
        outs = outs[0]
    return outs[0]


def _is_softmax(cls: str, cfg: dict) -> bool:
    return cls == "Softmax" or (cls == "Activation" and cfg.get("activation") == "softmax")


def _model_fn(model: dict):
    """The model function (for ``build_model``) that replays the Keras config's layers, and the
    Keras class of each layer it adds."""
    if model.get("class_name") not in ("Sequential", "Functional"):
        raise ValueError("a %s model; save a Sequential or Functional model (a subclassed keras.Model has no "
                         "layer graph to read)" % model.get("class_name"))
    sequential = model["class_name"] == "Sequential"
    config, output = model["config"], _output_name(model)
    classes = {}

    def fn(images, num_classes):
        tensors, last = {}, None
        for layer in config["layers"]:
            cls, cfg = layer["class_name"], layer["config"]
            if cls == "InputLayer":
                tensors[cfg["name"]] = last = images
                continue
            where = "Keras layer %r (%s)" % (cfg["name"], cls)
            try:
                if cls in ("Sequential", "Functional", "Model"):
                    raise Unsupported("a nested model; build the model from layers")
                inputs = [last if last is not None else images] if sequential else [
                    tensors[n] for n in _producers(layer)]
                if cfg["name"] == output and _is_softmax(cls, cfg):
                    tensors[cfg["name"]] = last = inputs[0]   # the logits are the spec's output
                    continue
                if cls not in IN:
                    raise Unsupported("not supported; supported: %s" % ", ".join(SUPPORTED))
                if cfg["name"] == output and cfg.get("activation") == "softmax":
                    cfg = dict(cfg, activation=None)
                entry = IN[cls]
                settings = entry.to_spec(cfg)
                if entry.kind not in ("add", "concat") and len(inputs) != 1:
                    raise Unsupported("takes %d inputs; expected one" % len(inputs))
                tensors[cfg["name"]] = last = add_layer(entry.kind, inputs, cfg["name"], **settings)
            except (Unsupported, ValueError) as e:
                raise ValueError("%s: %s%s" % (where, e, "; rename the Keras layer" if "name" in str(e) else "")) from None
            classes[cfg["name"]] = cls
        if tensors.get(output) is not last:
            raise ValueError("the model's output %r is not its last layer; put the output layer last" % output)
        return last

    return fn, classes


def spec_from_keras(model: dict, weights: KerasWeights, name: str = "model",
                    source: str = "") -> tuple[ModelSpec, dict[str, np.ndarray]]:
    """(the ``ModelSpec`` of a Keras model's config ``model``, its weights {``<layer>/<weight>``:
    float32 array}). The image shape is the model's input (H, W, C), the classes the output's size.
    Raises ValueError with one line naming the Keras layer, its class and what is supported."""
    fn, classes = _model_fn(model)
    shape = _input_shape(model["config"])
    if len(shape) != 3 or None in shape:
        raise ValueError("the model takes inputs of shape %s; expected images (H, W, C)" % (shape,))
    spec = build_model(fn, shape, None, name=name)
    out = {}
    for layer in spec.layers:
        entry = IN[classes[layer.name]]
        names, arrays = entry.weight_names(layer), weights.get(layer.name, [])
        if len(arrays) != len(names):
            raise ValueError("Keras layer %r (%s): the file holds %d weights for it; expected %d (%s)"
                             % (layer.name, classes[layer.name], len(arrays), len(names), ", ".join(names)))
        for n, a in zip(names, arrays):
            out["%s/%s" % (layer.name, n)] = np.asarray(entry.reshape_in(n, a), np.float32)
    return dataclasses.replace(spec, source=source), out


@functools.lru_cache(maxsize=4)
def _load(path: str, mtime: float) -> tuple[ModelSpec, dict[str, np.ndarray]]:
    config, weights = read_keras(path)
    try:
        return spec_from_keras(config, weights, os.path.splitext(os.path.basename(path))[0], source=path)
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError("model file %s: %s" % (path, e)) from None


def read_spec(path: str) -> ModelSpec:
    """The model of the ``.keras`` file at ``path``, for the images and classes it was built for.
    Raises ValueError naming the file when it is no ``.keras`` file."""
    if not is_keras_file(path):
        raise ValueError("model file %s: expected a Keras model file (.keras)" % path)
    return _load(path, os.path.getmtime(path))[0]


def load_keras(path: str, image_shape: tuple[int, int, int], num_classes: int) -> ModelSpec:
    """The model of the ``.keras`` file at ``path`` for images of ``image_shape`` and ``num_classes``
    classes; raises ValueError naming the file when they are not what the model takes."""
    spec = read_spec(path)
    if spec.image_shape != tuple(image_shape) or spec.num_classes != num_classes:
        raise ValueError("model file %s: the Keras model takes %s images and gives %d classes; the dataset has %s "
                         "images and %d classes" % (path, spec.image_shape, spec.num_classes, tuple(image_shape),
                                                    num_classes))
    return spec


def keras_weights(path: str) -> dict[str, np.ndarray]:
    """The weights of the ``.keras`` file at ``path`` by ``<layer>/<weight>``: a job's initial model."""
    return dict(_load(path, os.path.getmtime(path))[1])


__all__ = ["KerasWeights", "is_keras_file", "keras_weights", "load_keras", "read_keras", "read_spec", "spec_from_keras"]
