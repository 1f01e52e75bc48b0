"""ADSP as published: the timer counts compute only, catch-up of cumulative commits, one search
decision per period, and a starting commit count scaled to the task."""
import math

import numpy as np
import pytest

from edgemesh_tf.sync.adsp import (CommitRateSearch, LossCurve, commits_per_worker, compute_interval_s,
                                   initial_commits, max_commits)


def test_the_period_subtracts_communication():
    # 6 s period, 3 commits, 0.5 s per commit communicating: compute 2 - 0.5 = 1.5 s between commits
    assert compute_interval_s(6.0, 3, 0.5) == pytest.approx(1.5)
    # one period = commits x (compute + communication)
    assert 3 * (compute_interval_s(6.0, 3, 0.5) + 0.5) == pytest.approx(6.0)
    assert compute_interval_s(6.0, 3, 0.0) == pytest.approx(2.0)
    assert compute_interval_s(6.0, 4, 2.0) == 0.0  # communication overfills the period
    with pytest.raises(ValueError, match="commits must be an int >= 1"):
        compute_interval_s(6.0, 0, 0.5)
    with pytest.raises(ValueError, match="comm_s must be a finite number >= 0"):
        compute_interval_s(6.0, 2, -1.0)


def test_max_commits_leaves_compute_time():
    assert max_commits(6.0, 2.0) == 2      # 3 commits would leave 6/3 - 2 = 0 s of compute
    assert max_commits(6.0, 1.9) == 3
    assert max_commits(6.0, 7.0) == 1
    assert max_commits(6.0, 0.0, cap=64) == 64
    for comm in (0.3, 1.0, 2.5):
        c = max_commits(6.0, comm)
        assert compute_interval_s(6.0, c, comm) > 0 and 6.0 / (c + 1) - comm <= 0


def test_catch_up_of_cumulative_commits():
    done = {"fast": 10, "mid": 8, "slow": 5}
    plan = commits_per_worker(done, 2)
    assert plan == {"fast": 2, "mid": 4, "slow": 7}
    assert len({done[g] + plan[g] for g in done}) == 1  # the counts meet at the end of the period
    # a worker behind commits sooner: a shorter compute interval in the same period
    comm = 0.2
    assert compute_interval_s(6.0, plan["slow"], comm) < compute_interval_s(6.0, plan["fast"], comm)
    assert commits_per_worker({"a": 3, "b": 3}, 1) == {"a": 1, "b": 1}
    with pytest.raises(ValueError, match="per_period must be an int >= 1"):
        commits_per_worker(done, 0)


def test_initial_commits_scale_with_the_task():
    # slowest round: 8 x 0.4 s + 0.8 s = 4 s; a 12 s period holds 3 of them
    assert initial_commits(12.0, [0.1, 0.2, 0.4], [0.1, 0.4, 0.8]) == 3
    assert initial_commits(12.0, [0.1, 0.2, 0.4], [0.1, 0.4, 0.8], local_steps=2) == 7  # 12 / 1.6
    assert initial_commits(2.0, [0.4], [3.0]) == 1  # never below 1
    # a heavier task (10x the compute) starts with fewer commits per period
    assert initial_commits(60.0, [1.0], [0.5]) < initial_commits(60.0, [0.1], [0.5])
    with pytest.raises(ValueError, match="one time per worker"):
        initial_commits(6.0, [0.1], [])


def _run(search, curve, until, dt=0.5):
    """Evaluations every dt (s) of `curve`; returns the times at which the search decided."""
    times, losses, decisions = [], [], []
    while len(times) * dt < until:
        times.append((len(times) + 1) * dt)
        losses.append(float(curve.loss(times[-1])))
        before = len(search.trials)
        search.update(times, losses)
        if len(search.trials) > before:
            decisions.append(times[-1])
    return decisions


def test_search_decides_once_per_period():
    curve = LossCurve(0.3, 0.5, 0.1)
    every_eval = CommitRateSearch(0.2, initial=2, min_points=3)
    per_period = CommitRateSearch(0.2, initial=2, min_points=3, period_s=6.0)
    _run(every_eval, curve, 24.0)
    decisions = _run(per_period, curve, 24.0)
    assert len(every_eval.trials) == 16        # every 3 evaluations (1.5 s)
    assert decisions == pytest.approx([6.5, 12.5, 18.5])  # first point 0.5 s, then one per 6 s
    with pytest.raises(ValueError, match="period_s must be > 0 or None"):
        CommitRateSearch(0.2, period_s=0)


def test_search_per_period_still_finds_the_best_count():
    """Progress rate r(n) per second with n commits per period; best n = 6; one decision per 10 s."""
    b, c, target = 1.0, 0.1, 0.12
    rate = lambda n: 0.05 * math.exp(-((n - 6) / 2.5) ** 2)  # noqa: E731
    rng = np.random.default_rng(1)
    s = CommitRateSearch(target_loss=target, initial=3, asymptote=c, min_points=3, period_s=10.0)
    times, losses, u, t = [], [], 0.0, 0.0
    for _ in range(400):  # evaluations every 0.5 s
        t += 0.5
        u += rate(s.count) * 0.5
        times.append(t)
        losses.append(1.0 / (u + b) + c + rng.normal(0, 1e-4))
        s.update(times, losses)
    assert [n for n, _ in s.trials[:5]] == [3, 4, 5, 6, 7]
    assert s.converged and s.count == 6
