"""The Keras models of ``keras_cases.py``, written once a session (in their own process: Keras runs
eagerly, the tests' TensorFlow in graph mode)."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="session")
def keras_dir(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("keras_cases"))
    subprocess.run([sys.executable, os.path.join(HERE, "keras_cases.py"), out], check=True, timeout=300,
                   capture_output=True)
    return out

