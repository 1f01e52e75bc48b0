"""Time to a target test accuracy per synchronisation strategy and ASHL variant, with statistics.

Issue 16's task (tta_plan.DEFAULTS): `vgg_m` on `digits32`, one data-parallel group per worker, batch 32 per
group and local iteration. A run's time to target is the first evaluation from which the held-out accuracy stays
>= --target for 3 evaluations in a row (`stats.reached_at`); the chief stops by the same rule (then --tail_s more)
or at the run's budget (`tta_plan.budget_of`). Runs are interleaved by seed on one testbed per cluster with warm
group processes, so that the machine's drift falls on every strategy alike; each --variants entry is compared with
its strategy as published. A failed run is made again once; --max_minutes caps the wall time by leaving out variant
runs. Statistics (bench/stats.py): an unreached run counts as its budget; medians, bootstrap 95% intervals of the
ratios of medians, permutation p-values. Prints one JSON object (also to --out). --quick: a smoke run, not evidence.
"""
import json
import os
import signal
import statistics
import sys
import tempfile
import time

from bench import cli, stats
from bench.tta_plan import (CONFIGS, CONSECUTIVE, DEFAULTS, FINAL_EVAL_EXAMPLES, MANY_SEEDS, QUICK, STRATEGIES,
                            VARIANTS, Clock, base_of, budget_of, estimate, plan_of, sync_config)
from edgemesh_tf.cluster import emulated_cluster, load_cluster


class Interrupted(BaseException):
    """SIGTERM (e.g. the suite's timeout) between runs: report what was measured so far."""


class ClusterRuns:
    """The runs of one cluster on one testbed, in schedule order: {name: [run record, ...]}."""

    def __init__(self, path, args, workdir):
        self.path, self.args, self.workdir = path, args, workdir
        self.homogeneous, self.cluster = path == args.homo_cluster, load_cluster(path)
        self.runs: dict[str, list[dict]] = {}
        self.info = {"cluster": path}

    def run_all(self, order, progress, clock):
        from edgemesh_tf.engine import WarmGroups  # TensorFlow: when run
        with emulated_cluster(self.cluster) as em, WarmGroups() as pool:
            self.info.update(compute=em.compute, network=em.network)
            for name, seed in order:
                if clock.allows(name, seed):
                    rec = self.run_one(name, seed, em, pool)
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
        return {**run_record(final, seed, args.target, time.monotonic() - t0, logdir), "failed_attempts": failed}


def run_record(final: dict, seed: int, target: float, wall: float, logdir: str) -> dict:
    """One run's figures: its time to target by the 3-evaluation rule, the chief's first touch, final
    accuracy, traffic, waiting, evaluation spacing (median, the last evaluation at the stop left out), its curve."""
    curve = final["curve"]
    t = stats.reached_at(curve, target, CONSECUTIVE)
    first = next((at for at, a in curve if a >= target), None)  # also the evaluation at the stop
    times = [p[0] for p in curve[:-1]]
    gaps = [b - a for a, b in zip(times, times[1:])]
    why = (None if t is not None else "never at target" if first is None
           else "fell below the target after reaching it" if any(a < target for at, a in curve if at > first)
           else "stopped before %d evaluations at target" % CONSECUTIVE)  # the tail took longer than expected
    return {"seed": seed, "time_to_target_s": t, "reached": t is not None, "not_reached": why,
            "first_at_target_s": first, "chief_time_to_target_s": final["time_to_target_s"],
            "accuracy": final["accuracy"], "t": final["t"], "why": final.get("why"), "bytes_sent": final["bytes_sent"],
            "wait_s": final["wait_s"], "eval_spacing_s": round(statistics.median(gaps), 3) if gaps else None,
            "phase_transitions": final["phase_transitions"], "curve": curve, "wall_s": round(wall, 1),
            "logdir": logdir, "group_exit_codes": final.get("group_exit_codes", {})}


def times_of(runs) -> list[float | None]:
    return [r["time_to_target_s"] for r in runs]


