"""The planner never loses to its alternatives, matches brute force, mixes grids and scales to 256 devices."""
import dataclasses
import itertools
import random

import pytest
from planner_util import device, exhaustive_best, flops_device, plan_random_cluster, profile
from specs import sequential

from edgemesh_tf.models.zoo import get_model
from edgemesh_tf.planner import PlanError, divide, model_stats, plan
from edgemesh_tf.planner.alternatives import singles, sync_data_parallel
from edgemesh_tf.planner.cost import fixed_memory_bytes, layer_coeffs
from edgemesh_tf.planner.grid import throughput

X86, PI = 50.0, 3.0  # GFLOP/s: an x86 core, a Raspberry-Pi-class board


def _sweep():
    """(model, image, batch, bandwidth Mbit/s, latency ms, speeds GFLOP/s): a sample of the issue's sweep."""
    rng = random.Random(15)
    grid = list(itertools.product(["vgg", "vgg_wide", "resnet"], [(8, 8, 1), (28, 28, 1), (32, 32, 3)],
                                  [8, 32, 128], [10, 100, 1000, 10000], [0.1, 1, 20],
                                  [(X86,) * 4, (PI,) * 4, (X86, PI, PI, PI), (PI, PI / 2, PI / 3, PI / 4)]))
    return rng.sample(grid, 40)


SWEEP = _sweep()
FAST_CASES = 8  # `make test-fast` plans the first 8; `make test` all 40


@pytest.mark.parametrize("case", [c if c < FAST_CASES else pytest.param(c, marks=pytest.mark.slow)
                                  for c in range(len(SWEEP))])
def test_never_slower_than_its_alternatives(case):
    model, image, batch, bw, lat, speeds = SWEEP[case]
    spec = get_model(model, image, 10)
    stats = model_stats(spec, batch)
    devs = [flops_device("e%d" % i, stats, g, i, bw=bw, lat=lat, overhead=2 * lat) for i, g in enumerate(speeds)]
    prof = profile(spec, devs, batch)
    result = plan(prof, spec)
    alternatives = dict(result.alternatives)
    assert set(alternatives) == {"fastest_device", "all_replicated", "sync_data_parallel"}
    assert result.examples_per_sec >= max(alternatives.values()) * (1 - 1e-9), (result.kind, alternatives)
    # One group (the plan `edgemesh plan --groups 1` returns): never a slower step than one device
    # alone or synchronous data parallelism at the same batch.
    one = plan(prof, spec, groups=1).groups[0].prediction.step_ms
    alone = min(d.prediction.step_ms for d in singles(devs, stats, batch).values())
    assert one <= alone * (1 + 1e-9)
    assert one <= sync_data_parallel(devs, stats, batch).prediction.step_ms * (1 + 1e-9)
    for g in result.groups:
        g.layout.validate(spec.dims(batch))


def test_slowest_device_is_left_out_of_a_group():
    """edge4's failure: a slow device behind a slow link made the one-group plan 5x slower than the
    fastest device alone; now the group uses its fastest devices only."""
    spec = get_model("vgg", (8, 8, 1), 10)
    stats = model_stats(spec, 32)
    devs = [flops_device("edge%d" % i, stats, g, i, bw=bw, lat=lat, overhead=2 * lat)
            for i, (g, bw, lat) in enumerate([(4, 100, 2), (2, 50, 5), (1.33, 20, 10), (1, 10, 20)])]
    div = divide(devs, stats, subsets=True)
    alone = divide(devs[:1], stats).prediction.step_ms
    assert div.prediction.step_ms <= alone and divide(devs, stats).prediction.step_ms > 2 * alone
    assert div.idle and div.layout().num_devices == len(div.names) < 4
    result = plan(profile(spec, devs, 32), spec, groups=1)
    assert result.groups[0].prediction.step_ms <= alone and set(result.idle) | set(result.groups[0].names) == {
        d.name for d in devs}


def test_mixed_grid_wins_on_pi_boards_beside_a_fast_device():
    """A faster device trains alone; Pi-class boards on a fast switch form one
    model-parallel group (the staleness charge makes fewer, faster groups worth it)."""
    spec = get_model("vgg", (32, 32, 3), 10)
    stats = model_stats(spec, 32)
    devs = [flops_device("x86", stats, 15.0, 0, bw=100, lat=1)]
    devs += [flops_device("pi%d" % i, stats, PI, i + 1, bw=1000, lat=0.2, overhead=0.4) for i in range(4)]
    result = plan(profile(spec, devs, 32), spec, commit_interval=4)
    sizes = sorted(len(g.names) for g in result.groups)
    assert result.kind == "grid" and sizes[0] == 1 and sizes[-1] > 1, [g.names for g in result.groups]
    assert any(g.layout.rules for g in result.groups)  # filters are split in the model-parallel group
    without = plan(profile(spec, devs, 32), spec, commit_interval=4, staleness_penalty=0.0)
    assert [len(g.names) for g in without.groups] == [1] * 5  # no staleness charge: all alone


