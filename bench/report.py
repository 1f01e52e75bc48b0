"""Renders bench/REPORT.md and its PNG plots from the JSON that bench/suite.py recorded.

    python bench/report.py [--results bench/results] [--out bench]

Reads only <results>/machine.json and <results>/<benchmark>.json (each: status, command, seconds,
error, result = the benchmark's own JSON), so a report can be regenerated, or tested, from recorded
input. Every figure in the report is taken from those files; nothing is measured here.
"""
import argparse
import json
import os

import matplotlib
import matplotlib.ticker

from edgemesh_tf.engine.config import STRATEGIES as MAIN_SIX  # the six strategies, in the report's order

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ORDER = ("uneven_split", "emulation", "planner", "edgemesh_claims", "time_to_accuracy", "faults")
LABELS = {"bsp": "BSP", "asp": "ASP", "ssp": "SSP", "local_sgd": "Local SGD", "adsp": "ADSP", "ashl": "ASHL",
          "ashl_topk1_ef": "ASHL, top-k 1% + error feedback", "ashl_topk1_no_ef": "ASHL, top-k 1%, no error feedback"}
MIB = 2 ** 20


def load(results_dir: str) -> tuple[dict, dict]:
    """(machine info, {benchmark name: record}); a benchmark without a record is recorded as not run."""
    def read(name):
        path = os.path.join(results_dir, name + ".json")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            try:
                return json.load(f)
            except ValueError as e:
                raise ValueError(f"{path}: not valid JSON ({e})") from None

    machine = read("machine") or {}
    records = {}
    for name in ORDER:
        rec = read(name)
        records[name] = rec if rec is not None else {
            "name": name, "status": "failed", "error": f"not run: {name}.json is not in {results_dir}"}
    return machine, records


def fmt(x, digits=3, unit=""):
    if x is None:
        return "—"
    if isinstance(x, float):
        x = round(x, digits) if digits else int(round(x))
    return f"{x}{unit}"


