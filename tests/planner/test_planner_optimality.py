"""The filter division matches an exhaustive search over all share vectors with the same cost model."""
import dataclasses
import random

import pytest
from planner_util import compositions, device, exhaustive_best
from specs import sequential

from edgemesh_tf.planner import PlanError, divide, model_stats, predict
from edgemesh_tf.planner.cost import fixed_memory_bytes, layer_coeffs
from edgemesh_tf.planner.division import quantum, solve_layer

# (devices, chunks, layers): at most 4 devices and 3 layers, coarse shares keep the search small.
CASES = [(2, 8, 3), (3, 8, 2), (4, 6, 3), (3, 6, 3), (2, 4, 1), (4, 8, 2)]


def _spec(rng, n_layers, chunks):
    layers = [("conv", "conv1", chunks * rng.choice([1, 2, 4]), True)]
    if n_layers >= 2:
        layers.append(("conv", "conv2", chunks * rng.choice([1, 2, 3]), rng.random() < 0.5))
    if n_layers >= 3:
        layers.append(("dense", "fc1", chunks * rng.choice([2, 4])))
    return sequential("tiny", (8, 8, 1), 4, layers)


def _group(rng, stats, k, split_overhead=False):
    """k random devices; with split_overhead, each with its own calibrated overhead per split layer
    and peer (0-20 ms; some with none)."""
    group = [device("d%d" % i, {d.name: rng.uniform(1, 60) for d in stats.dims}, bw=rng.choice([2, 5, 20, 100, 1000]),
                    lat=rng.uniform(0, 3), overhead=rng.uniform(0, 2), task=i) for i in range(k)]
    if split_overhead:
        group = [dataclasses.replace(d, split_overhead_ms=rng.choice([0.0, rng.uniform(0, 20)])) for d in group]
    return group


@pytest.mark.parametrize("split_overhead", [False, True])
@pytest.mark.parametrize("seed", range(len(CASES)))
def test_division_matches_exhaustive_search(seed, split_overhead):
    rng = random.Random(1000 + seed)
    k, chunks, n_layers = CASES[seed]
    stats = model_stats(_spec(rng, n_layers, chunks), batch=8)
    group = _group(rng, stats, k, split_overhead)
    got = divide(group, stats, chunks=chunks).prediction.step_ms
    best = exhaustive_best(group, stats, chunks)
    assert best - 1e-9 <= got <= best * 1.01, (got, best)


def test_layer_solver_exact_at_finer_granularity():
    """One layer, 3 devices, 24 quanta (253 share vectors), many random cost mixes."""
    rng = random.Random(7)
    stats = model_stats(sequential("one", (8, 8, 1), 4, [("conv", "conv1", 24, True)]), batch=16)
    dim = stats.dims[0]
    for i in range(80):
        group = _group(rng, stats, 3, split_overhead=i % 2 == 1)
        co = layer_coeffs(group, dim, stats.batch, stats.batch)
        shares = solve_layer(co, 1, [24, 24, 24])
        best = min(co.layer_ms(s) for s in compositions(24, 3))
        assert sum(shares) == 24 and min(shares) >= 1
        assert co.layer_ms(shares) <= best + 1e-9


def test_quantum_and_split_prediction_consistent():
    assert quantum(64, 2, 8) == 8 and quantum(10, 4, 8) == 1 and quantum(3, 4, None) is None
    assert quantum(64, 16, 8) == 4 and quantum(64, 3, None) == 1
    rng = random.Random(3)
    stats = model_stats(_spec(rng, 3, 8), batch=8)
    group = _group(rng, stats, 3)
    div = divide(group, stats, chunks=8)
    again = predict(group, stats, dict(div.assignment))
    assert again == div.prediction


def _tight(seed, fraction):
    """(group, stats, chunks, i, budget): a random case whose device i may hold only `fraction` of the
    bytes its unconstrained division gives it beyond the fixed part (weights it must hold whatever the
    division: ``fixed_memory_bytes``). The fixed part is most of a small model's bytes, so a cap on the
    whole would rule out every division or none."""
    rng = random.Random(2000 + seed)
    k, chunks, n_layers = CASES[seed]
    stats = model_stats(_spec(rng, n_layers, chunks), batch=8)
    group = _group(rng, stats, k)
    free = divide(group, stats, chunks=chunks).prediction
    i = rng.randrange(k)
    fixed = fixed_memory_bytes(stats, k)[i]
    budget = int(fixed + fraction * (free.memory_bytes[i] - fixed))
    group[i] = dataclasses.replace(group[i], memory_bytes=budget)
    return group, stats, chunks, i


FRACTIONS = (0.2, 0.5, 0.8)


@pytest.mark.parametrize("fraction", FRACTIONS)
@pytest.mark.parametrize("seed", range(len(CASES)))
def test_tight_memory_finds_a_fitting_plan_when_one_exists(seed, fraction):
    """With one device's division-dependent bytes capped below its unconstrained need, the (heuristic)
    memory fitting returns a plan whenever the exhaustive search finds one that fits, never a plan that
    does not fit, and one no worse than 1.3x the exhaustive best that fits; when none fits, it says so
    naming the device."""
    group, stats, chunks, i = _tight(seed, fraction)
    best = exhaustive_best(group, stats, chunks, fits=True)
    if best is None:
        with pytest.raises(PlanError, match="device d%d" % i):
            divide(group, stats, chunks=chunks)
        return
    got = divide(group, stats, chunks=chunks).prediction
    assert all(m <= d.memory_bytes for m, d in zip(got.memory_bytes, group))
    assert best - 1e-9 <= got.step_ms <= best * 1.3


def test_the_tight_memory_cases_take_every_branch():
    """The cases above are not all of one kind: in some a fitting plan exists only because the cap
    moved units off the capped device (it binds), and in some no plan fits."""
    kinds = set()
    for seed in range(len(CASES)):
        for fraction in FRACTIONS:
            group, stats, chunks, _ = _tight(seed, fraction)
            best = exhaustive_best(group, stats, chunks, fits=True)
            kinds.add("none fits" if best is None else
                      "binds" if best > exhaustive_best(group, stats, chunks) + 1e-9 else "free")
    assert {"none fits", "binds"} <= kinds, kinds


@pytest.mark.parametrize("fits", [False, True])
def test_the_exhaustive_reference_is_predicts_best(fits):
    """planner_util.exhaustive_best takes each division's step and bytes from coefficients made once per
    search; it returns what calling ``predict`` on every division returns (with ``fits``: every budget
    halfway between the least a device can hold and what the unconstrained division gives it)."""
    from planner_util import exhaustive_best_by_predict

    rng = random.Random(1003)
    k, chunks, n_layers = CASES[0 if fits else 1]
    stats = model_stats(_spec(rng, n_layers, chunks), batch=8)
    group = _group(rng, stats, k, split_overhead=True)
    if fits:
        free = divide(group, stats, chunks=chunks).prediction.memory_bytes
        floor = max(fixed_memory_bytes(stats, k)) + sum(layer_coeffs(group, d, 8, 8).mem_per_unit for d in stats.dims)
        group = [dataclasses.replace(d, memory_bytes=int(floor + (free[i] - floor) * 0.5)) for i, d in enumerate(group)]
        assert exhaustive_best(group, stats, chunks, fits=True) > exhaustive_best(group, stats, chunks)  # it binds
    best = exhaustive_best(group, stats, chunks, fits=fits)
    assert best is not None and best == exhaustive_best_by_predict(group, stats, chunks, fits=fits)
