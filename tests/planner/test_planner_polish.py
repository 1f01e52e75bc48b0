"""polish's memory repair: the same shares as moving one quantum at a time, and no search where none can fit;
the exact layer solve asked once per layer."""
import random

from planner_util import flops_device

from edgemesh_tf.models.zoo import get_model
from edgemesh_tf.planner import model_stats
from edgemesh_tf.planner.cost import layer_coeffs
from edgemesh_tf.planner.division import quantum
from edgemesh_tf.mesh.layout import even_split
from edgemesh_tf.planner.polish import _moved, _replace, _Search, polish

STATS = model_stats(get_model("vgg16", (32, 32, 1), 10), 32)


def _search(budgets_mib):
    group = [flops_device("d%d" % i, STATS, 10 + i, i, mem=m << 20) for i, m in enumerate(budgets_mib)]
    coeffs = [layer_coeffs(group, d, STATS.batch, STATS.batch) for d in STATS.dims]
    quanta = [quantum(d.units, len(group), 16) for d in STATS.dims]
    return _Search(group, STATS, coeffs, quanta, STATS.batch, lambda l: None)


def _one_quantum_at_a_time(search, sh, fixed):
    """The repair as first written: one quantum per iteration, memory recomputed every time."""
    sh, k = list(sh), search.k
    for _ in range(sum(co.units for co in search.coeffs)):
        mem = search.memory(sh)
        over = [(mem[i] - search.budget[i], i) for i in range(k) if mem[i] > search.budget[i]]
        if not over:
            return sh
        _, i = max(over)
        room = max(range(k), key=lambda j: search.budget[j] - mem[j])
        layers = [l for l in range(len(sh)) if l not in fixed and sh[l] is not None and search.quanta[l]
                  and sh[l][i] >= 2 * search.quanta[l] and room != i]
        if not layers:
            return None
        l = max(layers, key=lambda l: search.coeffs[l].mem_per_unit)
        sh[l] = _moved(sh[l], i, room, search.quanta[l])
    return None


def _random_start(rng, search):
    """Shares of most layers split at random, skewed to one device; one layer the move fixed."""
    sh = []
    for d, q in zip(STATS.dims, search.quanta):
        if q is None or rng.random() < 0.2:
            sh.append(None)
            continue
        w = [rng.random() ** 3 for _ in range(search.k)]
        n = d.units // q - search.k  # one quantum each, the rest by the weights
        cut = [1 + int(n * x / sum(w)) for x in w]
        cut[cut.index(max(cut))] += d.units // q - sum(cut)
        sh.append(tuple(q * c for c in cut))
    return sh, {rng.randrange(len(sh))}


def test_repair_moves_what_one_quantum_at_a_time_moves():
    repaired = 0
    for seed in range(60):
        rng = random.Random(seed)
        search = _search([rng.choice([192, 256, 384, 512, 768]) for _ in range(rng.choice([3, 4]))])
        sh, fixed = _random_start(rng, search)
        got = search.repair(sh, fixed)
        assert got == _one_quantum_at_a_time(search, sh, fixed), seed
        if got is not None and got != sh:
            assert search.fits(got)
            repaired += 1
    assert repaired >= 5  # the draws exercise real repairs, not only starts that fit or cannot


def test_repair_gives_up_at_once_when_the_group_cannot_hold_the_model():
    search = _search([64, 64, 64])
    whole = [None] * len(STATS.dims)
    assert sum(search.memory(whole)) > sum(search.budget)
    assert search.repair(whole, set()) is None


def test_the_search_asks_the_exact_layer_solve_once_per_layer():
    search = _search([2048] * 4)
    asked = []

    def split(l):
        asked.append(l)
        return None  # as for a layer that cannot be split: the moves fall back to an even split

    replicated = [None] * len(STATS.dims)
    polish(search.group, STATS, search.coeffs, search.quanta, [replicated], STATS.batch, split, max_evaluations=400)
    assert asked and len(asked) == len(set(asked)), asked  # every descent pass asked again before (23 s of a plan)


