"""A model from its reference: a zoo name (``vgg``), a Python file that defines ``model``, a
model saved as JSON (``save_model``: how a model built in a caller's own code reaches a job's
processes), or a Keras model file (``.keras``, read by ``keras_in``, its weights the job's start).

Every process of a job (chief, groups, a rejoined group, the profiler, the planner) builds its
model with ``load_model(ref, image_shape, num_classes)`` from the same reference, so all of them
hold the same layers. A model file is plain Python:

    # examples/lenet_bn.py
    from edgemesh_tf import layers as L

    def model(images, num_classes):
        x = L.conv2d(images, "conv1", 6, kernel=5, padding="valid", activation="relu")
        ...
        return L.dense(x, "logits", num_classes, gain=1.0)

It may also set ``INPUT_SHAPE = (H, W, C)``: the images it was written for, checked against the
dataset's.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys

from edgemesh_tf.layers import ModelSpec, build_model, model_from_dict
from edgemesh_tf.models.keras_in import is_keras_file, keras_weights, load_keras
from edgemesh_tf.models.zoo import MODEL_NAMES, get_model


def is_model_file(ref: str) -> bool:
    return ref.endswith(".py") or ref.endswith(".json") or is_keras_file(ref)


def save_model(spec: ModelSpec, path: str) -> str:
    """Writes ``spec`` as JSON to ``path``; returns the path, a reference ``load_model`` reads."""
    with open(path, "w") as f:
        json.dump(spec.to_dict(), f, indent=1)
    return os.path.abspath(path)


def check_model_ref(ref: str) -> str:
    """``ref`` as every process can read it: a zoo name, or a model file's absolute path.
    Raises ValueError naming the reference when it is neither."""
    if is_model_file(ref):
        path = os.path.abspath(ref)
        if not os.path.isfile(path):
            raise ValueError("model file %s: no such file" % ref)
        return path
    if ref not in MODEL_NAMES:
        raise ValueError("unknown model %r; expected one of %s, a path to a .py file that defines "
                         "model(images, num_classes), a saved model .json or a Keras model .keras" % (ref, list(MODEL_NAMES)))
    return ref


def _module(path: str):
    name = "edgemesh_user_model_%d" % (abs(hash(path)) % 10 ** 8)
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the user's file: any error is reported with the file's name
        raise ValueError("model file %s: loading it raised %s: %s" % (path, type(e).__name__, e)) from None
    sys.modules[name] = module
    return module


def load_model(ref: str, image_shape: tuple[int, int, int], num_classes: int) -> ModelSpec:
    """The model ``ref`` (a zoo name or a model file) for images of ``image_shape`` (H, W, C) and
    ``num_classes`` classes. Raises ValueError with one line naming the file (and the layer) when the
    file does not define ``model``, raises while building, or was written for other images."""
    ref = check_model_ref(ref)
    if not is_model_file(ref):
        return dataclasses.replace(get_model(ref, image_shape, num_classes), source=ref)
    if ref.endswith(".json"):
        return _saved(ref, image_shape, num_classes)
    if is_keras_file(ref):
        return load_keras(ref, image_shape, num_classes)
    module = _module(ref)
    fn = getattr(module, "model", None)
    if not callable(fn):
        raise ValueError("model file %s: defines no function model(images, num_classes) (it defines %s)"
                         % (ref, sorted(n for n in vars(module) if not n.startswith("_")) or "nothing"))
    want = getattr(module, "INPUT_SHAPE", None)
    if want is not None and tuple(want) != tuple(image_shape):
        raise ValueError("model file %s: INPUT_SHAPE is %s but the dataset's images are %s; pick the dataset the "
                         "model was written for (--dataset) or change INPUT_SHAPE" % (ref, tuple(want), tuple(image_shape)))
    name = os.path.splitext(os.path.basename(ref))[0]
    try:
        return dataclasses.replace(build_model(fn, tuple(image_shape), num_classes, name=name), source=ref)
    except (ValueError, TypeError) as e:
        raise ValueError("model file %s: %s" % (ref, e)) from None
    except Exception as e:  # the user's code: report where, not a traceback
        raise ValueError("model file %s: building the model raised %s: %s" % (ref, type(e).__name__, e)) from None


def _saved(path: str, image_shape, num_classes: int) -> ModelSpec:
    try:
        with open(path) as f:
            spec = model_from_dict(json.load(f), source=path)
    except json.JSONDecodeError as e:
        raise ValueError("model file %s: not JSON (%s)" % (path, e)) from None
    if spec.image_shape != tuple(image_shape) or spec.num_classes != num_classes:
        raise ValueError("model file %s: saved for %s images and %d classes; the dataset has %s and %d"
                         % (path, spec.image_shape, spec.num_classes, tuple(image_shape), num_classes))
    return spec


def initial_weights(spec: ModelSpec) -> dict:
    """The weights a job starts ``spec`` from, {``<layer>/<weight>``: whole tensor}: a Keras model
    file's own (so a pre-trained model is fine-tuned); empty for any other model (its initializers)."""
    return keras_weights(spec.source) if is_keras_file(spec.source) else {}