def summary(name: str, runs: list[dict], budget: float) -> dict:
    """One strategy's runs: median time (unreached = `budget` s) with its CI, reach count, median final
    accuracy, traffic and waiting, the runs."""
    times = times_of(runs)
    med, ci = stats.median_ci(times, budget) if runs else (None, None)
    reached = sum(t is not None for t in times)
    median = lambda key, digits: _r(statistics.median([r[key] for r in runs]), digits) if runs else None  # noqa: E731
    return {"sync": CONFIGS[name], "seeds": len(runs), "budget_s": budget, "time_to_target_s": _r(med),
            "time_to_target_ci95": _r(ci),
            # a lower bound only where the unreached runs decide the median (counted as the budget or later)
            "time_is_lower_bound": reached < len(runs) and med != stats.median(times, 10 * budget),
            "reached": f"{reached}/{len(runs)}",
            "not_reached": {w: sum(r.get("not_reached") == w for r in runs)
                            for w in sorted({r["not_reached"] for r in runs if r.get("not_reached")})},
            "times_s": times, "final_accuracy": median("accuracy", 4), "wait_s": median("wait_s", 2),
            "bytes_sent": statistics.median([r["bytes_sent"] for r in runs]) if runs else None, "runs": runs}


def compare(a_runs, b_runs, a_budget: float, b_budget: float) -> dict:
    """ratio of medians a/b, its bootstrap 95% CI, permutation p; None where a sample is empty.
    Each sample's unreached runs count as its own budget (s)."""
    a, b = stats.censored(times_of(a_runs), a_budget), stats.censored(times_of(b_runs), b_budget)
    ratio, ci = stats.median_ratio_ci(a, b)
    return {"ratio": _r(ratio, 4), "ci95": _r(ci, 4), "p": _r(stats.permutation_p(a, b), 5)}


def _r(x, digits=3):
    """x (a number or a sequence of them) rounded to `digits`; None stays None."""
    return None if x is None else ([round(float(v), digits) for v in x] if isinstance(x, (list, tuple))
                                   else round(float(x), digits))


def _check(value, threshold: str, ok, undecided: str | None = None, **extra) -> dict:
    """One check: {value, threshold, pass}; pass None, with the reason, where the data cannot decide it."""
    decided = {"pass": bool(ok) if value is not None else False} if undecided is None else {
        "pass": None, "undecided": undecided}
    return {"value": value, "threshold": threshold, **decided, **extra}


def checks_of(out: dict) -> dict:
    """Issue 16's checks that this run's data can decide, each {value, threshold, pass}."""
    checks, het, ratio = {}, out["heterogeneous"]["strategies"], out.get
    none_reached = lambda s, *names: all(s[n]["reached"].startswith("0/") for n in names)  # noqa: E731
    if "adsp" in het:
        t = het["adsp"]["time_to_target_s"]
        checks["adsp_median_ge_30s"] = _check(t, ">= 30 s", (t or 0) >= 30,
                                              value_is_lower_bound=het["adsp"]["time_is_lower_bound"])
    for n in (n for n in MANY_SEEDS if n in het):
        k, total = map(int, het[n]["reached"].split("/"))
        checks[f"{n}_reached_ge_7_of_8"] = _check(het[n]["reached"], ">= 7/8 of the runs", total and k / total >= 7 / 8)
    if ratio("ashl_over_adsp") is not None:
        checks["ashl_over_adsp_le_0.70"] = _check(ratio("ashl_over_adsp"), "<= 0.70", ratio("ashl_over_adsp") <= 0.70)
        hi = ratio("ashl_over_adsp_ci95")[1]
        checks["ashl_over_adsp_ci95_upper_lt_1"] = _check(hi, "< 1.0", hi < 1.0)
    if ratio("ashl_over_bsp") is not None:
        checks["ashl_over_bsp_le_0.5"] = _check(ratio("ashl_over_bsp"), "<= 0.5 (BSP unreached = budget: the ratio is "
                                                "then an upper bound)", ratio("ashl_over_bsp") <= 0.5)
    if ratio("homogeneous_ashl_over_adsp") is not None:
        checks["homogeneous_ashl_over_adsp_le_1.10"] = _check(
            ratio("homogeneous_ashl_over_adsp"), "<= 1.10", ratio("homogeneous_ashl_over_adsp") <= 1.10,
            "neither ASHL nor ADSP reached the target on the homogeneous cluster: the ratio compares two budgets"
            if none_reached(out["homogeneous"]["strategies"], "ashl", "adsp") else None)
    if "ashl" in het and "bsp" in het:  # BSP stopped at its budget in every run, far from converged: no reference
        d = round(het["ashl"]["final_accuracy"] - het["bsp"]["final_accuracy"], 4)
        checks["ashl_final_accuracy_within_1pt_of_bsp"] = _check(
            d, "ASHL - BSP >= -0.01 (medians)", d >= -0.01, "BSP reached the target in no run: its final accuracy "
            "is that of a model still training, not a converged reference" if none_reached(het, "bsp") else None)
    return checks


