"""`edgemesh train --cluster --sync`: two model-parallel groups (uneven filter splits over two devices
each) train one global model through the parameter server on emulated edge4; bad input is named."""
import json
import os
import subprocess
import sys

import pytest
import yaml

pytestmark = [pytest.mark.subprocess]

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
W = "/job:worker/task:%d"


def _run(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "edgemesh_tf.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def _group(a, b, split):
    return {"mesh": {"model": 2}, "devices": [W % a, W % b], "rules": {"conv1": "model", "conv2": "model",
                                                                      "fc1": "model"},
            "sizes": {"conv1": split(32), "conv2": split(64), "fc1": split(128)}}


@pytest.mark.emulator
def test_two_model_parallel_groups_train_one_global_model(tmp_path):
    plan = tmp_path / "plan.yaml"
    # edge0:edge1 are 2:1 in speed, edge2:edge3 4:3: filters in proportion
    plan.write_text(yaml.safe_dump({"groups": [_group(0, 1, lambda n: [n * 2 // 3, n - n * 2 // 3]),
                                               _group(2, 3, lambda n: [n * 4 // 7, n - n * 4 // 7])]}))
    logdir = tmp_path / "run"
    out = _run("train", "--cluster", "layouts/edge4.yaml", "--layout", str(plan), "--sync", "asp",
               "--time_budget_s", "10", "--eval_interval_s", "1", "--logdir", str(logdir))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    final = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(final["groups"]) == {"edge0-edge1", "edge2-edge3"}
    for name, g in final["groups"].items():
        assert g["commits"] >= 3 and g["bytes_sent"] > 0, (name, g)
    assert final["group_exit_codes"] == {"edge0-edge1": 0, "edge2-edge3": 0}
    assert final["accuracy"] > 0.6, final["curve"]
    assert "acc " in out.stdout and "tensorboard --logdir" in out.stdout
    # TensorBoard scalars per group and in total
    for run in ("total", "edge0-edge1", "edge2-edge3"):
        assert os.listdir(logdir / "tb" / run)


def test_bad_hybrid_input_is_named(tmp_path):
    out = _run("train", "--sync", "ashl")
    assert out.returncode != 0 and "--sync ashl needs --cluster FILE" in out.stderr
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"groups": [_group(0, 7, lambda n: [n // 2, n - n // 2])]}))
    out = _run("train", "--cluster", "layouts/edge4.yaml", "--layout", str(plan), "--sync", "asp")
    assert out.returncode != 0
    assert "group 0 uses devices ['/job:worker/task:7']" in out.stderr and "plan.yaml" in out.stderr
    out = _run("train", "--cluster", "layouts/edge4.yaml", "--sync", "asp", "--compression_ratio", "0")
    assert out.returncode != 0 and "ratio must be a fraction of entries in (0, 1], got 0" in out.stderr
    assert "Traceback" not in out.stderr
