"""Local search on the simulated step time (ms) of one group's filter division, within every memory budget.

``division.divide`` starts from the exact layer-by-layer optimum (``solve_layer``). The simulated step
(``simulate``) couples the layers (a layer's backward collective is a reduce-scatter when the
previous layer is split and a ring allreduce when it is replicated; devices run out of step), so
the layer-by-layer optimum is not always the simulated one. ``polish`` improves on it:

  starts      the given shares, and every layer replicated (when that fits in memory)
  moves       per layer: replicate it, split it (the exact layer optimum, or evenly), move one quantum
              from device a to device b; when none improves: two layers at once (layer l: a -> b,
              layer l': b -> c; c = a is an exchange, which keeps both devices' memory about level)
  memory      a move that puts a device over its ``memory_bytes`` is repaired by moving quanta of
              the other split layers off it (largest bytes per quantum first) to the device with
              the most room; a move that cannot be repaired is skipped
  search      best improvement, until no move improves or ``max_evaluations`` simulations are spent;
              from each start (the layer-by-layer optimum, a memory-first packing, all replicated);
              a sweep's moves are built, checked for memory and simulated as arrays (``simulate``)
  exact       when there are at most EXACT_MAX divisions in all, every one is simulated instead

Measured against brute force over every integer division (2-8 devices, 2-4 layers, with and without
tight memory; ``tests/planner/test_planner_optimality.py``): within 2%.
"""
from __future__ import annotations

import functools
import itertools
import math
from typing import Callable, Sequence

import numpy as np

from edgemesh_tf.mesh.layout import even_split
from edgemesh_tf.planner.cost import LayerCoeffs, Shares, group_fixed_memory_bytes
from edgemesh_tf.planner.model_stats import ModelStats
from edgemesh_tf.planner.simulate import simulate_share_arrays, simulate_step_ms, simulate_steps_ms
from edgemesh_tf.profiling.types import DeviceProfile

MAX_EVALUATIONS = 4000
EXACT_MAX = 2000  # divisions: at most this many, try them all
TRIAL_BATCH = 4096  # divisions simulated together in a sweep, at least (but the last)


def memory_bytes(stats: ModelStats, coeffs: Sequence[LayerCoeffs], shares: Sequence[Shares],
                 group: Sequence[DeviceProfile], fixed: Sequence[int] | None = None) -> list[int]:
    """Predicted bytes per device of ``group`` under a division (``cost``'s memory formula); ``fixed``:
    the group's ``fixed_memory_bytes`` if already known."""
    k = len(group)
    mem = list(group_fixed_memory_bytes(stats, group) if fixed is None else fixed)
    for s, co in zip(shares, coeffs):
        if s is None:
            for i in range(k):
                mem[i] += co.mem_per_unit * co.units
        else:
            for i in range(k):
                mem[i] += co.mem_per_unit * s[i]
    return mem


