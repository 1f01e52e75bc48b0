"""Models: the reference zoo (written with the mesh API, ``edgemesh_tf.layers``), loading a model
by reference (a zoo name or a model file) and the builders that turn a ``ModelSpec`` into mtf or
plain TF."""
from edgemesh_tf.layers import ModelSpec
from edgemesh_tf.models.load import check_model_ref, initial_weights, load_model, save_model
from edgemesh_tf.models.zoo import MODEL_NAMES, get_model

__all__ = ["ModelSpec", "MODEL_NAMES", "check_model_ref", "get_model", "initial_weights", "load_model", "save_model"]
