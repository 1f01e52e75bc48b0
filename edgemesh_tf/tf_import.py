"""TensorFlow without Keras, for the processes of a job: they build and run graphs and never use Keras.

TensorFlow's import loads Keras's optimizers eagerly (SavedModel registrations), ~1.4 s of the ~4 s
a process spends importing TensorFlow on this class of machine; TensorFlow catches the ImportError
when `keras` cannot be imported. Every server, group client and CLI process of a job pays that import
on the devices' own CPUs during set-up. The export of a trained model to Keras runs in a process of
its own (engine/export.py) and keeps Keras.
"""
import sys


def without_keras() -> bool:
    """Makes this process's `import tensorflow` skip Keras (a later `import keras` raises ImportError).
    Only before TensorFlow or Keras is imported: afterwards it changes nothing and returns False."""
    if "tensorflow" in sys.modules or "keras" in sys.modules:
        return False
    sys.modules["keras"] = None
    return True
