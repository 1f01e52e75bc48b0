"""The examples a newcomer starts from run as their docstrings say: `edgemesh run --model
examples/my_cnn.py` reaches its target and splits a layer, examples/train_python_api.py trains a
model of its own from Python, examples/inspect_plan.py explains a plan (from the run's saved profile;
em.profile itself runs in train_python_api.py); and the README's "Your own
model" snippet is a model file that loads for digits32 (32x32x1); the "Bring a Keras model" commands
build a Keras CNN and an .npz, train it, export it and evaluate the export with plain Keras."""
import json
import os
import re
import subprocess
import sys

import pytest

from edgemesh_tf.models import load_model

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _python(*args, timeout=900):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def _tail(out) -> str:
    return out.stdout[-3000:] + out.stderr[-3000:]


@pytest.mark.emulator
@pytest.mark.subprocess
def test_edgemesh_run_my_cnn_reaches_its_target_and_splits(main_job):
    logdir, out = main_job  # `edgemesh run --model examples/my_cnn.py` (tests/conftest.py)
    assert out.returncode == 0, _tail(out)
    summary = json.loads(out.stdout.strip().splitlines()[-1])  # the summary's JSON line
    assert summary["model"].endswith("examples/my_cnn.py")
    # reached: an evaluation was at the target; the final model may end a little below it (commits in flight land)
    assert summary["time_to_target_s"] is not None and summary["why"].endswith("reached"), summary
    assert summary["accuracy"] >= summary["target_accuracy"] - 0.05, summary
    splits = summary["planned"]["splits"]
    assert splits and all(len(by) >= 2 for dims in splits.values() for by in dims.values()), summary["planned"]
    for group, dims in splits.items():  # the summary's "plan:" lines name each split
        for dim in dims:
            assert re.search(r"^  %s splits %s: " % (group, dim), out.stdout, re.M), out.stdout[-3000:]
    for f in ("plan.yaml", "profile.json", "summary.json", "tb"):
        assert os.path.exists(os.path.join(logdir, f)), f


@pytest.mark.emulator
@pytest.mark.subprocess
def test_inspect_plan_explains_a_saved_profile(main_job):
    logdir, run = main_job
    assert run.returncode == 0, _tail(run)
    with open(os.path.join(logdir, "summary.json")) as f:
        planned = json.load(f)["planned"]
    # the main job planned one group (tests/conftest.py): the same profile, planned for one group
    out = _python("examples/inspect_plan.py", os.path.join(logdir, "profile.json"), "1", timeout=300)
    assert out.returncode == 0, _tail(out)
    for group, dims in planned["splits"].items():  # the same profile plans the same splits (devices in mesh order)
        for dim, by in dims.items():
            assert re.search(r"^  %s\s+\d+ units split" % dim, out.stdout, re.M), out.stdout
            first = 0
            for device, units in by.items():
                line = "    %-8s units %4d-%-4d (" % (device, first, first + units - 1)
                assert line in out.stdout, (dim, line, out.stdout)
                first += units
    assert "plan: %s" % planned["kind"] in out.stdout and "examples/s" in out.stdout


@pytest.mark.emulator
@pytest.mark.subprocess
def test_train_python_api_reaches_its_target(tmp_path):
    logdir = str(tmp_path / "run")
    out = _python("examples/train_python_api.py", logdir, "layouts/edge2.yaml")  # pi4 is its default: ~2x the set-up
    assert out.returncode == 0, _tail(out)
    assert "layer" in out.stdout and "conv2" in out.stdout  # em.format_table(plan)
    assert re.search(r"^accuracy 0\.\d+, time to target \d", out.stdout, re.M), out.stdout[-3000:]
    for f in ("plan.yaml", "model.json", "tb"):
        assert os.path.exists(os.path.join(logdir, f)), f


def _readme_section() -> str:
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    return text.split("## Your own model", 1)[1].split("\n## ", 1)[0]


