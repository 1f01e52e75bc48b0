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
              from each start (the layer-by-layer optimum, a memory-first packing, all replicated)
  exact       when there are at most EXACT_MAX divisions in all, every one is simulated instead

Measured against brute force over every integer division (2-8 devices, 2-4 layers, with and without
tight memory; ``tests/planner/test_planner_optimality.py``): within 2%.
"""
from __future__ import annotations

import functools
import itertools
import math
from typing import Callable, Sequence

from edgemesh_tf.mesh.layout import even_split
from edgemesh_tf.planner.cost import LayerCoeffs, Shares, fixed_memory_bytes
from edgemesh_tf.planner.model_stats import ModelStats
from edgemesh_tf.planner.simulate import simulate_step_ms, simulate_steps_ms
from edgemesh_tf.profiling.types import DeviceProfile

MAX_EVALUATIONS = 4000
EXACT_MAX = 2000  # divisions: at most this many, try them all


def memory_bytes(stats: ModelStats, coeffs: Sequence[LayerCoeffs], shares: Sequence[Shares], k: int,
                 fixed: Sequence[int] | None = None) -> list[int]:
    """Predicted bytes per device of a division (``cost``'s memory formula); ``fixed``: the
    group's ``fixed_memory_bytes`` if already known."""
    mem = list(fixed_memory_bytes(stats, k) if fixed is None else fixed)
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
        self.fixed = fixed_memory_bytes(stats, self.k)
        self.budget = [d.memory_bytes for d in group]
        names = [d.name for d in stats.dims]
        self._one = lambda sh: simulate_step_ms(group, stats, dict(zip(names, sh)), profile_batch, coeffs)
        self._batch = not any(d.medium for d in group)  # simulate_steps_ms: groups on their own links
        self.cache: dict[tuple, float] = {}

    def cost(self, sh) -> float:
        return self.costs([sh])[0]

    def costs(self, trials) -> list[float]:
        """The simulated step ms of each of ``trials``: the ones not simulated before at once."""
        keys = [tuple(sh) for sh in trials]
        new = list(dict.fromkeys(key for key in keys if key not in self.cache))
        if len(new) > 1 and self._batch:
            self.cache.update(zip(new, simulate_steps_ms(self.group, self.stats, new, self.coeffs).tolist()))
        else:
            self.cache.update((key, self._one(key)) for key in new)
        return [self.cache[key] for key in keys]

    def memory(self, sh) -> list[int]:
        return memory_bytes(self.stats, self.coeffs, sh, self.k, self.fixed)

    def fits(self, sh) -> bool:
        return all(m <= b for m, b in zip(self.memory(sh), self.budget))

    def fits_changed(self, base, base_room, trial, changed) -> bool:
        """``fits(trial)`` for a ``trial`` that differs from ``base`` only in the layers ``changed``;
        ``base_room``: (each device's budget minus the base's bytes, the least of them). The bytes of
        the changed layers are swapped (integers: exact); when even holding every unit of them more
        than the base does fits the device with the least room, the trial fits without the sum."""
        room, least = base_room
        coeffs = self.coeffs
        if sum(coeffs[l].mem_per_unit * coeffs[l].units for l in changed) <= least:
            return True
        room = list(room)
        for l in changed:
            co = coeffs[l]
            old, new = base[l] or (co.units,) * self.k, trial[l] or (co.units,) * self.k
            for i in range(self.k):
                room[i] -= co.mem_per_unit * (new[i] - old[i])
        return min(room) >= 0

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

    def single_moves(self, sh):
        """(layers changed, shares) per layer: replicate, split, or one quantum a -> b."""
        k = self.k
        for l, (co, q) in enumerate(zip(self.coeffs, self.quanta)):
            if not q:
                continue
            cur = sh[l]
            if cur is None:
                for cand in {self.split(l), tuple(q * s for s in even_split(co.units // q, k))} - {None}:
                    yield (l,), _replace(sh, l, cand)
                continue
            yield (l,), _replace(sh, l, None)
            for a in range(k):
                if cur[a] >= 2 * q:
                    for b in range(k):
                        if b != a:
                            yield (l,), _replace(sh, l, _moved(cur, a, b, q))

    def chain_moves(self, sh):
        """(layers changed, shares): layer l moves a quantum a -> b while layer m moves one b -> c
        (c = a: an exchange, which keeps both devices' memory about level)."""
        k, split = self.k, [l for l in range(len(sh)) if sh[l] is not None and self.quanta[l]]
        for l in split:
            for m in split:
                if m == l:
                    continue
                ql, qm = self.quanta[l], self.quanta[m]
                for a in range(k):
                    if sh[l][a] < 2 * ql:
                        continue
                    for b in range(k):
                        if b == a or sh[m][b] < 2 * qm:
                            continue
                        trial = _replace(sh, l, _moved(sh[l], a, b, ql))
                        for c in range(k):
                            if c != b:
                                yield (l, m), _replace(trial, m, _moved(sh[m], b, c, qm))

    def descend(self, start, budget: int):
        """Best-improvement descent from ``start``; returns (ms, shares, evaluations left). Each sweep's
        trials (the moves that fit, or fit once repaired) are simulated together."""
        best, best_ms = list(start), self.cost(start)
        while budget > 0:
            move = None
            room = [b - m for b, m in zip(self.budget, self.memory(best))]
            base_room = (room, min(room))
            for moves in (self.single_moves, self.chain_moves):
                trials = []
                for changed, trial in moves(best):
                    if not self.fits_changed(best, base_room, trial, changed):
                        trial = self.repair(trial, changed)
                        if trial is None:
                            continue
                    trials.append(trial)
                budget -= len(trials)
                for ms, trial in zip(self.costs(trials), trials):
                    if ms < best_ms - 1e-9 and (move is None or ms < move[0]):
                        move = (ms, trial)
                if move is not None or budget <= 0:
                    break
            if move is None:
                break
            best_ms, best = move
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
