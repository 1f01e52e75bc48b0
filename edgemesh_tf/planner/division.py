"""Filter division for one model-parallel group: integer shares per layer minimising the predicted step.

Per split dim the cost model gives (in quanta of q units, N = U/q quanta, n_i >= 1 per device)

    layer_ms(n) = max_i A_i * n_i  +  max_i (hop + O_i + B_i * max(N - n_i, (k - 1) * n_i))  +  reduce
                  compute (grows with n_i)   forward allconcat: device i's link receives the others'
                                             quanta and sends its own to k - 1 peers (O_i: its split
                                             overhead, ``cost.LayerCoeffs.split_ms``)

Layers are solved one at a time (each ends in a collective; ``reduce`` is charged as if the previous
layer were split evenly, ``polish`` then searches on the uneven one), each exactly: for every compute
level T (some A_i * n) the caps n_i <= T / A_i are known; a gather level C gives floors
n_i >= N - (C - hop - O_i) / B_i and caps n_i <= (C - hop - O_i) / ((k - 1) B_i). The smallest C whose
floors and caps still fit (sum floors <= N <= sum caps, each floor <= its cap) only falls as T grows,
so one two-pointer sweep over the sorted levels finds min T + C in O(k N log(k N)). The shares are the
floors, filled up to N by water-filling (one quantum at a time to the device whose compute stays
smallest) within the caps. A layer stays replicated when splitting is not faster.

Memory (bytes, linear in the shares, see ``cost``): while a device is over its ``memory_bytes``, cap
its quanta on one layer by its whole excess (splitting a replicated layer if need be), choosing the
layer whose re-solved division costs the fewest predicted ms per byte freed; the others absorb the
units. This part is a heuristic, compared with the exhaustive optimum on random small instances
(tests/planner/test_planner_optimality.py; the figures in docs/DESIGN.md).

The step time that is reported (and checked against measurement) is the event simulation of
``simulate``, which the layer-by-layer objective bounds from above. The exact per-layer solution is
the starting point of ``polish``'s local search on the simulated step (groups of up to
POLISH_MAX_DEVICES devices; larger groups keep the layer-by-layer optimum). With ``subsets`` a
group uses only its fastest m devices (m chosen on the predicted step ms), so a group is never
predicted slower than its fastest device alone.
"""
from __future__ import annotations

import dataclasses
import functools
import heapq
import math
from typing import Callable, Sequence

from edgemesh_tf.mesh.layout import Layout
from edgemesh_tf.planner import media
from edgemesh_tf.planner.cost import (GroupPrediction, LayerCoeffs, Shares, check_group, group_fixed_memory_bytes,
                                      layer_coeffs)
from edgemesh_tf.planner.model_stats import ModelStats
from edgemesh_tf.planner.predict import predict
from edgemesh_tf.planner.polish import memory_bytes
from edgemesh_tf.planner.polish import polish as polish_shares
from edgemesh_tf.profiling.types import DeviceProfile

MESH_DIM = "model"
BATCH_DIM = "batch"  # the batch tensor dim and the mesh dim of synchronous data parallelism
POLISH_MAX_DEVICES = 8
SUBSET_EXHAUSTIVE = 8  # groups up to this many devices try every subset size m
POLISH_SUBSETS = 3  # subset sizes polished (the best unpolished ones)


class PlanError(ValueError):
    """No plan fits: names the device and how many bytes it is missing."""


