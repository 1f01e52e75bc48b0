"""Shared media (one Wi-Fi channel) in the cost model, by hand on small numbers."""
import dataclasses

import pytest
from planner_util import device
from specs import sequential

from edgemesh_tf.planner import divide, media, model_stats, predict
from edgemesh_tf.planner.simulate import queue_end, simulate_step_ms

SPEC = sequential("m", (8, 8, 1), 4, [("dense", "fc", 8), ("dense", "out", 4, False)])


def _on(d, medium="wifi", mbit=8.0):
    return dataclasses.replace(d, medium=medium, medium_mbit=mbit)


def _devs(k, on=None, **kw):
    """k devices with fast own links (8,000 Mbit/s) and no latency; ``on``: which are on an 8 Mbit/s
    (1,000 bytes/ms) medium (default all)."""
    devs = [device("d%d" % i, {"fc": 0.0, "out": 0.0}, bw=8000.0, lat=0.0, overhead=0.0, task=i, **kw)
            for i in range(k)]
    return [_on(d) if on is None or i in on else d for i, d in enumerate(devs)]


def test_exchange_crosses_the_medium_twice_between_members():
    stats = model_stats(SPEC, batch=10)
    fc = predict(_devs(3), stats, {"fc": (6, 1, 1)}).layers[0]
    # fc's output: 10 examples * 8 units * 4 bytes = 320 bytes; each part goes to 2 peers, up to the
    # access point and down again: 2 * (k - 1) * 320 bytes whatever the shares (own links: ~0.002 ms)
    assert fc.comm_ms == pytest.approx(2 * 2 * 320 / 1000)
    # d0 on a wired link: its 6 units cross once per peer (2), the members' parts 2 + 1 times
    mixed = predict(_devs(3, on={1, 2}), stats, {"fc": (6, 1, 1)}).layers[0]
    assert mixed.comm_ms == pytest.approx((2 * 6 + 3 * 1 + 3 * 1) / 8 * 320 / 1000, rel=1e-3)


def test_reduce_scatter_ring_and_input_batches_on_the_medium():
    stats = model_stats(SPEC, batch=10)
    devs = _devs(3)
    out = predict(devs, stats, {"fc": (6, 1, 1), "out": (2, 1, 1)}).layers[1]
    # gather of out (160 bytes) + reduce-scatter of out's input gradient (320 bytes), both 2(k-1) times
    assert out.comm_ms == pytest.approx(4 * 160 / 1000 + 4 * 320 / 1000)
    # mtf's ring: each device sends 2(k-1)/k of the tensor to the next, both ends on the medium
    assert media.ring_ms(devs, 300.0) == pytest.approx(3 * 2 * 2 / 3 * 300 * 2 / 1000)
    # every member's input batch (10 * 256 bytes) crosses once: the step starts after all three
    pred = predict(devs, stats, {})
    assert pred.step_ms == pytest.approx(3 * 2560 / 1000)
    assert media.each_once_ms(devs[:1] + [dataclasses.replace(devs[1], medium="", medium_mbit=0.0)],
                              [100.0, 100.0]) == pytest.approx(0.1)


def test_the_simulated_gather_waits_for_the_medium_queue():
    assert queue_end([0.0, 5.0], [3.0, 1.0]) == 6.0  # the early part is through before the late one
    assert queue_end([0.0, 0.0], [2.0, 2.0]) == 4.0
    stats = model_stats(SPEC, batch=10)
    step = simulate_step_ms(_devs(3), stats, {"fc": (6, 1, 1)}, 10)
    assert step == pytest.approx(3 * 2560 / 1000 + 2 * 2 * 320 / 1000)


def test_a_slow_shared_medium_makes_the_planner_keep_layers_whole():
    spec = sequential("c", (16, 16, 1), 10, [("conv", "conv1", 64, True), ("conv", "conv2", 64, True)])
    stats = model_stats(spec, batch=16)
    wired = [device("d%d" % i, {"conv1": 40.0, "conv2": 40.0}, bw=1000.0, lat=0.1, overhead=0.2, task=i)
             for i in range(2)]
    split = divide(wired, stats)
    assert any(s is not None for _, s in split.assignment)  # on their own 1 Gbit/s links a split pays
    shared = [_on(d, mbit=20.0) for d in wired]
    kept = divide(shared, stats, subsets=True)
    assert all(s is None for _, s in kept.assignment) or len(kept.names) == 1
    assert kept.prediction.step_ms > split.prediction.step_ms * 0.99
    assert predict(shared, stats, dict(split.assignment)).step_ms > kept.prediction.step_ms


def test_inconsistent_media_are_named():
    stats = model_stats(SPEC, batch=2)
    a, b = _devs(2)
    with pytest.raises(ValueError, match="devices d0 and d1 share medium 'wifi' but give it different rates"):
        predict([a, dataclasses.replace(b, medium_mbit=9.0)], stats, {})
    with pytest.raises(ValueError, match="device d1: medium 'wifi' needs medium_mbit > 0"):
        predict([a, dataclasses.replace(b, medium_mbit=0.0)], stats, {})
