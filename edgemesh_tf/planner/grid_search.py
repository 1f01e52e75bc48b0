"""The grid's search over partitions of the devices into data-parallel groups (``grid``'s docstring).

A partition is a tuple of groups, each a tuple of device names; a group's division (``divide`` with
coarse shares and ``subsets=True``) is made once and kept. The search starts from seeds (the devices
dealt into K groups of about equal capability, and mixed grids) and moves to the best neighbour
partition while one is better. A neighbour differs from the current partition in one or two groups
(``moves``), so it is scored from the current partition's divisions with those groups changed:
only the changed groups are looked up, and a ``SummedRate`` (the default objective) sums the
groups' kept terms instead of pricing every group again. Both give the rate, to the bit, that
pricing the whole neighbour gives; any other objective is priced on the whole list of divisions.
"""
from __future__ import annotations

import dataclasses
import heapq
import math
from typing import Callable, Iterator, Sequence

from edgemesh_tf.planner.cost import GroupPrediction
from edgemesh_tf.planner.division import Division, PlanError, speed
from edgemesh_tf.planner.shared_divisions import SharedDivisions
from edgemesh_tf.profiling.types import DeviceProfile

LOCAL_SEARCH_DEVICES = 16
SCREEN_GROUP = 16  # above LOCAL_SEARCH_DEVICES devices, seeds have groups of at most this many devices
MAX_ROUNDS = 30

Partition = tuple[tuple[str, ...], ...]
# A move: (indices of the two groups merged, {index: its new group}, groups appended at the end)
Move = tuple[tuple[int, ...], dict[int, tuple[str, ...]], tuple[tuple[str, ...], ...]]


@dataclasses.dataclass(frozen=True)
class SummedRate:
    """An objective that adds up over groups: ``combine(sum of term(prediction, several), G)`` over
    the G groups' predictions in order, ``several`` = G > 1 (a group alone commits to no one)."""

    term: Callable[[GroupPrediction, bool], float]
    combine: Callable[[float, int], float]

    def __call__(self, divs: Sequence[Division]) -> float:
        several = len(divs) > 1
        return self.combine(sum(self.term(d.prediction, several) for d in divs), len(divs))


def capability_groups(devices: Sequence[DeviceProfile], k: int) -> list[list[DeviceProfile]]:
    """Deals ``devices`` into k groups of about equal total speed (LPT): fastest first, each to the
    group of least total speed (then fewest devices, then lowest index); each group fastest first."""
    if not 1 <= k <= len(devices):
        raise ValueError("number of groups must be in 1..%d (the number of devices), got %r" % (len(devices), k))
    groups: list[list[DeviceProfile]] = [[] for _ in range(k)]
    heap = [(0.0, 0, g) for g in range(k)]  # (total speed, devices, index): the least is the next to get one
    for d in sorted(devices, key=lambda d: (-speed(d), d.name)):
        total, count, g = heapq.heappop(heap)
        groups[g].append(d)
        heapq.heappush(heap, (total + speed(d), count + 1, g))
    return groups


