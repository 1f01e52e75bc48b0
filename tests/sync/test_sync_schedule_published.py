"""ASHL's published rules (the authors' code): Algorithm 2, shares from SHL's H, the staleness
rule, the learning-rate schedule and SGD with weight decay, against worked examples."""
import math
import random

import numpy as np
import pytest

from edgemesh_tf.sync.schedule import (MOMENTUM, WEIGHT_DECAY, StalenessGate, WorkerTiming, local_iterations,
                                       lr_warmup_cosine, plan_rounds_published, published_plan,
                                       sgd_momentum_step)


def _timings(iter_ms, push_ms, pull_ms, compress_ms=None):
    compress_ms = compress_ms or [0.0] * len(iter_ms)
    return [WorkerTiming("w%d" % i, it, pu + pl, pu, pl, cm)
            for i, (it, pu, pl, cm) in enumerate(zip(iter_ms, push_ms, pull_ms, compress_ms))]


# the example: T_iter 0.1/0.2/0.3/0.4 s, push = pull = 0.05/0.2/0.3/0.4 s (here in ms)
EXAMPLE = _timings([100, 200, 300, 400], [50, 200, 300, 400], [50, 200, 300, 400])
NAMES = ["w0", "w1", "w2", "w3"]


def test_algorithm2_worked_example_dense():
    # T_max = max(800+100, 1600+400, 2400+600, 3200+800) = 4000 ms
    # H = round(3900/100, 3600/200, 3400/300, 3200/400) = [39, 18, 11 (11.33), 8]
    h, r = plan_rounds_published(EXAMPLE, 8, compress=False)
    assert [h[n] for n in NAMES] == [39, 18, 11, 8]
    assert r == {n: 1.0 for n in NAMES}
    assert local_iterations(EXAMPLE, 8) == h  # the project's dense rule agrees
    # at r_preset 1 the compressed rule plans the same rounds and never compresses
    h1, r1 = plan_rounds_published(EXAMPLE, 8, 1.0)
    assert h1 == h and r1 == {n: 1.0 for n in NAMES}


def test_algorithm2_worked_example_compressed():
    # SHL, H_preset 2, r_preset 0.1: c = 0.1·push + pull = 55, 220, 330, 440 ms
    # T_max = max(200+55, 400+220, 600+330, 800+440) = 1240
    # H = round(1185/100 = 11.85, 1020/200 = 5.1, 910/300 = 3.03, 800/400 = 2) = [12, 5, 3, 2]
    # m_T = max(1200+55, 1000+220, 900+330, 800+440) = 1255; T_other = iter·H + pull = 1250, 1200, 1200, 1200
    # R = (1255 - T_other)/push = 5/50, 55/200, 55/300, 55/400
    h, r = plan_rounds_published(EXAMPLE, 2, 0.1)
    assert [h[n] for n in NAMES] == [12, 5, 3, 2]
    assert [r[n] for n in NAMES] == pytest.approx([0.1, 0.275, 55 / 300, 0.1375])
    # every round, its compressed push included, takes exactly m_T: no worker idles
    for t in EXAMPLE:
        assert t.iter_ms * h[t.name] + t.other_ms + r[t.name] * t.push_ms == pytest.approx(1255)


def test_algorithm2_counts_the_compression_time_in_shl_only():
    slow_topk = _timings([100, 200, 300, 400], [50, 200, 300, 400], [50, 200, 300, 400], [0, 0, 0, 200])
    # w3's round grows by 200 ms: T_max = 1440, H = round(13.85, 6.1, 3.7, 2) = [14, 6, 4, 2]
    # m_T = max(1455, 1420, 1200+330, 1440) = 1530 (w2 rounded up); R = 75/50 -> 1, 130/200, 30/300, 130/400
    h, r = plan_rounds_published(slow_topk, 2, 0.1)
    assert [h[n] for n in NAMES] == [14, 6, 4, 2]
    assert [r[n] for n in NAMES] == pytest.approx([1.0, 0.65, 0.1, 0.325])
    assert plan_rounds_published(slow_topk, 8, compress=False)[0] == plan_rounds_published(EXAMPLE, 8,
                                                                                            compress=False)[0]


def test_algorithm2_properties_on_random_clusters():
    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(1, 6)
        ts = _timings([rng.uniform(5, 500) for _ in range(n)], [rng.uniform(0, 3000) for _ in range(n)],
                      [rng.uniform(0, 3000) for _ in range(n)], [rng.uniform(0, 50) for _ in range(n)])
        preset, r_preset = rng.randint(1, 10), rng.uniform(0.01, 1.0)
        h, r = plan_rounds_published(ts, preset, r_preset)
        comm = {t.name: r_preset * t.push_ms + t.other_ms + t.compress_ms for t in ts}
        slowest = max(ts, key=lambda t: t.iter_ms * preset + comm[t.name])
        assert h[slowest.name] == preset and min(h.values()) >= preset
        m_t = max(t.iter_ms * h[t.name] + comm[t.name] for t in ts)
        for t in ts:
            assert r_preset - 1e-9 <= r[t.name] <= 1.0
            assert t.iter_ms * h[t.name] + t.other_ms + t.compress_ms + r[t.name] * t.push_ms <= m_t + 1e-6


