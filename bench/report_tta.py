"""The time-to-accuracy section of bench/REPORT.md (bench/report.py renders the rest): the strategies'
medians with confidence intervals and p-values, the ASHL variants, per-seed and accuracy-curve plots.
Both the current JSON (format 2, bench/time_to_accuracy.py) and the earlier one render."""
import os

import matplotlib
import matplotlib.ticker

from edgemesh_tf.engine.config import STRATEGIES as MAIN_SIX  # the six strategies, in the report's order
from report_common import LABELS, _compact, _status_line, fmt, plt, result, table  # noqa: F401


def _median_run(summary):
    """The run whose time to target is the median (else the first): its curve is the one drawn."""
    runs = summary.get("runs") or []
    timed = sorted((r for r in runs if r.get("time_to_target_s") is not None), key=lambda r: r["time_to_target_s"])
    return timed[len(timed) // 2] if len(timed) == len(runs) and timed else (runs[0] if runs else None)


def _quotient(cluster_result, a, b):
    """time to target of a / of b (medians), None if either is missing."""
    s = cluster_result["strategies"]
    ta = s.get(a, {}).get("time_to_target_s")
    tb = s.get(b, {}).get("time_to_target_s")
    return None if ta is None or tb is None else round(ta / tb, 4)


def plot_tta(res: dict, target: float, path: str, title: str) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, summary in res["strategies"].items():
        if name not in MAIN_SIX:
            continue
        run = _median_run(summary)
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
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _tta_section_v1(rec, res, out_dir) -> tuple[str, list[str]]:
    """The first format (issue 5: repeats, no statistics), still rendered from recorded JSON."""
    text = ["## Time to accuracy\n", _status_line(rec)]
    plots = []
    text.append(f"Reference CNN (`{res.get('model')}`) on the built-in `{res.get('dataset')}` data, one data-parallel "
                f"group per worker, batch {res.get('batch_per_group')} per group and local iteration. Target: "
                f"**{res['target_accuracy']:.0%} held-out accuracy**; every run stops {res.get('tail_s')} s after "
                f"reaching it or at {res.get('budget_s')} s. Figures are medians; curves are each strategy's median "
                "run; dotted lines mark ASHL's AHL→SHL switch. Times are training time (after set-up).\n")
    ratios = res.get("ratios", {})
    for key, label in (("heterogeneous", "edge4"), ("homogeneous", "homo4")):
        c = res.get(key)
        if not c:
            continue
        name = os.path.splitext(os.path.basename(c["cluster"]))[0]
        png = f"tta_{name}.png"
        plot_tta(c, res["target_accuracy"], os.path.join(out_dir, png), f"{name}: accuracy against training time")
        plots.append(png)
        reps = c.get("repeats", res.get("repeats"))
        prefix = "" if key == "heterogeneous" else "homogeneous_"
        rows = []
        for n, s in c["strategies"].items():
            # the JSON's own ratio where it printed one, else the same quotient of the medians shown
            over = {b: ratios.get(f"{prefix}{n}_over_{b}", _quotient(c, n, b)) for b in ("bsp", "adsp")}
            rows.append([LABELS.get(n, n), fmt(s["time_to_target_s"], 2, " s"), s.get("reached", "—"),
                         fmt(s["final_accuracy"], 4), fmt(s["bytes_sent"] / 1e6 if s.get("bytes_sent") is not None
                                                          else None, 1, " MB"),
                         fmt(s["wait_s"], 1, " s"), fmt(over["bsp"], 3), fmt(over["adsp"], 3)])
        text.append(f"### {name} (`{c['cluster']}`; network {c.get('network')}, compute {c.get('compute')}; "
                    f"medians over {reps} repeat{'s' if reps != 1 else ''})\n")
        text.append(f"![{name}]({png})\n")
        text.append(table(["Strategy", "Time to target", "Reached", "Final accuracy", "Sent", "Waiting",
                           "÷ BSP", "÷ ADSP"], rows) + "\n")
    text.append("Ratios as printed by `bench/time_to_accuracy.py` in this run: "
                + ", ".join(f"`{k}` = {fmt(v, 4)}" for k, v in ratios.items() if k.startswith(("ashl_over", "homogeneous_ashl_over")))
                + ".\n")
    checks = res.get("checks", {})
    if checks:
        text.append(table(["Check (issue 5)", "Result"], [[k, "pass" if v else "**FAIL**"] for k, v in checks.items()])
                    + "\n")
    return "\n".join(text), plots


VARIANT_LABELS = {"ashl": "ASHL as published (baseline)", "adsp": "ADSP as published (baseline)",
                  "adsp+constant_lr": "ADSP, constant rate without weight decay", "ashl_project": "the project's ASHL (all its rules)",
                  "ashl+error_feedback": "+ error feedback", "ashl+replan": "+ re-planning (drift, interval)",
                  "ashl+compress_in_ahl": "+ top-k in AHL too", "ashl+phase_shares": "+ per-phase data shares",
                  "ashl+budget_compression": "+ the project's per-link top-k rule (budget)",
                  "ashl+project_staleness": "+ the project's staleness gate", "ashl+constant_lr": "+ constant learning rate"}
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
    rows = []
    for v, s in var.items():
        opts = {k: x for k, x in (s.get("sync") or {}).items() if k != "strategy"}
        ratio = s.get("ratio_to_baseline", s.get("ratio_to_ashl"))  # format 2 recorded ratio_to_ashl
        rows.append([VARIANT_LABELS.get(v, v), "`" + v + "`" + (" " + ", ".join(f"{k}={x}" for k, x in opts.items())
                                                                 if opts else ""),
                     _median_time(s), s.get("reached", "—"), fmt(ratio, 3),
                     _ci(s.get("ratio_to_baseline_ci95", s.get("ratio_to_ashl_ci95"))), fmt(s.get("p"), 4),
                     fmt(s.get("final_accuracy"), 4)])
    text.append(table(["Variant", "Options", "Median time to target", "Reached", "÷ as published", "95% CI", "p",
                       final_header(res)], rows) + "\n")
    return text


# checks a run to target cannot decide, and where the report decides them
ELSEWHERE = {"ashl_final_accuracy_within_1pt_of_bsp": " (decided against BSP converged by `make bench-final`: "
                                                      "the section Final accuracy below)"}


def final_header(res: dict, label: str = "Final accuracy") -> str:
    """The final-accuracy column's header: on how many test images (records before
    final_eval_examples: all of them)."""
    n = res.get("final_eval_examples")
    return f"{label} ({n:,} test images)" if n else f"{label} (all test images)"


def _ci(ci, digits=3) -> str:
    return "—" if not ci else f"[{fmt(ci[0], digits)}, {fmt(ci[1], digits)}]"


def _median_time(s) -> str:
    """The median time, '≥' when unreached runs (counted as the budget) make it a lower bound."""
    t = s.get("time_to_target_s")
    return ("≥ " if t is not None and s.get("time_is_lower_bound") else "") + fmt(t, 2, " s")


def _cluster_name(c) -> str:
    return os.path.splitext(os.path.basename(c["cluster"]))[0]


def plot_seeds(res: dict, path: str) -> None:
    """One dot per seed per strategy (and ASHL variant), one panel per cluster; hollow red dots at
    the budget are runs that did not reach the target; a bar marks each median."""
    panels = []
    for key in ("heterogeneous", "homogeneous"):
        c = res.get(key)
        if not c:
            continue
        entries = [(LABELS.get(n, n), s) for n, s in c["strategies"].items()]
        if key == "heterogeneous":
            entries += [(v, s) for v, s in res.get("variants", {}).get("variants", {}).items()
                        if v not in c["strategies"]]
        panels.append((_cluster_name(c), entries))
    widths = [max(2, len(e)) for _, e in panels] or [1]
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(1.0 + 0.75 * sum(widths), 4.6), squeeze=False,
                             gridspec_kw={"width_ratios": widths}, sharey=True)
    budget = res.get("budget_s")
    for ax, (name, entries) in zip(axes[0], panels):
        for i, (label, s) in enumerate(entries):
            times = s.get("times_s") or []
            n = max(1, len(times))
            xs = [i + 0.3 * (k - (n - 1) / 2) / n for k in range(len(times))]
            ax.scatter([x for x, t in zip(xs, times) if t is not None], [t for t in times if t is not None],
                       s=22, color="tab:blue", zorder=3)
            own = s.get("budget_s") or (res.get("bsp_budget_s") or budget if s.get("sync", {}).get("strategy") == "bsp"
                                        else budget)
            ax.scatter([x for x, t in zip(xs, times) if t is None], [own for t in times if t is None],
                       s=26, facecolors="none", edgecolors="tab:red", zorder=3)
            if s.get("time_to_target_s") is not None:
                ax.hlines(s["time_to_target_s"], i - 0.3, i + 0.3, color="black", lw=1.5)
        if budget:
            ax.axhline(budget, color="grey", ls="--", lw=0.8)
        ax.set_xticks(range(len(entries)))
        ax.set_xticklabels([label for label, _ in entries], rotation=35, ha="right", fontsize=8)
        ax.set_title(name)
        ax.set_ylim(bottom=0)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("time to target (s); hollow red: not reached (budget)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _verdict(res) -> str:
    r, ci, p = res.get("ashl_over_adsp"), res.get("ashl_over_adsp_ci95"), res.get("ashl_over_adsp_p")
    if r is None or not ci:
        return ""
    holds = r <= 0.70 and ci[1] < 1.0
    return (f"**ASHL against ADSP on {_cluster_name(res['heterogeneous'])}: {fmt(r, 3)} of ADSP's median time "
            f"(95% CI {_ci(ci)}, permutation p = {fmt(p, 4)}).** The paper's claim (more than 30% less time: "
            f"ratio ≤ 0.70, with the interval's upper bound below 1) "
            + ("holds in this run." if holds else
               "does not hold in this run: " + ("the median ratio is above 0.70" if r > 0.70 else
                                                "the median ratio is ≤ 0.70") +
               (", and the interval includes 1 (no difference is shown)." if ci[1] >= 1.0 else
                ", but the interval's upper bound is below 1 (ASHL is faster).")) + "\n")


def tta_section(rec, out_dir) -> tuple[str, list[str]]:
    res = result(rec)
    if res and res.get("format") != 2:
        return _tta_section_v1(rec, res, out_dir)
    text = ["## Time to accuracy\n", _status_line(rec)]
    if not res:
        return "\n".join(text), []
    plots = []
    seeds = res.get("seeds", {})
    text.append(f"`{res.get('model')}` on `{res.get('dataset')}`, one data-parallel group per worker, batch "
                f"{res.get('batch_per_group')} per group and local iteration. Target: **{res['target_accuracy']:.0%} "
                f"held-out accuracy for {res.get('consecutive_evaluations')} evaluations in a row** (the time is the "
                f"first of them); " + ("every run stops a few evaluations after first reaching it (tail "
                                        f"{res.get('tail_s')}, recorded before the chief stopped by the same rule)"
                                        if res.get("tail_s") in ("auto", None) or "target_evaluations" not in res
                                        else f"the chief stops by the same rule (then {res.get('tail_s')} s more)")
                + f" or at its budget of {res.get('budget_s')} s"
                + (f" (BSP: {res['bsp_budget_s']} s, over twice ASHL's time, so that its unreached runs still tell "
                   "ASHL ≤ 0.5× BSP)" if res.get("bsp_budget_s") not in (None, res.get("budget_s")) else "")
                + (f" ({res['homo_budget_s']} s on the homogeneous cluster, whose devices are each slower than "
                   "edge4's fastest)" if res.get("homogeneous") and res.get("homo_budget_s") not in
                   (None, res.get("budget_s")) else "")
                + f". Seeds: {seeds.get('ashl_adsp')} "
                f"for ASHL and ADSP, {seeds.get('other')} for the other strategies"
                + (f", {seeds.get('variants')} per variant" if res.get("variants") else "")
                + (f", {seeds.get('homogeneous')} on the homogeneous cluster" if res.get("homogeneous") else "")
                + "; runs interleaved by seed"
                + (f", within a {fmt(res.get('max_minutes'), 0)}-minute cap (`--max_minutes`)" if res.get("max_minutes")
                   else "") + ". "
                f"Unreached runs: {res.get('unreached_rule')}. Statistics: {res.get('statistics')}. Times are "
                "training time (after set-up).\n")
    if res.get("interrupted"):
        text.append("**Interrupted** (SIGTERM) before every run had finished: the figures cover the runs shown.\n")
    rows = []
    for key, label, cluster in HEADLINES:
        if key in res and res.get(cluster):
            rows.append([label, _cluster_name(res[cluster]), fmt(res[key], 3), _ci(res.get(key + "_ci95")),
                         fmt(res.get(key + "_p"), 4)])
    if rows:
        text.append(table(["Comparison", "Cluster", "Ratio of median times", "95% CI (bootstrap)",
                           "p (permutation)"], rows) + "\n")
    text.append(_verdict(res))
    text.append("Ratios as printed by `bench/time_to_accuracy.py` in this run: "
                + ", ".join(f"`{k}` = {fmt(res.get(k), 4)}" for k, _, c in HEADLINES if k in res) + ".\n")
    ratios = res.get("ratios", {})
    for key in ("heterogeneous", "homogeneous"):
        c = res.get(key)
        if not c:
            continue
        name = _cluster_name(c)
        png = f"tta_{name}.png"
        plot_tta(c, res["target_accuracy"], os.path.join(out_dir, png), f"{name}: accuracy against training time")
        plots.append(png)
        prefix = "" if key == "heterogeneous" else "homogeneous_"
        rows = []
        for n, s in c["strategies"].items():
            over = {b: (1.0 if n == b else ratios.get(f"{prefix}{n}_over_{b}")) for b in ("bsp", "adsp")}
            rows.append([LABELS.get(n, n), _median_time(s), _ci(s.get("time_to_target_ci95"), 2), s.get("reached", "—"),
                         fmt(s.get("final_accuracy"), 4),
                         fmt(s["bytes_sent"] / 1e6 if s.get("bytes_sent") is not None else None, 1, " MB"),
                         fmt(s.get("wait_s"), 1, " s"), fmt(over["bsp"], 3), fmt(over["adsp"], 3)])
        text.append(f"### {name} (`{c['cluster']}`; network {c.get('network')}, compute {c.get('compute')}; "
                    f"evaluations every {fmt(c.get('eval_spacing_s'), 2, ' s')} (median)"
                    + (f" on {res['eval_examples']:,} test images" if res.get("eval_examples") else "") + ")\n")
        text.append(f"![{name}]({png})\n")
        text.append(table(["Strategy", "Median time to target", "95% CI", "Reached", final_header(res, "Final accuracy, median"),
                           "Sent", "Waiting", "÷ BSP", "÷ ADSP"], rows) + "\n")
        why = "; ".join(f"{LABELS.get(n, n)}: " + ", ".join(f"{k} {w}" for w, k in s["not_reached"].items())
                        for n, s in c["strategies"].items() if s.get("not_reached"))
        if why:
            text.append(f"Runs not reached: {why}.\n")
    if res.get("heterogeneous") or res.get("homogeneous"):
        plot_seeds(res, os.path.join(out_dir, "tta_seeds.png"))
        plots.append("tta_seeds.png")
        text.append("### Per-seed times\n\nOne dot per seed; hollow red dots at the budget did not reach the target "
                    "(counted as the budget); bars are the medians.\n")
        text.append("![tta_seeds](tta_seeds.png)\n")
    text += variants_table(res)
    if res.get("skipped_for_time"):
        text.append(f"Left out by the {fmt(res.get('max_minutes'), 0)}-minute cap (`--max_minutes`): "
                    + ", ".join(res["skipped_for_time"]) + ".\n")
    checks = res.get("checks", {})
    if checks:
        text.append(table(["Check (issue 16)", "Value", "Threshold", "Result"],
                          [[k, ("≥ " if c.get("value_is_lower_bound") else "") + _compact(c.get("value")),
                            c.get("threshold"), "pass" if c.get("pass") else
                            "undecided: " + c["undecided"] + ELSEWHERE.get(k, "") if c.get("undecided") else "**FAIL**"]
                           for k, c in checks.items()]) + "\n")
    est, wall = res.get("estimate_s"), res.get("wall_s")
    text.append(f"Wall time of the benchmark: {fmt(wall, 0)} s (estimated beforehand: {fmt(est, 0)} s).\n")
    return "\n".join(text), plots




def tta_variants_section(rec, out_dir) -> tuple[str, list[str]]:
    """`make bench-variants`: the variant table, with the strategies as published that it is measured
    against (their runs interleaved with the variants')."""
    res = result(rec)
    text = ["## Time to accuracy: the variants\n", _status_line(rec)]
    if not res:
        return "\n".join(text), []
    text.append(f"Run by `make bench-variants` (kept out of `make bench` for its time): `{res.get('model')}` on "
                f"`{res.get('dataset')}` to {res['target_accuracy']:.0%} within {fmt(res.get('budget_s'), 0)} s, the "
                f"stopping rule above, in a run of its own ({res.get('date', 'date unknown')}).\n")
    het = res.get("heterogeneous") or {}
    rows = _strategy_rows(het)
    if rows:
        text.append(table(["As published", "Median time to target", "95% CI", "Reached", final_header(res)], rows)
                    + "\n")
    text += variants_table(res)
    text.append(f"Wall time: {fmt(res.get('wall_s'), 0)} s.\n")
    return "\n".join(text), []


def _strategy_rows(het) -> list[list]:
    """[label, median time, CI, reached, final accuracy] of each strategy of a cluster's record."""
    return [[LABELS.get(n, n), _median_time(s), _ci(s.get("time_to_target_ci95"), 2), s.get("reached", "—"),
             fmt(s.get("final_accuracy"), 4)] for n, s in het.get("strategies", {}).items()]
