"""Models: the reference zoo (written with the mesh API, ``edgemesh_tf.layers``), loading a model
by reference (a zoo name or a model file) and the builders that turn a ``ModelSpec`` into mtf or
plain TF. ``PlainModel`` (the plain-TF build) is imported on first use: it imports TensorFlow."""
import importlib

from edgemesh_tf.layers import ModelSpec
from edgemesh_tf.models.load import check_model_ref, initial_weights, load_model, save_model
from edgemesh_tf.models.zoo import MODEL_NAMES, get_model

_LAZY = {"PlainModel": "plain_tf"}
__all__ = ["ModelSpec", "MODEL_NAMES", "PlainModel", "check_model_ref", "get_model", "initial_weights", "load_model",
           "save_model"]


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    return getattr(importlib.import_module(__name__ + "." + _LAZY[name]), name)
