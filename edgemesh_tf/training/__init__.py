"""Single-process training (the reference a job is compared with) and the checkpoint format.

Names are imported lazily (``importlib.import_module`` on first use), so that importing the package
does not import TensorFlow.
"""
from edgemesh_tf.lazy import lazy_exports

_EXPORTS = {"build_train_graph": "graph", "restore_or_init": "loop"}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
