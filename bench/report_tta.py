"""The time-to-accuracy sections of bench/REPORT.md (bench/time_to_accuracy.py): the strategies'
medians with confidence intervals and p-values, the ASHL variants, per-seed and accuracy-curve plots."""
import os

import matplotlib.ticker

from bench.report_common import LABELS, ci, compact, figure, fmt, plt, section, table
from edgemesh_tf.engine import STRATEGIES as MAIN_SIX  # the six strategies, in the report's order


def _median_run(summary):
    """The run whose time to target is the median (else the first): its curve is the one drawn."""
    runs = summary.get("runs") or []
    timed = sorted((r for r in runs if r.get("time_to_target_s") is not None), key=lambda r: r["time_to_target_s"])
    return timed[len(timed) // 2] if len(timed) == len(runs) and timed else (runs[0] if runs else None)


def plot_tta(res: dict, target: float, title: str):
    """Accuracy against training time of each strategy's median run, ASHL's AHL→SHL switch marked."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, run in ((n, _median_run(s)) for n, s in res["strategies"].items() if n in MAIN_SIX):
        if not run or not run.get("curve"):
            continue
        t, acc = zip(*run["curve"])
        (line,) = ax.plot(t, acc, label=LABELS.get(name, name), lw=1.6)
        for phase, _, at in run.get("phase_transitions", []):
            if phase == "shl":
                ax.axvline(at, color=line.get_color(), ls=":", lw=1.2)
                ax.annotate("AHL→SHL", (at, 0.05), color=line.get_color(), rotation=90, fontsize=8)
    ax.axhline(target, color="grey", ls="--", lw=0.8, label=f"target {target:.0%}")
    ax.set_xscale("log")
    ax.set_xticks([t for t in (0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500) if t <= ax.get_xlim()[1]])
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set(xlabel="training time (s, log scale)", ylabel="held-out accuracy", ylim=(0, 1), title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return fig


VARIANT_LABELS = {"ashl": "ASHL as published (baseline)", "adsp": "ADSP as published (baseline)",
                  "adsp+constant_lr": "ADSP, constant rate without weight decay",
                  "ashl_project": "the project's ASHL (all its rules)", "ashl+error_feedback": "+ error feedback",
                  "ashl+replan": "+ re-planning (drift, interval)", "ashl+compress_in_ahl": "+ top-k in AHL too",
                  "ashl+phase_shares": "+ per-phase data shares", "ashl+constant_lr": "+ constant learning rate",
                  "ashl+budget_compression": "+ the project's per-link top-k rule (budget)",
                  "ashl+project_staleness": "+ the project's staleness gate"}
HEADLINES = (("ashl_over_adsp", "ASHL ÷ ADSP", "heterogeneous"), ("ashl_over_bsp", "ASHL ÷ BSP", "heterogeneous"),
             ("homogeneous_ashl_over_adsp", "ASHL ÷ ADSP", "homogeneous"),
             ("homogeneous_ashl_over_bsp", "ASHL ÷ BSP", "homogeneous"))


def variants_table(res: dict) -> list[str]:
    """The variants of a time_to_accuracy result: each strategy as published, then its variants,
    each with its ratio to that baseline (interleaved runs), CI and p."""
    var = res.get("variants", {}).get("variants", {})
    if not var:
        return []
    text = [f"### Variants: what each of the project's rules buys (`{res['variants'].get('cluster')}`)\n",
            "Each of the project's ASHL rules alone on top of the published ASHL, all of them together (the "
            "project's ASHL), and ADSP with its own paper's constant rate instead of the optimizer it shares with "
            "ASHL. Ratio < 1: faster than the strategy as published (its runs above, interleaved with the "
            f"variants'); {res.get('seeds', {}).get('variants')} seeds per variant, so only large effects show; CI "
            "and p as above.\n"]
    rows = [[VARIANT_LABELS.get(v, v), (f"`{v}` " + ", ".join(f"{k}={x}" for k, x in (s.get("sync") or {}).items()
                                                            if k != "strategy")).strip(),
             _median_time(s), s.get("reached", "—"), fmt(s.get("ratio_to_baseline"), 3),
             ci(s.get("ratio_to_baseline_ci95")), fmt(s.get("p"), 4), fmt(s.get("final_accuracy"), 4)]
            for v, s in var.items()]
    text.append(table(["Variant", "Options", "Median time to target", "Reached", "÷ as published", "95% CI", "p",
                       final_header(res)], rows) + "\n")
    return text


# checks a run to target cannot decide, and where the report decides them
ELSEWHERE = {"ashl_final_accuracy_within_1pt_of_bsp": " (decided against BSP converged by `make bench-final`: "
                                                      "the section Final accuracy below)"}


def final_header(res: dict, label: str = "Final accuracy") -> str:
    """The final-accuracy column's header: on how many test images."""
    n = res.get("final_eval_examples")
    return f"{label} ({n:,} test images)" if n else f"{label} (all test images)"


def _median_time(s) -> str:
    """The median time, '≥' when unreached runs (counted as the budget) make it a lower bound."""
    t = s.get("time_to_target_s")
    return ("≥ " if t is not None and s.get("time_is_lower_bound") else "") + fmt(t, 2, " s")


def _cluster_name(c) -> str:
    return os.path.splitext(os.path.basename(c["cluster"]))[0]


def plot_seeds(res: dict):
    """One dot per seed per strategy (and ASHL variant), one panel per cluster; hollow red dots at
    the budget are runs that did not reach the target; a bar marks each median."""
    variants, budget = res.get("variants", {}).get("variants", {}), res.get("budget_s")
    panels = [(_cluster_name(c), [(LABELS.get(n, n), s) for n, s in c["strategies"].items()]
               + [(v, s) for v, s in variants.items() if key == "heterogeneous" and v not in c["strategies"]])
              for key, c in ((k, res.get(k)) for k in ("heterogeneous", "homogeneous")) if c]
    widths = [max(2, len(e)) for _, e in panels] or [1]
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(1.0 + 0.75 * sum(widths), 4.6), squeeze=False,
                             gridspec_kw={"width_ratios": widths}, sharey=True)
    for ax, (name, entries) in zip(axes[0], panels):
        for i, (label, s) in enumerate(entries):
            times = s.get("times_s") or []
            xs = [i + 0.3 * (k - (len(times) - 1) / 2) / len(times) for k in range(len(times))]
            ax.scatter([x for x, t in zip(xs, times) if t is not None], [t for t in times if t is not None],
                       s=22, color="tab:blue", zorder=3)
            ax.scatter([x for x, t in zip(xs, times) if t is None], [s.get("budget_s", budget)] * times.count(None),
                       s=26, facecolors="none", edgecolors="tab:red", zorder=3)
            if s.get("time_to_target_s") is not None:
                ax.hlines(s["time_to_target_s"], i - 0.3, i + 0.3, color="black", lw=1.5)
        if budget:
            ax.axhline(budget, color="grey", ls="--", lw=0.8)
        ax.set_xticks(range(len(entries)), [label for label, _ in entries], rotation=35, ha="right", fontsize=8)
        ax.set(title=name, ylim=(0, None))
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("time to target (s); hollow red: not reached (budget)")
    return fig


