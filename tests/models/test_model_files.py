"""Model references: zoo names, model files and saved JSON load the same way everywhere, and every
misuse is one line naming the file (and the layer)."""
import json
import os
import sys
import textwrap

import pytest

from edgemesh_tf.engine.config import FieldError, JobSettings
from edgemesh_tf.models import check_model_ref, get_model, load_model, save_model

LENET = """
from edgemesh_tf import layers as L

INPUT_SHAPE = (32, 32, 1)

def model(images, num_classes):
    x = L.conv2d(images, "conv1", 6, kernel=5, padding="valid")
    x = L.avg_pool2d(L.relu(L.batch_norm(x)), 2)
    x = L.conv2d(x, "conv2", 16, kernel=5, padding="valid", activation="relu")
    x = L.global_avg_pool(x)
    return L.dense(x, "logits", num_classes, gain=1.0)
"""


def _file(tmp_path, text, name="net.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_model_file_builds_and_knows_its_source(tmp_path):
    path = _file(tmp_path, LENET)
    spec = load_model(path, (32, 32, 1), 10)
    assert spec.name == "net" and spec.source == os.path.abspath(path)
    assert spec.split_dims() == {"conv1": 6, "conv2": 16, "logits": 10}
    assert spec.shape_of("conv1") == (28, 28, 6) and spec.shape_of("conv2") == (10, 10, 16)
    # batch norm, relu and the pool run on conv1's slices: one segment, gathered after the pool
    (seg1, seg2, seg3) = spec.segments()
    assert [x.kind for x in seg1.followers] == ["batch_norm", "activation", "avg_pool2d"]
    assert [x.kind for x in seg2.followers] == ["global_avg_pool"] and seg3.followers == ()


@pytest.mark.parametrize("text, expected", [
    ("x = 1\n", "defines no function model(images, num_classes)"),
    ("def model(images, num_classes):\n    raise RuntimeError('boom')\n", "building the model raised RuntimeError: boom"),
    ("import not_a_module_anywhere\n", "loading it raised ModuleNotFoundError"),
    ("def model(images, num_classes):\n    return images\n", "the model function returned 'input'"),
    ("from edgemesh_tf import layers as L\ndef model(x, n):\n    return L.dense(L.flatten(x), 'fc', 3)\n",
     "expected (10,), the logits of 10 classes"),
    ("from edgemesh_tf import layers as L\ndef model(x, n):\n"
     "    return L.dense(L.flatten(L.conv2d(x, 'c', 4, kernel=40, padding='valid')), 'logits', n)\n",
     "layer 'c' (conv2d): output shape"),
    ("from edgemesh_tf import layers as L\nINPUT_SHAPE = (8, 8, 1)\ndef model(x, n):\n    return x\n",
     "INPUT_SHAPE is (8, 8, 1) but the dataset's images are (32, 32, 1)"),
])
def test_bad_model_files_are_one_line_naming_the_file(tmp_path, text, expected):
    path = _file(tmp_path, text)
    with pytest.raises(ValueError) as e:
        load_model(path, (32, 32, 1), 10)
    assert expected in str(e.value) and path in str(e.value) and "\n" not in str(e.value)


def test_unknown_references():
    with pytest.raises(ValueError, match="no such file"):
        check_model_ref("missing/net.py")
    with pytest.raises(ValueError, match="unknown model 'lenet'.*a path to a .py file"):
        check_model_ref("lenet")


def test_saved_json_round_trips_and_checks_the_data(tmp_path):
    spec = get_model("resnet", (8, 8, 1), 10)
    path = save_model(spec, str(tmp_path / "m.json"))
    back = load_model(path, (8, 8, 1), 10)
    assert back == spec and back.source == path and back.segments() == spec.segments()
    with pytest.raises(ValueError, match="saved for \\(8, 8, 1\\) images"):
        load_model(path, (32, 32, 1), 10)
    (tmp_path / "bad.json").write_text(json.dumps({"name": "x", "layers": [{"kind": "dense"}]}))
    with pytest.raises(ValueError, match="bad.json: not a saved model"):
        load_model(str(tmp_path / "bad.json"), (8, 8, 1), 10)


def test_job_settings_take_a_model_file_as_an_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _file(tmp_path, LENET)
    settings = JobSettings.for_command("run", model="net.py", logdir=str(tmp_path))
    assert settings.model == str(tmp_path / "net.py")
    with pytest.raises(FieldError, match="model: unknown model 'lenet'"):
        JobSettings.for_command("run", model="lenet", logdir=str(tmp_path))


@pytest.mark.subprocess
def test_package_root_is_the_api_and_imports_no_tensorflow():
    import subprocess
    code = ("import sys, edgemesh_tf as em; m = em.load_model('vgg'); "
            "assert callable(em.start) and callable(em.train) and em.layers.conv2d; "
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.subprocess
def test_package_root_functions_stay_functions_after_the_library_is_imported():
    """No subpackage is named like a root function: importing every module keeps em.profile, em.train, ...
    the API's functions (a subpackage `edgemesh_tf.profile` would replace em.profile once imported)."""
    import subprocess
    code = ("import importlib, pkgutil, edgemesh_tf as em; "
            "[importlib.import_module(m.name) for m in pkgutil.walk_packages(em.__path__, 'edgemesh_tf.') "
            " if '.cli.' not in m.name]; "
            "import edgemesh_tf.api as api; "
            "print(sorted(n for n in api.__all__ if getattr(em, n) is not getattr(api, n)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
