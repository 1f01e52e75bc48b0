"""Time to a target test accuracy per synchronisation strategy and ASHL variant, with statistics.

    python bench/time_to_accuracy.py [--cluster layouts/edge4.yaml] [--homo_cluster layouts/homo4.yaml]
        [--dataset digits32] [--model vgg_m] [--target 0.90] [--budget_s 80] [--bsp_budget_s 130]
        [--homo_budget_s 120]
        [--strategies bsp,adsp,ashl] [--seeds 8] [--other_seeds 3]
        [--homo_strategies ashl,adsp] [--homo_seeds 2]
        [--variants ashl_project,ashl+error_feedback,...] [--variant_seeds 2] [--max_minutes 0]
        [--tail_s 0] [--eval_interval_s 1] [--eval_examples 500] [--out FILE.json] [--quick] [--estimate]

The task (issue 16): `vgg_m` (1.04 M parameters) on `digits32` (21,552 train / 5,400 test images of
32x32x1, generated offline), one data-parallel group per worker, batch 32 per group and local
iteration. A run's time to target is `stats.reached_at(curve, target, consecutive=3)`: the first
evaluation from which the held-out accuracy stays >= --target for 3 evaluations in a row. The chief
stops by the same rule (`target_evaluations=3`: a dip below the target starts the count again),
--tail_s after it (default 0), or at --budget_s (BSP: --bsp_budget_s, over twice ASHL's time, so
that its unreached runs still tell whether ASHL takes at most half of BSP's time; every run on
--homo_cluster: --homo_budget_s).

Runs are interleaved: seed 0 of every strategy and variant, then seed 1, ... (the order rotated
each seed), one testbed per cluster, so that the machine's drift falls on all of them alike.
ASHL and ADSP get --seeds seeds on --cluster, the other --strategies --other_seeds, every
--variants entry --variant_seeds (its baseline is the published `ashl` runs), every
--homo_strategies entry --homo_seeds on --homo_cluster. Seeds are the job's `seed` (weights and
data order): seed k of every strategy starts from the same weights.

Time: `--help` ends with the estimate of the defaults by the time model in tta_plan.py (and
--estimate prints it for any arguments): 37 runs, ~52 min; `make bench` runs it with --variants ''
(23 runs; measured 35.9 min at 500 images an evaluation) and `make bench-variants` the variants. The group processes are kept warm across
the runs of a cluster (engine/warm.py: TensorFlow and the dataset loaded once) and set up with the
devices' CPU quotas and link rates lifted (run_job's fast_setup, restored before the clock starts and
lifted again once the model at the stop is pulled), so a run's set-up is ~7 s instead of ~40.
Every --variants entry is compared with its strategy as published (`base_of`), whose runs are
interleaved with its own. A run whose job fails (e.g. a group that could not start) is made again
once; its record lists the failure under `failed_attempts`. --max_minutes caps the wall time:
strategy runs are always made, a variant run only while the time left allows it; the runs left
out are listed under `skipped_for_time`.

Statistics (bench/stats.py): a run that did not reach the target counts as its budget, a LOWER
BOUND of its time (so a ratio over a strategy with unreached runs is an upper bound of the true
one); medians; bootstrap 95% intervals of the ratios of medians (each sample resampled on its
own); two-sided permutation p-values of the difference of the medians (exact for small samples).

Prints one JSON object (also to --out); keys: `ashl_over_adsp`, `ashl_over_adsp_ci95` ([lo, hi]),
`ashl_over_adsp_p`, the same for `ashl_over_bsp` and `homogeneous_ashl_over_adsp`; `heterogeneous`
and `homogeneous` (per strategy: median time, its CI, reached "k/n", final accuracies, each run);
`variants` (per variant: its options, median time, ratio to published ASHL with CI and p);
`checks` (issue 16's, each with value, threshold and pass); `estimate_s` and `wall_s`.
--quick: the same pipeline on the small built-in digits (a smoke run for `make bench QUICK=1`,
not evidence). --estimate: print the time estimate of the chosen configuration and exit.
"""
import argparse
import json
import os
import shlex
import signal
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import stats  # noqa: E402  (bench/stats.py)
from tta_plan import (CONFIGS, CONSECUTIVE, DEFAULT_VARIANTS, DEFAULTS, EVAL_SPACING_S,  # noqa: E402,F401
                      EVAL_EXAMPLES, EXPECTED_TRAIN_S, FINAL_EVAL_EXAMPLES, FINAL_EVAL_S, MANY_SEEDS, QUICK, STARTUP_S, STRATEGIES, VARIANTS,
                      Clock, _names, base_of, budget_of, estimate, estimate_s, expected_run_s, plan_of, schedule,
                      sync_config, tail_for)


