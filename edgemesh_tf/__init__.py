"""edgemesh_tf: train your own CNN on a heterogeneous edge cluster, its conv filters split unevenly
across the devices of a group (EdgeMesh) and the groups synchronised by a parameter server (ASHL).

Define the model with the mesh API, then profile, plan and train:

    import edgemesh_tf as em
    from edgemesh_tf import layers as L

    def model(images, num_classes):
        x = L.conv2d(images, "conv1", 32, kernel=5, padding="valid", activation="relu")
        x = L.max_pool2d(x, 2)
        x = L.global_avg_pool(L.conv2d(x, "conv2", 64, activation="relu"))
        return L.dense(x, "logits", num_classes, gain=1.0)

    spec = em.load_model(model, dataset="digits32")
    with em.start("layouts/pi4.yaml") as cluster:
        plan = em.plan(em.profile(cluster, spec), spec)
        result = em.train(cluster, spec, plan, dataset="digits32", target_accuracy=0.9)

Everything here is imported lazily: ``import edgemesh_tf`` does not import TensorFlow.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what the names below are, for readers and type checkers
    from edgemesh_tf import layers
    from edgemesh_tf.api import Cluster, TrainResult, format_table, load_model, plan, profile, run, start, train
    from edgemesh_tf.layers import ModelSpec, build_model

from edgemesh_tf.version import VERSION as __version__

_API = {"Cluster", "TrainResult", "format_table", "load_model", "plan", "profile", "run", "start", "train"}
_LAYERS = {"ModelSpec", "build_model"}
__all__ = sorted(_API | _LAYERS | {"layers", "__version__"})


def __getattr__(name: str):
    if name in _API:
        return getattr(importlib.import_module("edgemesh_tf.api"), name)
    if name in _LAYERS:
        return getattr(importlib.import_module("edgemesh_tf.layers"), name)
    if name == "layers":
        return importlib.import_module("edgemesh_tf.layers")
    raise AttributeError("module 'edgemesh_tf' has no attribute %r" % name)


def __dir__():
    return __all__
