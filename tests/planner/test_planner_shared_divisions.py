"""planner/shared_divisions.py (pure): a group measured alike to one divided before gets its division,
relabelled; a group that differs in any measured figure is divided anew; errors are not shared."""
import dataclasses

import pytest
from planner_util import flops_device, profile

from edgemesh_tf.models import get_model
from edgemesh_tf.planner import model_stats, plan
from edgemesh_tf.planner.division import PlanError, divide
from edgemesh_tf.planner.shared_divisions import SharedDivisions

VGG = get_model("vgg", (8, 8, 1), 10)
STATS = model_stats(VGG, 32)


def _group(prefix, first_task, gflops=(8, 4, 0.5), **kw):
    return [flops_device("%s%d" % (prefix, i), STATS, g, first_task + i, bw=1000, lat=0.5, **kw)
            for i, g in enumerate(gflops)]


def _divide(group, **options):
    return divide(group, STATS, **options)


def test_an_alike_group_gets_the_division_a_fresh_divide_gives_it():
    shared = SharedDivisions(_divide)
    a, b = _group("a", 0), _group("b", 10)
    first = shared(a, subsets=True)
    second = shared(b, subsets=True)
    assert (shared.divided, shared.shared) == (1, 1)
    fresh = divide(b, STATS, subsets=True)
    assert second == fresh
    assert first.idle and second.idle == fresh.idle  # the slow device is left out, under its own name
    assert set(second.names) | set(second.devices) <= {d.name for d in b} | {d.device for d in b}


def test_options_and_any_measured_figure_make_another_division():
    shared = SharedDivisions(_divide)
    a = _group("a", 0)
    shared(a, subsets=True)
    shared(a, subsets=False)
    shared([dataclasses.replace(d, latency_ms=d.latency_ms + 1) for d in a], subsets=True)
    shared(list(reversed(a)), subsets=True)  # ring order is part of the division
    assert (shared.divided, shared.shared) == (4, 0)


def test_an_error_names_each_groups_own_device():
    shared = SharedDivisions(_divide)
    for prefix in ("a", "b"):
        with pytest.raises(PlanError, match="device %s0" % prefix):
            shared(_group(prefix, 0 if prefix == "a" else 10, mem=1 << 20))
    assert shared.shared == 0


def test_a_cluster_of_alike_groups_plans_as_if_each_were_divided_alone():
    devices = [flops_device("edge%d" % i, STATS, g, i, bw=1000, lat=0.5) for i, g in enumerate([8, 4, 8, 4, 8, 4])]
    prof = profile(VGG, devices, 32)
    result = plan(prof, VGG, groups=3, calibrate=False)
    for g in result.groups:
        alone = divide([next(d for d in devices if d.name == n) for n in g.names], STATS, profile_batch=32,
                       ps_bandwidth_mbit=prof.ps_bandwidth_mbit)
        assert g.prediction == alone.prediction
