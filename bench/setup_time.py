"""The main job's set-up on a first run and on a rerun that reuses the cached device profile
(`python -m bench.setup_time [--cluster layouts/pi4.yaml] [--jobs 2]`).

`edgemesh run` (the main job: its defaults but --cluster and --time_budget_s) with an empty profile
cache, then the same command again, `--jobs` pairs, each with a cache of its own. Prints one JSON
object: each job's `setup_s`, `train_s`, accuracy and whether it reused the profile (its summary.json),
the medians of both set-up times and their ratio (rerun / first).
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

from bench import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main_job_pairs(cluster_path: str, jobs: int, budget_s: float) -> list[dict]:
    out = []
    for _ in range(jobs):
        with tempfile.TemporaryDirectory(prefix="setup-bench-") as tmp:
            env, pair = dict(os.environ, EDGEMESH_PROFILE_CACHE=os.path.join(tmp, "cache")), {}
            for run in ("first", "rerun"):
                logdir = os.path.join(tmp, run)
                p = subprocess.run([sys.executable, "-m", "edgemesh_tf.cli.main", "run", "--cluster", cluster_path,
                                    "--logdir", logdir, "--time_budget_s", str(budget_s)], cwd=ROOT, env=env,
                                   capture_output=True, text=True, timeout=1200)
                if p.returncode != 0:
                    raise SystemExit("edgemesh run failed (%s):\n%s" % (run, p.stderr[-2000:]))
                with open(os.path.join(logdir, "summary.json")) as f:
                    s = json.load(f)
                pair[run] = {"setup_s": s["setup_s"], "train_s": s["train_s"], "accuracy": s["accuracy"],
                             "reused": s["profile_cache"]["reused"]}
            out.append(pair)
    return out


def main():
    args = cli.parser(__doc__, (("cluster", "layouts/pi4.yaml"), ("jobs", 2, "first-run + rerun pairs of the main job"),
                                ("budget_s", 240.0, "the main job's --time_budget_s"))).parse_args()
    pairs = main_job_pairs(args.cluster, args.jobs, args.budget_s)
    median = {run: statistics.median(p[run]["setup_s"] for p in pairs) for run in ("first", "rerun")}
    cli.emit({"cluster": args.cluster, "pairs": pairs, "median_setup_s": median,
              "rerun_over_first": round(median["rerun"] / median["first"], 3)})


if __name__ == "__main__":
    main()
