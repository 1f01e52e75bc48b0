"""The adaptive grid: capability-balanced groups and throughput scoring (planning time: bench/planning_time.py)."""
import dataclasses

import pytest
from planner_util import device, flops_device, plan_random_cluster, profile

from edgemesh_tf.models.zoo import get_model
from edgemesh_tf.planner import PlanError, capability_groups, model_stats, plan
from edgemesh_tf.planner.grid import throughput

VGG32 = get_model("vgg", (32, 32, 3), 10)


def test_sixteen_devices_vgg_plan_to_valid_layouts_that_beat_every_candidate():
    """The planning time is bench/planning_time.py's (256 and 1,024 devices over a grid of regimes), not a test's."""
    result, _, devs = plan_random_cluster(VGG32, 16)
    used = [n for g in result.groups for n in g.names]
    assert len(used) == len(set(used)) and sorted(used + list(result.idle)) == sorted(d.name for d in devs)
    assert result.examples_per_sec >= max(r for _, r in result.candidates + result.alternatives) * (1 - 1e-9)
    for g in result.groups:
        g.layout.validate(VGG32.dims(32))


def test_capability_groups_balance_speed():
    devs = [device("d%d" % i, {"l": ms}, task=i) for i, ms in enumerate([1, 2, 2, 4, 4, 4, 4])]  # speeds 1, .5, .25
    groups = capability_groups(devs, 2)
    totals = [sum(1 / d.layers[0].compute_ms for d in g) for g in groups]
    assert totals == [1.5, 1.5]
    assert all(g == sorted(g, key=lambda d: d.layers[0].compute_ms) for g in groups)  # fastest first
    assert [len(g) for g in capability_groups(devs, 7)] == [1] * 7
    with pytest.raises(ValueError, match="number of groups must be in 1..7"):
        capability_groups(devs, 8)


def _homo(n, **kw):
    stats = model_stats(VGG32, 32)
    return profile(VGG32, [flops_device("n%d" % i, stats, 4, i, **kw) for i in range(n)], 32)


def test_fast_links_slow_ps_prefer_one_model_parallel_group():
    prof = _homo(4, bw=10000, lat=0.05)
    prof = dataclasses.replace(prof, ps_bandwidth_mbit=1.0)
    result = plan(prof, VGG32)
    assert len(result.groups) == 1 and result.groups[0].layout.num_devices == 4
    assert result.groups[0].layout.rules  # filters are split


def test_slow_links_prefer_data_parallel_groups():
    result = plan(_homo(4, bw=20, lat=20), VGG32, commit_interval=8)
    assert len(result.groups) == 4
    preds = [g.prediction for g in result.groups]
    assert result.examples_per_sec == pytest.approx(throughput(preds, 32, 8))
    # four asynchronous groups: each example counts 1 / (1 + 0.1 * 3) (the staleness charge)
    assert result.examples_per_sec == pytest.approx(sum(32000 / (p.step_ms + p.ps_sync_ms / 8) for p in preds) / 1.3)


def test_plans_keep_the_memory_models_headroom_below_every_budget(monkeypatch):
    import dataclasses

    from edgemesh_tf.planner import cost

    need = plan(_homo(4, bw=1000, lat=0.3), VGG32, groups=1, batch=16, memory_margin=1.0).groups[0]
    tight = max(need.prediction.memory_bytes)  # budgets a margin-less four-way plan fits
    squeezed = plan(_homo(4, bw=1000, lat=0.3, mem=tight), VGG32, batch=16, memory_margin=1.0)
    assert all(m <= tight for g in squeezed.groups for m in g.prediction.memory_bytes)
    for margin in (1.5, None):  # None: the shipped fit's headroom for the model
        factor = cost.MEMORY.headroom_for(VGG32.name) if margin is None else margin
        try:
            got = plan(_homo(4, bw=1000, lat=0.3, mem=tight), VGG32, batch=16, memory_margin=margin)
        except PlanError as e:
            assert "over the memory margin x%.3f" % factor in str(e)
            continue
        assert all(m * factor <= tight * 1.0001 for g in got.groups for m in g.prediction.memory_bytes)
    with pytest.raises(ValueError, match="memory_margin must be a number >= 1"):
        plan(_homo(2), VGG32, memory_margin=0.9)
    # a model measured without under-prediction keeps no headroom; any other model the largest error
    measured = dataclasses.replace(cost.MEMORY, fit_error=0.5, model_errors=((VGG32.name, 0.0),))
    monkeypatch.setattr(cost, "MEMORY", measured)
    own = plan(_homo(4, bw=1000, lat=0.3, mem=tight), VGG32, groups=1, batch=16)
    assert max(m for g in own.groups for m in g.prediction.memory_bytes) > tight / 1.5
    monkeypatch.setattr(cost, "MEMORY", dataclasses.replace(cost.MEMORY, model_errors=(("vgg16", 0.0),)))
    with pytest.raises(PlanError, match=r"over the memory margin x1\.500"):
        plan(_homo(4, bw=1000, lat=0.3, mem=tight), VGG32, groups=1, batch=16)


def test_forced_groups_and_memory_error():
    result = plan(_homo(4, bw=100, lat=1), VGG32, groups=2, batch=16)
    assert len(result.groups) == 2 and all(g.batch == 16 for g in result.groups)
    with pytest.raises(PlanError, match=r"device n\d: .* bytes missing"):
        plan(_homo(4, bw=100, lat=1, mem=1 << 20), VGG32)


