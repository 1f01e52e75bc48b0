"""The memory model (planner/memory.py): its terms, the least-squares fit of measured peaks, the
shipped fit's file, and the planner's use of it."""
import json

import pytest

from edgemesh_tf.models import get_model
from edgemesh_tf.planner import cost, memory
from edgemesh_tf.planner.model_stats import model_stats

MODEL = memory.MemoryModel(50 * 2 ** 20, 4.5, 2.5, 2.0, "known")


def _points(mm, models=("vgg", "vgg_wide", "vgg16"), batches=(8, 32), ways=(1, 2, 4)):
    out = []
    for name in models:
        spec = get_model(name, (32, 32, 3), 10)
        for b in batches:
            stats = model_stats(spec, b)
            for k in ways:
                held = [d.units if d.units < k else d.units // k for d in stats.dims]
                out.append((stats, held, k, mm.device_bytes(stats, held, k)))
    return out


def test_fit_recovers_the_coefficients_of_exact_points():
    got = memory.fit(_points(MODEL))
    assert got.runtime_bytes == pytest.approx(MODEL.runtime_bytes, rel=1e-3)
    assert got.weight_factor == pytest.approx(4.5, rel=1e-3)
    assert got.master_factor == pytest.approx(2.5, rel=1e-3)
    assert got.activation_factor == pytest.approx(2.0, rel=1e-3)


def test_fit_keeps_every_coefficient_non_negative():
    # peaks that a negative runtime would fit best: the runtime is dropped to 0 and the rest refitted
    mm = memory.MemoryModel(0.0, 4.0, 2.0, 1.0)
    pts = [(s, h, k, p - 30 * 2 ** 20 if p > 100 * 2 ** 20 else p) for s, h, k, p in _points(mm)]
    got = memory.fit(pts)
    assert min(got.runtime_bytes, got.weight_factor, got.master_factor, got.activation_factor) >= 0
    with pytest.raises(ValueError, match="at least 4 measured points"):
        memory.fit(pts[:3])


def test_a_split_device_holds_its_part_of_the_masters_and_a_replica_its_anchors():
    stats = model_stats(get_model("vgg16", (32, 32, 3), 10), 8)
    P = stats.param_bytes
    assert MODEL.fixed_bytes(stats, 4) - MODEL.fixed_bytes(stats, 1) == pytest.approx(2.5 * P / 4, abs=1)
    assert MODEL.fixed_bytes(stats, 4, replica=True) - MODEL.fixed_bytes(stats, 4) == pytest.approx(2 * P / 4, abs=1)
    # one device: its slices are the masters, no master term; a replica still keeps whole anchors
    assert MODEL.fixed_bytes(stats, 1, replica=True) - MODEL.fixed_bytes(stats, 1) == pytest.approx(2 * P, abs=1)


def test_terms_add_up():
    stats = model_stats(get_model("vgg16", (32, 32, 3), 10), 16)
    held = [d.units for d in stats.dims]
    fixed, per_example = MODEL.whole_model_bytes(stats, 16)
    assert MODEL.device_bytes(stats, held) == pytest.approx(fixed + 16 * per_example, rel=1e-6)
    # a pooled conv keeps its pre-pool output (4x the pooled one) for the backward pass
    conv = stats.dim("conv1_2")
    assert conv.act_bytes == 4 * conv.out_bytes
    half = [d.units // 2 if d.units > 10 else d.units for d in stats.dims]
    assert MODEL.device_bytes(stats, half) < 0.65 * MODEL.device_bytes(stats, held)  # weights dominate vgg16


def test_load_the_shipped_fit_or_say_what_is_wrong(tmp_path):
    assert memory.load(str(tmp_path / "absent.json")) == memory.COUNTED
    path = tmp_path / "fit.json"
    path.write_text(json.dumps({"model": MODEL.to_dict()}))
    assert memory.load(str(path)) == MODEL
    path.write_text(json.dumps({"model": {"runtime_bytes": 1}}))
    with pytest.raises(ValueError, match="fit.json: expected .*weight_factor"):
        memory.load(str(path))


def test_the_planner_predicts_with_the_fitted_model():
    stats = model_stats(get_model("vgg", (32, 32, 3), 10), 8)
    fixed = cost.MEMORY.fixed_bytes(stats, 3, replica=True)
    assert cost.fixed_memory_bytes(stats, 3) == [fixed + cost.MEMORY.session_host_bytes(stats, 3), fixed, fixed]
    assert cost.MEMORY == memory.FITTED


def _pi4(stats):
    """layouts/pi4.yaml as a profile: ~25 / 18 / 18 / 10 GFLOP/s, 1024 / 512 / 256 / 192 MiB, 1 Gbit/s."""
    from planner_util import flops_device
    return [flops_device(n, stats, g, i, bw=1000, lat=0.3, mem=m << 20)
            for i, (n, g, m) in enumerate([("jetson0", 25, 1024), ("pi1", 18, 512), ("pi2", 18, 256), ("pi3", 10, 192)])]


@pytest.mark.parametrize("commit_interval", [1, 8])
def test_vgg16_on_pi_boards_needs_the_filter_split(commit_interval):
    """By the fitted memory model VGG-16 (batch 32) does not fit the two smallest boards whole, so
    data parallelism cannot use them; the plan splits filters over groups that do use them, and is
    predicted faster than every alternative."""
    from planner_util import profile

    from edgemesh_tf.planner import plan
    from edgemesh_tf.planner.alternatives import sync_data_parallel

    spec = get_model("vgg16", (32, 32, 1), 10)
    stats = model_stats(spec, 32)
    devs = _pi4(stats)
    fixed, per_example = cost.MEMORY.whole_model_bytes(stats, 32, replica=True)
    too_small = [d.name for d in devs if fixed + 32 * per_example > d.memory_bytes]
    assert {"pi2", "pi3"} <= set(too_small)
    sync = sync_data_parallel(devs, stats, 32)
    assert sync is None or not set(sync.names) & set(too_small)
    result = plan(profile(spec, devs, 32), spec, commit_interval=commit_interval)
    used = {n for g in result.groups for n in g.names}
    assert result.kind == "grid" and set(too_small) <= used
    assert all(g.layout.sizes for g in result.groups if set(g.names) & set(too_small))  # split where they are
    assert all(result.examples_per_sec >= v for _, v in result.alternatives)
    by_name = {d.name: d for d in devs}
    for g in result.groups:
        assert all(m <= by_name[n].memory_bytes for m, n in zip(g.prediction.memory_bytes, g.names))


def test_the_session_host_is_fitted_apart_and_charged_to_a_groups_first_device():
    true = memory.MemoryModel(50 * 2 ** 20, 4.5, 2.5, 2.0, "known", 40 * 2 ** 20, 1.5, 20 * 2 ** 20)
    sessions = []
    for name in ("vgg", "vgg_wide", "vgg16"):
        stats = model_stats(get_model(name, (32, 32, 3), 10), 8)
        sessions += [(stats, k, true.session_host_bytes(stats, k)) for k in (1, 2, 4)]
    got = memory.fit(_points(true), sessions)
    assert got.session_bytes == pytest.approx(40 * 2 ** 20, rel=1e-3) and got.session_factor == pytest.approx(1.5, rel=1e-3)
    assert got.session_per_device == pytest.approx(20 * 2 ** 20, rel=1e-3)
    assert memory.fit(_points(true)).session_host_bytes(sessions[0][0]) == 0  # no sessions measured: no term
