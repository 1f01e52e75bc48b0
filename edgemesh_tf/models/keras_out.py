"""A trained mesh-API model as a Keras model: ``to_keras(spec, weights)`` and ``export_keras`` (a
``model.keras`` file that plain Keras loads, and a SavedModel for serving). Keras runs eagerly, so
these run in a process that has not imported ``mesh.compat`` (which turns TF's graph mode on):
``engine/runtime/export.py`` runs them in a process of their own.

A model that came in as a ``.keras`` file goes out as that model (same layers, names and softmax),
its weights replaced by the trained ones. A model written with the mesh API goes out as the
equivalent Functional model, one Keras layer per layer (``keras_kinds.OUT``), named as it, giving
logits. Weights are ``{<layer>/<weight>: array}`` as in checkpoints (whole tensors).
"""
from __future__ import annotations

import os
from typing import Mapping

import numpy as np

from edgemesh_tf.layers import INPUT, ModelSpec
from edgemesh_tf.models.keras_in import is_keras_file
from edgemesh_tf.models.keras_kinds import IN, Unsupported, keras_entry_for


def check_exportable(spec: ModelSpec) -> None:
    """Raises ValueError naming the first layer that has no Keras equivalent (``mtf_op``)."""
    if is_keras_file(spec.source):
        return
    for layer in spec.layers:
        try:
            keras_entry_for(layer)
        except Unsupported as e:
            raise ValueError("model %r cannot be exported to Keras: %s" % (spec.name, e)) from None


def _set(klayer, entry, layer, weights: Mapping[str, np.ndarray]) -> None:
    names = entry.weight_names(layer)
    missing = [n for n in names if "%s/%s" % (layer.name, n) not in weights]
    if missing:
        raise ValueError("layer %r: the weights hold no %s" % (layer.name, ["%s/%s" % (layer.name, n) for n in missing]))
    if names:
        klayer.set_weights([entry.reshape_out(n, np.asarray(weights["%s/%s" % (layer.name, n)])) for n in names])


def to_keras(spec: ModelSpec, weights: Mapping[str, np.ndarray]):
    """The ``keras.Model`` of ``spec`` holding ``weights``."""
    import keras

    check_exportable(spec)
    if is_keras_file(spec.source):
        model = keras.models.load_model(spec.source, compile=False)
        for layer in spec.layers:
            klayer = model.get_layer(layer.name)
            _set(klayer, IN[type(klayer).__name__], layer, weights)
        return model
    inputs = keras.Input(spec.image_shape, name="images")
    values = {INPUT: inputs}
    for layer in spec.layers:
        entry = keras_entry_for(layer)
        klayer = entry.to_keras(keras, layer)
        xs = [values[i] for i in layer.inputs]
        values[layer.name] = klayer(xs if layer.kind in ("add", "concat") else xs[0])
        _set(klayer, entry, layer, weights)
    return keras.Model(inputs, values[spec.layers[-1].name], name=spec.name)


def export_keras(spec: ModelSpec, weights: Mapping[str, np.ndarray], export_dir: str,
                 saved_model: bool = True) -> dict[str, str]:
    """Writes ``export_dir/model.keras`` (and ``export_dir/saved_model``, a TF SavedModel whose
    ``serve`` signature maps float32 images [batch, H, W, C] to the model's output); returns
    {"keras": path, "saved_model": path}."""
    model = to_keras(spec, weights)
    os.makedirs(export_dir, exist_ok=True)
    out = {"keras": os.path.join(export_dir, "model.keras")}
    model.save(out["keras"])
    if saved_model:
        out["saved_model"] = os.path.join(export_dir, "saved_model")
        model.export(out["saved_model"], verbose=False)
    return out


def keras_accuracy(path: str, images: np.ndarray, labels: np.ndarray, batch_size: int = 256) -> float:
    """Accuracy of the Keras model file at ``path`` on ``images`` [N, H, W, C] float32 and int
    ``labels`` [N], computed by plain Keras (``load_model(...).predict``)."""
    import keras

    model = keras.models.load_model(path, compile=False)
    scores = model.predict(images, batch_size=batch_size, verbose=0)
    return float(np.mean(np.argmax(scores, axis=-1) == labels))
