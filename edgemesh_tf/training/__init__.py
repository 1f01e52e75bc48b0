"""Single-process training (the reference a job is compared with) and the checkpoint format.

Names are imported lazily (``importlib.import_module`` on first use), so that importing the package
does not import TensorFlow.
"""
import importlib

_EXPORTS = {"build_train_graph": "graph", "restore_or_init": "loop"}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    return getattr(importlib.import_module(__name__ + "." + _EXPORTS[name]), name)
