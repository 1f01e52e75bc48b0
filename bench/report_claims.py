"""The EdgeMesh claims section of bench/REPORT.md (bench/edgemesh_claims.py): each device alone,
synchronous data parallelism, the planned filter split and hybrid grid, at the same batch per update;
the issue's checks, and the bounds that say why a check is out of reach (bench/claims_figures.py)."""
from bench.claims_figures import (PREDICTED_LAYOUTS, THRESHOLDS, compute_bound, data_parallel_bound, memory_spread,
                                  plan_devices, prediction_ratios)
from bench.report_common import figure, fmt, plt, section, table

PLOTS = (("ms_per_example", "tab:blue", "ms per example", "delay (lower is better)"),
         ("max_peak_mib", "tab:orange", "MiB", "max peak memory per device"))  # (field, colour, y label, title)


def _group_line(g) -> str:
    """One group of a plan: its devices and division, its step predicted against measured."""
    return ("[" + ", ".join(g["devices"]) + "] " + (", ".join(f"{k} {v}" for k, v in g["sizes"].items())
                                                    or "(whole model)")
            + (f" — step predicted {fmt(g['predicted_step_ms'], 0)} ms, measured {fmt(g['measured_step_ms'], 0)} ms "
               f"({fmt(g['predicted_over_measured'], 2)}×); uncalibrated (layer times as measured): "
               f"{fmt(g['uncalibrated_step_ms'], 0)} ms ({fmt(g['uncalibrated_over_measured'], 2)}×)"
               if "measured_step_ms" in g else "")
            + (f"; per device, predicted compute {', '.join(fmt(x, 0) for x in g['predicted_compute_ms'])} ms and "
               f"communication {', '.join(fmt(x, 0) for x in g['predicted_comm_ms'])} ms"
               if len(g.get("predicted_comm_ms", ())) > 1 else ""))


def _modes_and_plans(res) -> list[str]:
    """The modes' table and what each plan divided, with the engine's grid, idle devices and commits."""
    modes, eg, hp = res["modes"], res.get("engine_grid_plan"), res.get("hybrid_plan") or {}
    hd = modes.get("hybrid", {})
    rows = [[f"`{m}`", ", ".join(fmt(x, 1) for x in d.get("median_step_ms", [])) or "—",
             fmt(d.get("ms_per_example"), 2, " ms"),
             ", ".join(f"{n} {v / 2 ** 20:.0f}" for n, v in (d.get("peak_bytes") or {}).items())
             or ("**out of memory**" if d.get("out_of_memory") else "—"), fmt(d.get("max_peak_mib"), 1)]
            for m, d in modes.items()]
    text = [table(["Mode", "Median step per replica (ms)", "Delay per example", "Peak per device (MiB)",
                   "Max peak (MiB)"], rows) + "\n"]
    text += [f"- `{m}` ran out of memory: {d['out_of_memory']}" for m, d in modes.items() if d.get("out_of_memory")]
    if res.get("data_parallel_shares"):
        text.append("- `data_parallel`: examples per device " + ", ".join(
            f"{n} {b}" for n, b in res["data_parallel_shares"].items()) + " (in proportion to their speed alone)")
    if res.get("filter_split_is_the_hybrid_plan"):
        text.append("- The grid chose the one-group plan: `filter_split` and `hybrid` are the same plan, "
                    "measured once.")
    text += [f"- `{m}` plan ({p.get('kind')}): " + "; ".join(_group_line(g) for g in p.get("groups", []))
             for m in PREDICTED_LAYOUTS for p in [res.get(f"{m}_plan")] if p and p.get("groups")]
    if eg and eg.get("groups") != hp.get("groups"):
        text.append("- The engine's grid (what `edgemesh run` would train, its replicas' anchors, residuals and ps "
                    "buffers counted in memory; not timed): " + "; ".join(
                        "[" + ", ".join(g["devices"]) + f"] predicted {fmt(g['predicted_step_ms'], 0)} ms a step"
                        for g in eg.get("groups", [])) + ". A one-group grid commits to no ps here, so `hybrid` "
                    "is the one-group plan planned for the plain layout it runs.")
    if hp.get("idle"):
        text.append(f"- The plan leaves {', '.join(hp['idle'])} idle: by the cost and memory models (with the memory "
                    "model's headroom below each budget) no group is faster with them.")
    if hp.get("commit_interval") and hd.get("effective_ms_per_example"):
        text.append(f"- `hybrid`: {len(hp['groups'])} groups committing asynchronously to the parameter server every "
                    f"{hp['commit_interval']} local iterations (the default strategy's, as `edgemesh run` plans), each "
                    f"timed over {hd.get('rounds')} rounds of the engine's replica (pull, the iterations, a dense "
                    f"push); its delay includes the commits. Charged for staleness as the planner charges it: "
                    f"{fmt(hd['effective_ms_per_example'], 2)} ms per example.")
    text += [f"- `{m}`: step measured {fmt(d['median_step_ms'][0], 0)} ms, predicted {fmt(d['predicted_step_ms'], 0)} "
             f"ms ({fmt(d['predicted_over_measured'], 2)}×), uncalibrated {fmt(d['uncalibrated_step_ms'], 0)} ms "
             f"({fmt(d['uncalibrated_over_measured'], 2)}×)"
             for m, d in modes.items() if "uncalibrated_over_measured" in d]
    if res.get("compute_scale") not in (None, 1.0):
        text.append(f"- Calibration (`planner/calibrate.py`, used by the plan): layer times × "
                    f"{fmt(res['compute_scale'], 3)}, the factor that makes the cost model predict the whole step "
                    "timed on one device while profiling" + _split_overhead(res) + ".")
    return text + [""]


