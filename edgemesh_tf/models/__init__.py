"""Models: the reference zoo (written with the mesh API, ``edgemesh_tf.layers``), loading a model
by reference (a zoo name or a model file) and the builders that turn a ``ModelSpec`` into mtf or
plain TF. ``PlainModel`` (the plain-TF build) is imported on first use: it imports TensorFlow."""
from edgemesh_tf.lazy import lazy_exports
from edgemesh_tf.layers import ModelSpec
from edgemesh_tf.models.load import check_model_ref, initial_weights, load_model, save_model
from edgemesh_tf.models.zoo import MODEL_NAMES, get_model

_EXPORTS = {"PlainModel": "plain_tf"}
__all__ = ["ModelSpec", "MODEL_NAMES", "PlainModel", "check_model_ref", "get_model", "initial_weights", "load_model",
           "save_model"]

__getattr__ = lazy_exports(__name__, _EXPORTS)