def table(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def result(rec):
    return rec.get("result") if rec.get("status") == "ok" or rec.get("result") else None


def _status_line(rec) -> str:
    if rec.get("status") == "ok":
        return ""
    return f"**FAILED**: {rec.get('error')}.\n"


# --- time to accuracy ------------------------------------------------------------------------

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


VARIANT_LABELS = {"ashl": "ASHL as published (baseline)", "ashl_project": "the project's ASHL (all its rules)",
                  "ashl+error_feedback": "+ error feedback", "ashl+replan": "+ re-planning (drift, interval)",
                  "ashl+compress_in_ahl": "+ top-k in AHL too", "ashl+phase_shares": "+ per-phase data shares",
                  "ashl+budget_compression": "+ the project's per-link top-k rule (budget)",
                  "ashl+project_staleness": "+ the project's staleness gate", "ashl+constant_lr": "+ constant learning rate"}
HEADLINES = (("ashl_over_adsp", "ASHL ÷ ADSP", "heterogeneous"), ("ashl_over_bsp", "ASHL ÷ BSP", "heterogeneous"),
             ("homogeneous_ashl_over_adsp", "ASHL ÷ ADSP", "homogeneous"),
             ("homogeneous_ashl_over_bsp", "ASHL ÷ BSP", "homogeneous"))


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
            entries += [(v, s) for v, s in res.get("variants", {}).get("variants", {}).items() if v != "ashl"]
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
            ax.scatter([x for x, t in zip(xs, times) if t is None], [budget for t in times if t is None],
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
                f"first of them); every run stops a few evaluations after first reaching it (tail "
                f"{res.get('tail_s')}) or at its budget of {res.get('budget_s')} s. Seeds: {seeds.get('ashl_adsp')} "
                f"for ASHL and ADSP, {seeds.get('other')} for the other strategies, {seeds.get('variants')} per ASHL "
                f"variant" + (f", {seeds.get('homogeneous')} on the homogeneous cluster" if res.get("homogeneous") else "")
                + f"; runs interleaved by seed, variant runs only while the {fmt(res.get('max_minutes'), 0)}-minute cap "
                "(`--max_minutes`, 0: none) allows. "
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
                    f"evaluations every {fmt(c.get('eval_spacing_s'), 2, ' s')} (median))\n")
        text.append(f"![{name}]({png})\n")
        text.append(table(["Strategy", "Median time to target", "95% CI", "Reached", "Final accuracy (median)",
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
    var = res.get("variants", {}).get("variants", {})
    if var:
        text.append(f"### ASHL variants: what each of the project's rules buys (`{res['variants'].get('cluster')}`)\n")
        text.append("Each improvement alone on top of the published ASHL, and all of them together (the project's "
                    "ASHL). Ratio < 1: faster than the published ASHL; its CI and p as above.\n")
        vrows = []
        for v, s in var.items():
            opts = {k: x for k, x in (s.get("sync") or {}).items() if k != "strategy"}
            vrows.append([VARIANT_LABELS.get(v, v), "`" + v + "`" + (" " + ", ".join(f"{k}={x}" for k, x in opts.items())
                                                                     if opts else ""),
                          _median_time(s), s.get("reached", "—"), fmt(s.get("ratio_to_ashl"), 3),
                          _ci(s.get("ratio_to_ashl_ci95")), fmt(s.get("p"), 4), fmt(s.get("final_accuracy"), 4)])
        text.append(table(["Variant", "Options", "Median time to target", "Reached", "÷ published ASHL", "95% CI",
                           "p", "Final accuracy"], vrows) + "\n")
    if res.get("skipped_for_time"):
        text.append(f"Left out by the {fmt(res.get('max_minutes'), 0)}-minute cap (`--max_minutes`): "
                    + ", ".join(res["skipped_for_time"]) + ".\n")
    checks = res.get("checks", {})
    if checks:
        text.append(table(["Check (issue 16)", "Value", "Threshold", "Result"],
                          [[k, ("≥ " if c.get("value_is_lower_bound") else "") + _compact(c.get("value")),
                            c.get("threshold"), "pass" if c.get("pass") else "**FAIL**"]
                           for k, c in checks.items()]) + "\n")
    est, wall = res.get("estimate_s"), res.get("wall_s")
    text.append(f"Wall time of the benchmark: {fmt(wall, 0)} s (estimated beforehand: {fmt(est, 0)} s).\n")
    return "\n".join(text), plots


# --- EdgeMesh's claims -----------------------------------------------------------------------

def _division(group) -> str:
    if group["sizes"]:
        return ", ".join(f"{k} {v}" for k, v in group["sizes"].items())
    if len(group["devices"]) > 1:
        return "(no layer split: the planner found no division that pays on these links)"
    return "(whole model)"


def claims_section(rec, out_dir) -> tuple[str, list[str]]:
    res = result(rec)
    text = ["## EdgeMesh's claims: delay and memory against single-device and data-parallel training\n",
            _status_line(rec)]
    if not res:
        return "\n".join(text), []
    modes = res["modes"]
    text.append(f"`{res['model']}` on {res['dataset']}-shaped input, batch {res['batch']} per replica, on the "
                f"workers of `{res['cluster']}`, {res['steps']} timed steps per mode (median), modes interleaved. "
                "Memory: mean over the workers a mode uses of each one's peak RSS above its idle server.\n")
    rows = []
    for m, d in modes.items():
        mem = d.get("mean_peak_bytes")
        steps = ", ".join(fmt(x, 1) for x in d["median_step_ms"]) if isinstance(d["median_step_ms"], list) \
            else fmt(d["median_step_ms"], 1)
        peaks = ", ".join(f"{n} {v / MIB:.0f}" for n, v in (d.get("peak_bytes") or {}).items()) or "—"
        rows.append([m, steps, fmt(d["ms_per_example"], 3, " ms"), peaks,
                     fmt(mem / MIB if mem is not None else None, 1, " MiB")])
    text.append(table(["Mode", "Median step per replica (ms)", "Delay per example", "Peak per device (MiB)",
                       "Mean peak per device"], rows) + "\n")
    text.append("Delay reduction = the baseline's delay per example ÷ the mode's; memory change = the mode's mean "
                "peak per device ÷ the baseline's − 1 (negative: less memory).\n")
    r = res["ratios"]
    paper = res.get("paper", {})
    crow = []
    for m in ("filter_split", "hybrid"):
        for base in ("single", "data_parallel"):
            crow.append([f"{m} against {base}", fmt(r.get(f"delay_{base}_over_{m}"), 2, "×"),
                         fmt(paper.get("delay_reduction_x"), 1, "×"),
                         fmt(None if r.get(f"memory_{m}_vs_{base}") is None else 100 * r[f"memory_{m}_vs_{base}"], 1, "%"),
                         fmt(None if paper.get("memory_change") is None else 100 * paper["memory_change"], 0, "%")])
    text.append(table(["Comparison", "Delay reduction (measured)", "Paper", "Memory change (measured)", "Paper"], crow)
                + "\n")
    for m in ("filter_split", "hybrid"):
        groups = res.get(f"{m}_plan", [])
        text.append(f"- `{m}` plan: " + "; ".join("[" + ", ".join(g["devices"]) + "] " + _division(g) for g in groups))
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    names = list(modes)
    axes[0].bar(names, [modes[m]["ms_per_example"] for m in names], color="tab:blue")
    axes[0].set(ylabel="ms per example", title="delay (lower is better)")
    axes[0].set_yscale("log")
    mems = [(modes[m].get("mean_peak_bytes") or 0) / MIB for m in names]
    axes[1].bar(names, mems, color="tab:orange")
    axes[1].set(ylabel="MiB", title="mean peak memory per device")
    for ax in axes:
        ax.tick_params(axis="x", labelrotation=20)
    text.append("")
    return _figure(fig, out_dir, text, "claims")


# --- planner, emulation, uneven split, faults ------------------------------------------------

def _identity_scatter(ax, points, xlabel, ylabel, title) -> None:
    """(x, y, label) points against the y = x line, both axes from 0."""
    top = max(max(x, y) for x, y, _ in points) * 1.15
    ax.plot([0, top], [0, top], color="grey", lw=0.8, label="y = x")
    ax.scatter([x for x, _, _ in points], [y for _, y, _ in points], color="tab:red", zorder=3)
    for x, y, label in points:
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(5, -10), fontsize=8)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title, xlim=(0, top), ylim=(0, top))


def _figure(fig, out_dir, text, name) -> tuple[str, list[str]]:
    """Saves `fig` as <name>.png, links it at the end of the section `text`; the section's return."""
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, name + ".png"), dpi=110)
    plt.close(fig)
    text.append(f"![{name}]({name}.png)\n")
    return "\n".join(text), [name + ".png"]