@section("## EdgeMesh's claims: delay and memory, like for like")
def claims_section(res, text, out_dir):
    modes, checks = res["modes"], res.get("checks", {})
    text.append(f"`{res['model']}` on {res['dataset']}-shaped input, **{res['batch']} examples per model update in "
                f"every mode**, on the workers of `{res['cluster']}`, {res['steps']} timed steps per mode (median), "
                "modes interleaved. Memory: each mode on a fresh testbed with every device's memory budget "
                "enforced (cgroup v1), peak resident memory above the idle server of each device it uses.\n")
    text += _modes_and_plans(res)
    if checks:
        text.append(table(["Claim (issue 15; the paper: 3.2× lower delay, 43% less memory)", "Measured", "Threshold",
                           "Result"], [[k, fmt(c["value"], 3), ("≤ " if c["at_most"] else "≥ ") + str(c["threshold"]),
                                        "pass" if c["pass"] else "**not met**"] for k, c in checks.items()]) + "\n")
    alone = [m.split(":", 1)[1] for m, d in modes.items() if m.startswith("alone:") and d.get("ms_per_example")]
    oom = [m.split(":", 1)[1] for m, d in modes.items() if m.startswith("alone:") and d.get("out_of_memory")]
    if checks and oom:
        text.append(f"The mean, the fastest and the sum of the devices alone are over those that hold the model "
                    f"alone ({', '.join(alone)}); {', '.join(oom)} ran out of memory alone and count in no "
                    "denominator, though the plan may use them.\n")
    why = (_why_bound(res), _why_data_parallel(res), _why_memory(res), _why_prediction(res), _memory_capped(res))
    text += [p + "\n" for p in why if p] + [f"**Error**: {e}\n" for e in res.get("errors", [])]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, (key, color, ylabel, title) in zip(axes, PLOTS):
        shown = [m for m in modes if modes[m].get(key)]
        ax.bar(shown, [modes[m][key] for m in shown], color=color)
        ax.set(ylabel=ylabel, title=title)
        ax.tick_params(axis="x", labelrotation=30)
    return figure(fig, out_dir, text, "claims")


def _split_overhead(res) -> str:
    """The calibration's split overhead per split layer and peer, and the split step it was fitted to."""
    per_peer, prof = res.get("split_overhead_ms_per_peer"), res.get("profile") or {}
    on, sizes = prof.get("split_step_devices") or [], prof.get("split_step_sizes") or {}
    return "" if not per_peer else (
        ", and per split layer and peer " + ", ".join(f"{n} {fmt(v, 1)} ms" for n, v in per_peer.items())
        + " (in proportion to each device's compute time), fitted to "
        + ("an uneven" if any(len(set(v)) > 1 for v in sizes.values()) else "an even") + " split step timed"
        + (" over " + ", ".join(on) if on else " on two devices"))


def _why_bound(res) -> str:
    """What no division can beat: every worker's compute used in full and no communication."""
    b, asked = compute_bound(res), THRESHOLDS["delay_mean_alone_over_hybrid"]
    return "" if not res.get("checks") or not b else (
        f"Why the delay claims are hard here: the workers' profiled speeds sum to {fmt(b['speed_sum'], 2)}× the "
        f"fastest's ({', '.join(f'{n} {fmt(v, 2)}' for n, v in res['profiled_speed'].items())}): with every worker's "
        f"compute used in full and no communication, a division is at most {fmt(b['fastest_over_bound'], 2)}× faster "
        f"than the fastest device alone and {fmt(b['mean_over_bound'], 2)}× than the mean of those alone"
        + (f"; the hybrid reaches {fmt(100 * b['hybrid_share_of_bound'], 0)}% of that bound"
           if "hybrid_share_of_bound" in b else "") + " (the gathers and reductions of activations take the rest)."
        + (f" The paper's {fmt(asked, 1)}× over the mean is out of reach on this cluster whatever the division."
           if b["mean_over_bound"] < asked else ""))