def _single_moves(search, sh):
    """The single moves as first written: (layers changed, shares) per layer: replicate, split, or one
    quantum a -> b."""
    k = search.k
    for l, (co, q) in enumerate(zip(search.coeffs, search.quanta)):
        if not q:
            continue
        cur = sh[l]
        if cur is None:
            for cand in {search.split(l), tuple(q * s for s in even_split(co.units // q, k))} - {None}:
                yield (l,), _replace(sh, l, cand)
            continue
        yield (l,), _replace(sh, l, None)
        for a in range(k):
            if cur[a] >= 2 * q:
                for b in range(k):
                    if b != a:
                        yield (l,), _replace(sh, l, _moved(cur, a, b, q))


def _chain_moves(search, sh):
    """The chain moves as first written: layer l moves a quantum a -> b while layer m moves one b -> c."""
    k, split = search.k, [l for l in range(len(sh)) if sh[l] is not None and search.quanta[l]]
    for l in split:
        for m in split:
            if m == l:
                continue
            ql, qm = search.quanta[l], search.quanta[m]
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


def _descend_as_first_written(search, start, budget):
    """The descent with its trials as Python lists, one at a time: (ms, shares, evaluations left)."""
    best, best_ms = list(start), search.cost(start)
    while budget > 0:
        move = None
        for moves in (_single_moves, _chain_moves):
            trials = []
            for changed, trial in moves(search, best):
                if not search.fits(trial):
                    trial = search.repair(trial, changed)
                    if trial is None:
                        continue
                trials.append(trial)
            budget -= len(trials)
            for trial in trials:
                ms = search.cost(trial)
                if ms < best_ms - 1e-9 and (move is None or ms < move[0]):
                    move = (ms, trial)
            if move is not None or budget <= 0:
                break
        if move is None:
            break
        best_ms, best = move
    return best_ms, best, budget


def _tight_search(rng, k):
    """A search of k devices and a random start whose budgets are its bytes plus up to one layer's."""
    search = _search([1 << 20] * k)
    base, _ = _random_start(rng, search)
    largest = max(co.mem_per_unit * co.units for co in search.coeffs)
    search.budget = [m + int(rng.random() ** 2 * largest) for m in search.memory(base)]
    return search, base


def test_the_moves_as_arrays_are_the_moves_as_lists_in_order_with_their_fit():
    """Every single and chain move, built as arrays, is the move as first written, in the same order;
    the arrays' fit is ``fits`` of each, for fitting and tight starts."""
    answers = set()
    for seed in range(12):
        search, base = _tight_search(random.Random(seed), random.Random(seed).choice([3, 4]))
        shares, split = search.as_arrays(base)
        for blocks, moves in ((search.single_blocks, _single_moves), (search.chain_blocks, _chain_moves)):
            got = [(changed, search.as_shares(x, on), bool(fit)) for changed, xs, ons in blocks(base, shares, split)
                   for x, on, fit in zip(xs, ons, search.fitting(xs, ons))]
            expected = [(changed, trial, search.fits(trial)) for changed, trial in moves(search, base)]
            assert got == expected, seed
            answers |= {fit for _, _, fit in got}
    assert answers == {True, False}  # both answers are given: the draws reach tight budgets and loose ones


def test_the_descent_in_arrays_ends_where_the_descent_in_lists_ends():
    """From random starts on 3-5 devices, under tight and loose budgets: the same shares, the same ms and
    the same evaluations left as the descent as first written (one trial at a time, in lists)."""
    moved = 0
    for seed in range(10):
        rng = random.Random(seed)
        search, base = _tight_search(rng, rng.choice([3, 4, 5]))
        if seed % 2:
            search.budget = [1 << 40] * search.k  # loose: every move fits
        budget = rng.choice([60, 300, 900])
        got = search.descend(base, budget)
        assert got == _descend_as_first_written(search, base, budget), seed
        moved += got[1] != base
    assert moved >= 5  # the descents move, not only stop at their starts