def test_a_plan_without_the_engine_admits_a_device_too_small_for_a_replicas_share():
    """pi4-like: VGG-16, three equal Pi-class devices on fast links; the third device's budget holds
    most of a third of a plain step (with the headroom) but not what an engine replica keeps whatever
    its share (anchors, residuals, ps buffers), so only a plan for one plain layout (`edgemesh train
    --layout`) uses all three."""
    from edgemesh_tf.planner import cost

    spec = get_model("vgg16", (32, 32, 1), 10)
    stats = model_stats(spec, 32)
    headroom = cost.MEMORY.headroom_for(spec.name)
    small = int(cost.fixed_memory_bytes(stats, 3)[2] * headroom * 0.98)  # an engine replica's fixed bytes do not fit
    plain_stats = model_stats(spec, 32, engine=False)
    plain_fixed = cost.fixed_memory_bytes(plain_stats, 3)[2]
    assert plain_fixed * headroom < small * 0.6  # the premise: a plain step's leave room for a share
    # a plain layout's session is the chief's: its first device holds only its masters, as the others
    assert cost.fixed_memory_bytes(plain_stats, 3) == [cost.MEMORY.fixed_bytes(plain_stats, 3, rank=r) for r in range(3)]
    assert cost.fixed_memory_bytes(stats, 3)[0] > cost.MEMORY.fixed_bytes(stats, 3, replica=True, rank=0)
    devs = [flops_device("p%d" % i, stats, 4, i, bw=10000, lat=0.05, mem=(8 << 30) if i < 2 else small)
            for i in range(3)]
    prof = profile(spec, devs, 32)
    engine, layout = plan(prof, spec, groups=1), plan(prof, spec, engine=False)
    assert engine.engine and not layout.engine
    assert "p2" in engine.idle and engine.groups[0].names == ("p0", "p1")
    assert len(layout.groups) == 1 and set(layout.groups[0].names) == {"p0", "p1", "p2"} and not layout.idle
    assert layout.groups[0].layout.rules  # filters are split over the three
    for d, m in zip(layout.groups[0].names, layout.groups[0].prediction.memory_bytes):
        assert m * headroom <= prof.device(d).memory_bytes
    assert layout.groups[0].prediction.step_ms < engine.groups[0].prediction.step_ms
    # the same shares predicted for an engine replica: p2 over its budget
    replica_stats = model_stats(spec, 32, engine=True)
    held = [dict(layout.groups[0].layout.sizes).get(d.name, (d.units,) * 3)[2] for d in stats.dims]
    assert cost.held_memory_bytes(replica_stats, [held] * 3)[2] * headroom > small
    with pytest.raises(ValueError, match="several data-parallel groups need its parameter server"):
        plan(prof, spec, groups=2, engine=False)



VGG16 = get_model("vgg16", (32, 32, 1), 10)


@pytest.fixture(scope="module")
def weak_fourth():
    """VGG-16 (one plain layout) on 8, 4, 4 and 2 GFLOP/s at 1 Gbit/s: at the screen's coarse shares
    the three fastest look best; at full granularity all four are 7.7% faster."""
    stats = model_stats(VGG16, 32, engine=False)
    devs = [flops_device("n%d" % i, stats, g, i, bw=1000, lat=0.3) for i, g in enumerate([8, 4, 4, 2])]
    prof = profile(VGG16, devs, 32)
    return prof, stats, plan(prof, VGG16, calibrate=False, memory_margin=1.0, engine=False)


@pytest.mark.slow
def test_the_finish_offers_idle_devices_at_full_granularity(weak_fourth):
    from edgemesh_tf.planner.division import divide

    prof, stats, fast = weak_fourth
    three = divide(prof.devices[:3], stats, profile_batch=32)
    assert fast.groups[0].names == ("n0", "n1", "n2", "n3") and not fast.idle
    assert fast.groups[0].prediction.step_ms < three.prediction.step_ms * 0.95


@pytest.mark.slow
def test_memory_fraction_caps_every_device_below_its_share_of_single_device_training(weak_fourth):
    from edgemesh_tf.planner import cost

    prof, stats, fast = weak_fourth
    whole = cost.held_memory_bytes(stats, [[d.units for d in stats.dims]])[0]
    worst = max(m for g in fast.groups for m in g.prediction.memory_bytes) / whole
    capped = plan(prof, VGG16, calibrate=False, memory_margin=1.0, engine=False, memory_fraction=0.5)
    held = [m / whole for g in capped.groups for m in g.prediction.memory_bytes]
    assert worst > 0.55 and max(held) <= 0.5  # the fastest plan holds more on its fastest device; the cap binds
    assert capped.examples_per_sec <= fast.examples_per_sec * (1 + 1e-9)  # memory is bought with time
    assert capped.kind == "grid" and all(g.layout.rules for g in capped.groups)  # no device holds it whole
    with pytest.raises(PlanError, match="capped at 0.10 of the whole model's step on one device"):
        plan(prof, VGG16, calibrate=False, memory_margin=1.0, engine=False, memory_fraction=0.1)
    for bad in (0, 1.5, "half"):
        with pytest.raises(ValueError, match="memory_fraction must be a number in"):
            plan(prof, VGG16, memory_fraction=bad)