class Interrupted(BaseException):
    """SIGTERM (e.g. the suite's timeout) between runs: report what was measured so far."""


# ---- running ----



def _spacing(curve) -> float | None:
    """Median time between evaluations of a curve (the last one, at the stop, left out)."""
    t = [p[0] for p in curve[:-1]]
    gaps = [b - a for a, b in zip(t, t[1:])]
    return statistics.median(gaps) if gaps else None


class ClusterRuns:
    """The runs of one cluster: one testbed, the runs in schedule order, the evaluation spacing
    measured so far."""

    def __init__(self, path, args, workdir):
        from edgemesh_tf.cluster import load_cluster
        self.path, self.args, self.workdir = path, args, workdir
        self.homogeneous = path == args.homo_cluster
        self.cluster = load_cluster(path)
        self.runs: dict[str, list[dict]] = {}
        self.spacings: list[float] = []
        self.info = {"cluster": path}


    def run_all(self, order, progress, clock):
        from edgemesh_tf.cluster import emulated_cluster
        from edgemesh_tf.engine.job import default_groups, job_config, run_job
        from edgemesh_tf.engine.warm import WarmGroups
        args, cluster = self.args, self.cluster
        with emulated_cluster(cluster) as em, WarmGroups() as pool:
            self.info.update(compute=em.compute, network=em.network)
            for name, seed in order:
                if not clock.allows(name, seed):
                    continue
                failed = []
                for attempt in range(2):  # a run whose job fails (a group that could not start) is made again, once
                    logdir = os.path.join(self.workdir, cluster.name, f"{name}-{seed}" + ("-again" if attempt else ""))
                    cfg = job_config(cluster, default_groups(cluster, args.batch), sync=sync_config(name),
                                     model=args.model, dataset=args.dataset, target_accuracy=args.target,
                                     target_evaluations=CONSECUTIVE, stop_after_target_s=args.tail_s,
                                     time_budget_s=budget_of(name, args, self.homogeneous),
                                     eval_interval_s=args.eval_interval_s, eval_examples=args.eval_examples,
                                     final_eval_examples=FINAL_EVAL_EXAMPLES,
                                     checkpoint_interval_s=60.0, seed=seed,
                                     logdir=logdir)
                    t0 = time.monotonic()
                    try:
                        final = run_job(cfg, cluster, testbed=em, pool=pool, fast_setup=True)
                        break
                    except (RuntimeError, TimeoutError) as e:
                        if attempt or _TERMINATED:
                            raise
                        failed.append(str(e).splitlines()[0])
                        print(f"[tta] {name} seed {seed} failed ({failed[-1]}); making it again", file=sys.stderr,
                              flush=True)
                if _TERMINATED or "SIGTERM" in str(final.get("why")):  # the chief took the signal: the run is cut short
                    raise Interrupted()
                rec = run_record(final, seed, args.target, args.tail_s, time.monotonic() - t0, logdir)
                rec["failed_attempts"] = failed
                if rec["eval_spacing_s"] is not None:
                    self.spacings.append(rec["eval_spacing_s"])
                self.runs.setdefault(name, []).append(rec)
                clock.done(name, rec["wall_s"])
                progress(cluster.name, name, rec)
                if _TERMINATED:
                    raise Interrupted()


def run_record(final: dict, seed: int, target: float, tail: float, wall: float, logdir: str) -> dict:
    """One run's figures: its time to target by the 3-evaluation rule, the chief's first touch,
    final accuracy, traffic, waiting, evaluation spacing, its curve."""
    curve = final["curve"]
    t = stats.reached_at(curve, target, CONSECUTIVE)
    first = next((at for at, a in curve if a >= target), None)  # also the evaluation at the stop
    if t is not None:
        why = None
    elif first is None:
        why = "never at target"
    elif any(a < target for at, a in curve if at > first):
        why = "fell below the target after reaching it"
    else:  # the tail was shorter than CONSECUTIVE evaluations (they took longer than expected)
        why = "stopped before %d evaluations at target" % CONSECUTIVE
    return {"seed": seed, "time_to_target_s": t, "reached": t is not None, "not_reached": why,
            "first_at_target_s": first, "chief_time_to_target_s": final["time_to_target_s"],
            "accuracy": final["accuracy"], "t": final["t"],
            "why": final.get("why"), "bytes_sent": final["bytes_sent"], "wait_s": final["wait_s"],
            "tail_s": tail, "eval_spacing_s": None if _spacing(curve) is None else round(_spacing(curve), 3),
            "phase_transitions": final["phase_transitions"], "curve": curve, "wall_s": round(wall, 1),
            "logdir": logdir, "group_exit_codes": final.get("group_exit_codes", {})}