def planner_section(rec, out_dir) -> tuple[str, list[str]]:
    res = result(rec)
    text = ["## Planner: predicted against measured step time\n", _status_line(rec)]
    if not res:
        return "\n".join(text), []
    pts = {k: res[k] for k in ("planned", "even") if k in res}
    rows = [[k, fmt(v["predicted_step_ms"], 1, " ms"), fmt(v["measured_median_step_ms"], 1, " ms"),
             fmt(v["predicted_over_measured"], 3), v.get("steps")] for k, v in pts.items()]
    text.append(f"`{res['model']}` on {res['dataset']}, batch {res['batch']}, one group over the workers of "
                f"`{res['cluster']}`; measured steps are medians over the number of steps shown.\n")
    text.append(table(["Layout", "Predicted", "Measured", "Predicted ÷ measured", "Steps"], rows) + "\n")
    text.append(f"Planned over even throughput: {fmt(res.get('planned_over_even_throughput'), 3)}×.\n")
    mem = res.get("memory", {})
    if mem:
        text.append(table(["Model (memory)", "One device peak", "Filter split, max peak per device", "Ratio"],
                          [[m, fmt(max(d["one_device_peak_bytes"].values()) / MIB, 1, " MiB"),
                            fmt(max(d["filter_split_peak_bytes"].values()) / MIB, 1, " MiB"),
                            fmt(d["split_over_one_device_max"], 3)] for m, d in mem.items()]) + "\n")
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    _identity_scatter(ax, [(v["measured_median_step_ms"], v["predicted_step_ms"], k) for k, v in pts.items()],
                      "measured step (ms)", "predicted step (ms)", "planner's cost model")
    ax.legend()
    return _figure(fig, out_dir, text, "planner")


def emulation_section(rec, out_dir) -> tuple[str, list[str]]:
    res = result(rec)
    text = ["## Emulation fidelity: configured against measured\n", _status_line(rec)]
    if not res:
        return "\n".join(text), []
    devs, links = res.get("devices", {}), res.get("links", {})
    rows = []
    for n, d in devs.items():
        ln = links.get(n, {})
        rows.append([n, fmt(d.get("speed_file")), fmt(d.get("speed_measured")), fmt(ln.get("latency_ms_file"), 1),
                     fmt(ln.get("latency_ms"), 2), fmt(ln.get("bandwidth_mbit_file")), fmt(ln.get("download_mbit"), 1),
                     fmt(ln.get("upload_mbit"), 1), "yes" if d.get("ok") and ln.get("ok", True) else "**no**"])
    text.append(f"`{res['cluster']}`, network {res.get('network')}, compute {res.get('compute')}, tolerance "
                f"±{res.get('tolerance', 0):.0%}, load average during the run {res.get('load_average')}.\n")
    text.append(table(["Device", "Speed (file)", "Speed (measured)", "Latency ms (file)", "Latency ms (measured)",
                       "Mbit/s (file)", "Down Mbit/s", "Up Mbit/s", "Within tolerance"], rows) + "\n")
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.6))
    names = list(devs)
    for ax, (conf, meas, title) in zip(axes, ((lambda n: devs[n].get("speed_file"), lambda n: devs[n].get("speed_measured"),
                                               "relative speed"),
                                              (lambda n: links.get(n, {}).get("bandwidth_mbit_file"),
                                               lambda n: links.get(n, {}).get("download_mbit"), "bandwidth (Mbit/s)"))):
        pairs = [(conf(n), meas(n), n) for n in names if conf(n) is not None and meas(n) is not None]
        if pairs:
            _identity_scatter(ax, pairs, "configured", "measured", title)
    return _figure(fig, out_dir, text, "emulation")


