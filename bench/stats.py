"""Statistics of the time-to-accuracy benchmark (pure: numpy only, no TensorFlow).

Times to target are right-censored: a run that did not reach the target within its budget has an
unknown time, larger than its budget. Every function here takes such a run as ``None`` and counts it
as ``budget``, a LOWER BOUND of its time, so that every run stays in the sample (dropping unreached
runs would favour the strategy that fails most) with no survival model: a ratio of medians
``median(a) / median(b)`` is then an upper bound of the true one when only ``b`` has unreached runs,
and a lower bound when only ``a`` has. ``budget=None`` with a ``None`` in the sample is an error.
"""
from __future__ import annotations

import itertools
import math
from typing import Iterable, Sequence

import numpy as np

_TOL = 1e-9  # statistics equal up to rounding count as "as extreme" (ties at the budget are common)


def reached_at(curve: Sequence[Sequence[float]], target: float, consecutive: int = 3) -> float | None:
    """The time of the first evaluation from which accuracy stays >= ``target`` for ``consecutive``
    evaluations in a row (that one included); None if it never does, also when the curve ends
    with fewer than ``consecutive`` evaluations at or above target. curve: [[t, accuracy], ...] in
    time order (the final record's ``curve``)."""
    if consecutive < 1:
        raise ValueError("consecutive must be >= 1, got %r" % (consecutive,))
    run = 0
    for i, (_, accuracy) in enumerate(curve):
        run = run + 1 if accuracy >= target else 0
        if run >= consecutive:
            return curve[i - consecutive + 1][0]
    return None


def censored(values: Iterable[float | None], budget: float | None = None) -> np.ndarray:
    """The sample as floats, an unreached run (None) counted as ``budget`` (a lower bound)."""
    values = list(values)
    if any(v is None for v in values):
        if budget is None:
            raise ValueError("the sample has unreached runs (None) but no budget to count them at")
        values = [budget if v is None else v for v in values]
    return np.asarray(values, dtype=float)


def median(values: Iterable[float | None], budget: float | None = None) -> float | None:
    """The median, unreached runs counted as ``budget``; None of an empty sample."""
    x = censored(values, budget)
    return float(np.median(x)) if x.size else None


def median_ci(values, budget: float | None = None, n_boot: int = 10000, seed: int = 0,
              level: float = 0.95) -> tuple[float | None, list[float] | None]:
    """(median, [lo, hi]): the median and its bootstrap percentile interval."""
    x = censored(values, budget)
    if not x.size:
        return None, None
    lo, hi = np.percentile(_boot_medians(x, np.random.default_rng(seed), n_boot), [50 * (1 - level), 50 * (1 + level)])
    return float(np.median(x)), [float(lo), float(hi)]


def _boot_medians(x: np.ndarray, rng, n_boot: int) -> np.ndarray:
    """The medians of ``n_boot`` resamples of ``x`` with replacement, each of its own size."""
    return np.median(x[rng.integers(0, x.size, (n_boot, x.size))], axis=1)


def median_ratio_ci(a, b, n_boot: int = 10000, seed: int = 0, budget: float | None = None,
                    level: float = 0.95) -> tuple[float | None, list[float] | None]:
    """(median(a) / median(b), [lo, hi]): the ratio of the medians and its bootstrap percentile
    interval (``level``, 95%), a and b resampled independently with replacement, ``n_boot`` times.
    Unreached runs (None) count as ``budget``. (None, None) when a sample is empty."""
    x, y = censored(a, budget), censored(b, budget)
    if not x.size or not y.size:
        return None, None
    if np.median(y) <= 0:
        raise ValueError("median(b) must be > 0 for a ratio, got %r" % float(np.median(y)))
    rng = np.random.default_rng(seed)
    mx, my = _boot_medians(x, rng, n_boot), _boot_medians(y, rng, n_boot)
    ratios = mx / np.where(my > 0, my, np.nan)
    lo, hi = np.nanpercentile(ratios, [50 * (1 - level), 50 * (1 + level)])
    return float(np.median(x) / np.median(y)), [float(lo), float(hi)]


def permutation_p(a, b, n_perm: int = 20000, seed: int = 0, budget: float | None = None) -> float | None:
    """Two-sided permutation p-value of |median(a) - median(b)|: the share of the splits of the
    pooled sample into groups of len(a) and len(b) whose statistic is at least the observed one.
    Exact (every one of the C(n, len(a)) splits) when there are at most ``n_perm`` of them, else
    ``n_perm`` random splits, p = (1 + as extreme) / (1 + n_perm). Unreached runs count as
    ``budget``. None when a sample is empty."""
    x, y = censored(a, budget), censored(b, budget)
    if not x.size or not y.size:
        return None
    pooled = np.concatenate([x, y])
    n, k = pooled.size, x.size
    observed = abs(float(np.median(x) - np.median(y)))
    exact = math.comb(n, k) <= n_perm
    idx = (np.array(list(itertools.combinations(range(n), k)), dtype=int) if exact  # a's positions in each split
           else np.argsort(np.random.default_rng(seed).random((n_perm, n)), axis=1)[:, :k])
    mask = np.zeros((len(idx), n), dtype=bool)
    mask[np.arange(len(idx))[:, None], idx] = True
    # each split's statistic: |median of the masked values - median of the others|
    vals = np.broadcast_to(pooled, mask.shape)
    first = np.sort(np.where(mask, vals, np.inf), axis=1)[:, :k]
    second = np.sort(np.where(mask, np.inf, vals), axis=1)[:, :n - k]
    hits = int(np.sum(np.abs(np.median(first, axis=1) - np.median(second, axis=1)) >= observed - _TOL))
    return hits / len(idx) if exact else (1 + hits) / (1 + n_perm)