def test_readme_model_file_loads_for_digits32(tmp_path):
    section = _readme_section()
    assert len(section.strip().splitlines()) <= 40
    code = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    path = tmp_path / "my_model.py"
    path.write_text(code)
    spec = load_model(str(path), (32, 32, 1), 10)
    kinds = {layer.kind for layer in spec.layers}
    assert {"conv2d", "avg_pool2d", "batch_norm", "global_avg_pool", "dense"} <= kinds, kinds
    assert all(layer.get("kernel") == 5 and layer.get("padding") == "valid"
               for layer in spec.layers if layer.kind == "conv2d")


@pytest.mark.subprocess
def test_readme_check_command_prints_the_models_layers(tmp_path):
    section = _readme_section()
    (tmp_path / "my_model.py").write_text(re.findall(r"```python\n(.*?)```", section, re.S)[0])
    command = next(line for line in section.splitlines() if line.startswith(".venv/bin/python -c "))
    code = command.split('-c "', 1)[1].rsplit('"', 1)[0]
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, _tail(out)
    lines = out.stdout.splitlines()
    assert lines[0] == "model 'my_model': 32x32x1 images, 10 classes", lines
    assert any(line.split()[:4] == ["conv1", "conv2d", "28x28x32", "conv1"] for line in lines), lines


@pytest.mark.parametrize("path, shape, dims", [
    ("examples/my_cnn.py", (8, 8, 1), ["conv1", "conv2", "fc1", "fc2", "logits"]),
    ("examples/lenet_bn.py", (32, 32, 1), ["conv1", "conv2", "fc1", "fc2", "logits"])])
def test_example_model_files_load_for_their_datasets(path, shape, dims):
    spec = load_model(os.path.join(ROOT, path), shape, 10)
    assert list(spec.split_dims()) == dims and spec.image_shape == shape


def _keras_section() -> str:
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read().split("## Bring a Keras model", 1)[1].split("\n## ", 1)[0]


def _command(line: str) -> list[str]:
    """A README command line as run from a scratch directory: the venv's programs as this Python."""
    words = line.split("#", 1)[0].split()
    head = {".venv/bin/python": [sys.executable], ".venv/bin/edgemesh": [sys.executable, "-m", "edgemesh_tf.cli.main"]}
    return head[words[0]] + [os.path.join(ROOT, w) if w.startswith("examples/") else w for w in words[1:]]


@pytest.mark.emulator
@pytest.mark.subprocess
def test_readme_keras_commands_train_export_and_evaluate_with_plain_keras(tmp_path):
    """The README's three commands: a Keras CNN and an .npz go in, the trained model comes out as a
    .keras file whose accuracy by plain Keras is the run's (within 0.5 points), with the same layers."""
    section = _keras_section()
    assert len(section.strip().splitlines()) <= 25
    build, run, evaluate = [_command(x) for x in re.findall(r"```\n(.*?)```", section, re.S)[0].strip().splitlines()]
    out = subprocess.run(build, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, _tail(out)
    out = subprocess.run(run + ["--target_accuracy", "0.8", "--time_budget_s", "60", "--logdir", "run",
                                "--cluster", os.path.join(ROOT, "layouts", "edge2.yaml")],  # pi4's set-up: ~2x
                         cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, _tail(out)
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["initial_weights"].endswith("out/keras_cnn.keras") and "started from the weights in" in out.stdout
    export = summary["export"]
    assert abs(export["keras_accuracy"] - summary["accuracy"]) <= 0.005, (export, summary["accuracy"])
    out = subprocess.run(evaluate, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, _tail(out)
    layers = ["images", "conv1", "bn1", "pool1", "conv2", "bn2", "relu2", "residual", "conv3", "pool3", "gap",
              "dropout", "classes"]
    assert "layers %s, test accuracy %.4f" % (layers, export["keras_accuracy"]) in out.stdout, out.stdout