# ---- statistics of the runs ----

def times_of(runs) -> list[float | None]:
    return [r["time_to_target_s"] for r in runs]


def summary(name: str, runs: list[dict], budget: float) -> dict:
    """One strategy's runs: median time (unreached = `budget` s) with its CI, reach count, final
    accuracies, traffic, waiting, the runs."""
    times = times_of(runs)
    med, ci = stats.median_ci(times, budget) if runs else (None, None)
    reached = sum(t is not None for t in times)
    finals = [r["accuracy"] for r in runs]
    return {"sync": CONFIGS[name], "seeds": len(runs), "budget_s": budget, "time_to_target_s": _r(med), "time_to_target_ci95": _rl(ci),
            # a lower bound only where the unreached runs decide the median (counted as the budget or later)
            "time_is_lower_bound": reached < len(runs) and med != stats.median(times, 10 * budget),
            "reached": f"{reached}/{len(runs)}",
            "not_reached": {w: sum(r.get("not_reached") == w for r in runs)
                            for w in sorted({r["not_reached"] for r in runs if r.get("not_reached")})},
            "times_s": times, "final_accuracy": _r(statistics.median(finals), 4) if finals else None,
            "final_accuracies": finals,
            "bytes_sent": statistics.median([r["bytes_sent"] for r in runs]) if runs else None,
            "wait_s": _r(statistics.median([r["wait_s"] for r in runs]), 2) if runs else None,
            "runs": runs}


def compare(a_runs, b_runs, a_budget: float, b_budget: float) -> dict:
    """ratio of medians a/b, its bootstrap 95% CI, permutation p; None where a sample is empty.
    Each sample's unreached runs count as its own budget (s)."""
    if not a_runs or not b_runs:
        return {"ratio": None, "ci95": None, "p": None}
    a, b = stats.censored(times_of(a_runs), a_budget), stats.censored(times_of(b_runs), b_budget)
    ratio, ci = stats.median_ratio_ci(a, b)
    return {"ratio": _r(ratio, 4), "ci95": _rl(ci, 4), "p": _r(stats.permutation_p(a, b), 5)}


def _r(x, digits=3):
    return None if x is None else round(float(x), digits)


def _rl(xs, digits=3):
    return None if xs is None else [round(float(x), digits) for x in xs]


def _check(value, threshold: str, ok) -> dict:
    return {"value": value, "threshold": threshold, "pass": bool(ok) if value is not None else False}


def checks_of(out: dict) -> dict:
    """Issue 16's checks that this run's data can decide, each {value, threshold, pass}."""
    checks = {}
    het = out["heterogeneous"]["strategies"]
    if "adsp" in het:
        checks["adsp_median_ge_30s"] = {**_check(het["adsp"]["time_to_target_s"], ">= 30 s",
                                                 (het["adsp"]["time_to_target_s"] or 0) >= 30),
                                        "value_is_lower_bound": het["adsp"]["time_is_lower_bound"]}
    for n in MANY_SEEDS:
        if n in het:
            k, total = map(int, het[n]["reached"].split("/"))
            checks[f"{n}_reached_ge_7_of_8"] = _check(het[n]["reached"], ">= 7/8 of the runs",
                                                      total and k / total >= 7 / 8)
    if out.get("ashl_over_adsp") is not None:
        checks["ashl_over_adsp_le_0.70"] = _check(out["ashl_over_adsp"], "<= 0.70", out["ashl_over_adsp"] <= 0.70)
        hi = out["ashl_over_adsp_ci95"][1]
        checks["ashl_over_adsp_ci95_upper_lt_1"] = _check(hi, "< 1.0", hi < 1.0)
    if out.get("ashl_over_bsp") is not None:
        checks["ashl_over_bsp_le_0.5"] = _check(out["ashl_over_bsp"], "<= 0.5 (BSP unreached = budget: the "
                                                "ratio is then an upper bound)", out["ashl_over_bsp"] <= 0.5)
    if out.get("homogeneous_ashl_over_adsp") is not None:
        r = out["homogeneous_ashl_over_adsp"]
        checks["homogeneous_ashl_over_adsp_le_1.10"] = _check(r, "<= 1.10", r <= 1.10)
        homo = out["homogeneous"]["strategies"]
        if all(homo[n]["reached"].startswith("0/") for n in ("ashl", "adsp")):  # two budgets compared
            checks["homogeneous_ashl_over_adsp_le_1.10"].update(
                {"pass": None, "undecided": "neither ASHL nor ADSP reached the target on the homogeneous cluster: "
                                            "the ratio compares two budgets"})
    if "ashl" in het and "bsp" in het:
        d = round(het["ashl"]["final_accuracy"] - het["bsp"]["final_accuracy"], 4)
        checks["ashl_final_accuracy_within_1pt_of_bsp"] = _check(d, "ASHL - BSP >= -0.01 (medians)", d >= -0.01)
        if het["bsp"]["reached"].startswith("0/"):  # BSP stopped at its budget, far from converged: no reference
            checks["ashl_final_accuracy_within_1pt_of_bsp"].update(
                {"pass": None, "undecided": "BSP reached the target in no run: its final accuracy is that of a "
                                            "model still training, not a converged reference"})
    return checks