def test_sync_data_parallel_layout_splits_the_batch():
    spec = get_model("vgg", (8, 8, 1), 10)
    stats = model_stats(spec, 32)
    devs = [flops_device("d%d" % i, stats, g, i, bw=10000, lat=0.05, overhead=0.1) for i, g in enumerate([4, 4, 2])]
    div = sync_data_parallel(devs, stats, 32)
    layout = div.layout().validate(spec.dims(32))
    assert layout.rule_map == {"batch": "batch"} and sum(layout.size_map["batch"]) == 32
    assert layout.size_map["batch"][0] > layout.size_map["batch"][2]  # the faster device takes more examples
    assert div.prediction.step_ms < min(d.prediction.step_ms for d in singles(devs, stats, 32).values())


def test_staleness_charge_in_the_objective():
    spec = get_model("vgg", (8, 8, 1), 10)
    stats = model_stats(spec, 32)
    preds = [d.prediction for d in singles([flops_device("d%d" % i, stats, 4, i) for i in range(3)], stats, 32).values()]
    raw = sum(32000 / (p.step_ms + p.ps_sync_ms) for p in preds)
    assert throughput(preds, 32, 1) == pytest.approx(raw / 1.2)
    assert throughput(preds, 32, 1, staleness_penalty=0.5) == pytest.approx(raw / 2.0)
    assert throughput(preds[:1], 32, 1) == pytest.approx(32000 / preds[0].step_ms)  # one group: no sync, no charge
    with pytest.raises(ValueError, match="staleness_penalty must be a number >= 0"):
        plan(profile(spec, [flops_device("d0", stats, 4, 0)], 32), spec, staleness_penalty=-1)


# Brute force: every integer division (and replication) of every layer, over every fastest-m subset.
def _tiny(rng, n_layers, units):
    layers = [("conv", "conv1", rng.choice(units), True),
              ("conv", "conv2", rng.choice(units), rng.random() < 0.5),
              ("dense", "fc1", rng.choice(units)), ("dense", "fc2", rng.choice(units))]
    return sequential("tiny", (8, 8, 1), 4, layers[:n_layers])


def _instance(seed, k, n_layers, tight):
    rng = random.Random(seed)
    units = [k + 2, k + 4, 2 * k] if k <= 4 else [k, k + 1, k + 2, k + 3]
    stats = model_stats(_tiny(rng, n_layers, units), batch=8)
    group = [device("d%d" % i, {d.name: rng.uniform(1, 60) for d in stats.dims}, bw=rng.choice([2, 5, 20, 100, 1e3, 1e4]),
                    lat=rng.uniform(0, 3), overhead=rng.uniform(0, 2), task=i) for i in range(k)]
    if tight:  # two devices get a budget between their least possible memory and their unconstrained need
        free = divide(group, stats).prediction.memory_bytes
        floor = max(fixed_memory_bytes(stats, k)) + sum(layer_coeffs(group, d, 8, 8).mem_per_unit for d in stats.dims)
        for i in rng.sample(range(k), 2):
            group[i] = dataclasses.replace(group[i], memory_bytes=int(floor + (free[i] - floor) * rng.uniform(0.3, 0.9)))
    return group, stats


BRUTE = [(s, k, L, tight) for s, (k, L) in enumerate([(2, 4), (3, 3), (4, 3), (4, 2), (3, 4), (2, 3), (5, 2), (6, 2),
                                                      (7, 2), (8, 2)]) for tight in (False, True)]


@pytest.mark.slow
@pytest.mark.parametrize("seed,k,n_layers,tight", BRUTE)
def test_within_two_percent_of_brute_force(seed, k, n_layers, tight):
    group, stats = _instance(500 + seed, k, n_layers, tight)
    best = exhaustive_best(group, stats, None, fits=True)
    try:
        got = divide(group, stats).prediction
    except PlanError:
        assert best is None
        return
    assert best is not None and all(m <= d.memory_bytes for m, d in zip(got.memory_bytes, group))
    assert best - 1e-9 <= got.step_ms <= best * 1.02, (got.step_ms, best)
    # with subsets: no worse than brute force over every fastest-m prefix of the group
    order = sorted(range(k), key=lambda i: sum(t.compute_ms for t in group[i].layers))
    prefixes = [exhaustive_best([group[i] for i in sorted(order[:m])], stats, None, fits=True) for m in range(1, k)]
    best_any = min([b for b in prefixes + [best] if b is not None])
    assert divide(group, stats, subsets=True).prediction.step_ms <= best_any * 1.02


def test_256_devices_plan_to_a_grid_that_uses_each_device_once():
    """The planning time at this scale is bench/planning_time.py's, not a test's."""
    result, _, devs = plan_random_cluster(get_model("vgg", (32, 32, 3), 10), 256)
    used = [n for g in result.groups for n in g.names]
    assert len(used) == len(set(used)) and len(used) + len(result.idle) == 256
    assert result.examples_per_sec >= max(r for _, r in result.alternatives)
