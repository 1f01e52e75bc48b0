"""The memory model (planner/memory.py): its terms, the least-squares fit of measured peaks, the
shipped fit's file, and the planner's use of it."""
import functools
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
                out.extend((stats, held, k, r, mm.device_bytes(stats, held, k, rank=r)) for r in range(k))
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
    pts = [(s, h, k, r, p - 30 * 2 ** 20 if p > 100 * 2 ** 20 else p) for s, h, k, r, p in _points(mm)]
    got = memory.fit(pts)
    assert min(got.runtime_bytes, got.weight_factor, got.master_factor, got.activation_factor) >= 0
    with pytest.raises(ValueError, match="at least 4 measured points"):
        memory.fit(pts[:3])


def test_a_split_device_holds_the_masters_placed_on_it_and_a_replica_its_anchors():
    from edgemesh_tf.planner import masters

    stats = model_stats(get_model("vgg_wide", (32, 32, 3), 10), 8)
    P = stats.param_bytes
    held = masters.rank_bytes(stats, 4)
    # every whole tensor is on one device: the weights and state once, the momentum slots of the weights
    momentum = sum(t.nbytes for t in stats.tensors if t.kind == "momentum")
    assert sum(w for w, _ in held) == P + momentum and sum(p for _, p in held) == P
    # vgg_wide's fc2 kernel is half the model: the device holding it holds twice an even share of the masters
    big = max(t.nbytes for t in stats.tensors)
    assert big > 0.45 * P and max(p for _, p in held) >= big > 1.8 * P / 4
    for r, (whole, pushed) in enumerate(held):
        assert MODEL.fixed_bytes(stats, 4, rank=r) - MODEL.fixed_bytes(stats, 1) == pytest.approx(2.5 * whole, abs=1)
        assert (MODEL.fixed_bytes(stats, 4, replica=True, rank=r) - MODEL.fixed_bytes(stats, 4, rank=r)
                == pytest.approx(2 * pushed, abs=1))
    # one device: its slices are the masters, no master term; a replica still keeps whole anchors
    assert MODEL.fixed_bytes(stats, 1, replica=True) - MODEL.fixed_bytes(stats, 1) == pytest.approx(2 * P, abs=1)


def test_the_replica_terms_are_fitted_to_replica_peaks_less_the_plain_prediction():
    import dataclasses

    from edgemesh_tf.planner import masters

    true = dataclasses.replace(MODEL, replica_factor=1.5, replica_split_bytes=80 * 2 ** 20)
    stats = model_stats(get_model("vgg16", (32, 32, 3), 10), 32)
    assert true.replica_bytes(stats, 1) == 1.5 * stats.param_bytes  # one device: no split copies
    pushed = [p for _, p in masters.rank_bytes(stats, 4)]
    for r in range(4):
        assert true.replica_bytes(stats, 4, r) == pytest.approx(1.5 * pushed[r] + 80 * 2 ** 20)
    replicas = [(s, h, k, r, true.device_bytes(s, h, k, True, r)) for s, h, k, r, _ in _points(true)]
    got = memory.fit_replica(MODEL, replicas)
    assert got.replica_factor == pytest.approx(1.5, rel=1e-6)
    assert got.replica_split_bytes == pytest.approx(80 * 2 ** 20, rel=1e-6)
    assert got.weight_factor == MODEL.weight_factor  # the plain terms are kept
    plain = memory.fit_replica(true, [(s, h, k, r, true.device_bytes(s, h, k, rank=r)) for s, h, k, r, _ in replicas])
    assert plain.replica_factor == 0.0 and plain.replica_split_bytes == 0.0
    with pytest.raises(ValueError, match="at least 2 measured replica peaks"):
        memory.fit_replica(MODEL, replicas[:1])


def test_the_headroom_is_the_fits_largest_error_and_comes_with_the_shipped_file(tmp_path):
    import dataclasses

    assert memory.MemoryModel(0.0, 1.0, 1.0, 1.0).headroom == 1.0
    assert dataclasses.replace(MODEL, fit_error=0.25).headroom == 1.25
    path = tmp_path / "fit.json"
    old = {k: v for k, v in MODEL.to_dict().items() if k not in ("fit_error", "replica_factor", "replica_split_bytes")}
    path.write_text(json.dumps({"model": old, "fitted_max_abs_rel_error": 0.3}))
    assert memory.load(str(path)).headroom == 1.3  # a file written before the model carried its error
    assert memory.load(str(path)).replica_factor == 2.0  # ... and its replica factor: counted
    new = dataclasses.replace(MODEL, fit_error=0.2, replica_factor=1.5, replica_split_bytes=8e7)
    path.write_text(json.dumps({"model": new.to_dict()}))
    assert memory.load(str(path)) == new and memory.load(str(path)).headroom == 1.2
    # per model: a measured model's own largest under-prediction, any other model the largest
    per = dataclasses.replace(new, model_errors=(("vgg16", 0.03), ("vgg_wide", 0.25)))
    assert per.headroom_for("vgg16") == 1.03 and per.headroom_for("vgg_wide") == 1.25
    assert per.headroom_for("resnet") == per.headroom_for(None) == 1.2
    path.write_text(json.dumps({"model": per.to_dict()}))
    assert per.to_dict()["model_errors"] == {"vgg16": 0.03, "vgg_wide": 0.25} and memory.load(str(path)) == per


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
    fixed = [cost.MEMORY.fixed_bytes(stats, 3, replica=True, rank=r) for r in range(3)]
    assert cost.fixed_memory_bytes(stats, 3) == [fixed[0] + cost.MEMORY.session_host_bytes(stats, 3), *fixed[1:]]
    assert cost.MEMORY == memory.FITTED