def _verdict(res) -> str:
    """Whether this run shows the paper's claim: ASHL ≤ 0.70× ADSP's median time, the CI's upper bound below 1."""
    r, interval, p = res.get("ashl_over_adsp"), res.get("ashl_over_adsp_ci95"), res.get("ashl_over_adsp_p")
    if r is None or not interval:
        return ""
    verdict = "holds in this run." if r <= 0.70 and interval[1] < 1.0 else (
        f"does not hold in this run: the median ratio is {'above' if r > 0.70 else '≤'} 0.70"
        + (", and the interval includes 1 (no difference is shown)." if interval[1] >= 1.0
           else ", but the interval's upper bound is below 1 (ASHL is faster)."))
    return (f"**ASHL against ADSP on {_cluster_name(res['heterogeneous'])}: {fmt(r, 3)} of ADSP's median time "
            f"(95% CI {ci(interval)}, permutation p = {fmt(p, 4)}).** The paper's claim (more than 30% less time: "
            f"ratio ≤ 0.70, with the interval's upper bound below 1) {verdict}\n")


def _intro(res) -> str:
    """The task, the stopping rule, the budgets, the seeds and the statistics of a run."""
    seeds, budget = res.get("seeds", {}), res.get("budget_s")
    return (f"`{res.get('model')}` on `{res.get('dataset')}`, one data-parallel group per worker, batch "
            f"{res.get('batch_per_group')} per group and local iteration. Target: **{res['target_accuracy']:.0%} "
            f"held-out accuracy for {res.get('consecutive_evaluations')} evaluations in a row** (the time is the "
            f"first of them); the chief stops by the same rule (then {res.get('tail_s')} s more) or at its budget "
            f"of {budget} s"
            + (f" (BSP: {res['bsp_budget_s']} s, over twice ASHL's time, so that its unreached runs still tell "
               "ASHL ≤ 0.5× BSP)" if res.get("bsp_budget_s") not in (None, budget) else "")
            + (f" ({res['homo_budget_s']} s on the homogeneous cluster, whose devices are each slower than "
               "edge4's fastest)" if res.get("homogeneous") and res.get("homo_budget_s") not in (None, budget) else "")
            + f". Seeds: {seeds.get('ashl_adsp')} for ASHL and ADSP, {seeds.get('other')} for the other strategies"
            + (f", {seeds.get('variants')} per variant" if res.get("variants") else "")
            + (f", {seeds.get('homogeneous')} on the homogeneous cluster" if res.get("homogeneous") else "")
            + "; runs interleaved by seed"
            + (f", within a {fmt(res.get('max_minutes'), 0)}-minute cap (`--max_minutes`)" if res.get("max_minutes")
               else "") + f". Unreached runs: {res.get('unreached_rule')}. Statistics: {res.get('statistics')}. "
            "Times are training time (after set-up).\n")