class _Search:
    """One group's local search state: the cost of a share list (cached) and memory repair."""

    def __init__(self, group, stats, coeffs, quanta, profile_batch, split: Callable[[int], Shares]):
        self.group, self.stats, self.coeffs, self.quanta = group, stats, coeffs, quanta
        # the exact layer solve is a pure function of the layer (its caps are fixed by then), and every
        # pass over the single moves asks it of every replicated layer again
        self.split = functools.cache(split)
        self.k = len(group)
        self.fixed = group_fixed_memory_bytes(stats, group)
        self.budget = [d.memory_bytes for d in group]
        names = [d.name for d in stats.dims]
        self._one = lambda sh: simulate_step_ms(group, stats, dict(zip(names, sh)), profile_batch, coeffs)
        self._batch = not any(d.medium for d in group)  # simulate_steps_ms: groups on their own links
        # the arrays of the moves: bytes per unit and units per layer, one-hot rows,
        # the pairs (a, b != a) and triples (a, b != a, c != b) of devices in the order the moves take them
        self.mpu = np.array([co.mem_per_unit for co in coeffs], dtype=np.int64)
        self.units = np.array([co.units for co in coeffs], dtype=np.int64)
        self.eye = np.eye(self.k, dtype=np.int64)
        pairs = [(a, b) for a in range(self.k) for b in range(self.k) if b != a]
        self.pairs = tuple(np.array(pairs, dtype=np.intp).reshape(-1, 2).T)
        self.triples = tuple(np.array([(a, b, c) for a, b in pairs for c in range(self.k) if c != b],
                                      dtype=np.intp).reshape(-1, 3).T)

    def cost(self, sh) -> float:
        return self.costs([sh])[0]

    def costs(self, trials) -> list[float]:
        """The simulated step ms of each of ``trials`` (lists of shares)."""
        if len(trials) > 1 and self._batch:
            return simulate_steps_ms(self.group, self.stats, trials, self.coeffs).tolist()
        return [self._one(sh) for sh in trials]

    def memory(self, sh) -> list[int]:
        return memory_bytes(self.stats, self.coeffs, sh, self.group, self.fixed)

    def fits(self, sh) -> bool:
        return all(m <= b for m, b in zip(self.memory(sh), self.budget))

    def repair(self, sh, fixed: Sequence[int]):
        """Moves quanta of split layers not in ``fixed`` off over-budget devices (see the module
        docstring) until all fit; None if they cannot. Several quanta move at once while the same
        device stays the most over, the same device keeps the most room and the layer keeps two
        quanta on it (the result of moving them one at a time)."""
        sh, k, budget = list(sh), self.k, self.budget
        mem = self.memory(sh)
        if sum(mem) > sum(budget):
            return None  # moves keep the group's total bytes
        for _ in range(sum(co.units for co in self.coeffs)):
            over = sorted(((mem[i] - budget[i], i) for i in range(k) if mem[i] > budget[i]), reverse=True)
            if not over:
                return sh
            excess, i = over[0]
            slack = sorted(((budget[j] - mem[j], j) for j in range(k)), key=lambda t: t[0], reverse=True)
            room = slack[0][1]
            layers = [l for l in range(len(sh)) if l not in fixed and sh[l] is not None and self.quanta[l]
                      and sh[l][i] >= 2 * self.quanta[l] and room != i]
            if not layers:
                return None
            l = max(layers, key=lambda l: self.coeffs[l].mem_per_unit)
            q = self.quanta[l]
            step = self.coeffs[l].mem_per_unit * q
            n = 1
            if step > 0:
                n = min(sh[l][i] // q - 1, math.ceil(excess / step), int((slack[0][0] - slack[1][0]) // step) + 1)
                if len(over) > 1:
                    n = min(n, int((excess - over[1][0]) // step) + 1)
            sh[l] = _moved(sh[l], i, room, n * q)
            mem[i] -= n * step
            mem[room] += n * step
        return None

    def as_arrays(self, sh) -> tuple[np.ndarray, np.ndarray]:
        """``sh`` as (L, k) units (0 where replicated) and (L,) whether each layer is split."""
        split = np.array([x is not None for x in sh], dtype=bool)
        return np.array([x if x is not None else (0,) * self.k for x in sh], dtype=np.int64).reshape(-1, self.k), split

    def as_shares(self, shares: np.ndarray, split: np.ndarray) -> list:
        """One division's arrays back as shares (tuples of ints, None where replicated)."""
        return [tuple(row) if on else None for row, on in zip(shares.tolist(), split.tolist())]

    def fitting(self, shares: np.ndarray, split: np.ndarray) -> np.ndarray:
        """(N,) whether each of N divisions ((N, L, k) units, (N, L) split) fits every device's budget:
        ``fits`` in integers, so exactly its answer."""
        held = np.where(split[:, :, None], shares, self.units[None, :, None])
        mem = np.array(self.fixed, dtype=np.int64) + (self.mpu[None, :, None] * held).sum(axis=1)
        return (mem <= np.array(self.budget, dtype=np.int64)).all(axis=1)

    def single_blocks(self, sh, shares: np.ndarray, split: np.ndarray):
        """Per layer, the single moves from ``sh`` (arrays ``shares``, ``split``) as ((layer,), (n, L, k)
        units, (n, L) split): replicate a split layer, then one quantum a -> b for every a that keeps a
        quantum and every b != a; split a replicated one (its exact layer optimum, or evenly)."""
        k = self.k
        for l, (co, q) in enumerate(zip(self.coeffs, self.quanta)):
            if not q:
                continue
            if sh[l] is None:
                rows = list({self.split(l), tuple(q * s for s in even_split(co.units // q, k))} - {None})
                new, on = np.array(rows, dtype=np.int64).reshape(-1, k), np.ones(len(rows), dtype=bool)
            else:
                a, b = self.pairs
                keep = shares[l][a] >= 2 * q
                moved = shares[l] + q * (self.eye[b[keep]] - self.eye[a[keep]])
                new = np.concatenate([np.zeros((1, k), dtype=np.int64), moved])
                on = np.arange(len(new)) > 0
            yield (l,), *_with_rows(shares, split, {l: new}, {l: on})

    def chain_blocks(self, sh, shares: np.ndarray, split: np.ndarray):
        """Per pair of split layers (l, m), the chain moves: layer l moves a quantum a -> b while layer m
        moves one b -> c (c = a: an exchange, which keeps both devices' memory about level), for every
        a, b, c in that order, as ((l, m), (n, L, k) units, (n, L) split)."""
        on = [l for l in range(len(sh)) if sh[l] is not None and self.quanta[l]]
        a, b, c = self.triples
        for l in on:
            for m in on:
                if m == l:
                    continue
                ql, qm = self.quanta[l], self.quanta[m]
                keep = (shares[l][a] >= 2 * ql) & (shares[m][b] >= 2 * qm)
                ka, kb, kc = a[keep], b[keep], c[keep]
                rows = {l: shares[l] + ql * (self.eye[kb] - self.eye[ka]),
                        m: shares[m] + qm * (self.eye[kc] - self.eye[kb])}
                yield (l, m), *_with_rows(shares, split, rows, {})

    def trials(self, blocks):
        """The moves of ``blocks`` that fit, or fit once repaired (``repair``, the move's layers fixed), in
        order, gathered into arrays of at least TRIAL_BATCH divisions (the last may be smaller)."""
        got_shares, got_split, count = [], [], 0
        for changed, shares, split in blocks:
            fits = self.fitting(shares, split)
            if not fits.all():
                for i in np.flatnonzero(~fits):
                    repaired = self.repair(self.as_shares(shares[i], split[i]), changed)
                    if repaired is not None:
                        shares[i], split[i] = self.as_arrays(repaired)
                        fits[i] = True
                shares, split = shares[fits], split[fits]
            got_shares.append(shares)
            got_split.append(split)
            count += len(shares)
            if count >= TRIAL_BATCH:
                yield np.concatenate(got_shares), np.concatenate(got_split)
                got_shares, got_split, count = [], [], 0
        if count:
            yield np.concatenate(got_shares), np.concatenate(got_split)

    def array_costs(self, shares: np.ndarray, split: np.ndarray) -> np.ndarray:
        """The simulated step ms of each division of the arrays."""
        if self._batch:
            return simulate_share_arrays(self.group, self.stats, shares, split, self.coeffs)
        return np.array([self._one(self.as_shares(x, on)) for x, on in zip(shares, split)])

    def descend(self, start, budget: int):
        """Best-improvement descent from ``start``; returns (ms, shares, evaluations left). A sweep tries
        the single moves, and the chain moves when no single move improves; its trials (the moves that
        fit, or fit once repaired) count against ``budget``, and the best is the first of least ms."""
        best, best_ms = list(start), self.cost(start)
        while budget > 0:
            move = None
            shares, split = self.as_arrays(best)
            for blocks in (self.single_blocks, self.chain_blocks):
                for trial_shares, trial_split in self.trials(blocks(best, shares, split)):
                    budget -= len(trial_shares)
                    ms = self.array_costs(trial_shares, trial_split)
                    better = np.flatnonzero(ms < best_ms - 1e-9)
                    if len(better):
                        i = better[np.argmin(ms[better])]
                        if move is None or ms[i] < move[0]:
                            move = (float(ms[i]), trial_shares[i], trial_split[i])
                if move is not None or budget <= 0:
                    break
            if move is None:
                break
            best_ms, best = move[0], self.as_shares(move[1], move[2])
        return best_ms, best, budget


def polish(group: Sequence[DeviceProfile], stats: ModelStats, coeffs: Sequence[LayerCoeffs],
           quanta: Sequence[int | None], starts: Sequence[Sequence[Shares]], profile_batch: int,
           split: Callable[[int], Shares], max_evaluations: int = MAX_EVALUATIONS) -> list[Shares]:
    """The best shares found (see the module docstring) from ``starts`` (the first must fit; the
    others are used if they fit). When the whole space has at most ``EXACT_MAX`` divisions, every
    one is tried instead (exact).

    split(l): the exact layer-by-layer shares of layer l (None if it cannot be split); a pure function
    of l, asked at most once per layer.
    """
    search = _Search(group, stats, coeffs, quanta, profile_batch, split)
    if _space(coeffs, quanta, search.k) <= EXACT_MAX:
        options = [[None] + ([tuple(q * c for c in comp) for comp in compositions(co.units // q, search.k)] if q else [])
                   for co, q in zip(coeffs, quanta)]
        fitting = [list(sh) for sh in itertools.product(*options) if search.fits(sh)]
        costs = search.costs(fitting)
        return fitting[costs.index(min(costs))]
    starts = [list(s) for j, s in enumerate(starts) if j == 0 or search.fits(s)]
    replicated = [None] * len(coeffs)
    if search.fits(replicated):
        starts.append(replicated)
    best, budget = None, max_evaluations
    for start in starts:
        ms, found, budget = search.descend(start, max(budget, 1))
        if best is None or ms < best[0]:
            best = (ms, found)
    return best[1]


def compositions(n: int, k: int):
    """All k-tuples of positive integers adding up to n."""
    for cuts in itertools.combinations(range(1, n), k - 1):
        edges = (0,) + cuts + (n,)
        yield tuple(edges[j + 1] - edges[j] for j in range(k))


def _space(coeffs, quanta, k) -> int:
    """How many divisions there are: per layer, replicated or one composition of its quanta."""
    total = 1
    for co, q in zip(coeffs, quanta):
        total *= 1 + (math.comb(co.units // q - 1, k - 1) if q else 0)
        if total > EXACT_MAX:
            break
    return total


def _replace(sh, l, value):
    return list(sh[:l]) + [value] + list(sh[l + 1:])


def _moved(shares: tuple[int, ...], a: int, b: int, q: int) -> tuple[int, ...]:
    out = list(shares)
    out[a] -= q
    out[b] += q
    return tuple(out)


def _with_rows(shares: np.ndarray, split: np.ndarray, rows: dict, on: dict) -> tuple[np.ndarray, np.ndarray]:
    """n copies of one division's arrays with layer l's units replaced by ``rows[l]`` (n, k) and its split
    flag by ``on[l]`` (n,) where given."""
    n = len(next(iter(rows.values())))
    out, out_split = np.repeat(shares[None], n, axis=0), np.repeat(split[None], n, axis=0)
    for l, new in rows.items():
        out[:, l] = new
    for l, flags in on.items():
        out_split[:, l] = flags
    return out, out_split