def _pi4(stats):
    """layouts/pi4.yaml as a profile: ~25 / 18 / 18 / 10 GFLOP/s, 1024 / 512 / 256 / 192 MiB, 1 Gbit/s."""
    from planner_util import flops_device
    return [flops_device(n, stats, g, i, bw=1000, lat=0.3, mem=m << 20)
            for i, (n, g, m) in enumerate([("jetson0", 25, 1024), ("pi1", 18, 512), ("pi2", 18, 256), ("pi3", 10, 192)])]


@functools.lru_cache(maxsize=None)
def _pi4_plan(name, commit_interval):
    """(devices too small for a whole replica of `name` (32x32, batch 32), the pi4 plan, its devices);
    planned (and its checks run) once per argument: two tests read the vgg16 plan at commit interval 8."""
    from planner_util import profile

    from edgemesh_tf.planner import plan
    from edgemesh_tf.planner.alternatives import sync_data_parallel

    spec = get_model(name, (32, 32, 1), 10)
    stats = model_stats(spec, 32)
    devs = _pi4(stats)
    fixed, per_example = cost.MEMORY.whole_model_bytes(stats, 32, replica=True)
    too_small = {d.name for d in devs if fixed + 32 * per_example > d.memory_bytes}
    sync = sync_data_parallel(devs, stats, 32)
    assert sync is None or not set(sync.names) & too_small  # data parallelism cannot use them
    result = plan(profile(spec, devs, 32), spec, commit_interval=commit_interval)
    assert all(result.examples_per_sec >= v for _, v in result.alternatives)
    by_name = {d.name: d for d in devs}
    for g in result.groups:  # every device within its budget, the memory model's headroom kept
        assert all(m * cost.MEMORY.headroom_for(name) <= by_name[n].memory_bytes
                   for m, n in zip(g.prediction.memory_bytes, g.names))
    return too_small, result


@pytest.mark.parametrize("commit_interval", [1, 8])
def test_a_model_too_large_for_a_small_board_trains_split_on_it(commit_interval):
    """VGG-16 at 32x32 (batch 32) does not fit pi1 (512 MiB) as a whole engine replica, so data
    parallelism cannot use it; the plan splits the model over a group with it (the Pi-class claims'
    plan, bench/edgemesh_claims.py). At the measured replica memory and the headroom no 256 MiB board
    takes a share of VGG-16 (below) and vgg_wide's takes one only at H = 1."""
    too_small, result = _pi4_plan("vgg16", commit_interval)
    used = {n for g in result.groups for n in g.names}
    assert "pi1" in too_small & used and result.kind == "grid"
    assert all(g.layout.sizes for g in result.groups if "pi1" in g.names)  # split where it is


def test_vgg16_replicas_do_not_fit_the_two_smallest_boards():
    """VGG-16 does not fit pi2 and pi3 whole, nor, by the replica memory measured (bench/memory_fit.py:
    about 2.6 P/k + 75 MiB more on each device of a split group), a share of a split group with the headroom:
    the plan leaves them idle (docs/DESIGN.md)."""
    too_small, result = _pi4_plan("vgg16", 8)
    assert {"pi2", "pi3"} <= too_small and {"pi2", "pi3"} <= set(result.idle)


def test_vgg16_as_one_plain_layout_takes_pi2_into_the_split():
    """Without the engine's replica (one group, no ps: `edgemesh train --layout`, what
    bench/edgemesh_claims.py runs) pi2's 256 MiB, and here pi3's 192 MiB, hold a share of VGG-16 with
    the headroom."""
    from planner_util import profile

    from edgemesh_tf.planner import plan

    spec = get_model("vgg16", (32, 32, 1), 10)
    devs = _pi4(model_stats(spec, 32))
    result = plan(profile(spec, devs, 32), spec, engine=False)
    assert len(result.groups) == 1 and {"pi2", "pi3"} <= set(result.groups[0].names) and result.kind == "grid"
    assert all(len(shares) == len(result.groups[0].names) for _, shares in result.groups[0].layout.sizes)
    headroom = cost.MEMORY.headroom_for("vgg16")
    assert all(m * headroom <= {d.name: d.memory_bytes for d in devs}[n]
               for m, n in zip(result.groups[0].prediction.memory_bytes, result.groups[0].names))


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
