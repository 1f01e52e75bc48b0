"""EdgeMesh's headline claims on the emulated testbed: step time and memory per device of
single-device training, data-parallel training and the planned hybrid layout.

    python bench/edgemesh_claims.py --cluster layouts/edge4.yaml [--model vgg] [--dataset cifar10]
        [--batch 32] [--steps 15]

The paper reports, against stand-alone and data-parallel training, a 3.2x lower average delay and
up to 43% less average memory. Here, on the workers of the cluster file, with the same global batch:
  single         the fastest worker trains the whole batch alone
  data_parallel  the batch split evenly over all workers in one synchronous mtf step (all-reduce)
  filter_split   EdgeMesh's filter division alone: the planner's one-group plan, every conv layer's
                 filters split unevenly over all workers
  hybrid         the planner's grid (profiled devices): each data-parallel group trains its
                 model-parallel, unevenly divided replica on its own batch; groups step
                 concurrently and their PS commits are not timed here (bench/time_to_accuracy.py
                 times whole training)
Delay is milliseconds per example: step time / examples per step; for the hybrid, whose groups
run asynchronously, 1 / sum over groups of (batch / the group's median step time, measured while
all groups step). Timing interleaves rounds of every mode on one testbed. Memory is the
peak RSS above the idle server of every worker a mode uses, each mode on a fresh testbed.
Prints one JSON object.
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from edgemesh_tf.cluster import emulated_cluster, load_cluster  # noqa: E402
from edgemesh_tf.data import IMAGE_SHAPES  # noqa: E402
from edgemesh_tf.mesh.layout import Layout, even_split, single_device_layout  # noqa: E402
from edgemesh_tf.models import get_model  # noqa: E402
from edgemesh_tf.planner import plan  # noqa: E402
from edgemesh_tf.profile.run import profile_workers  # noqa: E402
from edgemesh_tf.profile.step_timer import LayoutRunner, measure_side_by_side, reset_peak  # noqa: E402
from edgemesh_tf.profile.profiler import read_vm_kb  # noqa: E402

PAPER = {"delay_reduction_x": 3.2, "memory_change": -0.43}
MODES = ("single", "data_parallel", "filter_split", "hybrid")


def mode_layouts(mode, plans, em, workers, batch):
    """[(layout, batch)] of the replicas a mode runs concurrently; layouts name emulated devices."""
    if mode == "single":
        return [(single_device_layout(em.device(workers[0])), batch)]
    if mode == "data_parallel":
        k = len(workers)
        lay = Layout(mesh=(("batch", k),), devices=tuple(em.device(n) for n in workers),
                     rules=(("batch", "batch"),), sizes=(("batch", even_split(batch, k)),))
        return [(lay, batch)]
    out = []
    for g in plans[mode].groups:
        lay = g.layout
        names = {n: em.device(n) for n in g.names}
        out.append((Layout(mesh=lay.mesh, devices=tuple(names.get(d, d) for d in g.names),
                           rules=lay.rules, sizes=lay.sizes), g.batch))
    return out


class ModeRunner:
    """The replicas of one mode; step_ms() runs one step of each concurrently (wall ms) and keeps
    each replica's own step time in ``own[i]``."""

    def __init__(self, spec, layouts, target, master, tag):
        self.runners = [LayoutRunner(spec, lay, b, target, master, container=f"{tag}{i}")
                        for i, (lay, b) in enumerate(layouts)]
        self.batches = [b for _, b in layouts]
        self.own = [[] for _ in layouts]
        self.pool = concurrent.futures.ThreadPoolExecutor(len(self.runners))

    def step_ms(self):
        t0 = time.perf_counter()
        for own, f in zip(self.own, [self.pool.submit(r.step_ms) for r in self.runners]):
            own.append(f.result(timeout=600))
        return (time.perf_counter() - t0) * 1e3

    def ms_per_example(self):
        """1 / examples per ms, every replica at its own median step time (replicas are asynchronous)."""
        return 1.0 / sum(b / statistics.median(t) for b, t in zip(self.batches, self.own))

    def close(self):
        self.pool.shutdown()
        for r in self.runners:
            r.close()


