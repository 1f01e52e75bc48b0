"""Shared fixtures. TF's C++ logs are silenced for readable test output."""
import atexit
import collections
import gc
import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The tests' main jobs keep device profiles in a cache of their own (shared by the session's jobs and their
# processes), never in the user's: profiling.cache.default_cache_dir reads this.
_PROFILE_CACHE = tempfile.mkdtemp(prefix="edgemesh-test-profiles-")
os.environ["EDGEMESH_PROFILE_CACHE"] = _PROFILE_CACHE
atexit.register(shutil.rmtree, _PROFILE_CACHE, True)

import pytest  # noqa: E402

# The garbage collector's full collections traverse every object: while the test modules import
# TensorFlow, hypothesis and matplotlib (~0.5 M objects) they took ~1.8 s of `make test-fast`, and
# ~3 s more during the tests. It is off while the modules are collected; then it collects once and
# moves what exists (gc.freeze: what lives that long lives as long as the session anyway) out of
# its view, so that its collections during the tests traverse only what the tests made. Garbage
# the tests make is collected as before.
gc.disable()


def pytest_collection_modifyitems(config, items):
    """In pytest-xdist's workers (`make test`'s first pass; a module stays on one worker), the modules
    with the most tests that start processes or are slow come first, the rest keep their order: a
    long module handed out last would leave the other worker idle while it runs."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    def module(item):
        return item.nodeid.split("::")[0]

    weight = collections.Counter(module(item) for item in items
                                 if any(item.get_closest_marker(m) for m in ("subprocess", "slow")))
    items.sort(key=lambda item: -weight[module(item)])  # stable: a module's tests stay in order


def pytest_collection_finish(session):
    gc.enable()
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def digits():
    from edgemesh_tf.data import load_dataset
    return load_dataset("digits")


@pytest.fixture(scope="session")
def vgg_digits(digits):
    from edgemesh_tf.models import get_model
    return get_model("vgg", digits.image_shape, digits.num_classes)


@pytest.fixture(scope="session")
def main_job(tmp_path_factory):
    """One `edgemesh run` on the default cluster (layouts/pi4.yaml, where the planner splits layers)
    with the README's own model file, to 0.9: (logdir, the finished process). The main job's tests (tests/cli/test_run_main_job.py) and the
    examples' (tests/examples/test_examples.py) read the same run: its set-up is most of a minute.
    It plans one group (``--groups 1``), which trains alone, without ASHL's phases
    (engine/core/rules.py): the honest plan depends on the profile (docs/DESIGN.md, "Memory limits when
    the idle server is leaner"), and these tests read a one-group job. The ASHL job of several groups
    is edge2's (tests/engine/test_engine_resume.py)."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    logdir = str(tmp_path_factory.mktemp("main_job") / "run")
    out = subprocess.run([sys.executable, "-m", "edgemesh_tf.cli.main", "run", "--model", "examples/my_cnn.py",
                          "--logdir", logdir, "--groups", "1", "--time_budget_s", "120", "--target_accuracy", "0.9",
                          "--eval_interval_s", "0.5"],
                         cwd=root, capture_output=True, text=True, timeout=900)
    return logdir, out
