"""The uneven Mesh-TensorFlow lowering and layouts (plain data).

Names are imported lazily (``importlib.import_module`` on first use): a layout is plain data, and
importing the package does not import TensorFlow until a name that needs it (``tf``, ``mtf``,
``session_config``) is used.
"""
from edgemesh_tf.lazy import lazy_exports

_EXPORTS = {
    "Layout": "layout", "even_split_layout": "layout", "local_devices": "layout", "single_device_layout": "layout",
    "session_config": "build", "mtf": "compat", "placement_mesh_impl": "compat", "tf": "compat",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
