"""The planner's time on large synthetic clusters, over a grid of regimes (no testbed, no root).

    python -m bench.planning_time [--sizes 256,1024] [--links 10,100,1000,10000] [--spreads 1,8,64]

Plans vgg (32x32x3, batch 32) on n devices per regime: every link at one speed (Mbit/s), device speeds
on four levels from the slowest to ``spread`` times it (1: all alike), memory 256, 512 or 1,024 MiB and
latency 1-10 ms drawn per device from a fixed seed; a layer's ms = 3 x its forward FLOPs / speed.
Issue 41 asks for every regime within 10 s. Each regime is planned twice: with --workers processes
dividing groups (the planner's default: this machine's cores) and in one process, which must give the
same plan. Prints one JSON object: per regime the seconds of each, groups, their sizes, idle devices,
the plan's kind and effective examples/s.
"""
import os
import random
import time

from bench import cli
from edgemesh_tf.models import get_model
from edgemesh_tf.planner import model_stats, plan
from edgemesh_tf.profiling import DeviceProfile, LayerTiming, Profile

BOUND_S = 10.0
SLOWEST_GFLOPS = 1.0
LEVELS = 4  # device speeds per regime


def cluster(spec, n: int, link_mbit: float, spread: float, seed: int = 0) -> Profile:
    """A profile of n synthetic devices of the regime (see the module docstring)."""
    stats = model_stats(spec, 32)
    rng = random.Random(seed)
    speeds = [SLOWEST_GFLOPS * spread ** (j / (LEVELS - 1)) for j in range(LEVELS)]
    devices = []
    for i in range(n):
        gflops = rng.choice(speeds)
        layers = tuple(LayerTiming(d.name, 3 * d.flops * 32 / (gflops * 1e6)) for d in stats.dims)
        devices.append(DeviceProfile("edge%d" % i, "/job:worker/task:%d/device:CPU:0" % i, layers,
                                     rng.choice([256, 512, 1024]) << 20, float(link_mbit),
                                     float(rng.choice([1, 2, 5, 10])), 1.0))
    return Profile(spec.name, 32, spec.image_shape, 10, tuple(devices))


def regime(spec, n: int, link_mbit: float, spread: float, workers: int) -> dict:
    """Plans one regime's cluster with ``workers`` processes, then in one, and returns its figures."""
    profile = cluster(spec, n, link_mbit, spread)
    timed = []
    for w in (workers, 1):
        t0 = time.perf_counter()
        timed.append((plan(profile, spec, workers=w), time.perf_counter() - t0))
    (result, seconds), (alone, alone_seconds) = timed
    same = (result.kind, result.groups, result.examples_per_sec) == (alone.kind, alone.groups, alone.examples_per_sec)
    return {"devices": n, "link_mbit": link_mbit, "spread": spread, "seconds": round(seconds, 2),
            "one_process_seconds": round(alone_seconds, 2), "same_plan_in_one_process": same,
            "kind": result.kind, "groups": len(result.groups),
            "group_sizes": sorted({len(g.names) for g in result.groups}), "idle": len(result.idle),
            "examples_per_sec": round(result.examples_per_sec, 1)}


OPTIONS = (("sizes", [256, 1024], "devices per cluster"), ("links", [10.0, 100.0, 1000.0, 10000.0], "Mbit/s"),
           ("spreads", [1.0, 8.0, 64.0], "fastest device's speed over the slowest's"),
           ("workers", os.cpu_count() or 1,
            "processes dividing groups (default: this machine's cores, as the planner's default)"))


def main():
    ap = cli.parser(__doc__, OPTIONS)
    args = ap.parse_args()
    bad = [f"--{k} {v}" for k, v in (("sizes", args.sizes), ("links", args.links), ("spreads", args.spreads))
           if not v or min(v) <= 0 or (k == "spreads" and min(v) < 1)] + (
        [f"--workers {args.workers}"] if args.workers < 1 else [])
    if bad:
        ap.error("expected positive numbers (spreads at least 1), got " + ", ".join(bad))
    spec = get_model("vgg", (32, 32, 3), 10)
    rows = [regime(spec, n, link, spread, args.workers)
            for n in args.sizes for link in args.links for spread in args.spreads]
    worst = max(rows, key=lambda r: r["seconds"])
    cli.emit({"model": spec.name, "bound_s": BOUND_S, "workers": args.workers, "regimes": rows,
              "max_seconds": worst["seconds"], "within_bound": worst["seconds"] <= BOUND_S,
              "over_bound": sum(r["seconds"] > BOUND_S for r in rows),
              "same_plans_in_one_process": all(r["same_plan_in_one_process"] for r in rows)})


if __name__ == "__main__":
    main()
