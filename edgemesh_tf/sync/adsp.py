"""ADSP's commit timer, catch-up, loss-curve fit and online search of the commit count per period
(numpy; scipy if present).

ADSP (Hu, Wang, Wu, AAAI 2020) lets every worker train without waiting and commit on a timer, so
that all workers commit about equally often: in each check period of ``period_s`` seconds worker i
commits ``ΔC_i`` times, ``ΔC_i`` chosen so that the cumulative commit counts meet again at the
end of the period (``commits_per_worker``: a worker behind commits more, it catches up); its
timer counts compute only, ``period_s/ΔC_i − comm_s[i]`` between commits
(``compute_interval_s``), because each commit then spends ``comm_s[i]`` communicating. Once per
period the scheduler fits the loss curve ``l(t) = 1/(a²·t + b) + c`` to the period's losses and
climbs the commit count while the predicted time to a target loss improves
(``CommitRateSearch(period_s=...)``). These follow the ADSP implementation in the ASHL authors'
public code (github.com/xiangunremarkable/ASHL, ``ASHL/ADSP/client1.py``: ``Trainer.get_c``,
``train``, ``reward``; ``server1.py``: ``get_c``, ``reward``), except the reward: their ``task``
solves the curve exactly through three losses of the period (first, middle, last, at normalised
times 0, ½, 1) and rewards ``a²/(1/(l_last − c) − b)``, which is 1 for any exact solution, so it
cannot rank commit counts; the search here keeps ADSP's criterion, the predicted time to the
target loss on a least-squares fit over the period's evaluations. ``t`` may be in any unit (s,
ms or steps) for the fit; predicted times come back in the same unit.
"""
from __future__ import annotations

import math
from typing import Mapping, NamedTuple, Sequence

import numpy as np

try:  # scipy refines the fit; without it the grid + linear least squares result is used as is
    from scipy.optimize import least_squares as _least_squares
except ImportError:  # pragma: no cover - scipy is installed in our environment
    _least_squares = None


def compute_interval_s(period_s: float, commits: int, comm_s: float) -> float:
    """Compute time between two commits, s: ``period_s/commits − comm_s``, at least 0.

    The authors' ``train``: a worker computes while ``elapsed < T/m_c − T1`` (``T1`` the mean of
    its last 10 commits' communication time), then commits; so ``commits`` commits with their
    communication fill the period. 0 when the communication alone overfills it (the worker then
    commits after every local step; the search should not go there: ``max_commits``).
    """
    if not (isinstance(period_s, (int, float)) and math.isfinite(period_s) and period_s > 0):
        raise ValueError(f"period_s must be a finite number > 0 s, got {period_s!r}")
    if not isinstance(commits, int) or isinstance(commits, bool) or commits < 1:
        raise ValueError(f"commits must be an int >= 1 per period, got {commits!r}")
    if not (isinstance(comm_s, (int, float)) and math.isfinite(comm_s) and comm_s >= 0):
        raise ValueError(f"comm_s must be a finite number >= 0 s, got {comm_s!r}")
    return max(0.0, period_s / commits - comm_s)


def max_commits(period_s: float, comm_s: float, cap: int = 1 << 20) -> int:
    """The most commits per period that leave compute time: the largest ``c >= 1`` with
    ``period_s/c − comm_s > 0`` (the authors' ``next = T/(m_c+1) − T1 > 0`` before climbing);
    ``cap`` when the communication takes 0 s; 1 when even one commit overfills the period."""
    if comm_s <= 0:
        return cap
    return max(1, min(cap, math.ceil(period_s / comm_s) - 1))


def commits_per_worker(commits_so_far: Mapping[str, int], per_period: int) -> dict[str, int]:
    """Commits each worker makes in the next period, so the cumulative counts meet at
    ``max(commits_so_far) + per_period``: ``ΔC_i = max_j C_j + per_period − C_i``.

    The leader commits ``per_period`` times, a worker behind more (catch-up). The authors'
    ``get_c``: the server returns ``max(l_c) + 1`` and each worker commits ``g_c − l_c`` times,
    ``per_period`` being the count their search then moves up or down by 1.
    """
    if not commits_so_far:
        raise ValueError("commits_so_far must hold at least one worker's cumulative commits, got none")
    if not isinstance(per_period, int) or isinstance(per_period, bool) or per_period < 1:
        raise ValueError(f"per_period must be an int >= 1 commits, got {per_period!r}")
    target = max(commits_so_far.values()) + per_period
    return {name: target - int(c) for name, c in commits_so_far.items()}


