"""Plan files load back (load_layout / load_plan) and validate; `edgemesh plan` prints and writes them."""
import json
import os
import subprocess
import sys

import pytest
import yaml
from planner_util import flops_device, profile

from edgemesh_tf.mesh.layout import load_layout
from edgemesh_tf.models.zoo import get_model
from edgemesh_tf.planner import format_table, load_plan, model_stats, plan, write_plan
from edgemesh_tf.profiling.types import save_profile

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
VGG = get_model("vgg", (8, 8, 1), 10)


def _profile(bw=1000, lat=0.5):
    stats = model_stats(VGG, 32)
    return profile(VGG, [flops_device("edge%d" % i, stats, g, i, bw=bw, lat=lat, mem=256 << 20)
                         for i, g in enumerate([4, 2, 1.33, 1])], 32)


def test_single_group_file_is_a_plain_layout(tmp_path):
    result = plan(_profile(), VGG, groups=1)
    path = str(tmp_path / "one.yaml")
    write_plan(result, path)
    text = open(path).read()
    assert text.startswith("# Written by `edgemesh plan`")
    layout = load_layout(path).validate(VGG.dims(32))
    assert layout == result.groups[0].layout and layout.rules
    loaded = load_plan(path)
    assert len(loaded.groups) == 1 and loaded.groups[0].layout == layout and loaded.groups[0].batch == 32
    pred = yaml.safe_load(text)["predicted"]
    assert pred["step_ms"] == pytest.approx(result.groups[0].prediction.step_ms, abs=1e-3)
    assert list(pred["memory_bytes"].values()) == list(result.groups[0].prediction.memory_bytes)
    assert "without a parameter server" not in text
    write_plan(plan(_profile(), VGG, engine=False), path)  # planned for `edgemesh train --layout`: the header says so
    assert "Planned for one plain layout without a parameter server" in open(path).read()


def test_multi_group_file_loads_with_load_plan(tmp_path):
    result = plan(_profile(), VGG, groups=2)
    path = str(tmp_path / "two.yaml")
    write_plan(result, path)
    loaded = load_plan(path)
    assert [g.layout for g in loaded.groups] == [g.layout for g in result.groups]
    for g, want in zip(loaded.groups, result.groups):
        g.layout.validate(VGG.dims(g.batch))
        assert g.predicted["step_ms"] == pytest.approx(want.prediction.step_ms, abs=1e-3)
    assert loaded.predicted["examples_per_sec"] == pytest.approx(result.examples_per_sec, abs=1e-3)
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['groups'\]"):
        load_layout(path)  # several groups are not one layout
    bad = tmp_path / "bad.yaml"
    bad.write_text("groups:\n- {mesh: {model: 2}, devices: [cpu:0]}\n")
    with pytest.raises(ValueError, match="group 0: .*needs 2 devices, got 1"):
        load_plan(str(bad))


def test_table_lists_layers_and_devices():
    result = plan(_profile(), VGG, groups=1)
    table = format_table(result)
    for name in ("conv1", "conv2", "fc1", "logits", "edge0", "edge3", "memory MiB", "layer ms"):
        assert name in table
    assert "%.2f ms" % result.groups[0].prediction.step_ms in table


def _cli(*args):
    code = "import sys; from absl import app; from edgemesh_tf.cli import plan; app.run(plan.main, argv=sys.argv)"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, timeout=60)


@pytest.mark.subprocess
def test_cli_writes_plan_and_rejects_bad_profiles(tmp_path):
    prof = str(tmp_path / "p.json")
    save_profile(_profile(), prof)
    out = str(tmp_path / "layouts" / "edge4.yaml")
    run = _cli("--profile", prof, "--model", "vgg", "--out", out, "--groups", "1")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "conv1" in run.stdout and "wrote " + out in run.stdout
    load_layout(out).validate(VGG.dims(32))

    broken = tmp_path / "broken.json"
    data = json.loads(open(prof).read())
    data["devices"][2]["bandwidth_mbit"] = -5
    broken.write_text(json.dumps(data))
    for path, message in ((str(tmp_path / "missing.json"), "does not exist"),
                          (str(broken), "device 'edge2': field 'bandwidth_mbit' must be a finite number > 0, got -5")):
        run = _cli("--profile", path, "--out", out)
        assert run.returncode != 0 and message in run.stderr, run.stderr[-2000:]
        assert "Traceback" not in run.stderr
    del data["devices"][0]["layers"]
    broken.write_text(json.dumps(data))
    run = _cli("--profile", str(broken))
    assert run.returncode != 0 and "field 'layers' must be a non-empty list" in run.stderr
    assert "Traceback" not in run.stderr
    run = _cli("--profile", prof, "--groups", "2", "--noengine")
    assert run.returncode != 0 and "groups=2 without the engine" in run.stderr and "Traceback" not in run.stderr
    run = _cli("--profile", prof, "--model", "resnet")
    assert run.returncode != 0 and "measured for model 'vgg', not 'resnet'" in run.stderr
