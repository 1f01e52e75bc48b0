"""The EdgeMesh claims section of bench/REPORT.md (bench/edgemesh_claims.py): each device alone,
synchronous data parallelism, the planned filter split and hybrid grid, at the same batch per update;
records of the first format (single / data_parallel / filter_split / hybrid) are still rendered."""
from claims_figures import (THRESHOLDS, compute_bound, data_parallel_bound, memory_spread, plan_devices,
                            prediction_ratios)
from report_common import MIB, _figure, _status_line, fmt, plt, result, table


def claims_section(rec, out_dir) -> tuple[str, list[str]]:
    res = result(rec)
    if res and "checks" not in res:
        return _claims_section_v1(rec, res, out_dir)
    text = ["## EdgeMesh's claims: delay and memory, like for like\n", _status_line(rec)]
    if not res:
        return "\n".join(text), []
    modes = res["modes"]
    text.append(f"`{res['model']}` on {res['dataset']}-shaped input, **{res['batch']} examples per model update in "
                f"every mode**, on the workers of `{res['cluster']}`, {res['steps']} timed steps per mode (median), "
                "modes interleaved. Memory: each mode on a fresh testbed with every device's memory budget "
                "enforced (cgroup v1), peak resident memory above the idle server of each device it uses.\n")
    rows = []
    for m, d in modes.items():
        steps = ", ".join(fmt(x, 1) for x in d.get("median_step_ms", [])) or "—"
        peaks = ", ".join(f"{n} {v / MIB:.0f}" for n, v in (d.get("peak_bytes") or {}).items())
        rows.append([f"`{m}`", steps, fmt(d.get("ms_per_example"), 2, " ms"),
                     peaks or ("**out of memory**" if d.get("out_of_memory") else "—"), fmt(d.get("max_peak_mib"), 1)])
    text.append(table(["Mode", "Median step per replica (ms)", "Delay per example", "Peak per device (MiB)",
                       "Max peak (MiB)"], rows) + "\n")
    for m, d in modes.items():
        if d.get("out_of_memory"):
            text.append(f"- `{m}` ran out of memory: {d['out_of_memory']}")
    if res.get("data_parallel_shares"):
        text.append("- `data_parallel`: examples per device " + ", ".join(
            f"{n} {b}" for n, b in res["data_parallel_shares"].items()) + " (in proportion to their speed alone)")
    if res.get("filter_split_is_the_hybrid_plan"):
        text.append("- The grid chose the one-group plan: `filter_split` and `hybrid` are the same plan, measured once.")
    for m in ("filter_split", "hybrid", "even", "memory_capped"):
        p = res.get(f"{m}_plan")
        if not p:
            continue
        text.append(f"- `{m}` plan ({p.get('kind')}): " + "; ".join(
            "[" + ", ".join(g["devices"]) + "] " + (", ".join(f"{k} {v}" for k, v in g["sizes"].items())
                                                    or "(whole model)")
            + (f" — step predicted {fmt(g['predicted_step_ms'], 0)} ms, measured {fmt(g['measured_step_ms'], 0)} ms "
               f"({fmt(g['predicted_over_measured'], 2)}×)" if "measured_step_ms" in g else "")
            + (f"; calibrated to the whole step timed while profiling: {fmt(g['calibrated_predicted_step_ms'], 0)} ms "
               f"({fmt(g['calibrated_over_measured'], 2)}×)" if "calibrated_over_measured" in g else "")
            + (f"; uncalibrated (layer times as measured): {fmt(g['uncalibrated_step_ms'], 0)} ms "
               f"({fmt(g['uncalibrated_over_measured'], 2)}×)" if "uncalibrated_over_measured" in g else "")
            + (f"; per device, predicted compute {', '.join(fmt(x, 0) for x in g['predicted_compute_ms'])} ms and "
               f"communication {', '.join(fmt(x, 0) for x in g['predicted_comm_ms'])} ms"
               if len(g.get("predicted_comm_ms", ())) > 1 else "")
            for g in p.get("groups", [])))
    eg = res.get("engine_grid_plan")
    if eg and eg.get("groups") != (res.get("hybrid_plan") or {}).get("groups"):
        text.append("- The engine's grid (what `edgemesh run` would train, its replicas' anchors, residuals and ps "
                    "buffers counted in memory; not timed): " + "; ".join(
                        "[" + ", ".join(g["devices"]) + f"] predicted {fmt(g['predicted_step_ms'], 0)} ms a step"
                        for g in eg.get("groups", [])) + ". A one-group grid commits to no ps here, so `hybrid` "
                    "is the one-group plan planned for the plain layout it runs.")
    hp, hd = res.get("hybrid_plan") or {}, modes.get("hybrid", {})
    if hp.get("idle"):
        text.append(f"- The plan leaves {', '.join(hp['idle'])} idle: by the cost and memory models (with the memory "
                    "model's headroom below each budget) no group is faster with them.")
    if hp.get("commit_interval") and hd.get("effective_ms_per_example"):
        text.append(f"- `hybrid`: {len(hp['groups'])} groups committing asynchronously to the parameter server every "
                    f"{hp['commit_interval']} local iterations (the default strategy's, as `edgemesh run` plans), each "
                    f"timed over {hd.get('rounds')} rounds of the engine's replica (pull, the iterations, a dense push); "
                    f"its delay includes the commits. Charged for staleness as the planner charges it: "
                    f"{fmt(hd['effective_ms_per_example'], 2)} ms per example.")
    for m, d in modes.items():  # (records before the plan calibrated show the calibrated figure beside it)
        other, key = (("uncalibrated", "uncalibrated_step_ms") if "uncalibrated_over_measured" in d
                      else ("calibrated", "calibrated_predicted_step_ms"))
        if f"{other}_over_measured" in d and m not in ("filter_split", "hybrid"):
            text.append(f"- `{m}`: step measured {fmt(d['median_step_ms'][0], 0)} ms, predicted "
                        f"{fmt(d['predicted_step_ms'], 0)} ms ({fmt(d['predicted_over_measured'], 2)}×), {other} "
                        f"{fmt(d[key], 0)} ms ({fmt(d[f'{other}_over_measured'], 2)}×)")
    if res.get("compute_scale") not in (None, 1.0):
        used = "used by the plan" if "uncalibrated_max_error" in res else "not used by the plan"
        text.append(f"- Calibration (`planner/calibrate.py`, {used}): layer times × "
                    f"{fmt(res['compute_scale'], 3)}, the factor that makes the cost model predict the whole step "
                    "timed on one device while profiling"
                    + _split_overhead(res) + ".")
    text.append("")
    checks = res.get("checks", {})
    if checks:
        text.append(table(["Claim (issue 15; the paper: 3.2× lower delay, 43% less memory)", "Measured", "Threshold",
                           "Result"],
                          [[k, fmt(c["value"], 3), ("≤ " if c.get("at_most", k.startswith("hybrid_max_peak")) else "≥ ")
                            + str(c["threshold"]), "pass" if c["pass"] else "**not met**"]
                           for k, c in checks.items()]) + "\n")
    alone = [m.split(":", 1)[1] for m, d in modes.items() if m.startswith("alone:") and d.get("ms_per_example")]
    oom = [m.split(":", 1)[1] for m, d in modes.items() if m.startswith("alone:") and d.get("out_of_memory")]
    if checks and oom:
        text.append(f"The mean, the fastest and the sum of the devices alone are over those that hold the model "
                    f"alone ({', '.join(alone)}); {', '.join(oom)} ran out of memory alone and count in no "
                    "denominator, though the plan may use them.\n")
    b, mean_asked = compute_bound(res), THRESHOLDS["delay_mean_alone_over_hybrid"]
    if checks and b:
        text.append(f"Why the delay claims are hard here: the workers' profiled speeds sum to {fmt(b['speed_sum'], 2)}× "
                    f"the fastest's ({', '.join(f'{n} {fmt(v, 2)}' for n, v in res['profiled_speed'].items())}). "
                    f"Even with every worker's compute used in full and no communication at all, a division could "
                    f"be at most {fmt(b['fastest_over_bound'], 2)}× faster than the fastest device alone and "
                    f"{fmt(b['mean_over_bound'], 2)}× faster than the mean of those alone"
                    + (f"; the hybrid reaches {fmt(100 * b['hybrid_share_of_bound'], 0)}% of that bound"
                       if "hybrid_share_of_bound" in b else "") + ". The gathers and reductions of activations "
                    "over the links take the rest (the plan's predicted communication above)."
                    + (f" The paper's {fmt(mean_asked, 1)}× over the mean is beyond that bound: out of reach "
                       "on this cluster whatever the division." if b["mean_over_bound"] < mean_asked else "")
                    + "\n")
    text += _why_data_parallel(res) + _why_memory(res) + _why_prediction(res)
    text += _memory_capped(res)
    for e in res.get("errors", []):
        text.append(f"**Error**: {e}\n")
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    timed = [m for m in modes if modes[m].get("ms_per_example")]
    axes[0].bar(timed, [modes[m]["ms_per_example"] for m in timed], color="tab:blue")
    axes[0].set(ylabel="ms per example", title="delay (lower is better)")
    held = [m for m in modes if modes[m].get("max_peak_mib")]
    axes[1].bar(held, [modes[m]["max_peak_mib"] for m in held], color="tab:orange")
    axes[1].set(ylabel="MiB", title="max peak memory per device")
    for ax in axes:
        ax.tick_params(axis="x", labelrotation=30)
    return _figure(fig, out_dir, text, "claims")