def assemble(args, clusters: dict, estimate: float, wall: float, workdir: str, interrupted: bool,
             skipped: list | None = None) -> dict:
    budget = args.budget_s
    out = {"format": 2, "dataset": args.dataset, "model": args.model, "target_accuracy": args.target,
           "consecutive_evaluations": CONSECUTIVE, "target_evaluations": CONSECUTIVE, "budget_s": budget,
           "bsp_budget_s": budget_of("bsp", args), "homo_budget_s": budget_of("ashl", args, True),
           "eval_interval_s": args.eval_interval_s, "eval_examples": args.eval_examples,
           "final_eval_examples": FINAL_EVAL_EXAMPLES,
           "tail_s": args.tail_s, "batch_per_group": args.batch,
           "seeds": {"ashl_adsp": args.seeds, "other": args.other_seeds, "variants": args.variant_seeds,
                     "homogeneous": args.homo_seeds},
           "unreached_rule": ("a run that did not reach the target (3 evaluations in a row at or above it) counts "
                              "as its budget (budget_s; BSP: bsp_budget_s), a lower bound of its time: medians with unreached runs are lower "
                              "bounds, a ratio over a strategy with unreached runs an upper bound"),
           "statistics": ("medians; ratio CI: bootstrap 95% percentile interval, each sample resampled "
                          "independently (10,000 resamples); p: two-sided permutation test of the difference of "
                          "the medians (exact when <= 20,000 splits)"),
           "quick": bool(args.quick), "interrupted": interrupted, "max_minutes": args.max_minutes,
           "skipped_for_time": list(skipped or []), "estimate_s": estimate, "wall_s": round(wall, 1),
           "logdirs": workdir, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
           "command": shlex.join([os.path.basename(sys.executable)] + sys.argv)}
    ratios = {}
    for key, label in (("heterogeneous", ""), ("homogeneous", "homogeneous_")):
        c = clusters.get(key)
        if c is None:
            continue
        strategies = [n for n in c.runs if n in STRATEGIES]
        homo = key == "homogeneous"
        out[key] = {**c.info, "eval_spacing_s": _r(statistics.median(c.spacings), 2) if c.spacings else None,
                    "strategies": {n: summary(n, c.runs[n], budget_of(n, args, homo)) for n in strategies}}
        for base in ("adsp", "bsp"):
            if "ashl" in c.runs and base in c.runs:
                cmp = compare(c.runs["ashl"], c.runs[base], budget_of("ashl", args, homo), budget_of(base, args, homo))
                out[f"{label}ashl_over_{base}"] = cmp["ratio"]
                out[f"{label}ashl_over_{base}_ci95"] = cmp["ci95"]
                out[f"{label}ashl_over_{base}_p"] = cmp["p"]
            for n in strategies:
                if n != base and base in c.runs:
                    ratios[f"{label}{n}_over_{base}"] = compare(c.runs[n], c.runs[base], budget_of(n, args, homo),
                                                                budget_of(base, args, homo))["ratio"]
    het = clusters.get("heterogeneous")
    variants = [v for v in _names(args.variants) if het and v in het.runs]
    if variants:
        rows = {}
        for base in dict.fromkeys(base_of(v) for v in variants):  # each strategy as published, then its variants
            runs = het.runs.get(base, [])
            rows[base] = {**summary(base, runs, budget), "baseline": base, "ratio_to_baseline": 1.0,
                          "ratio_to_baseline_ci95": None, "p": None}
            for v in (v for v in variants if base_of(v) == base):
                cmp = compare(het.runs[v], runs, budget, budget)
                rows[v] = {**summary(v, het.runs[v], budget), "baseline": base, "ratio_to_baseline": cmp["ratio"],
                           "ratio_to_baseline_ci95": cmp["ci95"], "p": cmp["p"]}
        out["variants"] = {"cluster": het.path, "baseline": "each variant's strategy as published, interleaved "
                           "with it (the runs of heterogeneous.strategies)", "variants": rows}
    out["ratios"] = {k: out[k] for k in ("ashl_over_bsp", "ashl_over_adsp", "homogeneous_ashl_over_bsp",
                                         "homogeneous_ashl_over_adsp") if k in out} | ratios
    if "heterogeneous" in out:
        out["checks"] = checks_of(out)
        out["all_checks_pass"] = bool(out["checks"]) and all(c["pass"] is True for c in out["checks"].values())
    return out


