"""The only module that imports ``mesh_tensorflow``: makes 0.1.21 work on TensorFlow 2.21.

Two import-time breakages are patched before the import (see docs/DESIGN.md, "Measured facts"):

* ``tensorflow.compat.v1.estimator`` is gone in TF >= 2.16; mtf only subclasses two hook
  base classes from it, which still exist in ``tf.compat.v1.train``.
* ``ops.register_tensor_conversion_function`` moved to ``tensor_conversion_registry``.

Resource variables are switched on: with ref variables mtf's backward pass can read weights
that the same step already updated, giving run-to-run differences and NaNs for uneven layouts.
"""
import sys
import types

import tensorflow as _tf

tf = _tf.compat.v1


def _patch_estimator() -> None:
    name = "tensorflow.compat.v1.estimator"
    if name in sys.modules:
        return
    try:  # pragma: no cover - only on TF < 2.16
        from tensorflow.compat.v1 import estimator  # noqa: F401  (present: nothing to patch)
        return
    except ImportError:
        pass
    shim = types.ModuleType(name)
    shim.SessionRunHook = tf.train.SessionRunHook
    shim.CheckpointSaverListener = tf.train.CheckpointSaverListener
    sys.modules[name] = shim
    tf.estimator = shim


def _patch_tensor_conversion() -> None:
    from tensorflow.python.framework import ops, tensor_conversion_registry

    if not hasattr(ops, "register_tensor_conversion_function"):
        ops.register_tensor_conversion_function = (
            tensor_conversion_registry.register_tensor_conversion_function)


_patch_estimator()
_patch_tensor_conversion()
tf.disable_eager_execution()
tf.enable_resource_variables()

import mesh_tensorflow as mtf  # noqa: E402
from mesh_tensorflow import placement_mesh_impl  # noqa: E402

__all__ = ["tf", "mtf", "placement_mesh_impl"]