def _split_overhead(res) -> str:
    """The calibration's split overhead as the report says it (records before the per-peer
    overhead: one figure per split layer)."""
    per_peer = res.get("split_overhead_ms_per_peer")
    if per_peer:
        prof = res.get("profile") or {}
        on = prof.get("split_step_devices") or []
        sizes = prof.get("split_step_sizes") or {}
        how = "an uneven" if any(len(set(v)) > 1 for v in sizes.values()) else "an even"
        where = " over " + ", ".join(on) if on else " on two devices"
        return (", and per split layer and peer " + ", ".join(f"{n} {fmt(v, 1)} ms" for n, v in per_peer.items())
                + f" (in proportion to each device's compute time), fitted to {how} split step timed{where}")
    if res.get("split_overhead_ms") is not None:
        return (f", and {fmt(res['split_overhead_ms'], 1)} ms per split layer, fitted to an even split step timed "
                "on two devices")
    return ""


def _division(group) -> str:
    if group["sizes"]:
        return ", ".join(f"{k} {v}" for k, v in group["sizes"].items())
    if len(group["devices"]) > 1:
        return "(no layer split: the planner found no division that pays on these links)"
    return "(whole model)"


def _claims_section_v1(rec, res, out_dir) -> tuple[str, list[str]]:
    text = ["## EdgeMesh's claims: delay and memory against single-device and data-parallel training\n",
            _status_line(rec)]
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