def _cluster(res, key, text, out_dir) -> list[str]:
    """One cluster's subsection: its curves and its strategies' table; [the plot's file name]."""
    c, prefix, ratios = res[key], "" if key == "heterogeneous" else "homogeneous_", res.get("ratios", {})
    name = _cluster_name(c)
    text.append(f"### {name} (`{c['cluster']}`; network {c.get('network')}, compute {c.get('compute')}; "
                f"evaluations every {fmt(c.get('eval_spacing_s'), 2, ' s')} (median)"
                + (f" on {res['eval_examples']:,} test images" if res.get("eval_examples") else "") + ")\n")
    plots = figure(plot_tta(c, res["target_accuracy"], f"{name}: accuracy against training time"), out_dir, text,
                   f"tta_{name}")
    rows = [_strategy_row(n, s) + [fmt(s["bytes_sent"] / 1e6 if s.get("bytes_sent") is not None else None, 1, " MB"),
                                   fmt(s.get("wait_s"), 1, " s")]
            + [fmt(1.0 if n == b else ratios.get(f"{prefix}{n}_over_{b}"), 3) for b in ("bsp", "adsp")]
            for n, s in c["strategies"].items()]
    text.append(table(["Strategy", "Median time to target", "95% CI", "Reached", final_header(res, "Final accuracy, "
                       "median"), "Sent", "Waiting", "÷ BSP", "÷ ADSP"], rows) + "\n")
    why = "; ".join(f"{LABELS.get(n, n)}: " + ", ".join(f"{k} {w}" for w, k in s["not_reached"].items())
                    for n, s in c["strategies"].items() if s.get("not_reached"))
    if why:
        text.append(f"Runs not reached: {why}.\n")
    return plots


@section("## Time to accuracy")
def tta_section(res, text, out_dir):
    text.append(_intro(res))
    if res.get("interrupted"):
        text.append("**Interrupted** (SIGTERM) before every run had finished: the figures cover the runs shown.\n")
    rows = [[label, _cluster_name(res[cluster]), fmt(res[key], 3), ci(res.get(key + "_ci95")),
             fmt(res.get(key + "_p"), 4)] for key, label, cluster in HEADLINES if key in res and res.get(cluster)]
    if rows:
        text.append(table(["Comparison", "Cluster", "Ratio of median times", "95% CI (bootstrap)",
                           "p (permutation)"], rows) + "\n")
    text.append(_verdict(res))
    text.append("Ratios as printed by `bench/time_to_accuracy.py` in this run: "
                + ", ".join(f"`{k}` = {fmt(res.get(k), 4)}" for k, _, c in HEADLINES if k in res) + ".\n")
    plots = [p for key in ("heterogeneous", "homogeneous") if res.get(key) for p in _cluster(res, key, text, out_dir)]
    if plots:
        text.append("### Per-seed times\n\nOne dot per seed; hollow red dots at the budget did not reach the target "
                    "(counted as the budget); bars are the medians.\n")
        plots += figure(plot_seeds(res), out_dir, text, "tta_seeds")
    text += variants_table(res)
    if res.get("skipped_for_time"):
        text.append(f"Left out by the {fmt(res.get('max_minutes'), 0)}-minute cap (`--max_minutes`): "
                    + ", ".join(res["skipped_for_time"]) + ".\n")
    if res.get("checks"):
        text.append(table(["Check (issue 16)", "Value", "Threshold", "Result"],
                          [[k, ("≥ " if c.get("value_is_lower_bound") else "") + compact(c.get("value")),
                            c.get("threshold"), "pass" if c.get("pass") else
                            "undecided: " + c["undecided"] + ELSEWHERE.get(k, "") if c.get("undecided") else "**FAIL**"]
                           for k, c in res["checks"].items()]) + "\n")
    text.append(f"Wall time of the benchmark: {fmt(res.get('wall_s'), 0)} s (estimated beforehand: "
                f"{fmt(res.get('estimate_s'), 0)} s).\n")
    return plots


@section("## Time to accuracy: the variants")
def tta_variants_section(res, text, out_dir):
    """`make bench-variants`: the variant table, with the strategies as published that it is measured
    against (their runs interleaved with the variants')."""
    text.append(f"Run by `make bench-variants` (kept out of `make bench` for its time): `{res.get('model')}` on "
                f"`{res.get('dataset')}` to {res['target_accuracy']:.0%} within {fmt(res.get('budget_s'), 0)} s, the "
                f"stopping rule above, in a run of its own ({res.get('date', 'date unknown')}).\n")
    rows = [_strategy_row(n, s) for n, s in (res.get("heterogeneous") or {}).get("strategies", {}).items()]
    if rows:
        text.append(table(["As published", "Median time to target", "95% CI", "Reached", final_header(res)], rows)
                    + "\n")
    text += variants_table(res)
    text.append(f"Wall time: {fmt(res.get('wall_s'), 0)} s.\n")


def _strategy_row(n, s) -> list:
    """[label, median time, CI, reached, final accuracy] of one strategy of a cluster's record."""
    return [LABELS.get(n, n), _median_time(s), ci(s.get("time_to_target_ci95"), 2), s.get("reached", "—"),
            fmt(s.get("final_accuracy"), 4)]