def _why_data_parallel(res) -> str:
    """The hybrid against synchronous data parallelism, each against its compute bound."""
    d, check = data_parallel_bound(res), res.get("checks", {}).get("delay_data_parallel_over_hybrid")
    return "" if not d or not check else (
        f"Against synchronous data parallelism: at their compute bounds, data parallelism over "
        f"{', '.join(res['modes']['data_parallel']['devices'])} (speeds summing to "
        f"{fmt(d['data_parallel_speed_sum'], 2)}) would take {fmt(d['ratio_at_bounds'], 2)}× the hybrid's delay over "
        f"{', '.join(plan_devices(res))} ({fmt(d['hybrid_speed_sum'], 2)}). Data parallelism reached "
        f"{fmt(100 * d['data_parallel_share_of_bound'], 0)}% of its bound (one allreduce a step), the hybrid "
        f"{fmt(100 * d['hybrid_share_of_bound'], 0)}% (every split layer's gathers and reductions), so the measured "
        f"ratio is {fmt(check['value'], 2)}×; {fmt(check['threshold'], 1)}× would take the hybrid at "
        f"{fmt(100 * d['hybrid_share_needed'], 0)}% of its bound."
        + "".join(f" The plan itself ran {fmt(1 / g['predicted_over_measured'], 2)}× the step it was planned for "
                  f"([{', '.join(g['devices'])}])." for g in res["hybrid_plan"]["groups"]
                  if abs(g.get("predicted_over_measured", 1.0) - 1.0) > 0.05))


def _why_memory(res) -> str:
    """Where the hybrid's largest peak is, and why."""
    m, check = memory_spread(res), res.get("checks", {}).get("hybrid_max_peak_over_alone_peak")
    return "" if not m or not check else (
        f"Memory: the default plan divides each layer to minimise time, so the fastest device holds the largest "
        f"part: the max peak is {m['max_device']}'s"
        + (f" ({fmt(100 * m['max_device_speed_share'], 0)}% of the plan's profiled speed, so about that share of "
           "each split layer's filters)" if "max_device_speed_share" in m else "")
        + f", {fmt(m['max_peak_over_alone_peak'], 3)} of the largest alone; the mean over the plan's devices is "
        f"{fmt(m['mean_peak_over_alone_peak'], 3)}. Each device also holds what a split does not divide (gathered "
        "activations, the input batch, unsplit layers, TF's runtime). A division by memory rather than time is the "
        "named option below.")


def _why_prediction(res) -> str:
    """The largest prediction error, and which devices' layer times were calibrated by a step of their own."""
    check, prof, ratios = res.get("checks", {}).get("prediction_max_error"), res.get("profile"), prediction_ratios(res)
    if not check or not prof or not ratios:
        return ""
    worst = max(ratios, key=lambda k: abs(ratios[k] - 1.0))
    timed = [d["name"] for d in prof["devices"] if d.get("whole_step_ms")]
    others = [d["name"] for d in prof["devices"] if not d.get("whole_step_ms")]
    alone = [f"{n} alone was predicted at {fmt(ratios[f'alone:{n}'], 2)}×" for n in others if f"alone:{n}" in ratios]
    return (f"Prediction: the largest error is `{worst}`, predicted at {fmt(ratios[worst], 2)}× its measured step."
            + (f" Only {', '.join(timed)} timed a whole step while profiling (the others do not hold the model "
               f"within their budgets), so the layer times of {', '.join(others)} are scaled by "
               + ("its factor" if len(timed) == 1 else "the factor of the timed device nearest in speed")
               + (f"; with it, {', '.join(alone)}" if alone else "") + "." if timed and others else ""))


def _memory_capped(res) -> str:
    """The planner's named option `memory_fraction` beside the planned hybrid."""
    p, o = res.get("memory_capped_plan") or {}, res.get("memory_capped_option") or {}
    figures = "; ".join(f"{label} {fmt(o[k], 3)}" for k, label in (
        ("max_peak_over_alone_peak", "max peak over the largest alone"),
        ("mean_peak_over_alone_peak", "mean peak over the largest alone"),
        ("delay_fastest_alone_over_it", "fastest alone's delay over its"),
        ("delay_over_hybrid", "its delay over the planned hybrid's")) if k in o) + "."
    return "" if not p else (
        f"The named option `memory_fraction={p['memory_fraction']}` (no device predicted above that fraction of the "
        "whole model's step on one device; not the default, which minimises time): "
        + (f"no plan: {p['error']}" if p.get("error") else
           f"ran out of memory: {o['out_of_memory']}" if o.get("out_of_memory") else figures))
