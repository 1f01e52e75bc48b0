"""plan -> train is two commands: a profile of two local devices (speeds 1 and 1/3, fast link) is
planned into an uneven layout that `edgemesh train` runs as it is."""
import json
import os
import subprocess
import sys

import pytest
import yaml

from edgemesh_tf.models import get_model
from edgemesh_tf.models.shapes import layer_shapes
from edgemesh_tf.profiling.types import DeviceProfile, LayerTiming, Profile, save_profile

pytestmark = [pytest.mark.subprocess]

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def _run(*args):
    return subprocess.run([sys.executable, "-m", "edgemesh_tf.cli.main", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def _profile(tmp_path, slowdowns=(1.0, 3.0)):
    """A profile of local devices, each `slowdown` times slower than the first, on fast links: (its path,
    the Profile, the model)."""
    spec = get_model("vgg", (8, 8, 1), 10)
    devices = []
    for i, slowdown in enumerate(slowdowns):
        layers = tuple(LayerTiming(s.name, 40.0 * slowdown * s.units / 64) for s in layer_shapes(spec, 32))
        devices.append(DeviceProfile("dev%d" % i, "/job:localhost/replica:0/task:0/device:CPU:%d" % i, layers,
                                     1 << 30, bandwidth_mbit=10000.0, latency_ms=0.05, step_overhead_ms=0.1))
    profile = Profile("vgg", 32, spec.image_shape, 10, tuple(devices))
    save_profile(profile, str(tmp_path / "profile.json"))
    return tmp_path / "profile.json", profile, spec


def test_plan_with_sync_prices_the_job_that_strategy_runs(tmp_path):
    """`edgemesh plan --sync S` plans as `edgemesh run --sync S` and `api.plan(strategy=S)` do
    (engine/core/job_cost.py's objective); with --commit_interval as well it says they conflict."""
    import edgemesh_tf as em

    path, profile, spec = _profile(tmp_path, (1.0, 1.5, 4.0))
    out = _run("plan", "--profile", str(path), "--sync", "bsp", "--out", str(tmp_path / "plan.yaml"))
    assert out.returncode == 0, out.stderr[-2000:]
    expected = em.plan(profile, spec, strategy="bsp")
    head = (tmp_path / "plan.yaml").read_text().splitlines()[0]
    assert "predicted %.1f effective examples/s" % expected.examples_per_sec in head, (head, expected)
    both = _run("plan", "--profile", str(path), "--sync", "bsp", "--commit_interval", "4")
    assert both.returncode != 0 and "--commit_interval and --sync" in both.stderr


def test_plan_then_train(tmp_path):
    profile, _, _ = _profile(tmp_path)
    plan = tmp_path / "plan.yaml"
    out = _run("plan", "--profile", str(profile), "--model", "vgg", "--groups", "1", "--out", str(plan))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "conv2" in out.stdout  # the table of layers x devices
    sizes = yaml.safe_load(plan.read_text())["sizes"]
    # split unevenly (filters, or the batch when synchronous data parallelism is predicted faster):
    # the 3x faster device computes more
    assert sizes and all(s[0] > 2 * s[1] for s in sizes.values()), sizes
    # the named option reaches the planner: no device may hold 5% of the model's step alone
    capped = _run("plan", "--profile", str(profile), "--groups", "1", "--memory_fraction", "0.05")
    assert capped.returncode != 0 and "capped at 0.05 of the whole model's step on one device" in capped.stderr
    out = _run("train", "--layout", str(plan), "--steps", "20", "--eval_every", "0")
    assert out.returncode == 0, out.stderr[-2000:]
    final = json.loads(out.stdout.splitlines()[-1])
    assert final["final"] and final["steps"] == 20