def cluster_figures(c, args, label: str, out: dict) -> dict:
    """One cluster's strategies; every strategy's ratio of median times to ADSP's and BSP's into out["ratios"],
    ASHL's also into ``out`` with its CI and p; each key prefixed by ``label``."""
    homo, strategies = label == "homogeneous_", [n for n in c.runs if n in STRATEGIES]
    for base in (b for b in ("adsp", "bsp") if b in c.runs):
        for n in (n for n in strategies if n != base):
            cmp = compare(c.runs[n], c.runs[base], budget_of(n, args, homo), budget_of(base, args, homo))
            out["ratios"][f"{label}{n}_over_{base}"] = cmp["ratio"]
            if n == "ashl":
                out.update({f"{label}ashl_over_{base}": cmp["ratio"], f"{label}ashl_over_{base}_ci95": cmp["ci95"],
                            f"{label}ashl_over_{base}_p": cmp["p"]})
    spacings = [r["eval_spacing_s"] for runs in c.runs.values() for r in runs if r["eval_spacing_s"] is not None]
    return {**c.info, "eval_spacing_s": _r(statistics.median(spacings), 2) if spacings else None,
            "strategies": {n: summary(n, c.runs[n], budget_of(n, args, homo)) for n in strategies}}


def variant_figures(het, variants: list[str], budget: float) -> dict:
    """Each strategy as published, then its variants, each with its ratio to that baseline, CI and p."""
    rows = {}
    for base in dict.fromkeys(base_of(v) for v in variants):
        for v in [base] + [v for v in variants if base_of(v) == base]:
            cmp = compare(het.runs[v], het.runs.get(base, []), budget, budget) if v != base else {"ratio": 1.0}
            rows[v] = {**summary(v, het.runs.get(v, []), budget), "baseline": base, "ratio_to_baseline": cmp["ratio"],
                       "ratio_to_baseline_ci95": cmp.get("ci95"), "p": cmp.get("p")}
    return {"cluster": het.path, "baseline": "each variant's strategy as published, interleaved with it (the runs of "
            "heterogeneous.strategies)", "variants": rows}


def assemble(args, clusters: dict, estimate: float, wall: float, workdir: str, interrupted: bool,
             skipped: list | None = None) -> dict:
    """The benchmark's JSON: the task, its budgets and seeds, how unreached runs and statistics are read, each
    cluster's figures, the variants, the ratios and the checks."""
    out = {"format": 2, "dataset": args.dataset, "model": args.model, "target_accuracy": args.target,
           "consecutive_evaluations": CONSECUTIVE, "budget_s": args.budget_s, "bsp_budget_s": budget_of("bsp", args),
           "homo_budget_s": budget_of("ashl", args, True), "eval_interval_s": args.eval_interval_s,
           "eval_examples": args.eval_examples, "final_eval_examples": FINAL_EVAL_EXAMPLES, "tail_s": args.tail_s,
           "batch_per_group": args.batch, "seeds": {"ashl_adsp": args.seeds, "other": args.other_seeds,
                                                    "variants": args.variant_seeds, "homogeneous": args.homo_seeds},
           "unreached_rule": "each counts as its budget (budget_s; BSP: bsp_budget_s), a lower bound of its time: "
           "medians with unreached runs are lower bounds, ratios over them upper bounds",
           "statistics": "medians; ratio CI: bootstrap 95% percentile interval (10,000 independent resamples of each "
           "sample); p: two-sided permutation test of the medians' difference (exact <= 20,000 splits)",
           "quick": bool(args.quick), "interrupted": interrupted, "max_minutes": args.max_minutes,
           "skipped_for_time": list(skipped or []), "estimate_s": estimate, "wall_s": round(wall, 1),
           "logdirs": workdir, "date": time.strftime("%Y-%m-%d %H:%M:%S"), "ratios": {}}
    for key, label in (("heterogeneous", ""), ("homogeneous", "homogeneous_")):
        if clusters.get(key) is not None:
            out[key] = cluster_figures(clusters[key], args, label, out)
    het = clusters.get("heterogeneous")
    variants = [v for v in args.variants if het and v in het.runs]
    if variants:
        out["variants"] = variant_figures(het, variants, args.budget_s)
    if "heterogeneous" in out:
        out["checks"] = checks_of(out)
        out["all_checks_pass"] = bool(out["checks"]) and all(c["pass"] is True for c in out["checks"].values())
    return out


