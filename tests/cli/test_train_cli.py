"""`edgemesh train`: JSON lines per step and a final accuracy; bad input is named, not a traceback."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.subprocess]

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def _run(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "edgemesh_tf.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def test_train_prints_json_lines_and_learns():
    out = _run("train", "--layout", "layouts/digits_uneven.yaml", "--model", "vgg", "--dataset", "digits",
               "--steps", "120", "--seed", "1", "--eval_every", "60")
    assert out.returncode == 0, out.stderr[-2000:]
    recs = [json.loads(line) for line in out.stdout.splitlines()]
    steps = [r for r in recs if "step" in r]
    assert [r["step"] for r in steps] == list(range(1, 121))
    assert all(r["examples_per_sec"] > 0 for r in steps)
    assert "accuracy" in steps[59]
    final = recs[-1]
    assert final["final"] and final["accuracy"] > 0.8, final
    assert steps[-1]["loss"] < steps[0]["loss"]


def test_bad_layout_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("mesh: {model: 2}\ndevices: [cpu:0, cpu:1]\nrules: {conv1: model}\nsizes: {conv1: [30, 30]}\n")
    out = _run("train", "--layout", str(bad), "--steps", "1")
    assert out.returncode != 0
    assert "sizes of 'conv1' add up to 60, expected 32" in out.stderr
    assert "Traceback" not in out.stderr


def test_unknown_subcommand_and_missing_dataset_path():
    out = _run("trian")
    assert out.returncode != 0 and "expected a subcommand, got 'trian'" in out.stderr
    out = _run("train", "--dataset", "cifar10", "--steps", "1")
    assert out.returncode != 0 and "path" in out.stderr and "Traceback" not in out.stderr
