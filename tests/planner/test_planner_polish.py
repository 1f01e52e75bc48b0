"""polish's memory repair: the same shares as moving one quantum at a time, and no search where none can fit;
the exact layer solve asked once per layer."""
import random

from planner_util import flops_device

from edgemesh_tf.models.zoo import get_model
from edgemesh_tf.planner import model_stats
from edgemesh_tf.planner.cost import layer_coeffs
from edgemesh_tf.planner.division import quantum
from edgemesh_tf.planner.polish import _moved, _Search, polish

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


def test_a_trial_s_fit_by_its_changed_layers_is_its_fit_by_every_layer():
    """fits_changed (the bytes of the moved layers swapped, or none counted when they cannot outgrow the
    tightest room) answers as fits does, for every single and chain move of fitting and tight starts."""
    answers = set()
    for seed in range(12):
        rng = random.Random(seed)
        search = _search([1 << 20] * rng.choice([3, 4]))
        base, _ = _random_start(rng, search)
        largest = max(co.mem_per_unit * co.units for co in search.coeffs)
        # each budget the base's bytes plus up to one layer's whole bytes: some moves fit, some do not
        search.budget = [m + int(rng.random() ** 2 * largest) for m in search.memory(base)]
        room = [b - m for b, m in zip(search.budget, search.memory(base))]
        for moves in (search.single_moves, search.chain_moves):
            for changed, trial in moves(base):
                fits = search.fits(trial)
                assert search.fits_changed(base, (room, min(room)), trial, changed) == fits, (seed, changed)
                answers.add(fits)
    assert answers == {True, False}  # both answers are given: the draws reach tight budgets and loose ones
