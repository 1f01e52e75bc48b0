"""Calibration of layer times by a measured whole-model step (pure; no TensorFlow)."""
import dataclasses

import pytest

from edgemesh_tf.mesh.layout import even_split_layout
from edgemesh_tf.models import get_model
from edgemesh_tf.planner import model_stats, plan
from edgemesh_tf.planner.calibrate import (alone_memory_bytes, apportion, beside_split_step, calibrated, compute_scale,
                                           compute_scales, memory_fractions, plain_memory_bytes, split_step,
                                           steps_to_time, whole_step_devices)
from edgemesh_tf.planner import cost
from edgemesh_tf.planner.predict import predict

from planner_util import flops_device, profile

SPEC = get_model("vgg", (8, 8, 1), 10)
STATS = model_stats(SPEC, 32)


def _profile(whole=None, on=0, speeds=(4, 2)):
    devs = [flops_device(n, STATS, g, i, bw=1000, lat=0.5) for i, (n, g) in enumerate(zip("abcd", speeds))]
    if whole is not None:
        devs[on] = dataclasses.replace(devs[on], whole_step_ms=whole)
    return profile(SPEC, devs, 32)


def test_the_factor_makes_the_cost_model_predict_the_measured_step():
    p = _profile()
    alone = predict([p.devices[0]], STATS, {})
    base = alone.step_ms - alone.compute_ms[0]
    measured = base + 0.8 * alone.compute_ms[0]  # the real step: 20% less compute than the layers summed
    cal = calibrated(_profile(whole=measured), SPEC)
    assert cal.compute_scale == pytest.approx(0.8, abs=1e-4)
    assert predict([cal.devices[0]], STATS, {}).step_ms == pytest.approx(measured, rel=1e-3)
    # a device not measured takes the factor of the measured one
    assert predict([cal.devices[1]], STATS, {}).compute_ms[0] == pytest.approx(
        0.8 * predict([p.devices[1]], STATS, {}).compute_ms[0], rel=1e-3)


def test_each_timed_device_gets_its_own_factor_and_the_others_their_nearest_in_speed():
    """A throttled device runs short layers within a CFS period: timed alone they are faster than its
    steps. Each timed device is scaled to its own step; an untimed one like the nearest in slowness."""
    p = _profile(speeds=(8, 4, 3.5, 1))
    step = {}
    for d, f in zip(p.devices[:2], (0.8, 1.3)):
        alone = predict([d], STATS, {})
        step[d.name] = alone.step_ms - alone.compute_ms[0] + f * alone.compute_ms[0]
    p = dataclasses.replace(p, devices=tuple(dataclasses.replace(d, whole_step_ms=step.get(d.name, 0.0))
                                             for d in p.devices))
    assert compute_scales(p, SPEC) == pytest.approx({"a": 0.8, "b": 1.3, "c": 1.3, "d": 1.3})
    assert compute_scale(p, SPEC) == pytest.approx((0.8 + 1.3) / 2)  # the median of the timed
    cal = calibrated(p, SPEC)
    for d in cal.devices[:2]:
        assert predict([d], STATS, {}).step_ms == pytest.approx(step[d.name], rel=1e-3)
    assert cal.compute_scale == pytest.approx(1.05, abs=1e-4)


def test_no_measurement_or_a_wild_one_leaves_the_profile_as_measured():
    p = _profile()
    assert calibrated(p, SPEC) is p and compute_scale(p, SPEC) is None
    wild = _profile(whole=1e9)
    assert compute_scale(wild, SPEC) is None and calibrated(wild, SPEC).devices == wild.devices


def test_calibrating_twice_scales_once_and_plan_calibrates_unless_told_not_to():
    p = _profile(whole=predict([_profile().devices[0]], STATS, {}).step_ms * 0.5)
    once = calibrated(p, SPEC)
    assert calibrated(once, SPEC) is once and once.compute_scale < 1
    assert plan(p, SPEC).examples_per_sec == pytest.approx(plan(once, SPEC).examples_per_sec)
    assert plan(p, SPEC).examples_per_sec > plan(p, SPEC, calibrate=False).examples_per_sec
    assert plan(p, SPEC, calibrate=False).examples_per_sec == pytest.approx(plan(_profile(), SPEC).examples_per_sec)


