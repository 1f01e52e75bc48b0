"""The uneven Mesh-TensorFlow lowering and layouts (plain data).

Names are imported lazily (``importlib.import_module`` on first use): a layout is plain data, and
importing the package does not import TensorFlow until a name that needs it (``tf``, ``mtf``,
``session_config``) is used.
"""
import importlib

_EXPORTS = {
    "Layout": "layout", "even_split_layout": "layout", "local_devices": "layout", "single_device_layout": "layout",
    "session_config": "build", "mtf": "compat", "placement_mesh_impl": "compat", "tf": "compat",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    return getattr(importlib.import_module(__name__ + "." + _EXPORTS[name]), name)
