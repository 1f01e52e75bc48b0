"""TensorFlow without Keras for the processes of a job, and a server without TensorFlow's Python API.

A job's processes build and run graphs and never use Keras.

TensorFlow's import loads Keras's optimizers eagerly (SavedModel registrations), ~1.4 s of the ~4 s
a process spends importing TensorFlow on this class of machine; TensorFlow catches the ImportError
when `keras` cannot be imported. Every server, group client and CLI process of a job pays that import
on the devices' own CPUs during set-up. The export of a trained model to Keras runs in a process of
its own (engine/runtime/export.py) and keeps Keras.
"""
import importlib.util
import sys
import types


def without_keras() -> bool:
    """Makes this process's `import tensorflow` skip Keras (a later `import keras` raises ImportError).
    Only before TensorFlow or Keras is imported: afterwards it changes nothing and returns False."""
    if "tensorflow" in sys.modules or "keras" in sys.modules:
        return False
    sys.modules["keras"] = None
    return True


def server_modules():
    """(server_lib, config_pb2): TensorFlow's server module and its config protos. In a process that
    has not imported TensorFlow yet they come without the `tensorflow` package's __init__, which
    imports TensorFlow's whole Python API (~2.7 s of CPU here; these two need ~0.4 s): a bare
    package module stands in for `tensorflow`, so only what the server needs is imported. The C++
    runtime (every op kernel a client's graph runs) loads with them. In such a process a later
    `import tensorflow` returns that bare module: only a process that is nothing but a server
    (cluster/server.py) asks for this."""
    if "tensorflow" not in sys.modules:
        spec = importlib.util.find_spec("tensorflow")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("TensorFlow is not installed (no module named 'tensorflow')")
        without_keras()
        bare = types.ModuleType("tensorflow", "TensorFlow's package without its Python API (tf_import.server_modules)")
        bare.__path__, bare.__spec__ = list(spec.submodule_search_locations), spec
        sys.modules["tensorflow"] = bare
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.training import server_lib

    return server_lib, config_pb2