class Grid:
    """Scores partitions with each group's division kept (a PlanError when it does not fit)."""

    def __init__(self, devices: Sequence[DeviceProfile], shared: SharedDivisions, chunks: int,
                 rate: Callable[[Sequence[Division]], float]):
        self.by_name = {d.name: d for d in devices}
        self.order = {d.name: i for i, d in enumerate(devices)}
        self.shared, self.chunks, self.rate = shared, chunks, rate
        self.cache: dict[tuple[str, ...], Division | PlanError] = {}

    def key(self, names) -> tuple[str, ...]:
        return tuple(sorted(names, key=self.order.__getitem__))

    def group(self, names: tuple[str, ...]) -> Division | PlanError:
        found = self.cache.get(names)  # the group as a partition holds it, before sorting its names
        if found is not None:
            return found
        key = self.key(names)
        if key not in self.cache:
            try:
                self.cache[key] = self.shared([self.by_name[n] for n in key], chunks=self.chunks, polish=False,
                                              subsets=True)
            except PlanError as e:
                self.cache[key] = e
        found = self.cache[names] = self.cache[key]
        return found

    def prefill(self, groups: Sequence[tuple[str, ...]]) -> None:
        """Divides the ``groups`` not kept yet all at once (``SharedDivisions.many``: in the pool's
        processes if it has one), kept as ``group`` keeps them."""
        todo: dict[tuple[str, ...], None] = {}
        for names in groups:
            if names not in self.cache:
                key = self.key(names)
                if key not in self.cache:
                    todo[key] = None
        found = self.shared.many([[self.by_name[n] for n in key] for key in todo], chunks=self.chunks,
                                 polish=False, subsets=True)
        self.cache.update(zip(todo, found))

    def score(self, partition: Partition) -> tuple[float, list[Division]] | PlanError:
        """(rate, divisions) of ``partition``, or the PlanError of its first group that does not fit."""
        divs = [self.group(g) for g in partition]
        bad = [d for d in divs if isinstance(d, PlanError)]
        return bad[0] if bad else (self.rate(divs), divs)


class _Current:
    """The partition the search moves from (the devices its best divisions use), each group's division
    as the grid keeps it and, for a SummedRate, each group's term among several groups (a neighbour of
    one group keeps no group of it)."""

    def __init__(self, grid: Grid, divs: Sequence[Division]):
        self.grid = grid
        self.summed = grid.rate if isinstance(grid.rate, SummedRate) else None
        self.partition: Partition = tuple(d.names for d in divs)
        self.divs = [grid.group(g) for g in self.partition]
        # a group the grid had divided alone before, and found not to fit: the neighbours are scored whole
        self.whole = any(isinstance(d, PlanError) for d in self.divs)
        self.terms = None if self.summed is None or self.whole else [
            self.summed.term(d.prediction, True) for d in self.divs]

    def score(self, move: Move) -> tuple[float, list[Division]] | PlanError:
        """``Grid.score`` of the neighbour ``move`` makes, from the groups it changes."""
        if self.whole:
            return self.grid.score(neighbour(self.partition, move))
        new = [self.grid.group(g) for g in new_groups(move)]
        bad = next((d for d in new if isinstance(d, PlanError)), None)
        if bad is not None:
            return bad
        divs = _edited(self.divs, move, new)
        if self.summed is None:
            return self.grid.rate(divs), divs
        if len(divs) == 1:  # a merge into one group: nothing is kept, and a group alone commits to no one
            return self.summed.combine(self.summed.term(divs[0].prediction, False), 1), divs
        terms = _edited(self.terms, move, [self.summed.term(d.prediction, True) for d in new])
        return self.summed.combine(sum(terms), len(divs)), divs


def new_groups(move: Move) -> list[tuple[str, ...]]:
    """The groups ``move`` makes, in the order its neighbour holds them: the replaced ones by index,
    then the appended ones."""
    return [move[1][i] for i in sorted(move[1])] + list(move[2])


def _edited(items: list, move: Move, new: list) -> list:
    """``items`` (one per group of the current partition) as the neighbour ``move`` has them: the two
    merged groups' items dropped, replaced groups' items swapped, appended groups' items at the end;
    ``new``: the items of the replaced groups (in index order), then of the appended ones."""
    merged, replaced, appended = move
    if merged:
        a, b = merged
        return items[:a] + items[a + 1:b] + items[b + 1:] + new
    out = list(items)
    for i, item in zip(sorted(replaced), new):
        out[i] = item
    return out + new[len(replaced):]


