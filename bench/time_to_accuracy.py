"""Time to a target test accuracy per synchronisation strategy and ASHL variant, with statistics.

    python -m bench.time_to_accuracy [--cluster layouts/edge4.yaml] [--homo_cluster layouts/homo4.yaml]
        [--strategies bsp,adsp,ashl] [--seeds 8] [--other_seeds 3] [--variants ...] [--variant_seeds 2]
        [--max_minutes 0] [--out FILE.json] [--quick] [--estimate]      # --help: every option

The task (issue 16): `vgg_m` on `digits32`, one data-parallel group per worker, batch 32 per group
and local iteration. A run's time to target is `stats.reached_at(curve, target, consecutive=3)`: the
first evaluation from which the held-out accuracy stays >= --target for 3 evaluations in a row; the
chief stops by the same rule (then --tail_s more) or at the run's budget (`tta_plan.budget_of`).

Runs are interleaved by seed (`tta_plan.schedule`), one testbed per cluster with the group processes
kept warm (WarmGroups) and set up with the limits lifted (run_job's fast_setup), so that the
machine's drift falls on every strategy alike. Every --variants entry is compared with its strategy
as published, whose runs are interleaved with its own. A run whose job fails is made again once
(`failed_attempts`). --max_minutes caps the wall time: strategy runs are always made, a variant run
only while the time left allows it (`skipped_for_time`). `--help` ends with the estimate of the
defaults by the time model of tta_plan.py; --estimate prints it for any arguments.

Statistics (bench/stats.py): an unreached run counts as its budget, a lower bound of its time;
medians, bootstrap 95% intervals of the ratios of medians, two-sided permutation p-values. Prints
one JSON object (also to --out): the ratios `ashl_over_adsp`, `ashl_over_bsp` and
`homogeneous_ashl_over_adsp` with their `_ci95` and `_p`, each cluster's strategies, the variants,
issue 16's `checks`, `estimate_s` and `wall_s`. --quick: the same pipeline on the small digits (a
smoke run for `make bench QUICK=1`, not evidence).
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

from bench import stats
from bench.tta_plan import (CONFIGS, CONSECUTIVE, DEFAULTS, EVAL_SPACING_S, EXPECTED_TRAIN_S, FINAL_EVAL_EXAMPLES,
                            FINAL_EVAL_S, MANY_SEEDS, QUICK, STARTUP_S, STRATEGIES, VARIANTS, Clock, base_of,
                            budget_of, csv_names, estimate, plan_of, sync_config)
from edgemesh_tf.cluster import emulated_cluster, load_cluster


class Interrupted(BaseException):
    """SIGTERM (e.g. the suite's timeout) between runs: report what was measured so far."""


def _spacing(curve) -> float | None:
    """Median time between evaluations of a curve (the last one, at the stop, left out)."""
    t = [p[0] for p in curve[:-1]]
    gaps = [b - a for a, b in zip(t, t[1:])]
    return statistics.median(gaps) if gaps else None


class ClusterRuns:
    """The runs of one cluster: one testbed, the runs in schedule order, the evaluation spacing
    measured so far."""

    def __init__(self, path, args, workdir):
        self.path, self.args, self.workdir = path, args, workdir
        self.homogeneous = path == args.homo_cluster
        self.cluster = load_cluster(path)
        self.runs: dict[str, list[dict]] = {}
        self.spacings: list[float] = []
        self.info = {"cluster": path}

    def run_all(self, order, progress, clock):
        from edgemesh_tf.engine import WarmGroups  # TensorFlow: when run
        with emulated_cluster(self.cluster) as em, WarmGroups() as pool:
            self.info.update(compute=em.compute, network=em.network)
            for name, seed in order:
                if clock.allows(name, seed):
                    rec = self.run_one(name, seed, em, pool)
                    if rec["eval_spacing_s"] is not None:
                        self.spacings.append(rec["eval_spacing_s"])
                    self.runs.setdefault(name, []).append(rec)
                    clock.done(name, rec["wall_s"])
                    progress(self.cluster.name, name, rec)
                if _TERMINATED:
                    raise Interrupted()

    def run_one(self, name, seed, em, pool) -> dict:
        """One run's record; a run whose job fails (a group that could not start) is made again, once."""
        from edgemesh_tf.engine import default_groups, job_config, run_job
        args, cluster, failed = self.args, self.cluster, []
        for attempt in range(2):
            logdir = os.path.join(self.workdir, cluster.name, f"{name}-{seed}" + ("-again" if attempt else ""))
            cfg = job_config(cluster, default_groups(cluster, args.batch), sync=sync_config(name), model=args.model,
                             dataset=args.dataset, target_accuracy=args.target, target_evaluations=CONSECUTIVE,
                             stop_after_target_s=args.tail_s, time_budget_s=budget_of(name, args, self.homogeneous),
                             eval_interval_s=args.eval_interval_s, eval_examples=args.eval_examples,
                             final_eval_examples=FINAL_EVAL_EXAMPLES, checkpoint_interval_s=60.0, seed=seed,
                             logdir=logdir)
            t0 = time.monotonic()
            try:
                final = run_job(cfg, cluster, testbed=em, pool=pool, fast_setup=True)
                break
            except (RuntimeError, TimeoutError) as e:
                if attempt or _TERMINATED:
                    raise
                failed.append(str(e).splitlines()[0])
                print(f"[tta] {name} seed {seed} failed ({failed[-1]}); making it again", file=sys.stderr, flush=True)
        if _TERMINATED or "SIGTERM" in str(final.get("why")):  # the chief took the signal: the run is cut short
            raise Interrupted()
        return {**run_record(final, seed, args.target, args.tail_s, time.monotonic() - t0, logdir),
                "failed_attempts": failed}


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


def settings(args, estimate: float, wall: float, workdir: str, interrupted: bool, skipped) -> dict:
    """What the run was: the task, its budgets and seeds, how unreached runs and statistics are read."""
    return {"format": 2, "dataset": args.dataset, "model": args.model, "target_accuracy": args.target,
            "consecutive_evaluations": CONSECUTIVE, "target_evaluations": CONSECUTIVE, "budget_s": args.budget_s,
            "bsp_budget_s": budget_of("bsp", args), "homo_budget_s": budget_of("ashl", args, True),
            "eval_interval_s": args.eval_interval_s, "eval_examples": args.eval_examples,
            "final_eval_examples": FINAL_EVAL_EXAMPLES, "tail_s": args.tail_s, "batch_per_group": args.batch,
            "seeds": {"ashl_adsp": args.seeds, "other": args.other_seeds, "variants": args.variant_seeds,
                      "homogeneous": args.homo_seeds},
            "unreached_rule": ("a run that did not reach the target (3 evaluations in a row at or above it) counts as "
                               "its budget (budget_s; BSP: bsp_budget_s), a lower bound of its time: medians with "
                               "unreached runs are lower bounds, a ratio over a strategy with unreached runs an upper "
                               "bound"),
            "statistics": ("medians; ratio CI: bootstrap 95% percentile interval, each sample resampled independently "
                           "(10,000 resamples); p: two-sided permutation test of the difference of the medians (exact "
                           "when <= 20,000 splits)"),
            "quick": bool(args.quick), "interrupted": interrupted, "max_minutes": args.max_minutes,
            "skipped_for_time": list(skipped or []), "estimate_s": estimate, "wall_s": round(wall, 1),
            "logdirs": workdir, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": shlex.join([os.path.basename(sys.executable)] + sys.argv)}


def cluster_figures(c, args, label: str, out: dict, ratios: dict) -> dict:
    """One cluster's strategies; ASHL's ratios to ADSP and BSP (with CI and p) into ``out``, every
    strategy's ratio to them into ``ratios``, each key prefixed by ``label``."""
    homo, strategies = label == "homogeneous_", [n for n in c.runs if n in STRATEGIES]
    for base in (b for b in ("adsp", "bsp") if b in c.runs):
        for n in (n for n in strategies if n != base):
            cmp = compare(c.runs[n], c.runs[base], budget_of(n, args, homo), budget_of(base, args, homo))
            ratios[f"{label}{n}_over_{base}"] = cmp["ratio"]
            if n == "ashl":
                out.update({f"{label}ashl_over_{base}": cmp["ratio"], f"{label}ashl_over_{base}_ci95": cmp["ci95"],
                            f"{label}ashl_over_{base}_p": cmp["p"]})
    return {**c.info, "eval_spacing_s": _r(statistics.median(c.spacings), 2) if c.spacings else None,
            "strategies": {n: summary(n, c.runs[n], budget_of(n, args, homo)) for n in strategies}}


def variant_figures(het, variants: list[str], budget: float) -> dict:
    """Each strategy as published, then its variants, each with its ratio to that baseline, CI and p."""
    rows = {}
    for base in dict.fromkeys(base_of(v) for v in variants):
        runs = het.runs.get(base, [])
        rows[base] = {**summary(base, runs, budget), "baseline": base, "ratio_to_baseline": 1.0,
                      "ratio_to_baseline_ci95": None, "p": None}
        for v in (v for v in variants if base_of(v) == base):
            cmp = compare(het.runs[v], runs, budget, budget)
            rows[v] = {**summary(v, het.runs[v], budget), "baseline": base, "ratio_to_baseline": cmp["ratio"],
                       "ratio_to_baseline_ci95": cmp["ci95"], "p": cmp["p"]}
    return {"cluster": het.path, "baseline": "each variant's strategy as published, interleaved with it (the runs of "
            "heterogeneous.strategies)", "variants": rows}


def assemble(args, clusters: dict, estimate: float, wall: float, workdir: str, interrupted: bool,
             skipped: list | None = None) -> dict:
    """The benchmark's JSON: its settings, each cluster's figures, the variants, the ratios and the checks."""
    out, ratios = settings(args, estimate, wall, workdir, interrupted, skipped), {}
    for key, label in (("heterogeneous", ""), ("homogeneous", "homogeneous_")):
        if clusters.get(key) is not None:
            out[key] = cluster_figures(clusters[key], args, label, out, ratios)
    het = clusters.get("heterogeneous")
    variants = [v for v in csv_names(args.variants) if het and v in het.runs]
    if variants:
        out["variants"] = variant_figures(het, variants, args.budget_s)
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
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, kind, what in (
            ("cluster", str, "heterogeneous cluster (strategies and variants)"),
            ("homo_cluster", str, "homogeneous cluster; '' to skip it"), ("dataset", str, None), ("model", str, None),
            ("target", float, "target held-out accuracy (0..1]"),
            ("budget_s", float, "training time budget of each run (s); an unreached run counts as this"),
            ("bsp_budget_s", float, "BSP's own budget (s; 0: --budget_s): over twice ASHL's time"),
            ("homo_budget_s", float, "budget (s) of every run on --homo_cluster (0: --budget_s)"),
            ("tail_s", float, "training after the chief has seen the target %d times in a row (s)" % CONSECUTIVE),
            ("eval_interval_s", float, None), ("eval_examples", int, "held-out images of each evaluation"),
            ("batch", int, "batch per group and local iteration"),
            ("strategies", str, "on --cluster, comma-separated, of " + ",".join(STRATEGIES)),
            ("seeds", int, "seeds of ashl and adsp on --cluster"), ("other_seeds", int, "seeds of the other --strategies"),
            ("homo_strategies", str, "on --homo_cluster, comma-separated"),
            ("homo_seeds", int, "seeds of each --homo_strategies entry"),
            ("variants", str, "ASHL variants on --cluster ('' for none), of " + ",".join(VARIANTS)),
            ("variant_seeds", int, "seeds of each variant"),
            ("max_minutes", float, "wall-time cap (0: none): strategy runs are always made, a variant run only if "
                                   "the time left after the strategy runs still to come allows it"),
            ("out", str, "also write the JSON here")):
        p.add_argument("--" + flag, type=kind, default=d.get(flag), help=what)
    p.add_argument("--quick", action="store_true", help="smoke run of the pipeline (make bench QUICK=1): "
                   + ", ".join(f"--{k} {v}" for k, v in QUICK.items()) + " unless given")
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
    unknown = [n for n in csv_names(args.strategies) + csv_names(args.homo_strategies) if n not in STRATEGIES]
    unknown += [v for v in csv_names(args.variants) if v not in VARIANTS]
    missing = sorted({base_of(v) for v in csv_names(args.variants) if v in VARIANTS} - set(csv_names(args.strategies)))
    if unknown or missing:
        sys.exit(f"time_to_accuracy: unknown strategies or variants {unknown} (expected some of {list(CONFIGS)}), "
                 f"or variants without their strategy as published in --strategies {missing}")
    plan, est = plan_of(args), estimate(args)
    if args.estimate:
        return print(json.dumps(est))
    for name in {n for runs in plan.values() for n, _ in runs}:
        try:
            sync_config(name)  # fail now, not after an hour, when an option does not exist
        except (TypeError, ValueError) as e:
            sys.exit(f"time_to_accuracy: {name}: {e}")
    print(f"[tta] {est['runs']} runs planned ({est['full_s'] / 60:.0f} min by the time model); estimated "
          f"{est['capped_s'] / 60:.0f} min under --max_minutes {args.max_minutes}", file=sys.stderr, flush=True)
    workdir, t_start, done, total = tempfile.mkdtemp(prefix="tta-"), time.monotonic(), [0], sum(map(len, plan.values()))

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
    print(json.dumps(out, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    if interrupted:
        sys.exit(143)


if __name__ == "__main__":
    main()
