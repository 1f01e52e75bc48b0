"""Reference models, defined once as data (``spec``) and built with mtf or plain TF."""
from edgemesh_tf.models.spec import LayerSpec, ModelSpec
from edgemesh_tf.models.zoo import MODEL_NAMES, get_model

__all__ = ["LayerSpec", "ModelSpec", "MODEL_NAMES", "get_model"]
