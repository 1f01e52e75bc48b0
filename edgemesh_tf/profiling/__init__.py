"""Device profiles: measured by short pre-training on each device (ASHL's profiling step).

Names are imported lazily (``importlib.import_module`` on first use), so that importing the package
imports neither TensorFlow nor the planner that reads the profiles.
"""
from edgemesh_tf.lazy import lazy_exports

_EXPORTS = {
    "DeviceProfile": "types", "LayerTiming": "types", "Profile": "types",
    "budgets": "run", "profile_servers": "run", "profile_workers": "run",
    "LayoutRunner": "step_timer", "PeakWatch": "step_timer", "measure_memory": "step_timer",
    "measure_side_by_side": "step_timer",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
