"""The training engine: one job of data-parallel groups synchronised through the parameter server.

Three levels: `config` (the job's settings as plain frozen dataclasses, which every entry point
reads without importing the rest), `core` (pure decisions, no TensorFlow) and `runtime` (the
TensorFlow sessions and processes around them). The names below are the engine's public ones;
they are imported lazily, so ``import edgemesh_tf.engine`` loads nothing else.
"""
from edgemesh_tf.lazy import lazy_exports

_EXPORTS = {
    "GroupSpec": "config", "JobConfig": "config", "STRATEGIES": "config", "SyncConfig": "config",
    "commit_interval": "core.rules", "records": "core",
    "PSLost": "runtime.chief", "default_groups": "runtime.job", "job_config": "runtime.job",
    "run_job": "runtime.job", "RoundRunner": "runtime.round_timer", "WarmGroups": "runtime.warm",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