def _why_data_parallel(res) -> list[str]:
    """The hybrid against synchronous data parallelism, each against its compute bound."""
    d, check = data_parallel_bound(res), res.get("checks", {}).get("delay_data_parallel_over_hybrid")
    if not d or not check:
        return []
    dp, on = res["modes"]["data_parallel"]["devices"], plan_devices(res)
    return [f"Against synchronous data parallelism: with their devices' compute used in full and no communication, "
            f"data parallelism over {', '.join(dp)} (profiled speeds summing to {fmt(d['data_parallel_speed_sum'], 2)}) "
            f"would take {fmt(d['ratio_at_bounds'], 2)}× the hybrid's delay over {', '.join(on)} "
            f"({fmt(d['hybrid_speed_sum'], 2)}). Data parallelism reached "
            f"{fmt(100 * d['data_parallel_share_of_bound'], 0)}% of its bound (its one transfer a step is the "
            f"gradients' allreduce), the hybrid {fmt(100 * d['hybrid_share_of_bound'], 0)}% of its (every split "
            f"layer's gathers and reductions of activations), so the measured ratio is {fmt(check['value'], 2)}×; "
            f"{fmt(check['threshold'], 1)}× would take the hybrid at {fmt(100 * d['hybrid_share_needed'], 0)}% of "
            "its bound." + "".join(f" The plan itself ran {fmt(1 / g['predicted_over_measured'], 2)}× the step it was "
                                  f"planned for ([{', '.join(g['devices'])}]; the prediction below)."
                                  for g in res["hybrid_plan"]["groups"]
                                  if abs(g.get("predicted_over_measured", 1.0) - 1.0) > 0.05) + "\n"]


