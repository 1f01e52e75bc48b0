"""Time to a target test accuracy for every synchronisation strategy, on the emulated testbed.

    python bench/time_to_accuracy.py --cluster layouts/edge4.yaml [--homo_cluster layouts/homo4.yaml]
        [--target 0.97] [--repeats 3] [--budget_s 180] [--tail_s 5] [--out FILE.json]
        [--strategies bsp,...] [--homo_strategies bsp,ashl] [--homo_repeats N]

Trains the reference CNN (vgg) on the built-in digits data (1437 train / 360 test images), one data-
parallel group per worker, with BSP, ASP, SSP, Local SGD, ADSP and ASHL, plus ASHL with top-k at 1%
with and without error feedback, on one running testbed per cluster. Every run stops `--tail_s`
after its first evaluation at or above `--target` (or at `--budget_s`); its final accuracy is the
held-out accuracy at the stop. Runs are interleaved (repeat 1 of every strategy, then repeat 2...)
so that the machine's noise falls on all of them alike; figures are medians over the repeats.
Prints one JSON object (and writes it to --out): per cluster and strategy the median time to
target (s, null if not reached), final accuracy, bytes sent, waiting time (s summed over groups),
each run's figures and its accuracy curve; ratios ashl/bsp and ashl/adsp; and the checks of
issue 5 with their thresholds.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from edgemesh_tf.cluster import emulated_cluster, load_cluster  # noqa: E402
from edgemesh_tf.engine.config import SyncConfig  # noqa: E402
from edgemesh_tf.engine.job import default_groups, job_config, run_job  # noqa: E402

STRATEGIES = {
    "bsp": SyncConfig(strategy="bsp"),
    "asp": SyncConfig(strategy="asp"),
    "ssp": SyncConfig(strategy="ssp"),
    "local_sgd": SyncConfig(strategy="local_sgd"),
    "adsp": SyncConfig(strategy="adsp"),
    "ashl": SyncConfig(strategy="ashl"),
    "ashl_topk1_ef": SyncConfig(strategy="ashl", compression="fixed", ratio=0.01, error_feedback=True),
    "ashl_topk1_no_ef": SyncConfig(strategy="ashl", compression="fixed", ratio=0.01, error_feedback=False),
}
HOMO_STRATEGIES = ("bsp", "ashl")


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _summary(runs):
    times = [r["time_to_target_s"] for r in runs]
    reached = [t for t in times if t is not None]
    return {"time_to_target_s": statistics.median(reached) if len(reached) == len(times) else None,
            "reached": f"{len(reached)}/{len(times)}",
            "final_accuracy": _median([r["accuracy"] for r in runs]),
            "bytes_sent": _median([r["bytes_sent"] for r in runs]),
            "wait_s": _median([r["wait_s"] for r in runs]),
            "runs": runs}


def run_cluster(path, names, args, workdir, repeats):
    cluster = load_cluster(path)
    runs = {n: [] for n in names}
    with emulated_cluster(cluster) as em:
        for rep in range(repeats):
            for n in names:
                logdir = os.path.join(workdir, cluster.name, f"{n}-{rep}")
                cfg = job_config(cluster, default_groups(cluster, args.batch), sync=STRATEGIES[n],
                                 target_accuracy=args.target, stop_after_target_s=args.tail_s,
                                 time_budget_s=args.budget_s, eval_interval_s=args.eval_interval_s,
                                 checkpoint_interval_s=60.0, seed=rep, logdir=logdir)
                t0 = time.monotonic()
                final = run_job(cfg, cluster, testbed=em)
                rec = {"time_to_target_s": final["time_to_target_s"], "accuracy": final["accuracy"],
                       "bytes_sent": final["bytes_sent"], "wait_s": final["wait_s"], "t": final["t"],
                       "phase_transitions": final["phase_transitions"], "curve": final["curve"],
                       "wall_s": round(time.monotonic() - t0, 1), "logdir": logdir,
                       "group_exit_codes": final["group_exit_codes"]}
                runs[n].append(rec)
                print(f"[{cluster.name} repeat {rep + 1}/{repeats}] {n}: target at "
                      f"{rec['time_to_target_s']} s, final accuracy {rec['accuracy']}, "
                      f"{rec['bytes_sent'] / 1e6:.1f} MB sent, {rec['wait_s']:.1f} s waiting",
                      file=sys.stderr, flush=True)
    return {"cluster": path, "repeats": repeats, "compute": em.compute, "network": em.network,
            "strategies": {n: _summary(r) for n, r in runs.items()}}


def _ratio(res, a, b):
    ta = res["strategies"][a]["time_to_target_s"]
    tb = res["strategies"][b]["time_to_target_s"]
    return None if ta is None or tb is None else round(ta / tb, 4)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster", default="layouts/edge4.yaml")
    p.add_argument("--homo_cluster", default="layouts/homo4.yaml", help="'' to skip the homogeneous comparison")
    p.add_argument("--target", type=float, default=0.97, help="target held-out accuracy (0..1)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--budget_s", type=float, default=180.0, help="training time budget of each run (s)")
    p.add_argument("--tail_s", type=float, default=5.0, help="training after reaching the target (s)")
    p.add_argument("--eval_interval_s", type=float, default=0.5)
    p.add_argument("--batch", type=int, default=32, help="batch per group and local iteration")
    p.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated subset")
    p.add_argument("--homo_strategies", default=",".join(HOMO_STRATEGIES),
                   help="strategies run on --homo_cluster (comma-separated)")
    p.add_argument("--homo_repeats", type=int, default=None, help="repeats on --homo_cluster (default: --repeats)")
    p.add_argument("--out", default=None, help="also write the JSON here")
    args = p.parse_args()
    names = [n for n in args.strategies.split(",") if n]
    homo_names = [n for n in args.homo_strategies.split(",") if n]
    unknown = [n for n in names + homo_names if n not in STRATEGIES]
    if unknown:
        sys.exit(f"time_to_accuracy: unknown strategies {unknown}; expected some of {list(STRATEGIES)}")
    workdir = tempfile.mkdtemp(prefix="tta-")
    out = {"target_accuracy": args.target, "budget_s": args.budget_s, "tail_s": args.tail_s,
           "repeats": args.repeats, "eval_interval_s": args.eval_interval_s, "model": "vgg", "dataset": "digits",
           "batch_per_group": args.batch, "logdirs": workdir, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
           "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}
    edge = run_cluster(args.cluster, names, args, workdir, args.repeats)
    out["heterogeneous"] = edge
    ratios = {"ashl_over_bsp": _ratio(edge, "ashl", "bsp") if {"ashl", "bsp"} <= set(names) else None,
              "ashl_over_adsp": _ratio(edge, "ashl", "adsp") if {"ashl", "adsp"} <= set(names) else None}
    for n in names:
        for base in ("bsp", "adsp"):
            if base in names and n not in (base, "ashl"):
                ratios[f"{n}_over_{base}"] = _ratio(edge, n, base)
    out["ratios"] = ratios
    checks = {}
    s = edge["strategies"]
    if ratios["ashl_over_bsp"] is not None:
        checks["ashl_time_le_0.7x_bsp"] = ratios["ashl_over_bsp"] <= 0.7
    if ratios["ashl_over_adsp"] is not None:
        checks["ashl_time_le_0.85x_adsp"] = ratios["ashl_over_adsp"] <= 0.85
    if {"ashl", "bsp"} <= set(names):
        checks["ashl_final_accuracy_within_1pt_of_bsp"] = s["ashl"]["final_accuracy"] >= s["bsp"]["final_accuracy"] - 0.01
    if "ashl_topk1_ef" in names:
        checks["topk1_with_error_feedback_reaches_target"] = s["ashl_topk1_ef"]["time_to_target_s"] is not None
    if args.homo_cluster:
        homo = run_cluster(args.homo_cluster, homo_names, args, workdir, args.homo_repeats or args.repeats)
        out["homogeneous"] = homo
        for n in homo_names:
            for base in ("bsp", "adsp"):
                if base in homo_names and n != base:
                    out["ratios"][f"homogeneous_{n}_over_{base}"] = _ratio(homo, n, base)
        if set(HOMO_STRATEGIES) <= set(homo_names):
            r = out["ratios"]["homogeneous_ashl_over_bsp"]
            checks["homogeneous_ashl_not_slower_than_1.1x_bsp"] = r is not None and r <= 1.1
    out["checks"] = checks
    out["all_checks_pass"] = all(checks.values())
    text = json.dumps(out, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