_TERMINATED = False


def _on_sigterm(signum, frame):
    global _TERMINATED
    _TERMINATED = True
    raise Interrupted()


def parser(quick: bool = False) -> argparse.ArgumentParser:
    d = {**DEFAULTS, **(QUICK if quick else {})}
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=None)
    p.add_argument("--cluster", default="layouts/edge4.yaml", help="heterogeneous cluster (strategies and variants)")
    p.add_argument("--homo_cluster", default=d["homo_cluster"], help="homogeneous cluster; '' to skip it")
    p.add_argument("--dataset", default=d["dataset"])
    p.add_argument("--model", default=d["model"])
    p.add_argument("--target", type=float, default=d["target"],
                   help="target held-out accuracy (0..1]; default 0.90 on digits32, where ADSP needs about a minute "
                   "(at 0.92 it reached the target within 80 s in 5 and 6 of 8 runs)")
    p.add_argument("--budget_s", type=float, default=d["budget_s"],
                   help="training time budget of each run (s); an unreached run counts as this (a lower bound)")
    p.add_argument("--bsp_budget_s", type=float, default=d["bsp_budget_s"],
                   help="BSP's own budget (s; 0: --budget_s): it waits on edge3's link every iteration and "
                   "needs over twice ASHL's time to tell ASHL <= 0.5x BSP")
    p.add_argument("--homo_budget_s", type=float, default=d["homo_budget_s"],
                   help="budget (s) of every run on --homo_cluster (0: as on --cluster); its devices are each "
                   "slower than edge4's fastest")
    p.add_argument("--tail_s", type=float, default=0.0, help="training after the chief has seen the target in %d "
                   "evaluations in a row (s)" % CONSECUTIVE)
    p.add_argument("--eval_interval_s", type=float, default=d["eval_interval_s"])
    p.add_argument("--eval_examples", type=int, default=d["eval_examples"],
                   help="held-out images of each evaluation during training (tta_plan.EVAL_EXAMPLES)")
    p.add_argument("--batch", type=int, default=32, help="batch per group and local iteration")
    p.add_argument("--strategies", default=d["strategies"], help="on --cluster, comma-separated, of %s"
                   % ",".join(STRATEGIES))
    p.add_argument("--seeds", type=int, default=d["seeds"], help="seeds of ashl and adsp on --cluster")
    p.add_argument("--other_seeds", type=int, default=d["other_seeds"], help="seeds of the other --strategies")
    p.add_argument("--homo_strategies", default=d["homo_strategies"], help="on --homo_cluster, comma-separated")
    p.add_argument("--homo_seeds", type=int, default=d["homo_seeds"], help="seeds of each --homo_strategies entry")
    p.add_argument("--variants", default=d["variants"], help="ASHL variants on --cluster ('' for none), of %s"
                   % ",".join(VARIANTS))
    p.add_argument("--variant_seeds", type=int, default=d["variant_seeds"], help="seeds of each variant")
    p.add_argument("--out", default=None, help="also write the JSON here")
    p.add_argument("--quick", action="store_true", help="smoke run of the pipeline (make bench QUICK=1): "
                   + ", ".join(f"--{k} {v}" for k, v in QUICK.items()) + " unless given")
    p.add_argument("--max_minutes", type=float, default=d["max_minutes"], help="wall-time cap (0: none): "
                   "strategy runs are always made; a variant run only if the time left after the strategy runs "
                   "still to come (their measured or modelled times) allows it; skipped runs are listed")
    p.add_argument("--estimate", action="store_true", help="print the estimated wall time and exit")
    return p


