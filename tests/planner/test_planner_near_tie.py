"""planner/near_tie.py (pure): which plans the cost model cannot tell apart, and the choice among them
once each group's step is timed; the console's line about it (cli/run.py)."""
import pytest
from planner_util import flops_device, profile

from edgemesh_tf.cli.run import near_tie_lines
from edgemesh_tf.engine import SyncConfig
from edgemesh_tf.engine.core import job_cost
from edgemesh_tf.models import get_model
from edgemesh_tf.planner import model_stats
from edgemesh_tf.planner.near_tie import near_ties, settle, timed_rate

VGG = get_model("vgg", (8, 8, 1), 10)
SYNC = SyncConfig(strategy="asp")


def _plans():
    stats = model_stats(VGG, 32)
    p = profile(VGG, [flops_device("edge%d" % i, stats, g, i, bw=1000, lat=0.5) for i, g in enumerate([4, 3])], 32)
    return {k: job_cost.plan_job(p, VGG, 32, SYNC, groups=k, calibrate=False) for k in (1, 2)}


def test_near_ties_are_the_plans_within_the_tolerance_of_the_best_best_first():
    assert near_ties({1: 100.0, 2: 95.0, 3: 80.0}, 0.10) == [1, 2]
    assert near_ties({1: 100.0, 2: 95.0, 3: 80.0}, 0.0) == [1]
    assert near_ties({1: 90.0, 2: 100.0}, 0.5) == [2, 1]
    assert near_ties({}, 0.1) == []
    with pytest.raises(ValueError, match="tolerance"):
        near_ties({1: 1.0}, -0.1)


def test_a_timed_step_replaces_the_predicted_one_and_nothing_else():
    plans, objective = _plans(), job_cost.objective(SYNC)
    for p in plans.values():
        as_predicted = timed_rate(p, [g.prediction.step_ms for g in p.groups], objective)
        assert as_predicted == pytest.approx(p.examples_per_sec, rel=1e-9)
        slower = timed_rate(p, [2 * g.prediction.step_ms for g in p.groups], objective)
        assert slower < 0.75 * as_predicted  # commits keep their predicted cost: not quite half
    with pytest.raises(ValueError, match="2 timed steps for a plan of 1 groups"):
        timed_rate(plans[1], [1.0, 2.0], objective)


def test_the_plan_fastest_as_timed_is_kept_even_against_the_prediction():
    plans, objective = _plans(), job_cost.objective(SYNC)
    first, second = sorted(plans, key=lambda k: -plans[k].examples_per_sec)
    as_predicted = {k: [g.prediction.step_ms for g in p.groups] for k, p in plans.items()}
    kept, record = settle(plans, as_predicted, objective)
    assert kept == first and record["kept"] == first
    slow = {**as_predicted, first: [3 * s for s in as_predicted[first]]}  # the favourite times 3x slower
    kept, record = settle(plans, slow, objective)
    assert kept == second
    rows = {c["groups"]: c for c in record["candidates"]}
    assert rows[first]["timed"] < rows[first]["predicted"] and rows[second]["timed"] == rows[second]["predicted"]
    assert rows[first]["devices"] == [list(g.names) for g in plans[first].groups]
    assert rows[first]["step_ms"][0][1] == pytest.approx(3 * rows[first]["step_ms"][0][0], rel=0.01)


def test_the_console_says_what_was_timed_and_what_was_kept():
    assert near_tie_lines(None) == []
    record = {"tolerance": 0.1, "planned": 1, "kept": 2, "seconds": 12.3, "candidates": [
        {"groups": 1, "devices": [["a", "b"]], "predicted": 331.4, "timed": 280.0},
        {"groups": 2, "devices": [["a"], ["b"]], "predicted": 310.2, "timed": 300.0}]}
    line, = near_tie_lines(record)
    assert "within 10% of each other, timed on the cluster before training in 12 s" in line
    assert "1 group(s) (a+b) predicted 331, timed 280" in line and "2 group(s) (a | b) predicted 310" in line
    assert line.endswith("kept 2 group(s) instead of the prediction's 1")
    assert near_tie_lines(dict(record, kept=1))[0].endswith("kept 1 group(s)")
