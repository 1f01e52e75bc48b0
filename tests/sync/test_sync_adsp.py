"""ADSP loss-curve fit and commit-rate search on synthetic curves with known parameters."""
import math

import numpy as np
import pytest

from edgemesh_tf.sync.adsp import CommitRateSearch, LossCurve, fit_loss_curve


def test_predict_time_by_hand():
    curve = LossCurve(0.3, 0.5, 0.2)
    # 1/(0.3 - 0.2) = 10 = 0.09 t + 0.5  ->  t = 9.5 / 0.09
    assert curve.predict_time_to(0.3) == pytest.approx(9.5 / 0.09)
    assert curve.loss(9.5 / 0.09) == pytest.approx(0.3)
    assert curve.predict_time_to(0.2) == math.inf     # the asymptote is never reached
    assert curve.predict_time_to(5.0) == 0.0          # l(0) = 2.2 is already below
    a, b, c = curve
    assert (a, b, c) == (0.3, 0.5, 0.2)


@pytest.mark.parametrize("a,b,c", [(0.3, 0.5, 0.2), (0.05, 0.4, 1.0), (1.2, 2.0, 0.0)])
def test_fit_recovers_known_parameters(a, b, c):
    rng = np.random.default_rng(0)
    t = np.linspace(0, 200 / a ** 2 * 0.09, 120)  # the same progress a²t for each curve
    truth = LossCurve(a, b, c)
    l = truth.loss(t) + rng.normal(0, 0.003, t.size)
    fit = fit_loss_curve(t, l)
    assert fit.a == pytest.approx(a, rel=0.08)
    assert fit.b == pytest.approx(b, rel=0.1)
    assert fit.c == pytest.approx(c, abs=0.02)
    target = c + 0.1
    assert fit.predict_time_to(target) == pytest.approx(truth.predict_time_to(target), rel=0.1)


def test_fit_with_fixed_asymptote_and_errors():
    t = np.arange(10.0)
    l = LossCurve(0.5, 1.0, 0.1).loss(t)
    fit = fit_loss_curve(t, l, fixed_c=0.1)
    assert fit == pytest.approx((0.5, 1.0, 0.1), rel=1e-6)
    with pytest.raises(ValueError, match="needs >= 3 finite points, got 2"):
        fit_loss_curve([0, 1], [1, 0.5])
    with pytest.raises(ValueError, match="same length"):
        fit_loss_curve([0, 1, 2], [1, 0.5])


def _climb(search, time_to_target, periods=30):
    path = [search.count]
    for _ in range(periods):
        search.observe(time_to_target(search.count))
        path.append(search.count)
    return path


def test_search_climbs_up_to_the_optimum():
    model = lambda n: (n - 6) ** 2 + 10.0  # noqa: E731  best commit count 6
    s = CommitRateSearch(target_loss=0.1, initial=2)
    path = _climb(s, model)
    assert path[:6] == [2, 3, 4, 5, 6, 7]  # climbs while it improves, 7 is worse
    assert s.converged and s.count == 6 and set(path[6:]) == {6}


def test_search_turns_back_when_the_first_step_is_worse():
    model = lambda n: (n - 6) ** 2 + 10.0  # noqa: E731
    s = CommitRateSearch(target_loss=0.1, initial=12, step=2)
    path = _climb(s, model)
    assert path[:6] == [12, 14, 10, 8, 6, 4]
    assert s.converged and s.count == 6


def test_search_respects_bounds():
    s = CommitRateSearch(target_loss=0.1, initial=3, lower=1, upper=5)
    _climb(s, lambda n: 100.0 / n)  # more commits always better: stops at the upper bound
    assert s.converged and s.count == 5
    with pytest.raises(ValueError, match=r"initial must be an int in \[1, 5\], got 9"):
        CommitRateSearch(0.1, initial=9, upper=5)


def test_update_fits_windows_of_a_synthetic_run():
    """Progress u grows at rate r(n) per time unit with commit count n; l = 1/(u + b) + c."""
    b, c, target = 1.0, 0.1, 0.12
    rate = lambda n: 0.05 * math.exp(-((n - 6) / 2.5) ** 2)  # noqa: E731  best n = 6
    rng = np.random.default_rng(1)
    s = CommitRateSearch(target_loss=target, initial=3, asymptote=c)
    times, losses, u, t0 = [], [], 0.0, 0.0
    counts = []
    for _ in range(8):
        n = s.count
        counts.append(n)
        for k in range(1, 21):
            times.append(t0 + k)
            losses.append(1.0 / (u + rate(n) * k + b) + c + rng.normal(0, 1e-4))
        u += rate(n) * 20
        t0 += 20
        s.update(times, losses)
    assert counts[:5] == [3, 4, 5, 6, 7]
    assert s.count == 6 and s.converged
    assert s.last_curve.a ** 2 == pytest.approx(rate(6), rel=0.05)
