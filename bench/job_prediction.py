"""The job's cost model against the main job: predicted and measured examples/s per phase and group.

    python -m bench.job_prediction [--clusters layouts/pi4.yaml,layouts/lan4.yaml] [--strategies bsp,...]
        [--groups 1,2] [--model vgg_wide] [--dataset digits] [--budget_s 40]

For every cluster file, number of groups and strategy, in that order, the main job (`edgemesh_tf.run`:
the cached device profile, the plan with that many groups, training for --budget_s s with no target)
writes its summary's `predicted_vs_measured` (engine/core/job_cost.py): per phase and group, the
predicted and measured step (ms), local iterations per commit, commit and wait (ms per round) and
examples/s. A row's error is |measured / predicted examples/s - 1|. Prints one JSON object: every
run's rows and plan, the largest error over all rows, per strategy and per phase.
"""
import os
import sys
import tempfile
import time

import edgemesh_tf as em
from bench import cli
from edgemesh_tf.engine import STRATEGIES, records


def job_rows(cluster: str, groups: int, strategy: str, args, logdir: str) -> dict:
    """One main job's plan and its rows of predicted beside measured figures, each with its error."""
    lost = []  # the groups the chief lost on the way: their rows measure a fault, not the cost model
    summary = em.run(cluster, args.model, dataset=args.dataset, strategy=strategy, groups=groups,
                     target_accuracy=None, time_budget_s=args.budget_s, logdir=logdir,
                     emit=lambda rec: lost.append(rec) if isinstance(rec, records.Lost) else None)
    rows = [{**r, "error": round(abs(r["ratio"] - 1.0), 3)} for r in summary["predicted_vs_measured"]["rows"]
            if r.get("ratio") is not None]
    return {"cluster": cluster, "groups": groups, "strategy": strategy, "rows": rows,
            "planned": summary["planned"], "examples_per_sec": summary["examples_per_sec"],
            "phases": [p for p, _, _ in summary["phase_transitions"]],
            "lost": [{"group": r.group, "t": r.t, "why": r.why} for r in lost], "logdir": logdir}



def largest(runs: list[dict], key) -> dict:
    """{key(run, row): the largest error of those rows} (pure)."""
    out: dict = {}
    for run in runs:
        for row in run["rows"]:
            k = key(run, row)
            out[k] = max(out.get(k, 0.0), row["error"])
    return out


OPTIONS = (("clusters", ["layouts/pi4.yaml", "layouts/lan4.yaml"]),
           ("strategies", list(STRATEGIES), None, {"choices": STRATEGIES}),
           ("groups", [1, 2], "data-parallel groups of the plans (comma-separated)"), ("model", "vgg_wide"),
           ("dataset", "digits"), ("budget_s", 40.0, "training time of each job (s)"),
           ("bound", 0.15, "the largest error accepted, a fraction (`within_bound`; issue 45 asks 15%%)"))


def main(argv=None) -> int:
    args = cli.parser(__doc__, OPTIONS).parse_args(argv)
    t0, work, runs = time.monotonic(), tempfile.mkdtemp(prefix="job-prediction-"), []
    for cluster in args.clusters:
        for groups in args.groups:
            for strategy in args.strategies:
                name = f"{os.path.splitext(os.path.basename(cluster))[0]}-{groups}-{strategy}"
                runs.append(job_rows(cluster, groups, strategy, args, os.path.join(work, name)))
                print(f"[job_prediction] {name}: " + ", ".join(
                    f"{r['phase']} {r['group']} x{r['ratio']}" for r in runs[-1]["rows"]), file=sys.stderr, flush=True)
    errors = [r["error"] for run in runs for r in run["rows"]]
    cli.emit({"model": args.model, "dataset": args.dataset, "budget_s": args.budget_s, "bound": args.bound,
              "runs": runs, "max_error": max(errors, default=None),
              "max_error_by_strategy": largest(runs, lambda run, row: run["strategy"]),
              "max_error_by_phase": largest(runs, lambda run, row: row["phase"]),
              "within_bound": bool(errors) and max(errors) <= args.bound, "seconds": round(time.monotonic() - t0, 1)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