def moves(groups: Partition, free: Sequence[str], large: bool, forced: bool) -> Iterator[Move]:
    """The neighbours of ``groups`` (the ``grid`` module docstring's moves), in the order the search
    tries them; ``free``: devices in no group; ``forced``: the number of groups stays the same."""
    if not forced:
        for n in free:
            yield (), {}, ((n,),)
        for a in range(len(groups)):
            for b in range(a + 1, len(groups)):
                if not large or b == a + 1:
                    yield (a, b), {}, (groups[a] + groups[b],)
    if large:
        return
    for n in free:
        for t in range(len(groups)):
            yield (), {t: groups[t] + (n,)}, ()
    for j, g in enumerate(groups):
        if len(g) < 2:
            continue
        for n in g:
            rest = tuple(x for x in g if x != n)
            if not forced:
                yield (), {j: rest}, ((n,),)
            for t in range(len(groups)):
                if t != j:
                    yield (), {j: rest, t: groups[t] + (n,)}, ()


def neighbour(groups: Partition, move: Move) -> Partition:
    """The partition ``move`` makes of ``groups``."""
    return tuple(_edited(list(groups), move, new_groups(move)))


def seeds(devices: Sequence[DeviceProfile], groups: int | None) -> list[Partition]:
    """The partitions the search starts from (the ``grid`` module docstring's seeds)."""
    n = len(devices)
    fastest = [d.name for d in sorted(devices, key=lambda d: (-speed(d), d.name))]
    if groups:
        ks = [groups]
    elif n <= LOCAL_SEARCH_DEVICES:
        ks = list(range(1, n + 1))
    else:  # groups of at most SCREEN_GROUP devices, K about x2 apart
        ks, k = [], math.ceil(n / SCREEN_GROUP)
        while k < n:
            ks.append(k)
            k *= 2
        ks.append(n)
    found = [tuple(tuple(d.name for d in g) for g in capability_groups(devices, k)) for k in ks]
    if n > LOCAL_SEARCH_DEVICES:
        if not groups or groups == 1:
            found.append((tuple(fastest[:SCREEN_GROUP]),))  # one group: of the fastest devices
        return found
    for j in range(1, n - 1):  # the fastest j alone, the rest one model-parallel group
        if groups in (None, j + 1):
            found.append(tuple((f,) for f in fastest[:j]) + (tuple(fastest[j:]),))
    return found


def search(grid: Grid, devices: Sequence[DeviceProfile], groups: int | None):
    """The best partition found: ((rate, groups, divisions) or None, the best rate per number of
    groups, the first PlanError met). Partitions keep only the devices their divisions use; the
    others are free (idle) and may form or join groups."""
    per_k: dict[int, float] = {}
    first_error: PlanError | None = None

    def better(value: float, divs: list[Division], current):
        """(value, divs) as the best so far if it beats ``current``; counted in per_k either way."""
        per_k[len(divs)] = max(per_k.get(len(divs), 0.0), value)
        if current is not None and value <= current[0] * (1 + 1e-9):
            return current
        for d in divs:
            grid.cache.setdefault(grid.key(d.names), d)
        return value, divs

    best = None
    for seed in seeds(devices, groups):
        grid.prefill(seed)
        scored = grid.score(seed)
        if isinstance(scored, PlanError):
            first_error = first_error or scored
        else:
            best = better(*scored, best)
    large = len(devices) > LOCAL_SEARCH_DEVICES
    for _ in range(MAX_ROUNDS if best else 0):
        current = _Current(grid, best[1])
        used = {n for g in current.partition for n in g}
        move_to = best
        free = [d.name for d in devices if d.name not in used]
        # the round's groups divided at once (in a pool's processes). Exact where every move adds devices
        # alone or merges two groups: a better neighbour found in the round keeps its divisions under the
        # devices they use, a subset of a merge, which is no device alone and no other merge
        if large:
            grid.prefill([g for move in moves(current.partition, free, large, groups is not None)
                          for g in new_groups(move)])
        for move in moves(current.partition, free, large, groups is not None):
            scored = current.score(move)
            if isinstance(scored, PlanError):
                first_error = first_error or scored
            else:
                move_to = better(*scored, move_to)
        if move_to is best:
            break
        best = move_to
    return (None if best is None else (best[0], tuple(d.names for d in best[1]), best[1])), per_k, first_error