def _help_estimate() -> str:
    args = parser().parse_args([])
    e = estimate(args)
    q = estimate(parser(quick=True).parse_args(["--quick"]))
    return (f"Estimated wall time of the defaults: {e['capped_s'] / 60:.0f} min under --max_minutes "
            f"{args.max_minutes:.0f} ({e['runs'] - e['variant_runs']} strategy runs and {e['variant_runs_in_cap']} "
            f"of the {e['variant_runs']} variant runs; all {e['runs']} runs: {e['full_s'] / 60:.0f} min). Time model: "
            f"{STARTUP_S:.0f} s set-up per run, an evaluation every {EVAL_SPACING_S['digits32']:.0f} s during training "
            f"({args.eval_examples:,} test images), {FINAL_EVAL_S['digits32']:.0f} s for the final one ({FINAL_EVAL_EXAMPLES:,}), training to target "
            f"ADSP {EXPECTED_TRAIN_S['adsp']:.0f} s, ASHL and variants "
            f"{EXPECTED_TRAIN_S['ashl']:.0f} s, BSP its budget. --quick: {q['capped_s'] / 60:.0f} min.")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    quick = "--quick" in argv
    p = parser(quick)
    p.epilog = _help_estimate()
    args = p.parse_args(argv)
    unknown = [n for n in _names(args.strategies) + _names(args.homo_strategies) if n not in STRATEGIES]
    unknown += [v for v in _names(args.variants) if v not in VARIANTS]
    if unknown:
        sys.exit(f"time_to_accuracy: unknown strategies or variants {unknown}; expected some of "
                 f"{list(STRATEGIES)} / {list(VARIANTS)}")
    missing = sorted({base_of(v) for v in _names(args.variants) if v in VARIANTS} - set(_names(args.strategies)))
    if missing:
        sys.exit(f"time_to_accuracy: --variants are compared with their strategy as published: add {missing} to "
                 f"--strategies")
    plan = plan_of(args)
    est = estimate(args)
    if args.estimate:
        print(json.dumps(est))
        return
    for name in {n for runs in plan.values() for n, _ in runs}:
        try:
            sync_config(name)  # fail now, not after an hour, when an option does not exist
        except (TypeError, ValueError) as e:
            sys.exit(f"time_to_accuracy: {name}: {e}")
    print(f"[tta] {est['runs']} runs planned ({est['full_s'] / 60:.0f} min by the time model); estimated "
          f"{est['capped_s'] / 60:.0f} min under --max_minutes {args.max_minutes}", file=sys.stderr, flush=True)
    workdir = tempfile.mkdtemp(prefix="tta-")
    t_start = time.monotonic()
    done = [0]
    total = sum(map(len, plan.values()))

    def progress(cluster, name, rec):
        done[0] += 1
        print(f"[tta {done[0]}/{total} {cluster}] {name} seed {rec['seed']}: reached at {rec['time_to_target_s']} s "
              f"(first at target {rec['first_at_target_s']} s), final accuracy {rec['accuracy']}, "
              f"{rec['bytes_sent'] / 1e6:.1f} MB sent, {rec['wait_s']:.1f} s waiting, evaluations every "
              f"{rec['eval_spacing_s']} s, {rec['wall_s']} s wall ({(time.monotonic() - t_start) / 60:.1f} min in all)",
              file=sys.stderr, flush=True)

    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    clusters, interrupted, clock = {}, False, Clock(args, plan)
    try:
        for key, path in (("heterogeneous", args.cluster), ("homogeneous", args.homo_cluster)):
            if key in plan:
                clusters[key] = ClusterRuns(path, args, workdir)
                clusters[key].run_all(plan[key], progress, clock)
    except Interrupted:
        interrupted = True
        print("[tta] SIGTERM: reporting the runs so far", file=sys.stderr, flush=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
    out = assemble(args, clusters, est["capped_s"], time.monotonic() - t_start, workdir, interrupted, clock.skipped)
    text = json.dumps(out, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)
    if interrupted:
        sys.exit(143)


if __name__ == "__main__":
    main()