def quantum(units: int, k: int, chunks: int | None = None) -> int | None:
    """Units per quantum of a dim split over k devices; None if it cannot be split (units < k).

    chunks: coarse granularity, shares in multiples of about units/chunks (the largest divisor of
      units not above units / max(chunks, k)); None = single units.
    """
    if units < k:
        return None
    if chunks is None:
        return 1
    target = max(1, units // max(chunks, k))
    return max(q for q in range(1, target + 1) if units % q == 0)


def solve_layer(co: LayerCoeffs, q: int, caps: Sequence[int]) -> tuple[int, ...] | None:
    """The shares (units) of one dim minimising ``co.layer_ms`` with n_i <= caps[i] quanta; None if
    the caps cannot hold all the quanta. Exact (see the module docstring)."""
    return _solve_layer(co, q, tuple(caps))


@functools.lru_cache(maxsize=1 << 14)
def _solve_layer(co: LayerCoeffs, q: int, caps: tuple[int, ...]) -> tuple[int, ...] | None:
    """``solve_layer``, kept by its arguments: a pure function, and the grid's search asks it the same
    layer of the same devices again and again (each subset size, each memory cut, each polish)."""
    k, n_q = len(caps), co.units // q
    if k < 2 or sum(caps) < n_q or min(caps) < 1:
        return None
    a = [f * q / co.units for f in co.full_ms]  # ms per quantum
    b = [r * q for r in co.recv_ms_per_unit]
    o = co.split_ms
    t_ev = sorted((a[i] * n, i, n) for i in range(k) for n in range(1, caps[i] + 1))
    # Gather levels, highest first. Going below o_i + b_i * (N - n) forces n_i >= n + 1 (receiving);
    # going below o_i + (k - 1) * b_i * n forces n_i <= n - 1 (sending). A device that moves bytes for
    # free (b_i = 0) stays at o_i whatever its share: the gather level never goes below the largest such.
    # events (level, device, is_floor, bound); a floor event sets lo_i, the others the sending cap
    c_ev = [(o[i] + b[i] * (n_q - n), i, True, n + 1) for i in range(k) if b[i] > 0 for n in range(1, n_q)]
    c_ev += [(o[i] + (k - 1) * b[i] * n, i, False, n - 1)
             for i in range(k) if b[i] > 0 for n in range(1, caps[i] + 1)]
    c_ev.sort(key=lambda e: -e[0])
    floor = max((o[i] for i in range(k) if b[i] <= 0), default=0.0)
    # a shared medium carries every part: a floor on the gather level (exact when every device of the
    # group is on it, its airtime then independent of the shares; else taken at even shares)
    medium = media.exchange_ms(co.medium_out, None, co.units)
    if medium:
        floor = max(floor, max(o) + medium)
    # per device: lo (floor from receiving) and two caps (compute level ccap, sending scap); the
    # effective cap eff is their min. Kept up to date incrementally, with the sum of the effective caps,
    # the sum of the floors and how many devices have lo > eff: this is the planner's innermost loop,
    # so each bound's update is written out where it is made (as locals: no function calls).
    lo, ccap, scap = [1] * k, [0] * k, list(caps)
    eff = [0] * k
    cap_sum, lo_sum, crossed = 0, k, k
    n_t, n_c = len(t_ev), len(c_ev)
    best, p, t = None, 0, 0
    while t < n_t:
        level = t_ev[t][0]
        if best is not None and level >= best[0]:
            break  # the gather term is >= 0: no larger compute level can win
        while t < n_t and t_ev[t][0] == level:  # the compute cap of device i rises to n
            _, i, n = t_ev[t]
            ccap[i] = n
            e_old, s = eff[i], scap[i]
            e = eff[i] = n if n < s else s
            cap_sum += e - e_old
            x = lo[i]
            crossed += (x > e) - (x > e_old)
            t += 1
        if crossed or cap_sum < n_q:
            continue
        while p < n_c:  # lower the gather level while the floors still fit under the caps
            j, undo, v = p, [], c_ev[p][0]
            while j < n_c and c_ev[j][0] == v:
                _, i, is_floor, n = c_ev[j]
                if is_floor:
                    old, lo[i] = lo[i], n
                    lo_sum += n - old
                    e = eff[i]
                    crossed += (n > e) - (old > e)
                else:
                    old, scap[i] = scap[i], n
                    e_old, c = eff[i], ccap[i]
                    e = eff[i] = c if c < n else n
                    cap_sum += e - e_old
                    x = lo[i]
                    crossed += (x > e) - (x > e_old)
                undo.append((i, is_floor, old))
                j += 1
            if crossed or lo_sum > n_q or cap_sum < n_q:
                for i, is_floor, n in reversed(undo):  # the same updates, back to the old bounds
                    if is_floor:
                        old, lo[i] = lo[i], n
                        lo_sum += n - old
                        e = eff[i]
                        crossed += (n > e) - (old > e)
                    else:
                        scap[i] = n
                        e_old, c = eff[i], ccap[i]
                        e = eff[i] = c if c < n else n
                        cap_sum += e - e_old
                        x = lo[i]
                        crossed += (x > e) - (x > e_old)
                break
            p = j
        total = level + max(c_ev[p][0] if p < n_c else 0.0, floor)
        if best is None or total < best[0]:
            best = (total, list(eff), list(lo))
    if best is None:
        return None
    _, hi, n = best
    heap = [(a[i] * (n[i] + 1), i) for i in range(k) if n[i] < hi[i]]
    heapq.heapify(heap)
    for _ in range(n_q - sum(n)):
        _, i = heapq.heappop(heap)
        n[i] += 1
        if n[i] < hi[i]:
            heapq.heappush(heap, (a[i] * (n[i] + 1), i))
    return tuple(x * q for x in n)


@dataclasses.dataclass(frozen=True)
class Division:
    """The filter division of one group: its devices (profile names and TF device strings, ring
    order), shares per dim (None = replicated) and the prediction."""

    names: tuple[str, ...]
    devices: tuple[str, ...]
    assignment: tuple[tuple[str, Shares], ...]
    prediction: GroupPrediction
    idle: tuple[str, ...] = ()  # devices of the group given to ``divide`` that get no units (profile names)
    batch_shares: tuple[int, ...] | None = None  # synchronous data parallelism: examples per device

    def layout(self) -> Layout:
        """The group's Layout: mesh {model: k}, split dims -> model with their sizes; with
        ``batch_shares``, mesh {batch: k} and the batch dim split by them (every layer whole)."""
        k = len(self.devices)
        if self.batch_shares is not None and k > 1:
            return Layout(mesh=((BATCH_DIM, k),), devices=self.devices, rules=((BATCH_DIM, BATCH_DIM),),
                          sizes=((BATCH_DIM, self.batch_shares),)).validate()
        split = [(dim, s) for dim, s in self.assignment if s is not None and k > 1]
        return Layout(mesh=((MESH_DIM, k),), devices=self.devices,
                      rules=tuple((dim, MESH_DIM) for dim, _ in split), sizes=tuple(split)).validate()


def speed(device: DeviceProfile) -> float:
    """Steps per ms of the whole model on ``device`` alone (1 / sum of its layer ms)."""
    total = sum(t.compute_ms for t in device.layers)
    return 1.0 / total if total > 0 else math.inf


def fastest_first(devices: Sequence[DeviceProfile]) -> list[int]:
    """Positions of ``devices``, fastest (``speed``) first; ties keep their order."""
    return sorted(range(len(devices)), key=lambda i: (-speed(devices[i]), i))


def min_over_sizes(cost: Callable[[int], float], n: int, exhaustive: int = SUBSET_EXHAUSTIVE) -> int:
    """The size m in 1..n with the least ``cost(m)``: every m when n <= ``exhaustive``, else the
    sizes 1, 2, 3, 4, 6, 8, 12, ... (about x1.5 apart), then a ternary search between the best one's
    neighbours (assumes the cost is unimodal there). Costs are evaluated once each."""
    seen: dict[int, float] = {}

    def f(m):
        if m not in seen:
            seen[m] = cost(m)
        return seen[m]

    if n <= exhaustive:
        return min(range(1, n + 1), key=lambda m: (f(m), m))
    grid, m = [], 1
    while m < n:
        grid.append(m)
        m = max(m + 1, int(m * 1.5))
    grid.append(n)
    j = min(range(len(grid)), key=lambda j: (f(grid[j]), grid[j]))
    lo, hi = grid[max(j - 1, 0)], grid[min(j + 1, len(grid) - 1)]
    while hi - lo > 2:
        a, b = lo + (hi - lo) // 3, hi - (hi - lo) // 3
        if f(a) <= f(b):
            hi = b
        else:
            lo = a
    return min(list(range(lo, hi + 1)) + [grid[j]], key=lambda m: (f(m), m))


def divide(group: Sequence[DeviceProfile], stats: ModelStats, *, chunks: int | None = None,
           profile_batch: int | None = None, ps_bandwidth_mbit: float = math.inf, polish: bool = True,
           subsets: bool = False) -> Division:
    """Divides every layer's filters over ``group`` (ring order) for the least predicted step ms
    within each device's ``memory_bytes``; raises PlanError if no division fits. ``polish``: run
    the local search on the simulated step (see the module docstring).

    subsets: the group may use only its fastest m devices (``fastest_first``; m chosen by
    ``min_over_sizes`` on the predicted step ms, the chosen ones keep their ring order); the others
    get no units and are listed in ``Division.idle``. Default: every device of ``group`` is used.
    """
    check_group(group)
    if not subsets or len(group) == 1:
        return _divide(group, stats, chunks, profile_batch, ps_bandwidth_mbit, polish)
    order, tried = fastest_first(group), {}
    subset = lambda m: [group[i] for i in sorted(order[:m])]

    def attempt(m: int) -> float:
        try:
            tried[m] = _divide(subset(m), stats, chunks, profile_batch, ps_bandwidth_mbit, False)
        except PlanError as e:
            tried[m] = e
            return math.inf
        return tried[m].prediction.step_ms

    m = min_over_sizes(attempt, len(group))
    if isinstance(tried[m], PlanError):
        raise tried[len(group)] if isinstance(tried.get(len(group)), PlanError) else tried[m]
    fitting = sorted((d.prediction.step_ms, n) for n, d in tried.items() if isinstance(d, Division) and n > 1)
    best = tried[m]
    for _, n in (fitting[:POLISH_SUBSETS] if polish else []):  # polish the best few sizes, keep the best
        polished = _divide(subset(n), stats, chunks, profile_batch, ps_bandwidth_mbit, True)
        if polished.prediction.step_ms < best.prediction.step_ms:
            best = polished
    idle = tuple(d.name for d in group if d.name not in best.names)
    return dataclasses.replace(best, idle=idle)


def _divide(group: Sequence[DeviceProfile], stats: ModelStats, chunks, profile_batch, ps_bandwidth_mbit,
            polish) -> Division:
    """``divide`` over every device of ``group``."""
    k, pb = len(group), profile_batch or stats.batch
    coeffs = [layer_coeffs(group, d, stats.batch, pb) for d in stats.dims]
    quanta = [quantum(d.units, k, chunks) if k > 1 else None for d in stats.dims]
    _check_memory_floor(group, stats, coeffs, quanta)
    caps = [[co.units // q] * k if q else None for co, q in zip(coeffs, quanta)]
    forced: set[int] = set()  # layers split to save memory even if replicating were faster

    def solve(l: int) -> Shares:
        co, q = coeffs[l], quanta[l]
        shares = solve_layer(co, q, caps[l]) if q else None
        if shares is not None and (l in forced or co.layer_ms(shares) < co.layer_ms(None)):
            return shares
        return None

    shares = [solve(l) for l in range(len(coeffs))]
    fits = lambda sh: all(m <= d.memory_bytes for m, d in zip(memory_bytes(stats, coeffs, sh, group), group))
    packed = _pack_memory(group, stats, coeffs, quanta) if k > 1 and (polish or not fits(shares)) else None
    while True:
        held = [s or (co.units,) * k for s, co in zip(shares, coeffs)]
        mem = memory_bytes(stats, coeffs, shares, group)
        excess, i = max((mem[i] - group[i].memory_bytes, i) for i in range(k))
        if excess <= 0:
            break
        move = _cheapest_cut(coeffs, quanta, caps, shares, held, i, excess)
        if move is None and packed is not None and fits(packed):
            shares = packed  # the greedy cuts are stuck; a memory-first packing fits
            break
        if move is None:
            raise PlanError("device %s: the plan needs %d bytes but its memory_bytes budget is %d: %d bytes missing "
                            "(the other devices of its group cannot take more filters)"
                            % (group[i].name, mem[i], group[i].memory_bytes, excess))
        l, caps[l], shares[l] = move
        forced.add(l)
    if polish and 1 < k <= POLISH_MAX_DEVICES:
        shares = polish_shares(group, stats, coeffs, quanta, [shares] + [packed] * (packed is not None), pb,
                               lambda l: solve_layer(coeffs[l], quanta[l], caps[l]) if quanta[l] else None)
    assignment = tuple((d.name, s) for d, s in zip(stats.dims, shares))
    pred = predict(group, stats, dict(assignment), profile_batch=pb, ps_bandwidth_mbit=ps_bandwidth_mbit,
                   coeffs=coeffs)
    return Division(tuple(d.name for d in group), tuple(d.device for d in group), assignment, pred)


def _cheapest_cut(coeffs, quanta, caps, shares, held, i, excess):
    """Caps device i's quanta on the layer where freeing ``excess`` bytes (or as many as the layer
    can) costs the fewest predicted ms per byte; returns (layer, its new caps, its new shares) or None."""
    best = None
    for l, co in enumerate(coeffs):
        q = quanta[l]
        if not q:
            continue
        have, others = held[l][i] // q, sum(caps[l]) - caps[l][i]
        # Cut all of the excess from one layer: cutting a quantum at a time is myopic (measured worse).
        cap = max(1, have - math.ceil(excess / (co.mem_per_unit * q)), co.units // q - others)
        if cap >= have:
            continue
        new_caps = caps[l][:i] + [cap] + caps[l][i + 1:]
        trial = solve_layer(co, q, new_caps)
        if trial is None:
            continue
        score = (co.layer_ms(trial) - co.layer_ms(shares[l])) / ((held[l][i] - trial[i]) * co.mem_per_unit)
        if best is None or score < best[0]:
            best = (score, l, new_caps, trial)
    return best and best[1:]


def _pack_memory(group, stats, coeffs, quanta) -> list[Shares]:
    """Shares chosen for memory alone: every splittable layer split, one quantum per device, then
    the other quanta (largest bytes first) each to the device with the most bytes left. A start
    for ``polish``, and the plan when the cheapest cuts cannot make one fit."""
    k = len(group)
    n = [[1] * k if q else None for q in quanta]
    room = [d.memory_bytes - m for d, m in zip(group, memory_bytes(stats, coeffs, [
        tuple([q] * k) if q else None for q in quanta], group))]
    pieces = sorted(((co.mem_per_unit * q, l) for l, (co, q) in enumerate(zip(coeffs, quanta)) if q
                     for _ in range(co.units // q - k)), reverse=True)
    for size, l in pieces:
        i = max(range(k), key=lambda i: (room[i], -i))
        n[l][i] += 1
        room[i] -= size
    return [tuple(x * q for x in c) if q else None for c, q in zip(n, quanta)]


def _check_memory_floor(group, stats, coeffs, quanta) -> None:
    """PlanError if a device is over budget even holding one quantum of every splittable layer."""
    for d, fixed in zip(group, group_fixed_memory_bytes(stats, group)):
        floor = fixed + sum(co.mem_per_unit * (q or co.units) for co, q in zip(coeffs, quanta))
        if floor > d.memory_bytes:
            raise PlanError("device %s: needs at least %d bytes (the fewest filters it can hold in a group of %d) but "
                            "its memory_bytes budget is %d: %d bytes missing"
                            % (d.name, floor, len(group), d.memory_bytes, floor - d.memory_bytes))
