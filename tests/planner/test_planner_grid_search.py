"""The grid's search: neighbours scored from the groups a move changes give the search that scores every
neighbour whole (as first written), for the default objective and for any other; the heap's deal is LPT's."""
import random

from planner_util import random_cluster

from edgemesh_tf.models.zoo import get_model
from edgemesh_tf.planner import model_stats
from edgemesh_tf.planner.division import PlanError, divide, speed
from edgemesh_tf.planner.grid import group_rate, staleness_charge, throughput
from edgemesh_tf.planner.grid_search import (LOCAL_SEARCH_DEVICES, MAX_ROUNDS, Grid, SummedRate, _Current,
                                             capability_groups, moves, neighbour, search, seeds)
from edgemesh_tf.planner.shared_divisions import SharedDivisions

VGG32 = get_model("vgg", (32, 32, 3), 10)
STATS = model_stats(VGG32, 32)


def _neighbours_as_first_written(partition, free, large, forced):
    groups = [tuple(g) for g in partition]
    if not forced:
        for n in free:
            yield tuple(groups) + ((n,),)
        for a in range(len(groups)):
            for b in range(a + 1, len(groups)):
                if not large or b == a + 1:
                    yield tuple(h for i, h in enumerate(groups) if i not in (a, b)) + (groups[a] + groups[b],)
    if large:
        return
    for n in free:
        for t in range(len(groups)):
            yield tuple(h + (n,) if i == t else h for i, h in enumerate(groups))
    for j, g in enumerate(groups):
        if len(g) < 2:
            continue
        for n in g:
            rest = tuple(tuple(x for x in h if x != n) if i == j else h for i, h in enumerate(groups))
            if not forced:
                yield rest + ((n,),)
            for t in range(len(groups)):
                if t != j:
                    yield tuple(h + (n,) if i == t else h for i, h in enumerate(rest))


def _search_as_first_written(grid, devices, groups):
    """Every neighbour scored whole (``Grid.score``), every group looked up."""
    best, per_k, first_error = None, {}, None
    names = [d.name for d in devices]

    def consider(partition, current):
        nonlocal first_error
        scored = grid.score(partition)
        if isinstance(scored, PlanError):
            first_error = first_error or scored
            return current
        per_k[len(partition)] = max(per_k.get(len(partition), 0.0), scored[0])
        if current is not None and scored[0] <= current[0] * (1 + 1e-9):
            return current
        used = tuple(d.names for d in scored[1])
        for g, d in zip(used, scored[1]):
            grid.cache.setdefault(grid.key(g), d)
        return scored[0], used, scored[1]

    for seed in seeds(devices, groups):
        best = consider(seed, best)
    large = len(devices) > LOCAL_SEARCH_DEVICES
    for _ in range(MAX_ROUNDS if best else 0):
        free = [n for n in names if not any(n in g for g in best[1])]
        move = best
        for cand in _neighbours_as_first_written(best[1], free, large, groups is not None):
            move = consider(cand, move)
        if move is best:
            break
        best = move
    return best, per_k, first_error


def _grid(devices, rate):
    shared = SharedDivisions(lambda group, **o: divide(group, STATS, profile_batch=32, **o))
    return Grid(devices, shared, 16, rate)


def _summed(interval):
    return SummedRate(lambda p, several: group_rate(p, 32, interval, several), lambda raw, g: raw / staleness_charge(g))


def _result(found):
    best, per_k, error = found
    return (None if best is None else (best[0], best[1], [d.names for d in best[2]], [d.prediction for d in best[2]]),
            per_k, None if error is None else str(error))


def test_the_search_finds_what_scoring_every_neighbour_whole_finds():
    """Clusters of 3-24 devices (the small ones search every move, the larger merges only), free and
    forced numbers of groups, under the default objective (summed) and the same objective as a plain
    function: the same best rate, groups, divisions, rates per K and first error."""
    moved = 0
    for seed in range(8):
        rng = random.Random(seed)
        devices = random_cluster(STATS, rng.choice([3, 5, 8, 12, 24]), seed)
        groups = rng.choice([None, None, 2])
        interval = rng.choice([1, 8])
        plain = lambda divs: throughput([d.prediction for d in divs], 32, interval)  # noqa: E731
        expected = _result(_search_as_first_written(_grid(devices, plain), devices, groups))
        for rate in (_summed(interval), plain):
            assert _result(search(_grid(devices, rate), devices, groups)) == expected, (seed, rate)
        grid = _grid(devices, plain)
        from_seeds = max(s[0] for s in map(grid.score, seeds(devices, groups)) if not isinstance(s, PlanError))
        moved += expected[0][0] > from_seeds
    assert moved >= 4  # the searches move from their seeds: neighbours decide them


def test_every_move_edits_the_divisions_and_terms_of_the_neighbour_it_makes():
    """From partitions of 2-4 groups (a merge of two makes one group), every move's edited divisions
    are the neighbour's groups looked up whole, its summed terms the neighbour's rate to the bit, and
    ``neighbour`` is the partition the search as first written tried, in the same order."""
    rate, groups = _summed(8), set()
    for seed, n in enumerate((4, 6, 20)):
        devices = random_cluster(STATS, n, seed)
        grid = _grid(devices, rate)
        for k in (2, 3, 4):
            scored = grid.score(tuple(tuple(d.name for d in g) for g in capability_groups(devices, k)))
            current = _Current(grid, scored[1])
            used = {x for g in current.partition for x in g}
            free = [d.name for d in devices if d.name not in used]
            large = n > LOCAL_SEARCH_DEVICES
            made = [neighbour(current.partition, m) for m in moves(current.partition, free, large, False)]
            assert made == list(_neighbours_as_first_written(current.partition, free, large, False))
            for move, partition in zip(moves(current.partition, free, large, False), made):
                whole = [grid.group(g) for g in partition]
                assert current.score(move) == (rate(whole), whole)
                groups.add(len(whole))
    assert 1 in groups and len(groups) >= 4  # merges into one group and moves that add groups


def test_the_summed_objective_is_throughput_to_the_bit():
    devices = random_cluster(STATS, 6, 3)
    divs = [divide([d], STATS, profile_batch=32) for d in devices]
    for n in (1, 2, 6):
        assert _summed(8)(divs[:n]) == throughput([d.prediction for d in divs[:n]], 32, 8)


def _lpt_as_first_written(devices, k):
    groups, totals = [[] for _ in range(k)], [0.0] * k
    for d in sorted(devices, key=lambda d: (-speed(d), d.name)):
        g = min(range(k), key=lambda g: (totals[g], len(groups[g]), g))
        groups[g].append(d)
        totals[g] += speed(d)
    return groups


def test_capability_groups_deal_as_the_scan_for_the_least_group_dealt():
    """The heap picks the group a scan over every group picks (least total speed, fewest devices,
    lowest index), ties of equal speeds included."""
    for seed in range(6):
        devices = random_cluster(STATS, 40, seed)
        for k in (1, 3, 7, 16, 40):
            assert capability_groups(devices, k) == _lpt_as_first_written(devices, k), (seed, k)