def test_the_whole_step_is_timed_on_every_device_the_model_fits():
    need = alone_memory_bytes(STATS)
    assert whole_step_devices({"a": need // 2, "b": need * 2, "c": need * 3}, SPEC, 32) == ("c", "b")
    assert whole_step_devices({"a": need // 2, "b": need + 1}, SPEC, 32) == ()  # no margin to spare
    assert whole_step_devices({}, SPEC, 32) == ()
    # the bound is the memory model of a plain step (the profiler's): no engine replica, no session
    from edgemesh_tf.planner.cost import MEMORY
    assert need == MEMORY.device_bytes(STATS, [d.units for d in STATS.dims])
    assert need < predict([_profile().devices[0]], STATS, {}).memory_bytes[0]  # a replica hosting its session


def test_the_split_overhead_makes_the_cost_model_predict_the_measured_split_step():
    p = _profile(whole=predict([_profile().devices[0]], STATS, {}).step_ms)  # compute as profiled (factor 1)
    _, shares = even_split_layout(SPEC.split_dims(), ("a", "b"))
    modelled = predict(list(p.devices), STATS, shares).step_ms
    # the real split: 3 ms per split layer and peer on a, 6 on b (half a's speed: twice its CPU time)
    truth = [dataclasses.replace(d, split_overhead_ms=o) for d, o in zip(p.devices, (3.0, 6.0))]
    measured = predict(truth, STATS, shares).step_ms
    assert measured > modelled + 3.0 * len(shares)
    cal = calibrated(dataclasses.replace(p, split_step_ms=measured, split_step_devices=("a", "b")), SPEC)
    assert [d.split_overhead_ms for d in cal.devices] == pytest.approx([3.0, 6.0], abs=1e-3)
    assert predict(list(cal.devices), STATS, shares).step_ms == pytest.approx(measured, rel=1e-4)
    # a device alone splits nothing: the overhead does not touch it
    assert predict([cal.devices[0]], STATS, {}).step_ms == pytest.approx(predict([p.devices[0]], STATS, {}).step_ms,
                                                                          rel=1e-3)
    # a split step faster than modelled is no negative overhead
    fast = dataclasses.replace(p, split_step_ms=modelled / 2, split_step_devices=("a", "b"))
    assert all(d.split_overhead_ms == 0 for d in calibrated(fast, SPEC).devices)


def test_the_split_step_is_timed_on_the_three_largest_budgets_if_each_holds_its_part():
    need = 2 * alone_memory_bytes(STATS)  # a small model: the runtime, not the weights, decides
    even = {n: tuple(v) for n, v in even_split_layout(SPEC.split_dims(), "acd")[1].items()}
    assert split_step({"a": need, "b": need // 8, "c": need, "d": need}, SPEC, 32) == (("a", "c", "d"), even)
    assert split_step({"a": need, "b": need // 8, "c": need}, SPEC, 32)[0] == ("a", "c")  # b cannot: two
    assert split_step({"a": need, "b": need // 8, "c": need // 8}, SPEC, 32) == ((), {})
    assert split_step({"a": need}, SPEC, 32) == ((), {})
    big = 4 * need  # holds a whole step and its split part at once
    assert steps_to_time({"a": need, "c": big}, SPEC, 32) == {
        "whole_step_devices": ("c", "a"), "split_step_devices": ("c", "a"),
        "split_step_sizes": {n: tuple(v) for n, v in even_split_layout(SPEC.split_dims(), "ca")[1].items()},
        "whole_beside_split": ("c",),
        "whole_step_bytes": int(alone_memory_bytes(STATS) * cost.MEMORY.headroom_for(SPEC.name))}


def test_whole_steps_are_timed_beside_the_split_step_where_both_graphs_fit():
    """pi4 and VGG-16: jetson0 (1 GiB) holds its whole step and its third of the split at once; pi1's
    512 MiB does not hold the whole step (455 MiB measured at 128-bit SIMD, bench/memory_fit.py).
    With 640 MiB pi1 holds either but not both, so its whole step is timed on its own."""
    spec = get_model("vgg16", (32, 32, 1), 10)
    budgets = {"jetson0": 1024 << 20, "pi1": 512 << 20, "pi2": 256 << 20, "pi3": 192 << 20}
    steps = steps_to_time(budgets, spec, 32)
    assert steps["whole_step_devices"] == ("jetson0",)
    assert steps["split_step_devices"] == ("jetson0", "pi1", "pi2")
    assert steps["whole_beside_split"] == ("jetson0",)
    budgets["pi1"] = 640 << 20
    steps = steps_to_time(budgets, spec, 32)
    assert steps["whole_step_devices"] == ("jetson0", "pi1") and steps["whole_beside_split"] == ("jetson0",)
    assert beside_split_step(budgets, spec, 32, ("jetson0", "pi1"), (), {}) == ()  # no split step, nothing beside
    # a device outside the split needs room only for its whole step
    assert beside_split_step(budgets, spec, 32, ("pi1",), ("jetson0", "pi2"), {}) == ("pi1",)


def test_a_device_short_of_an_even_part_takes_what_its_budget_holds_in_the_split_step():
    """pi4 and VGG-16: pi2 held 1% less than an even third, and the step fell back to two devices,
    where the per-peer overhead fitted 0 and the four-way split was predicted at 0.78x its step."""
    spec = get_model("vgg16", (32, 32, 1), 10)
    stats = model_stats(spec, 32)
    _, even = even_split_layout(spec.split_dims(), "abc")
    third = max(plain_memory_bytes(stats, [[even[d.name][i] if d.name in even else d.units for d in stats.dims]
                                          for i in range(3)]))
    budgets = {"a": 4 * third, "b": 2 * third, "c": int(0.95 * third)}  # c short of an even third: no headroom even
    group, sizes = split_step(budgets, spec, 32)
    assert group == ("a", "b", "c") and set(sizes) == set(even)
    for name, units in sizes.items():
        assert sum(units) == sum(even[name]) and units[2] <= min(units[:2])
    assert sum(u[2] for u in sizes.values()) < 0.95 * sum(u[2] for u in even.values())  # c holds less
    held = [[sizes[d.name][i] if d.name in sizes else d.units for d in stats.dims] for i in range(3)]
    need = plain_memory_bytes(stats, held)
    assert all(n * cost.MEMORY.headroom_for("vgg16") <= budgets[d] for n, d in zip(need, "abc"))


def test_memory_fractions_fill_the_caps_evenly_and_apportion_keeps_a_capped_device_under():
    assert memory_fractions([0.2, 1.0, 1.0]) == pytest.approx((0.2, 0.4, 0.4))
    assert memory_fractions([0.5, 0.5]) == pytest.approx((0.5, 0.5))
    assert memory_fractions([0.1, 0.42, 1.0]) == pytest.approx((0.1, 0.42, 0.48))  # capped in turn
    assert memory_fractions([0.3, 0.3, 0.3]) is None and memory_fractions([-0.1, 2.0]) is None
    assert apportion(10, (0.2, 0.4, 0.4)) == (2, 4, 4)
    assert apportion(128, (0.3372, 0.3372, 0.3256)) == (44, 43, 41)  # the capped 41.7 stays 41
    assert apportion(3, (0.01, 0.49, 0.5)) == (1, 1, 1)  # at least one each
    with pytest.raises(ValueError, match="cannot give 3 positions at least one of 2 units"):
        apportion(2, (0.2, 0.4, 0.4))


def test_the_split_overhead_is_fitted_on_the_split_step_as_timed():
    """An uneven split step is fitted with its own units, not an even split's."""
    p = _profile(whole=predict([_profile().devices[0]], STATS, {}).step_ms)
    sizes = {n: apportion(u, (0.7, 0.3)) for n, u in SPEC.split_dims().items() if u >= 2}
    truth = [dataclasses.replace(d, split_overhead_ms=o) for d, o in zip(p.devices, (3.0, 6.0))]
    measured = predict(truth, STATS, sizes).step_ms
    cal = calibrated(dataclasses.replace(p, split_step_ms=measured, split_step_devices=("a", "b"),
                                         split_step_sizes=sizes), SPEC)
    assert [d.split_overhead_ms for d in cal.devices] == pytest.approx([3.0, 6.0], abs=1e-3)


def test_the_split_overhead_is_charged_once_per_peer_on_each_device():
    from edgemesh_tf.planner.cost import layer_coeffs
    devs = [dataclasses.replace(flops_device(n, STATS, g, i, bw=1000, lat=0.5), split_overhead_ms=o)
            for i, (n, g, o) in enumerate((("a", 4, 1.0), ("b", 2, 2.0), ("c", 1, 4.0)))]
    dim = STATS.dims[1]
    shares = (dim.units - 2, 1, 1)
    for k in (2, 3):
        co = layer_coeffs(devs[:k], dim, 32, 32)
        bare = layer_coeffs([dataclasses.replace(d, split_overhead_ms=0.0) for d in devs[:k]], dim, 32, 32)
        extra = [g - b for g, b in zip(co.gather_ms(shares[:k]), bare.gather_ms(shares[:k]))]
        assert extra == pytest.approx([(k - 1) * d.split_overhead_ms for d in devs[:k]])
    assert layer_coeffs(devs[:1], dim, 32, 32).gather_ms(None) == (0.0,)  # alone: nothing to gather