_TERMINATED = False


def _on_sigterm(signum, frame):
    global _TERMINATED
    _TERMINATED = True
    raise Interrupted()


OPTIONS = (  # (flag, help) of the run's settings; defaults (and types): tta_plan.DEFAULTS (QUICK with --quick)
    ("cluster", "heterogeneous cluster (strategies and variants)"),
    ("homo_cluster", "homogeneous cluster; '' to skip it"), ("dataset", None), ("model", None),
    ("target", "target held-out accuracy (0..1]"),
    ("budget_s", "training time budget of each run (s); an unreached run counts as this"),
    ("bsp_budget_s", "BSP's own budget (s; 0: --budget_s): over twice ASHL's time"),
    ("homo_budget_s", "budget (s) of every run on --homo_cluster (0: --budget_s)"),
    ("tail_s", "training after the chief has seen the target %d times in a row (s)" % CONSECUTIVE),
    ("eval_interval_s", None), ("eval_examples", "held-out images of each evaluation"),
    ("batch", "batch per group and local iteration"),
    ("strategies", "on --cluster, comma-separated, of " + ",".join(STRATEGIES)),
    ("seeds", "seeds of ashl and adsp on --cluster"), ("other_seeds", "seeds of the other --strategies"),
    ("homo_strategies", "on --homo_cluster, comma-separated"), ("homo_seeds", "seeds of each of them"),
    ("variants", "ASHL variants on --cluster ('' for none), of " + ",".join(VARIANTS)),
    ("variant_seeds", "seeds of each variant"),
    ("max_minutes", "wall-time cap (0: none): strategy runs are always made, a variant run only if the time "
                    "left after the strategy runs still to come allows it"),
    ("out", "also write the JSON here"),
    ("quick", "smoke run of the pipeline (make bench QUICK=1): " + ", ".join(
        f"--{k} {','.join(v) if isinstance(v, list) else v}" for k, v in QUICK.items())
     + " unless given"),
    ("estimate", "print the estimated wall time (s) by the time model of bench/tta_plan.py, with and without the "
                 "--max_minutes cap, and exit"))


CHOICES = {"strategies": STRATEGIES, "homo_strategies": STRATEGIES, "variants": VARIANTS}


def parser(quick: bool = False):
    d = {**DEFAULTS, **(QUICK if quick else {}), "quick": False, "estimate": False}
    return cli.parser(__doc__, [(flag, d.get(flag), what, {"choices": CHOICES[flag]} if flag in CHOICES else {})
                                for flag, what in OPTIONS])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parser("--quick" in argv).parse_args(argv)
    missing = sorted({base_of(v) for v in args.variants} - set(args.strategies))
    if missing:
        sys.exit(f"time_to_accuracy: variants without their strategy as published in --strategies {missing}")
    plan, est = plan_of(args), estimate(args)
    if args.estimate:
        return print(json.dumps(est))
    print(f"[tta] {est['runs']} runs planned ({est['full_s'] / 60:.0f} min by the time model); estimated "
          f"{est['capped_s'] / 60:.0f} min under --max_minutes {args.max_minutes}", file=sys.stderr, flush=True)
    workdir, t_start, done, total = tempfile.mkdtemp(prefix="tta-"), time.monotonic(), [0], sum(map(len, plan.values()))

    def progress(cluster, name, rec):
        done[0] += 1
        print(f"[tta {done[0]}/{total} {cluster}] {name} seed {rec['seed']}: reached at {rec['time_to_target_s']} s "
              f"(first at target {rec['first_at_target_s']} s), final accuracy {rec['accuracy']}, {rec['wall_s']} s "
              f"wall ({(time.monotonic() - t_start) / 60:.1f} min in all)", file=sys.stderr, flush=True)

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
    cli.emit(out, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    if interrupted:
        sys.exit(143)


if __name__ == "__main__":
    main()