def test_published_plan_shares_come_from_shl():
    plan = published_plan(EXAMPLE, ahl_h_preset=8, shl_h_preset=2, r_preset=0.1)
    assert [plan.h_ahl[n] for n in NAMES] == [39, 18, 11, 8]
    assert [plan.h_shl[n] for n in NAMES] == [12, 5, 3, 2]
    assert [plan.shares[n] for n in NAMES] == pytest.approx([12 / 22, 5 / 22, 3 / 22, 2 / 22])
    assert plan.ratios == plan_rounds_published(EXAMPLE, 2, 0.1)[1]
    with pytest.raises(ValueError, match=r"r_preset must be in \(0, 1\]"):
        plan_rounds_published(EXAMPLE, 2, 0.0)
    with pytest.raises(ValueError, match="h_preset must be an int >= 1"):
        plan_rounds_published(EXAMPLE, 0)


def test_published_staleness_refuses_a_4th_commit_ahead():
    project, published = StalenessGate(3), StalenessGate(3, rule="published")
    rounds = {"fast": 3, "a": 0, "b": 0}
    assert project.may_commit(3, rounds)        # the project's gate lets the 4th commit ahead land
    assert not published.may_commit(3, rounds)  # the authors' server refuses it
    assert published.may_commit(2, {"fast": 2, "a": 0, "b": 0})  # the 3rd ahead lands
    assert published.lead_after_commit(3, [0, 0]) == 4  # own entry absent: the same answer
    assert not published.may_commit(3, [0, 0])


def test_published_staleness_in_a_run():
    """A fast worker commits whenever its gate lets it while the slow one never commits."""
    for rule, lead in (("project", 4), ("published", 3)):
        gate, fast = StalenessGate(3, rule=rule), 0
        while gate.may_commit(fast, {"fast": fast, "slow": 0}):
            fast += 1
        assert fast == lead


def test_published_staleness_lets_the_slowest_through():
    gate = StalenessGate(0, rule="published")  # lockstep
    assert not gate.may_commit(5, {"me": 5, "other": 5})  # waits for the other's 6th
    assert gate.may_commit(5, {"me": 5, "other": 6})
    assert gate.may_commit(5, {"me": 5})
    with pytest.raises(ValueError, match="rule must be one of"):
        StalenessGate(3, rule="ssp")
    with pytest.raises(ValueError, match="at least one live worker"):
        StalenessGate(3, rule="published").may_commit(1, {})


def test_lr_warmup_cosine_by_hand():
    lr = lambda s: lr_warmup_cosine(s, 200, 0.1, warmup=5)  # noqa: E731  the authors' AHL settings
    assert lr(0) == 0.0 and lr(2.5) == pytest.approx(0.05) and lr(5) == pytest.approx(0.1)
    assert lr(5 + 195 / 2) == pytest.approx(0.05)        # half way through the cosine
    assert lr(200) == pytest.approx(0.0, abs=1e-12) and lr(400) == pytest.approx(0.0, abs=1e-12)
    values = [lr(s) for s in range(5, 201)]
    assert all(a >= b for a, b in zip(values, values[1:]))  # decays monotonically after warm-up
    # SHL restarts: no warm-up, full base rate at its step 0
    assert lr_warmup_cosine(0, 200, 0.1) == pytest.approx(0.1)
    assert lr_warmup_cosine(100, 200, 0.1) == pytest.approx(0.05)
    with pytest.raises(ValueError, match="warmup .* must be < phase_len"):
        lr_warmup_cosine(0, 5, 0.1, warmup=5)
    with pytest.raises(ValueError, match="step must be a finite number >= 0"):
        lr_warmup_cosine(-1, 200, 0.1)


def test_sgd_momentum_step_with_weight_decay():
    assert (MOMENTUM, WEIGHT_DECAY) == (0.9, 5e-4)
    w, v = sgd_momentum_step(1.0, 0.5, 0.0, lr=0.1)
    assert v == pytest.approx(0.5005) and w == pytest.approx(1.0 - 0.1 * 0.5005)
    w2, v2 = sgd_momentum_step(w, 0.5, v, lr=0.1)
    assert v2 == pytest.approx(0.9 * 0.5005 + 0.5 + 5e-4 * w)
    arr_w, arr_v = sgd_momentum_step(np.ones(3), np.zeros(3), np.zeros(3), lr=1.0)
    np.testing.assert_allclose(arr_w, 1.0 - 5e-4)  # weight decay alone shrinks the weights
    assert math.isclose(arr_v[0], 5e-4)