def initial_commits(period_s: float, iter_s: Sequence[float], comm_s: Sequence[float],
                    local_steps: int = 8) -> int:
    """A starting commit count per period scaled to the task: as many commits as fit a round of
    ``local_steps`` iterations plus a commit on the slowest worker,
    ``max(1, floor(period_s / max_i(local_steps·iter_s[i] + comm_s[i])))`` (times in s).

    With ``local_steps`` = ASHL's H_preset (8), ADSP starts from AHL's commit frequency instead
    of a fixed timer; the search then climbs from there.
    """
    if len(iter_s) != len(comm_s) or not len(iter_s):
        raise ValueError(f"iter_s and comm_s must hold one time per worker, "
                         f"got {len(iter_s)} and {len(comm_s)}")
    if not isinstance(local_steps, int) or local_steps < 1:
        raise ValueError(f"local_steps must be an int >= 1, got {local_steps!r}")
    round_s = max(local_steps * it + cm for it, cm in zip(iter_s, comm_s))
    if not round_s > 0:
        raise ValueError(f"a round must take > 0 s, got iter_s {list(iter_s)} and comm_s {list(comm_s)}")
    return max(1, int(period_s // round_s))


class LossCurve(NamedTuple):
    """``l(t) = 1/(a²·t + b) + c``; unpacks as ``a, b, c``; ``a >= 0``.

    ``b`` is ``> 0`` for a curve fitted from ``t = 0``; a fit to a late window of a run whose rate
    changed may have ``b <= 0``: the curve is only meaningful where ``a²t + b > 0``.
    """

    a: float
    b: float
    c: float

    def loss(self, t):
        """Loss at time(s) ``t`` (same unit as the fit)."""
        return 1.0 / (self.a ** 2 * np.asarray(t, dtype=float) + self.b) + self.c

    def predict_time_to(self, target_loss: float) -> float:
        """Time at which the curve reaches ``target_loss``: ``(1/(target − c) − b)/a²``.

        0 if the curve starts at or below the target; ``inf`` if the target is at or below the
        asymptote ``c`` or the curve is flat (``a = 0``).
        """
        if target_loss <= self.c:
            return math.inf
        need = 1.0 / (target_loss - self.c) - self.b
        if need <= 0:
            return 0.0
        if self.a == 0:
            return math.inf
        return need / self.a ** 2


def _linear_given_c(t, l, c):
    """Least squares of ``1/(l − c) = s·t + b`` (s = a²) for a fixed c; None if degenerate."""
    y = 1.0 / (l - c)
    A = np.stack([t, np.ones_like(t)], axis=1)
    (s, b), *_ = np.linalg.lstsq(A, y, rcond=None)
    return math.sqrt(max(float(s), 0.0)), float(b)


def _sse(t, l, a, b, c):
    den = a * a * t + b
    if not np.all(den > 0):
        return math.inf
    return float(np.sum((1.0 / den + c - l) ** 2))


def fit_loss_curve(t: Sequence[float], loss: Sequence[float],
                   fixed_c: float | None = None) -> LossCurve:
    """Least-squares fit of ``l(t) = 1/(a²t + b) + c`` to points ``(t, loss)``.

    A grid over ``c`` below ``min(loss)`` with linear least squares for ``a², b`` given ``c``
    (``1/(l − c) = a²t + b``) gives the start; scipy's ``least_squares`` then refines (a, b, c) on
    the loss residuals. ``fixed_c`` fixes the asymptote (e.g. a known minimum loss) and fits a, b
    only. Needs >= 3 finite points (2 with ``fixed_c``).
    """
    t = np.asarray(t, dtype=float).ravel()
    l = np.asarray(loss, dtype=float).ravel()
    if t.shape != l.shape:
        raise ValueError(f"t and loss must have the same length, got {t.size} and {l.size}")
    ok = np.isfinite(t) & np.isfinite(l)
    t, l = t[ok], l[ok]
    need = 2 if fixed_c is not None else 3
    if t.size < need:
        raise ValueError(f"fit_loss_curve needs >= {need} finite points, got {t.size}")
    lo, span = float(l.min()), float(np.ptp(l)) or max(abs(float(l.min())), 1.0)

    if fixed_c is not None:
        keep = l > fixed_c
        if keep.sum() < 2:
            raise ValueError(f"fixed_c={fixed_c} must be below >= 2 of the losses "
                             f"(min loss {lo})")
        a, b = _linear_given_c(t[keep], l[keep], fixed_c)
        if _least_squares is not None:
            res = _least_squares(lambda p: 1.0 / (p[0] ** 2 * t + p[1]) + fixed_c - l, [a, b],
                                 x_scale="jac")
            if _sse(t, l, abs(res.x[0]), res.x[1], fixed_c) <= _sse(t, l, a, b, fixed_c):
                a, b = abs(float(res.x[0])), float(res.x[1])
        return LossCurve(a, b, float(fixed_c))

    best = None
    for q in np.logspace(-4, 1.5, 60):
        c = lo - q * span
        a, b = _linear_given_c(t, l, c)
        err = _sse(t, l, a, b, c)
        if best is None or err < best[0]:
            best = (err, a, b, c)
    err0, a, b, c = best
    if _least_squares is not None:
        res = _least_squares(lambda p: 1.0 / (p[0] ** 2 * t + p[1]) + p[2] - l, [a, b, c],
                             x_scale="jac")
        ra, rb, rc = abs(float(res.x[0])), float(res.x[1]), float(res.x[2])
        if np.isfinite([ra, rb, rc]).all() and _sse(t, l, ra, rb, rc) <= err0:
            a, b, c = ra, rb, rc
    return LossCurve(float(a), float(b), float(c))


class CommitRateSearch:
    """ADSP's online hill climb of the commit count per period.

    Each period, ``update(times, losses)`` gets the whole measured history; it fits the curve to
    the points measured since the previous evaluation (the current count's window), predicts the
    time to ``target_loss`` and calls ``observe(predicted_time)``. The climb starts at ``initial``
    and moves by ``step`` in ``direction`` while the prediction improves; on the first worse
    prediction it goes back to the best count and tries the other side once (unless that side
    was already measured); then it settles on the best count (``converged``). Counts stay in
    ``[lower, upper]``. ``asymptote`` fixes ``c`` of the fit (e.g. a known minimum loss).

    ``period_s`` (published ADSP: once per period): decide only when the window also spans
    ``period_s`` (same unit as the times) since the previous decision (since the first point
    for the first one), i.e. one fit over a whole period at each count; None (the default, as
    before) decides as soon as the window holds ``min_points`` points.
    """

    def __init__(self, target_loss: float, initial: int = 4, step: int = 1, lower: int = 1,
                 upper: int = 64, direction: int = 1, min_points: int = 5,
                 asymptote: float | None = None, period_s: float | None = None):
        for field, v, lo in (("step", step, 1), ("lower", lower, 1), ("min_points", min_points, 3)):
            if not isinstance(v, int) or v < lo:
                raise ValueError(f"CommitRateSearch {field} must be an int >= {lo}, got {v!r}")
        if not isinstance(upper, int) or upper < lower:
            raise ValueError(f"CommitRateSearch upper must be an int >= lower={lower}, got {upper!r}")
        if not isinstance(initial, int) or not lower <= initial <= upper:
            raise ValueError(f"CommitRateSearch initial must be an int in [{lower}, {upper}], "
                             f"got {initial!r}")
        if direction not in (1, -1):
            raise ValueError(f"CommitRateSearch direction must be +1 or -1, got {direction!r}")
        if period_s is not None and not (isinstance(period_s, (int, float)) and period_s > 0):
            raise ValueError(f"CommitRateSearch period_s must be > 0 or None, got {period_s!r}")
        self.period_s = period_s
        self.target_loss = float(target_loss)
        self.step, self.lower, self.upper = step, lower, upper
        self.direction = direction
        self.min_points = min_points
        self.asymptote = asymptote
        self.count = initial
        self.converged = False
        self.best_count: int | None = None
        self.best_time = math.inf
        self.measured: dict[int, float] = {}
        self.trials: list[tuple[int, float]] = []  # (count, predicted time to target)
        self._window_start = -math.inf
        self._decided_at: float | None = None  # time of the previous decision (or the first point)

    def observe(self, predicted_time: float) -> int:
        """Record the predicted time to target at the current count; returns the next count."""
        self.trials.append((self.count, predicted_time))
        self.measured[self.count] = predicted_time
        if self.converged:
            return self.count
        if self.best_count is None or predicted_time < self.best_time:
            self.best_count, self.best_time = self.count, predicted_time
            nxt = self.count + self.direction * self.step
            if self.lower <= nxt <= self.upper and nxt not in self.measured:
                self.count = nxt
                return self.count
        # worse (or blocked by a bound): try the other side of the best count once
        other = self.best_count - self.direction * self.step
        if self.lower <= other <= self.upper and other not in self.measured:
            self.direction = -self.direction
            self.count = other
        else:
            self.converged = True
            self.count = self.best_count
        return self.count

    def update(self, times: Sequence[float], losses: Sequence[float]) -> int:
        """Feed the measured ``(time, loss)`` history; returns the commit count for the next period.

        Waits (returns the current count) until the window holds ``min_points`` points (and, with
        ``period_s``, spans a whole period since the previous decision).
        """
        t = np.asarray(times, dtype=float).ravel()
        l = np.asarray(losses, dtype=float).ravel()
        if t.shape != l.shape:
            raise ValueError(f"times and losses must have the same length, got {t.size} and {l.size}")
        win = t > self._window_start
        if int(win.sum()) < self.min_points:
            return self.count
        if self.period_s is not None:
            if self._decided_at is None:
                self._decided_at = float(t[win].min())
            if float(t[win].max()) - self._decided_at < self.period_s:
                return self.count
            self._decided_at = float(t[win].max())
        curve = fit_loss_curve(t[win], l[win], fixed_c=self.asymptote)
        self.last_curve = curve
        self._window_start = float(t[win].max())
        return self.observe(curve.predict_time_to(self.target_loss))