def _why_memory(res) -> list[str]:
    """Where the hybrid's largest peak is, and why."""
    m, check = memory_spread(res), res.get("checks", {}).get("hybrid_max_peak_over_alone_peak")
    if not m or not check:
        return []
    share = (f" ({fmt(100 * m['max_device_speed_share'], 0)}% of the plan's profiled speed, so about that share "
             "of each split layer's filters)" if "max_device_speed_share" in m else "")
    return [f"Memory: the default plan divides each layer to minimise time, so the fastest device holds the "
            f"largest part: the max peak is {m['max_device']}'s{share}, {fmt(m['max_peak_over_alone_peak'], 3)} of "
            f"the largest alone; the mean over the plan's devices is {fmt(m['mean_peak_over_alone_peak'], 3)}. "
            "Each device also holds what a split does not divide (the gathered activations, the input batch, the "
            "unsplit layers, TF's runtime). A division by memory rather than time is the named option below.\n"]


def _why_prediction(res) -> list[str]:
    """The largest prediction error, and which devices' layer times were calibrated by a step of their own."""
    check, prof, ratios = res.get("checks", {}).get("prediction_max_error"), res.get("profile") or {}, prediction_ratios(res)
    if not check or not prof or not ratios:
        return []
    worst = max(ratios, key=lambda k: abs(ratios[k] - 1.0))
    text = f"Prediction: the largest error is `{worst}`, predicted at {fmt(ratios[worst], 2)}× its measured step."
    timed = [d["name"] for d in prof["devices"] if d.get("whole_step_ms")]
    others = [d["name"] for d in prof["devices"] if not d.get("whole_step_ms")]
    if timed and others:
        alone = [f"{n} alone was predicted at {fmt(ratios[f'alone:{n}'], 2)}×" for n in others if f"alone:{n}" in ratios]
        text += (f" Only {', '.join(timed)} timed a whole step while profiling (by the memory model and its headroom "
                 "the others do not hold the model within their budgets), so the layer times of "
                 f"{', '.join(others)} are scaled by " + ("its factor" if len(timed) == 1 else "the factor of the timed "
                                                          "device nearest in speed")
                 + (f"; with it, {', '.join(alone)}" if alone else "") + ".")
    return [text + "\n"]


def _memory_capped(res) -> list[str]:
    """The planner's named option `memory_fraction` beside the planned hybrid (bench/edgemesh_claims.py)."""
    p, o = res.get("memory_capped_plan") or {}, res.get("memory_capped_option") or {}
    if not p:
        return []
    head = (f"The named option `memory_fraction={p['memory_fraction']}` (no device predicted above that fraction of "
            "the whole model's step on one device; not the default, which minimises time): ")
    if p.get("error"):
        return [head + f"no plan: {p['error']}\n"]
    if o.get("out_of_memory"):
        return [head + f"ran out of memory: {o['out_of_memory']}\n"]
    figures = [f"{label} {fmt(o[k], 3)}" for k, label in (
        ("max_peak_over_alone_peak", "max peak over the largest alone"),
        ("mean_peak_over_alone_peak", "mean peak over the largest alone"),
        ("delay_fastest_alone_over_it", "fastest alone's delay over its"),
        ("delay_over_hybrid", "its delay over the planned hybrid's")) if k in o]
    return [head + "; ".join(figures) + ".\n"]
