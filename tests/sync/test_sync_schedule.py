"""ASHL schedule formulas checked against values worked out by hand."""
import json

import pytest

from edgemesh_tf.sync.schedule import (PhaseController, StalenessGate, WorkerTiming,
                                       compression_ratios, data_shares, local_iterations, t_max_ms)

# T_max = max(100*8+200, 50*8+100, 25*8+400) = max(1000, 500, 600) = 1000 ms
# H: A (1000-200)/100 = 8, B (1000-100)/50 = 18, C (1000-400)/25 = 24; ΣH = 50
TIMINGS = [WorkerTiming("A", 100, 200, 150, 50),
           WorkerTiming("B", 50, 100, 60, 40),
           WorkerTiming("C", 25, 400, 300, 100)]


def test_local_iterations_by_hand():
    assert t_max_ms(TIMINGS) == 1000
    assert local_iterations(TIMINGS) == {"A": 8, "B": 18, "C": 24}
    # h_preset=2: T_max = max(400, 200, 450) = 450 (C is slowest): A 2.5 -> 2, B 7, C 2
    assert local_iterations(TIMINGS, h_preset=2) == {"A": 2, "B": 7, "C": 2}


def test_local_iterations_rounds():
    # T_max = 800; B: (800-2)/30 = 26.6 -> 27
    t = [WorkerTiming("A", 100, 0, 0, 0), WorkerTiming("B", 30, 2, 1, 1)]
    assert local_iterations(t) == {"A": 8, "B": 27}


def test_data_shares_by_hand():
    d = data_shares({"A": 8, "B": 18, "C": 24})
    assert d == pytest.approx({"A": 0.16, "B": 0.36, "C": 0.48})
    assert sum(d.values()) == pytest.approx(1.0)


def test_compression_ratios_by_hand():
    h = local_iterations(TIMINGS)
    # every round is exactly 1000 ms under h: T_other + push = T_max for all -> R = 1
    assert compression_ratios(TIMINGS, h) == {"A": 1.0, "B": 1.0, "C": 1.0}
    # T_max 900: A (900-850)/150 = 1/3; B (900-940)/60 < 0 -> r_min; C (900-700)/300 = 2/3
    r = compression_ratios(TIMINGS, h, t_max=900)
    assert r == pytest.approx({"A": 1 / 3, "B": 0.01, "C": 2 / 3})
    assert compression_ratios(TIMINGS, h, r_min=0.05, t_max=900)["B"] == 0.05
    # zero push time: nothing to compress
    t0 = [WorkerTiming("Z", 10, 0, 0, 0)]
    assert compression_ratios(t0, {"Z": 8}) == {"Z": 1.0}


def test_errors_name_worker_and_expectation():
    with pytest.raises(ValueError, match=r"worker 'w1': iter_ms must be .*> 0"):
        WorkerTiming("w1", 0, 1, 1, 0)
    with pytest.raises(ValueError, match=r"worker 'w2': push_ms .*>= 0"):
        WorkerTiming("w2", 1, 1, -1, 0)
    with pytest.raises(ValueError, match="duplicate worker name 'A'"):
        local_iterations([TIMINGS[0], TIMINGS[0]])
    with pytest.raises(ValueError, match="h_preset must be an int >= 1"):
        local_iterations(TIMINGS, h_preset=0)
    with pytest.raises(ValueError, match=r"worker 'A': H must be an int >= 1"):
        data_shares({"A": 0})
    with pytest.raises(ValueError, match=r"missing \['C'\]"):
        compression_ratios(TIMINGS, {"A": 8, "B": 18})


def test_staleness_gate():
    g = StalenessGate(3)
    assert g.lag(5, [2, 4, 5]) == 3
    assert g.may_commit(5, [2, 4, 5])
    assert not g.may_commit(6, [2, 4, 6])
    assert g.may_commit(2, {"a": 2, "b": 9})  # the slowest always may proceed
    assert StalenessGate(0).may_commit(3, [3, 3]) and not StalenessGate(0).may_commit(4, [3, 4])
    with pytest.raises(ValueError, match="bound must be an int >= 0"):
        StalenessGate(-1)
    with pytest.raises(ValueError, match="at least one live worker"):
        g.may_commit(1, [])


def test_phase_controller_switch_and_round_trip():
    pc = PhaseController(0.5, patience=2, start_s=100.0)
    assert pc.phase == "profiling"
    assert pc.observe_loss(0.1, step=3, wall_time=100.5) == "profiling"  # ignored before AHL
    pc.start_ahl(step=10, wall_time=101.0)
    assert pc.observe_loss(0.4, step=20, wall_time=102.0) == "ahl"   # 1 of 2
    assert pc.observe_loss(0.6, step=30, wall_time=103.0) == "ahl"   # reset
    assert pc.observe_loss(float("nan"), step=35, wall_time=104.0) == "ahl"
    assert pc.observe_loss(0.5, step=40, wall_time=105.0) == "ahl"   # 1 of 2 (<= threshold counts)
    restored = PhaseController.from_state(json.loads(json.dumps(pc.state())))
    assert restored.state() == pc.state()
    assert restored.observe_loss(0.3, step=50, wall_time=123.5) == "shl"
    assert restored.transitions == [("profiling", 0, 100.0), ("ahl", 10, 101.0),
                                    ("shl", 50, 123.5)]
    assert [restored.phase_at(t) for t in (99.0, 100.0, 100.9, 101.0, 123.4, 200.0)] == [
        "profiling", "profiling", "profiling", "ahl", "ahl", "shl"]
    with pytest.raises(RuntimeError, match="needs phase 'profiling'"):
        restored.start_ahl(60, 130.0)
    with pytest.raises(ValueError, match="patience must be an int >= 1"):
        PhaseController(0.5, patience=0)


def test_link_ratios_compress_pushes_that_dominate_their_round():
    from edgemesh_tf.sync.schedule import link_ratios, plan_rounds
    timings = [WorkerTiming("fast", 10.0, 70.0, 50.0, 20.0), WorkerTiming("slow", 40.0, 700.0, 500.0, 200.0)]
    r = link_ratios(timings, {"fast": 40, "slow": 8}, r_min=0.01, push_budget=0.25)
    assert r["fast"] == 1.0                                   # 0.25 * 400 ms >= 50 ms
    assert r["slow"] == pytest.approx(0.25 * 40 * 8 / 500)   # 80 ms of a 500 ms push
    assert link_ratios(timings, {"fast": 1, "slow": 1}, r_min=0.05, push_budget=0.001)["slow"] == 0.05
    h, r2 = plan_rounds(timings, 8, push_budget=0.25)
    assert h["slow"] == 8
    # the fast worker fills the slow one's shortened round: 8*40 + 200 + 0.16*500 = 600 ms
    assert h["fast"] == round((600 - 20 - 50) / 10)
    assert plan_rounds(timings, 8, push_budget=None)[1] == {"fast": 1.0, "slow": 1.0}
    with pytest.raises(ValueError, match="push_budget must be > 0"):
        link_ratios(timings, {"fast": 1, "slow": 1}, push_budget=0)