def uneven_section(rec, out_dir) -> tuple[str, list[str]]:
    res = result(rec)
    text = ["## Uneven lowering against plain TensorFlow\n", _status_line(rec)]
    if not res:
        return "\n".join(text), []
    text.append(f"`{res['model']}`, batch {res['batch']}, input {res.get('image_shape')}, {res.get('devices')} "
                f"in-process CPU devices, medians over {res.get('steps_per_config')} steps per configuration.\n")
    text.append(table(["Configuration", "Median step"], [[k, fmt(v, 1, " ms")] for k, v in res["median_step_ms"].items()])
                + "\n")
    text.append(table(["Ratio", "Value"], [[k, fmt(res[k])] for k in
                                           ("uneven_over_plain_tf", "unsplit_over_plain_tf",
                                            "virtual_processors_over_edgemesh") if k in res]) + "\n")
    return "\n".join(text), []


def faults_section(rec, out_dir) -> tuple[str, list[str]]:
    res = result(rec)
    text = ["## Faults\n", _status_line(rec)]
    if not res:
        return "\n".join(text), []
    rows = res.get("scenarios", [])
    text.append(table(["Scenario", "What", "OK", "Measured"],
                      [[r.get("scenario"), r.get("what", "—"), "yes" if r.get("ok") else "**no**",
                        "; ".join(f"{k}: {_compact(v)}" for k, v in r.items() if k not in ("scenario", "what", "ok")
                                  and v is not None)] for r in rows]) + "\n")
    return "\n".join(text), []


def _compact(v, limit=300) -> str:
    """A value in one table cell: numbers rounded, nested data as short JSON, pipes escaped."""
    if isinstance(v, (dict, list)):
        text = json.dumps(v, separators=(", ", ": "))
    else:
        text = str(fmt(v))
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[:limit - 1] + "…"


SECTIONS = {"time_to_accuracy": tta_section, "edgemesh_claims": claims_section, "planner": planner_section,
            "emulation": emulation_section, "uneven_split": uneven_section, "faults": faults_section}


def render(results_dir: str, out_dir: str) -> str:
    """Writes <out_dir>/REPORT.md and its PNGs from the records in ``results_dir``; returns the path."""
    machine, records = load(results_dir)
    os.makedirs(out_dir, exist_ok=True)
    head = ["# edgemesh_tf benchmark report\n"]
    if machine.get("quick"):
        head.append("> **Quick smoke run** (`make bench QUICK=1`): every benchmark ran small; "
                    "these figures are not evidence.\n")
    head.append(f"Generated by `{machine.get('command', 'make bench')}` on {machine.get('date')} "
                f"(git {str(machine.get('git_commit'))[:10]}), {fmt(machine.get('seconds'), 0)} s in all.\n")
    for run in machine.get("partial_runs", []):
        head.append(f"Re-run since: {', '.join(run['only'])} by `{run['command']}` on {run['date']} "
                    f"(git {str(run.get('git_commit'))[:10]}), {fmt(run.get('seconds'), 0)} s.\n")
    head.append(table(["Machine", ""], [["CPU", machine.get("cpu_model")], ["Cores", machine.get("cores")],
                                       ["Memory", fmt(machine.get("memory_gib"), 1, " GiB")],
                                       ["Platform", machine.get("platform")], ["Python", machine.get("python")],
                                       ["TensorFlow", machine.get("tensorflow")],
                                       ["mesh-tensorflow", machine.get("mesh-tensorflow")]]) + "\n")
    head.append(table(["Benchmark", "Status", "Seconds", "Command"],
                      [[n, "ok" if r.get("status") == "ok" else f"**failed** ({r.get('error')})",
                        fmt(r.get("seconds"), 0), f"`{r.get('command', '—')}`"] for n, r in records.items()]) + "\n")
    body = []
    for name in ("time_to_accuracy", "edgemesh_claims", "planner", "emulation", "uneven_split", "faults"):
        text, _ = SECTIONS[name](records[name], out_dir)
        body.append(text)
    failed = [r for r in records.values() if r.get("status") != "ok" and r.get("stderr_tail")]
    if failed:
        body.append("## Failures\n")
        for r in failed:
            body.append(f"### {r['name']}: {r.get('error')}\n```\n" + "\n".join(r["stderr_tail"]) + "\n```\n")
    path = os.path.join(out_dir, "REPORT.md")
    with open(path, "w") as f:
        f.write("\n".join(head + body).replace("\n\n\n", "\n\n"))
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--results", default=os.path.join(here, "results"))
    ap.add_argument("--out", default=here)
    args = ap.parse_args()
    print(render(args.results, args.out))


if __name__ == "__main__":
    main()
