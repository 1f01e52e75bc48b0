"""What the progress lines estimate: throughput over a trailing window and the time to the target.

Pure Python (no TensorFlow): the chief's decisions (decide.py) feed these functions the
evaluations' totals and accuracies, and tests drive them with plain numbers
(tests/engine/test_progress.py). Times are seconds of training; counts are examples.

Throughput. A group reports its totals once per round, so its example count rises in bursts, one
per commit (ASHL's AHL commits after tens of local iterations). The rate over one evaluation
interval is then 0 whenever no commit landed in it and a multiple of the true rate when one did.
`windowed_rate` measures each group over a trailing window that begins AT one of its bursts, spans
at least `window_s` when the samples reach back that far, and holds at least `min_bursts` later bursts:

* Beginning at a burst, the window holds k >= min_bursts whole burst periods plus the part of one
  elapsed since the last burst, so it reads between k/(k+1) of the rate and the rate (k is about
  window_s / period when bursts are frequent), give or take one sample interval over the window's
  span (a burst shows at the sample after it). A window of fixed length (or of the last N
  evaluations, which come every eval_interval_s) reads 0 whenever a group's rounds are longer than
  it, and one that begins anywhere counts k or k+1 bursts over the same span.
* A group's window grows to cover `min_bursts` of its rounds when its rounds are long, so a slow
  group never shows 0 between its commits; a group that stops committing shows a rate that decays
  as 1/elapsed instead of a frozen figure.

Time to the target accuracy. `time_to_target` fits the error 1 - accuracy of the last
evaluations in log space by least squares (error(t) = exp(a + b t): the error keeps falling by the
same fraction per second) and solves for the target's error from the fitted value at the last
evaluation. The fit over a trailing window follows the curve's current pace, so the estimate moves
as the curve bends; compared with a straight line through the accuracy, the exponential slows as
the error shrinks, as training curves do. A curve levelling off below accuracy 1 reaches the target
later than estimated, by less as it comes closer. It gives no estimate (None) when it cannot tell:
fewer than `min_points` evaluations, a fall of the log error smaller than `t_min` standard errors
of its slope (a flat or noisy curve), or an estimate beyond `horizon_s` (e.g. the budget left).
"""
from __future__ import annotations

import collections
import math
from typing import Mapping, Sequence

WINDOW_S = 10.0  # throughput: the shortest trailing window (s)
MIN_BURSTS = 2  # throughput: the fewest bursts (a group's count rising) counted in a window
KEEP = 300  # throughput: evaluations kept per Throughput (bounds the longest window)
FIT_POINTS = 20  # target: the last evaluations fitted
MIN_POINTS = 4  # target: the fewest evaluations for an estimate
T_MIN = 2.0  # target: the log error must fall by at least this many standard errors of the slope
ERROR_FLOOR = 1e-6  # target: the smallest error 1 - accuracy (log of 0 otherwise)


def windowed_rate(samples: Sequence[tuple[float, float]], window_s: float = WINDOW_S,
                  min_bursts: int = MIN_BURSTS) -> float | None:
    """Examples/s of one group from samples [(s, its cumulative examples)] in time order: the
    examples since the window's start divided by the s since then (see the module docstring). The
    window starts at the latest burst (a sample whose count rose over the one before) that lies
    window_s or more before the last sample and has min_bursts bursts after it; failing that, at
    the earliest burst with min_bursts bursts after it; failing that (too few bursts), at the first
    sample. None with fewer than two samples or none of them before the last."""
    if min_bursts < 1:
        raise ValueError("windowed_rate: min_bursts must be >= 1, got %r" % (min_bursts,))
    if len(samples) < 2:
        return None
    t_now, x_now = samples[-1]
    rises = [i for i in range(1, len(samples)) if samples[i][1] > samples[i - 1][1]]
    starts = rises[:len(rises) - min_bursts]  # bursts with at least min_bursts bursts after them
    old = [i for i in starts if samples[i][0] <= t_now - window_s]
    start = old[-1] if old else starts[0] if starts else 0
    t0, x0 = samples[start]
    return (x_now - x0) / (t_now - t0) if t_now > t0 else None


class Throughput:
    """Each group's `windowed_rate` over the samples added so far (the last `keep`)."""

    def __init__(self, window_s: float = WINDOW_S, min_bursts: int = MIN_BURSTS, keep: int = KEEP):
        self.window_s, self.min_bursts = window_s, min_bursts
        self._samples: collections.deque = collections.deque(maxlen=keep)

    def add(self, t: float, examples: Mapping[str, float]) -> dict[str, float | None]:
        """Adds the sample {group: cumulative examples} at `t` (s); returns each group's examples/s
        (None: not measured yet). A group counts from the first sample that names it."""
        self._samples.append((float(t), {g: float(x) for g, x in examples.items()}))
        return {g: windowed_rate([(s, c[g]) for s, c in self._samples if g in c], self.window_s, self.min_bursts)
                for g in examples}


def _fit(ts: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
    """(intercept, slope, standard error of the slope) of the least-squares line y = a + b t."""
    n = len(ts)
    t_mean, y_mean = sum(ts) / n, sum(ys) / n
    sxx = sum((t - t_mean) ** 2 for t in ts)
    b = sum((t - t_mean) * (y - y_mean) for t, y in zip(ts, ys)) / sxx
    a = y_mean - b * t_mean
    ssr = sum((y - a - b * t) ** 2 for t, y in zip(ts, ys))
    return a, b, math.sqrt(ssr / (n - 2) / sxx)


def time_to_target(history: Sequence[tuple[float, float]], target: float, horizon_s: float | None = None,
                   points: int = FIT_POINTS, min_points: int = MIN_POINTS, t_min: float = T_MIN) -> float | None:
    """Estimated s from the last evaluation until the accuracy reaches `target`, from the history
    [(s, accuracy)] in time order: 0.0 when the last accuracy is at or above it; else a
    least-squares line through log(1 - accuracy) of the last `points` evaluations (see the module
    docstring). None when it cannot tell: fewer than `min_points` (>= 3) evaluations, no time
    between them, log error not falling by t_min standard errors, or an estimate over horizon_s."""
    if min_points < 3:
        raise ValueError("time_to_target: min_points must be >= 3 (a slope and its error), got %r" % (min_points,))
    if not history:
        return None
    if history[-1][1] >= target:
        return 0.0
    recent = history[-max(points, min_points):]
    if len(recent) < min_points or recent[-1][0] <= recent[0][0]:
        return None
    ts = [float(t) for t, _ in recent]
    ys = [math.log(max(1.0 - a, ERROR_FLOOR)) for _, a in recent]
    a, b, se = _fit(ts, ys)
    if not b < -t_min * se:
        return None
    eta = max(0.0, (math.log(max(1.0 - target, ERROR_FLOOR)) - (a + b * ts[-1])) / b)
    return None if horizon_s is not None and eta > horizon_s else eta
