"""bench/stats.py: the time-to-accuracy statistics against samples whose answers are known."""
import itertools
import math
import statistics

import pytest

from bench_modules import load

stats = load("stats")


# ---- reached_at ----

def test_reached_at_is_the_first_of_three_in_a_row():
    curve = [[1, 0.5], [2, 0.95], [3, 0.96], [4, 0.90], [5, 0.95], [6, 0.93], [7, 0.97], [8, 0.5]]
    assert stats.reached_at(curve, 0.93) == 5  # 2 and 3 are followed by a dip; 5, 6, 7 stay (0.93 counts)
    assert stats.reached_at(curve, 0.93, consecutive=1) == 2
    assert stats.reached_at(curve, 0.93, consecutive=2) == 2
    assert stats.reached_at(curve, 0.99) is None


def test_reached_at_needs_the_whole_run_of_evaluations():
    assert stats.reached_at([[1, 0.1], [2, 0.95], [3, 0.96]], 0.93) is None  # the curve ends after two
    assert stats.reached_at([[1, 0.1], [2, 0.95], [3, 0.96], [4.5, 0.99]], 0.93) == 2
    assert stats.reached_at([], 0.5) is None
    with pytest.raises(ValueError):
        stats.reached_at([[1, 1.0]], 0.5, consecutive=0)


# ---- medians, censoring ----

def test_unreached_runs_count_as_the_budget():
    assert stats.median([10, None, None], budget=100) == 100
    assert stats.median([10, 20, None], budget=100) == 20
    assert list(stats.censored([3, None], budget=7)) == [3.0, 7.0]
    with pytest.raises(ValueError, match="budget"):
        stats.median([10, None])


def test_median_ratio_of_known_samples():
    a = [10, 50, 20, 40, 30]    # median 30
    b = [8, 2, 6, 4]            # median 5
    ratio, (lo, hi) = stats.median_ratio_ci(a, b)
    assert ratio == pytest.approx(6.0)
    # every bootstrap median of a is in [10, 50], of b in [2, 8]: the interval lies within [1.25, 25]
    assert 1.25 <= lo < 6.0 < hi <= 25
    assert stats.median_ratio_ci(a, b) == (ratio, [lo, hi])  # seeded: reproducible


def test_ratio_ci_of_constant_samples_is_a_point():
    ratio, ci = stats.median_ratio_ci([30] * 8, [40] * 8)
    assert ratio == pytest.approx(0.75) and ci == pytest.approx([0.75, 0.75])


def test_ratio_ci_narrows_with_more_seeds():
    a3 = [28, 31, 35]
    b3 = [42, 47, 55]
    a8 = [28, 31, 35, 29, 33, 30, 34, 32]
    b8 = [42, 47, 55, 44, 50, 46, 52, 48]
    _, (lo3, hi3) = stats.median_ratio_ci(a3, b3)
    _, (lo8, hi8) = stats.median_ratio_ci(a8, b8)
    assert hi8 - lo8 < hi3 - lo3
    assert hi8 < 1.0


def test_ratio_with_unreached_runs_uses_the_budget():
    ratio, _ = stats.median_ratio_ci([30, 30, 30], [None, None, 60], budget=90)
    assert ratio == pytest.approx(30 / 90)  # BSP's median is the budget: the ratio is an upper bound
    assert stats.median_ratio_ci([], [1, 2]) == (None, None)


# ---- permutation test ----

def _brute_force_p(a, b):
    """Every split of the pooled sample, in plain Python."""
    pooled, k = list(a) + list(b), len(a)
    obs = abs(statistics.median(a) - statistics.median(b))
    hits = total = 0
    for idx in itertools.combinations(range(len(pooled)), k):
        x = [pooled[i] for i in idx]
        y = [pooled[i] for i in range(len(pooled)) if i not in idx]
        total += 1
        hits += abs(statistics.median(x) - statistics.median(y)) >= obs - 1e-9
    return hits / total


def test_completely_separated_8_vs_8_has_the_exact_p():
    a = [31, 29, 35, 30, 33, 28, 34, 32]
    b = [52, 47, 55, 44, 50, 46, 42, 48]
    # |median difference| is maximal only when each group holds the other's 5 extreme values and
    # its own middle two: the 3 values of each group beyond its middle may be swapped with any 3 of
    # the other's 6 beyond the middle... counted over the 16 sorted values, a split is as extreme
    # iff one group holds ranks 1-5 and the other ranks 12-16, the 6 middle ranks 6-11 shared 3:3:
    # 2 * C(6, 3) of the C(16, 8) splits.
    exact = 2 * math.comb(6, 3) / math.comb(16, 8)
    assert exact == pytest.approx(40 / 12870)
    assert stats.permutation_p(a, b) == pytest.approx(exact, abs=1e-15)
    assert stats.permutation_p(b, a) == pytest.approx(exact, abs=1e-15)  # two-sided
    assert _brute_force_p(a, b) == pytest.approx(exact)


def test_small_separated_samples():
    assert stats.permutation_p([1, 2, 3], [4, 5, 6]) == pytest.approx(4 / 20)  # 2 * C(2, 1) of C(6, 3)
    # medians of 2 are means: {1,2}|{3,4} and {3,4}|{1,2} are the only splits as far apart
    assert stats.permutation_p([1, 2], [3, 4]) == pytest.approx(2 / 6)


@pytest.mark.parametrize("a,b", [
    ([30, 41, 35, 29], [44, 38, 52]),
    ([10, 12, 11, 30, 31], [29, 28, 35, 12, 40, 41]),
    ([5, 5, 7, 90], [90, 90, 6]),  # ties, e.g. at the budget
])
def test_exact_p_equals_brute_force(a, b):
    assert stats.permutation_p(a, b) == pytest.approx(_brute_force_p(a, b))


def test_identical_samples_have_p_one():
    assert stats.permutation_p([40] * 8, [40] * 8) == pytest.approx(1.0)


def test_sampled_permutations_approximate_the_exact_p():
    a = [31, 29, 35, 30, 33, 28, 34, 32, 36, 27]
    b = [52, 47, 55, 44, 50, 46, 42, 48, 30, 41]
    exact = stats.permutation_p(a, b, n_perm=10 ** 6)  # C(20, 10) = 184,756 splits: enumerated
    sampled = stats.permutation_p(a, b, n_perm=20000, seed=3)
    assert sampled >= 1 / 20001
    assert sampled == pytest.approx(exact, abs=0.003)


def test_permutation_with_unreached_runs():
    p = stats.permutation_p([30, 31, 32, 33], [None, None, None, None], budget=90)
    # ties at the budget: a group of 30, 31, 32 and any one of the four 90s has the same median
    # (31.5) as the observed one, its complement too (90): (1 + 4) splits each way of C(8, 4)
    assert p == pytest.approx(10 / math.comb(8, 4))
    assert p == pytest.approx(_brute_force_p([30, 31, 32, 33], [90] * 4))
    assert stats.permutation_p([], [1.0]) is None
