"""Synthetic profiles and an exhaustive reference search for the planner tests."""
import itertools
import random
import time

from edgemesh_tf.planner import model_stats, plan
from edgemesh_tf.planner.cost import fixed_memory_bytes, layer_coeffs
from edgemesh_tf.planner.predict import predict
from edgemesh_tf.planner.division import quantum
from edgemesh_tf.planner.polish import compositions  # noqa: F401 (the tests import it from here)
from edgemesh_tf.planner.simulate import simulate_step_ms
from edgemesh_tf.profiling.types import DeviceProfile, LayerTiming, Profile

BIG = 1 << 40  # bytes: a memory budget that never binds


def device(name, layer_ms, *, bw=1000.0, lat=1.0, mem=BIG, overhead=1.0, task=None):
    """A DeviceProfile with ``layer_ms`` {dim: ms}."""
    return DeviceProfile(name, "/job:worker/task:%d/device:CPU:0" % (task if task is not None else hash(name) % 1000),
                         tuple(LayerTiming(k, float(v)) for k, v in layer_ms.items()), int(mem), float(bw), float(lat),
                         float(overhead))


def flops_device(name, stats, gflops, task, **kw):
    """A device whose layer ms follow the stats' FLOPs: fwd+bwd = 3x forward FLOPs at ``gflops``."""
    return device(name, {d.name: 3 * d.flops * stats.batch / (gflops * 1e6) for d in stats.dims}, task=task, **kw)


def profile(spec, devices, batch):
    return Profile(spec.name, batch, spec.image_shape, spec.num_classes, tuple(devices))


def exhaustive_best(group, stats, chunks, profile_batch=None, fits=False):
    """The least predicted step ms over every replicate/split choice and share vector of every dim
    (with ``fits``: only plans within every device's memory_bytes; None if there is none).

    Each division's step ms and bytes are ``predict``'s (its step_ms is ``simulate_step_ms`` on the
    group's ``layer_coeffs``, its memory_bytes the fixed bytes plus each dim's bytes per unit held):
    computed here from coefficients made once per search rather than once per division."""
    k = len(group)
    options = []
    for d in stats.dims:
        q = quantum(d.units, k, chunks)
        opts = [None] + ([tuple(x * q for x in c) for c in compositions(d.units // q, k)] if q else [])
        options.append(opts)
    pb = profile_batch or stats.batch
    coeffs = [layer_coeffs(group, d, stats.batch, pb) for d in stats.dims]
    fixed = fixed_memory_bytes(stats, k)
    best = None
    for combo in itertools.product(*options):
        if fits:
            memory = list(fixed)
            for co, s in zip(coeffs, combo):  # in predict's order
                for i in range(k):
                    memory[i] += co.mem_per_unit * (s[i] if s else co.units)
            if any(m > d.memory_bytes for m, d in zip(memory, group)):
                continue
        step_ms = simulate_step_ms(group, stats, {d.name: s for d, s in zip(stats.dims, combo)}, pb, coeffs)
        best = step_ms if best is None else min(best, step_ms)
    return best


def exhaustive_best_by_predict(group, stats, chunks, profile_batch=None, fits=False):
    """``exhaustive_best`` with ``predict`` called on every division (what it stands for; slower)."""
    k = len(group)
    options = []
    for d in stats.dims:
        q = quantum(d.units, k, chunks)
        opts = [None] + ([tuple(x * q for x in c) for c in compositions(d.units // q, k)] if q else [])
        options.append(opts)
    best = None
    for combo in itertools.product(*options):
        pred = predict(group, stats, {d.name: s for d, s in zip(stats.dims, combo)}, profile_batch=profile_batch)
        if fits and any(m > d.memory_bytes for m, d in zip(pred.memory_bytes, group)):
            continue
        best = pred.step_ms if best is None else min(best, pred.step_ms)
    return best


def random_cluster(stats, n, seed=0):
    """n devices of 1-8 GFLOP/s, 10-1000 Mbit/s, 1-10 ms and 256-1024 MiB (the scale tests' cluster)."""
    rng = random.Random(seed)
    return [flops_device("edge%d" % i, stats, rng.choice([1, 2, 4, 8]), i, bw=rng.choice([10, 50, 100, 1000]),
                         lat=rng.choice([1, 2, 5, 10]), mem=rng.choice([256, 512, 1024]) << 20) for i in range(n)]


def plan_random_cluster(spec, n, batch=32):
    """(the plan of `random_cluster` with n devices, the seconds planning took, the devices); planned in
    this process (``workers=1``: no worker process is started)."""
    devs = random_cluster(model_stats(spec, batch), n)
    start = time.perf_counter()
    result = plan(profile(spec, devs, batch), spec, workers=1)
    return result, time.perf_counter() - start, devs