def interleaved(runners, steps, warmup=3):
    """step_timer.measure_side_by_side, with each replica's own warm-up steps not counted."""
    for r in runners.values():
        for _ in range(warmup):
            r.step_ms()
        r.own = [[] for _ in r.own]
    return measure_side_by_side(runners, steps, warmup=0)


def peak_memory(cluster, spec, mode, plans, workers, batch, steps=3):
    """{worker: peak bytes above its idle RSS} of the workers ``mode`` uses, on a fresh testbed."""
    with emulated_cluster(cluster) as em:
        layouts = mode_layouts(mode, plans, em, workers, batch)
        used = [n for n in workers if any(em.device(n) in lay.devices for lay, _ in layouts)]
        pids = {n: em.devices[n].pid for n in used}
        before = {}
        for n in used:
            reset_peak(pids[n])
            before[n] = read_vm_kb(pids[n], "VmRSS")
        runner = ModeRunner(spec, layouts, em.session_target, cluster.master.device_string, mode)
        try:
            for _ in range(steps):
                runner.step_ms()
        finally:
            runner.close()
        return {n: max(0, read_vm_kb(pids[n], "VmHWM") - before[n]) * 1024 for n in used}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="layouts/edge4.yaml")
    ap.add_argument("--model", default="vgg")
    ap.add_argument("--dataset", default="cifar10", choices=sorted(IMAGE_SHAPES))
    ap.add_argument("--batch", type=int, default=32, help="examples per step of each replica")
    ap.add_argument("--steps", type=int, default=15, help="timed steps per mode")
    ap.add_argument("--memory", type=int, default=1, help="0: skip the memory measurement (quick runs)")
    args = ap.parse_args()
    t_start = time.time()
    spec = get_model(args.model, IMAGE_SHAPES[args.dataset], 10)
    cluster = load_cluster(args.cluster)
    workers = [d.name for d in cluster.workers]
    out = {"cluster": args.cluster, "model": args.model, "dataset": args.dataset, "batch": args.batch,
           "steps": args.steps, "paper": PAPER}
    with emulated_cluster(cluster) as em:
        profile = profile_workers(cluster, spec, args.batch, em.session_target,
                                  {n: d.pid for n, d in em.devices.items()})
        fastest = max(profile.devices, key=lambda d: 1.0 / max(1e-9, sum(t.compute_ms for t in d.layers))).name
        workers = [fastest] + [n for n in workers if n != fastest]
        plans = {"filter_split": plan(profile, spec, groups=1, batch=args.batch),
                 "hybrid": plan(profile, spec, batch=args.batch)}
        for m, p in plans.items():
            out[f"{m}_plan"] = [{"devices": list(g.names), "sizes": {k: list(v) for k, v in g.layout.sizes}}
                                for g in p.groups]
        runners = {}
        try:
            for m in MODES:
                runners[m] = ModeRunner(spec, mode_layouts(m, plans, em, workers, args.batch),
                                        em.session_target, cluster.master.device_string, m)
            times = interleaved(runners, args.steps)
        finally:
            for r in runners.values():
                r.close()
    delay = {m: runners[m].ms_per_example() for m in MODES}
    out["modes"] = {m: {"median_step_ms": [round(statistics.median(t), 2) for t in runners[m].own],
                        "examples_per_step": runners[m].batches, "ms_per_example": round(delay[m], 3),
                        "steps": len(times[m])} for m in MODES}
    out["ratios"] = {}
    for m in ("filter_split", "hybrid"):
        for base in ("single", "data_parallel"):
            out["ratios"][f"delay_{base}_over_{m}"] = round(delay[base] / delay[m], 3)
    for m in MODES if args.memory else ():
        peaks = peak_memory(cluster, spec, m, plans, workers, args.batch)
        out["modes"][m]["peak_bytes"] = peaks
        out["modes"][m]["mean_peak_bytes"] = int(statistics.mean(peaks.values()))
    for m in ("filter_split", "hybrid") if args.memory else ():
        for base in ("single", "data_parallel"):
            mem, ref = out["modes"][m]["mean_peak_bytes"], out["modes"][base]["mean_peak_bytes"]
            out["ratios"][f"memory_{m}_vs_{base}"] = round(mem / max(1, ref) - 1, 3)
    out["seconds"] = round(time.time() - t_start, 1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
