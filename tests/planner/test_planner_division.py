"""Filter division: memory budgets, slow links, homogeneous groups and speed-proportional shares."""
import re

import pytest
from planner_util import device

from edgemesh_tf.models.zoo import get_model
from edgemesh_tf.planner import PlanError, divide, model_stats

STATS = model_stats(get_model("vgg", (8, 8, 1), 10), batch=32)  # conv1 32, conv2 64, fc1 128, logits 10
SPLIT = ("conv1", "conv2", "fc1")


def _dev(name, ms=10.0, task=0, **kw):
    return device(name, {d.name: ms for d in STATS.dims}, task=task, **kw)


def _shares(div):
    return dict(div.assignment)


def _missing(err):
    return int(re.search(r"(\d+) bytes missing", str(err)).group(1))


def test_tight_memory_moves_filters_off_the_small_device():
    free = divide([_dev("big", task=0, bw=1e4, lat=0), _dev("small", task=1, bw=1e4, lat=0)], STATS)
    assert all(_shares(free)[n] == (d // 2, d // 2) for n, d in zip(SPLIT, (32, 64, 128)))
    with pytest.raises(PlanError) as e:
        divide([_dev("big", task=0, bw=1e4, lat=0), _dev("small", task=1, bw=1e4, lat=0, mem=1)], STATS)
    floor = 1 + _missing(e.value)  # the fixed bytes (runtime, inputs, masters) dominate a small model
    budget = (floor + free.prediction.memory_bytes[1]) // 2
    tight = divide([_dev("big", task=0, bw=1e4, lat=0), _dev("small", task=1, bw=1e4, lat=0, mem=budget)], STATS)
    assert tight.prediction.memory_bytes[1] <= budget
    moved = [_shares(tight)[n] for n in SPLIT]
    assert sum(s[1] for s in moved) < sum(s[0] for s in moved)
    assert tight.prediction.step_ms >= free.prediction.step_ms  # memory costs time, never saves it


def test_impossible_budget_names_device_and_missing_bytes():
    big = _dev("big", task=0, bw=1e4, lat=0)
    with pytest.raises(PlanError, match="device small: .* bytes missing") as e:
        divide([big, _dev("small", task=1, mem=1)], STATS)
    floor = 1 + _missing(e.value)  # the least memory "small" can get by with
    with pytest.raises(PlanError, match="device small: .*: 1000 bytes missing"):
        divide([big, _dev("small", task=1, mem=floor - 1000)], STATS)
    fits = divide([big, _dev("small", task=1, mem=floor)], STATS)
    assert fits.prediction.memory_bytes[1] <= floor
    # Both devices tight: each could hold its minimum, but not both the rest of the filters (the first
    # device, which also hosts the group's session, may already miss its minimum)
    with pytest.raises(PlanError, match=r"device (a|b): .* \d+ bytes .*: \d+ bytes missing"):
        divide([_dev("a", task=0, mem=floor + 1000), _dev("b", task=1, mem=floor + 1000)], STATS)


def test_slow_link_keeps_layers_replicated():
    div = divide([_dev("a", task=0, bw=0.5, lat=20), _dev("b", task=1, bw=1000, lat=1)], STATS)
    assert all(s is None for s in _shares(div).values())
    assert div.layout().rules == ()


def test_fast_homogeneous_group_splits_evenly():
    div = divide([_dev("n%d" % i, task=i, bw=1e5, lat=0) for i in range(4)], STATS)
    shares = _shares(div)
    for name, units in zip(SPLIT, (32, 64, 128)):
        assert shares[name] == (units // 4,) * 4
    assert div.layout().size_map["fc1"] == (32, 32, 32, 32)


def test_faster_device_gets_proportionally_more_filters():
    div = divide([_dev("fast", ms=10.0, task=0, bw=1e5, lat=0), _dev("slow", ms=30.0, task=1, bw=1e5, lat=0)], STATS)
    shares = _shares(div)
    assert shares["conv1"] == (24, 8) and shares["conv2"] == (48, 16) and shares["fc1"] == (96, 32)
    c = div.prediction.compute_ms
    assert abs(c[0] - c[1]) / max(c) < 0.1  # balanced up to the 10 logits units (8:2 = 8 ms vs 6 ms)


def test_chunks_make_coarse_shares():
    div = divide([_dev("fast", ms=10.0, task=0, bw=1e5, lat=0), _dev("slow", ms=22.0, task=1, bw=1e5, lat=0)],
                 STATS, chunks=8)
    for name, units in zip(SPLIT, (32, 64, 128)):
        assert all(s % (units // 8) == 0 for s in _shares(div)[name])
