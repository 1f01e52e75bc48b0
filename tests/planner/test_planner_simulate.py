"""planner/simulate.py (pure): the batched simulation gives the one-at-a-time simulation's floats bit
for bit, on uneven groups and divisions (split and replicated layers in every order)."""
import dataclasses
import random

import pytest
from planner_util import flops_device

from edgemesh_tf.models import get_model
from edgemesh_tf.planner import model_stats
from edgemesh_tf.planner.cost import layer_coeffs
from edgemesh_tf.planner.division import quantum
from edgemesh_tf.planner.simulate import simulate_step_ms, simulate_steps_ms

VGG = get_model("vgg", (8, 8, 1), 10)
STATS = model_stats(VGG, 32)


def _group(rng, k):
    return [dataclasses.replace(flops_device("edge%d" % i, STATS, rng.choice([0.5, 1, 4, 8]), i,
                                             bw=rng.choice([10, 100, 1000]), lat=rng.choice([0.5, 2, 10])),
                                step_overhead_ms=rng.uniform(0, 3), split_overhead_ms=rng.choice([0, 0.7]))
            for i in range(k)]


def _division(rng, k):
    out = []
    for d in STATS.dims:
        q = quantum(d.units, k)
        if not q or rng.random() < 0.4:
            out.append(None)
            continue
        cuts = sorted(rng.sample(range(1, d.units // q), k - 1))
        edges = [0] + cuts + [d.units // q]
        out.append(tuple(q * (b - a) for a, b in zip(edges, edges[1:])))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_the_batched_simulation_is_the_single_one_bit_for_bit(seed):
    rng = random.Random(seed)
    k = rng.choice([2, 3, 5, 8])
    group = _group(rng, k)
    coeffs = [layer_coeffs(group, d, STATS.batch, STATS.batch) for d in STATS.dims]
    divisions = [_division(rng, k) for _ in range(40)] + [[None] * len(STATS.dims)]
    batched = simulate_steps_ms(group, STATS, divisions, coeffs).tolist()
    single = [simulate_step_ms(group, STATS, {d.name: s for d, s in zip(STATS.dims, sh)}, STATS.batch, coeffs)
              for sh in divisions]
    assert batched == single
    assert len(set(batched)) > 10  # the divisions differ in step time: the comparison is not of constants


def test_groups_on_a_shared_medium_or_of_one_device_are_refused():
    rng = random.Random(0)
    group = _group(rng, 3)
    coeffs = [layer_coeffs(group, d, STATS.batch, STATS.batch) for d in STATS.dims]
    on_wifi = [dataclasses.replace(d, medium="wifi", medium_mbit=50.0) for d in group]
    with pytest.raises(ValueError, match="media \\['wifi'\\]"):
        simulate_steps_ms(on_wifi, STATS, [[None] * len(STATS.dims)], coeffs)
    with pytest.raises(ValueError, match="got 1 devices"):
        simulate_steps_ms(group[:1], STATS, [[None] * len(STATS.dims)], coeffs[:1])
