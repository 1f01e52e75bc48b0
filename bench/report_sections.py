"""The sections of bench/REPORT.md for the planner, the emulation, the uneven split, the faults, the
final accuracy, a user's own model and the set-up time (bench/report_claims.py and bench/report_tta.py
render the claims and the time to accuracy)."""
from bench.report_common import compact, figure, fmt, identity_scatter, plt, section, table


def drift_by_round(res) -> dict | None:
    """The machine's drift between profiling and measuring by round (pure): {"device": a calibrated device,
    "drift": its step alone's predicted ÷ measured (its step at profiling over the same step timed later),
    "relative_max_errors": each round's largest |ratio / drift - 1| over the layouts, "worst": the layout it
    was}; None without a calibrated device's step alone measured by round."""
    lays = res.get("layouts") or {}
    calibrated = [d for d in (res.get("calibration") or {}).get("whole_step_ms", {})
                  if lays.get(f"alone:{d}", {}).get("predicted_over_measured_by_round")]
    if not calibrated:
        return None
    drift = lays[f"alone:{calibrated[0]}"]["predicted_over_measured_by_round"]
    rel, worst = [], []
    for i, d in enumerate(drift):
        errors = {k: abs(v["predicted_over_measured_by_round"][i] / d - 1.0) for k, v in lays.items()
                  if len(v.get("predicted_over_measured_by_round", ())) > i}
        worst.append(max(errors, key=errors.get))
        rel.append(round(errors[worst[-1]], 3))
    return {"device": calibrated[0], "drift": drift, "relative_max_errors": rel, "worst": worst}


def _describe(lay) -> str:
    return ", ".join(lay["devices"]) + ", " + (", ".join(
        f"{d} {v}" for d, v in lay["sizes"].items() if v != "replicated") or "every layer whole")


def _drift(res) -> list[str]:
    """The machine's drift between profiling and measuring, and each round's error relative to it."""
    drift = drift_by_round(res)
    if not drift:
        return []
    d, untimed = drift["device"], sorted({w.split(":", 1)[1] for w in drift["worst"] if w.startswith("alone:")}
                                         - set(res["calibration"]["whole_step_ms"]))
    return [f"The machine's drift between profiling and measuring: the calibration makes the cost model predict "
            f"{d}'s step alone as the profiler timed it, so `alone:{d}`'s predicted ÷ measured is the same step at "
            "profiling over the same step measured minutes later: " + ", ".join(fmt(x, 3) for x in drift["drift"])
            + " by round. Relative to it (two steps of one round, measured side by side), each round's largest "
            "error: " + ", ".join(f"{fmt(100 * e, 1)}% (`{w}`)" for e, w in zip(drift["relative_max_errors"],
                                                                                drift["worst"])) + ".\n"] + (
        [f"{', '.join(untimed)} timed no whole step while profiling (the profiler runs only what the memory model "
         f"says a device holds within its budget), so {'its' if len(untimed) == 1 else 'their'} layer times are "
         "scaled by the factor of the timed device nearest in speed (`planner/calibrate.py`).\n"] if untimed else [])


@section("## Planner: predicted against measured step time{where}")
def planner_section(res, text, out_dir, name="planner", where=""):
    pts = res["layouts"]
    text.append(f"`{res['model']}` on {res['dataset']}, batch {res['batch']}, one group over the workers of "
                f"`{res['cluster']}` (planned and even split; `even:3`: the even split over the three fastest), "
                "and each worker alone (`alone:`, the groups of the all-replicated alternative); measured steps "
                "are medians over the number of steps shown.\n")
    text.append(table(["Layout", "Predicted", "Measured", "Predicted ÷ measured",
                       "Uncalibrated ÷ measured (layer times as profiled)", "Steps"],
                      [[k, fmt(v["predicted_step_ms"], 1, " ms"), fmt(v["measured_median_step_ms"], 1, " ms"),
                        fmt(v["predicted_over_measured"], 3), fmt(v.get("uncalibrated_over_measured"), 3),
                        v.get("steps")] for k, v in pts.items()]) + "\n")
    plans = res["planned_layouts"]  # each round plans on its own profile: its planned row against its own plan
    text.append(f"The one-group plan: {_describe(plans[0])}.\n" if all(p == plans[0] for p in plans) else
                "The one-group plan of each round: "
                + "; ".join(f"round {i + 1}: {_describe(p)}" for i, p in enumerate(plans)) + ".\n")
    text.append(f"Planned over even throughput: {fmt(res.get('planned_over_even_throughput'), 3)}×.\n")
    text.append(f"Largest prediction error: {fmt(100 * res['prediction_max_error'], 1)}% (issue 15: within 15%): "
                + ("pass" if res["prediction_max_error"] <= 0.15 else "**not met**")
                + f"; uncalibrated {fmt(100 * res['uncalibrated_max_error'], 1)}%.\n")
    if res["repeats"] > 1:
        text.append(f"Each figure is the median over {res['repeats']} rounds of profiling, planning and measuring on "
                    "one testbed (this machine's speed drifts over minutes); each round's largest error: "
                    + ", ".join(f"{fmt(100 * e, 1)}%" for e in res["repeat_max_errors"]) + ".\n")
    text += _drift(res) if res["repeats"] > 1 else []
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    identity_scatter(ax, [(v["measured_median_step_ms"], v["predicted_step_ms"], k) for k, v in pts.items()],
                     "measured step (ms)", "predicted step (ms)", "planner's cost model")
    ax.legend()
    return figure(fig, out_dir, text, name)


@section("## Emulation fidelity: configured against measured (`{name}`)")
def emulation_section(res, text, out_dir, name="emulation"):
    devs, links = res.get("devices", {}), res.get("links", {})
    rows = [[n, fmt(d.get("speed_file")), fmt(d.get("speed_measured")), fmt(ln.get("latency_ms_file"), 1),
             fmt(ln.get("latency_ms"), 2), fmt(ln.get("bandwidth_mbit_file")), fmt(ln.get("download_mbit"), 1),
             fmt(ln.get("upload_mbit"), 1), "yes" if d.get("ok") and ln.get("ok", True) else "**no**"]
            for n, d in devs.items() for ln in [links.get(n, {})]]
    text.append(f"`{res['cluster']}`, network {res.get('network')}, compute {res.get('compute')}, tolerance "
                f"±{res.get('tolerance', 0):.0%}, load average during the run {res.get('load_average')}.\n")
    text.append(table(["Device", "Speed (file)", "Speed (measured)", "Latency ms (file)", "Latency ms (measured)",
                       "Mbit/s (file)", "Down Mbit/s", "Up Mbit/s", "Within tolerance"], rows) + "\n")
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.6))
    for ax, (of, conf, meas, title) in zip(axes, ((devs, "speed_file", "speed_measured", "relative speed"), (
            links, "bandwidth_mbit_file", "download_mbit", "bandwidth (Mbit/s)"))):
        xy = {n: (of.get(n, {}).get(conf), of.get(n, {}).get(meas)) for n in devs}
        pairs = [(x, y, n) for n, (x, y) in xy.items() if x is not None and y is not None]
        if pairs:
            identity_scatter(ax, pairs, "configured", "measured", title)
    return figure(fig, out_dir, text, name)


@section("## Uneven lowering against plain TensorFlow")
def uneven_section(res, text, out_dir):
    text.append(f"`{res['model']}`, batch {res['batch']}, input {res.get('image_shape')}, {res.get('devices')} "
                f"in-process CPU devices, medians over {res.get('steps_per_config')} steps per configuration.\n")
    text.append(table(["Configuration", "Median step"],
                      [[k, fmt(v, 1, " ms")] for k, v in res["median_step_ms"].items()]) + "\n")
    text.append(table(["Ratio", "Value"], [[k, fmt(res[k])] for k in (
        "uneven_over_plain_tf", "unsplit_over_plain_tf", "virtual_processors_over_edgemesh") if k in res]) + "\n")


@section("## A user's own model against plain TensorFlow on one device (`make bench-own-model`)")
def own_model_section(res, text, out_dir):
    text.append(f"`{res['model']}` on {res['dataset']}, cluster `{res['cluster']}`. Plain TF: the same network and "
                f"initial weights on one device, {res['epochs']} epochs of SGD with momentum; edgemesh: profile, plan "
                f"and ASHL ({res['lr_schedule']} learning rate) to the plain-TF median less one point "
                f"({fmt(res['target'], 4)}).\n")
    rows = [[s, fmt(res["plain_tf_one_device"][s], 4), fmt(r["accuracy"], 4), "yes" if r["reached"] else "**no**",
             fmt(r["time_to_target_s"], 1, " s"), fmt(r["setup_s"], 1, " s"), r["planned"]["kind"] + (
                 " (splits " + ", ".join(sorted({d for g in r["planned"]["splits"].values() for d in g})) + ")"
                 if r["planned"]["splits"] else ", no split")] for s, r in res["edgemesh"].items()]
    text.append(table(["Seed", "Plain TF", "edgemesh final", "Target reached", "Time to target", "Set-up", "Plan"],
                      rows) + "\n")
    text.append(f"Medians: plain TF {fmt(res['plain_tf_median'], 4)}, edgemesh {fmt(res['edgemesh_median'], 4)} "
                f"(the target is judged on {res.get('target_judged_on', 'the whole test set')}, the final accuracy on "
                "the whole test set after the commits in flight land, so a run may end below the target it reached).\n")


@section("## The main job's set-up: first run and rerun (`make bench-setup`)")
def setup_section(res, text, out_dir):
    text.append(f"`edgemesh run --cluster {res['cluster']}` (the main job's defaults) with an empty profile cache, "
                f"then the same command again; each pair with a cache of its own, pairs one after another. "
                f"`setup_s` from each job's summary.json: the job's wall time but its training: servers, "
                f"profiling or the cached profile, planning, the groups' start and the testbed's teardown "
                f"(not the command's imports).\n")
    rows = [[i + 1, fmt(p["first"]["setup_s"], 1, " s"), fmt(p["rerun"]["setup_s"], 1, " s"),
             "yes" if p["rerun"]["reused"] else "**no**", fmt(p["first"]["train_s"], 1, " s"),
             fmt(p["rerun"]["train_s"], 1, " s"), fmt(p["first"]["accuracy"], 4), fmt(p["rerun"]["accuracy"], 4)]
            for i, p in enumerate(res["pairs"])]
    text.append(table(["Pair", "First set-up", "Rerun set-up", "Rerun reused the profile", "First training",
                       "Rerun training", "First accuracy", "Rerun accuracy"], rows) + "\n")
    med = res["median_setup_s"]
    text.append(f"Medians: first run {fmt(med['first'], 1, ' s')}, rerun {fmt(med['rerun'], 1, ' s')} "
                f"(rerun / first {fmt(res['rerun_over_first'], 2)}).\n")


@section("## Faults")
def faults_section(res, text, out_dir):
    text.append(table(["Scenario", "What", "OK", "Measured"],
                      [[r.get("scenario"), r.get("what", "—"), "yes" if r.get("ok") else "**no**",
                        "; ".join(f"{k}: {compact(v)}" for k, v in r.items() if k not in ("scenario", "what", "ok")
                                  and v is not None)] for r in res.get("scenarios", [])]) + "\n")


@section("## Final accuracy: ASHL against BSP converged (`make bench-final`)")
def final_section(res, text, out_dir):
    runs, check = res["runs"], res["check"]
    text.append(f"`{res['model']}` on {res['dataset']}, batch {res['batch']} per group, on `{res['cluster']}`; "
                f"{res['seeds']} seeds each, interleaved. ASHL (as published) trains under the cluster's limits; "
                "BSP with every limit lifted (its curve per iteration does not depend on the devices' speeds: "
                "each iteration waits for every group), so that it runs many more iterations in its budget than "
                "under the limits (the global steps below are the groups' iterations summed). Converged: the last "
                f"quarter of the run adds at most {fmt(100 * res['plateau'], 1)} points.\n")
    text.append(table(["Strategy", "Seed", "Limits", "Trained", "Global steps", "Final accuracy", "Converged"],
                      [[name, r["seed"], r["limits"], fmt(r["budget_s"], 0, " s"), r["global_steps"],
                        fmt(100 * r["accuracy"], 2, "%"), "yes" if r["converged"] else "no"]
                       for name, rs in runs.items() for r in rs]) + "\n")
    verdict = "pass" if check.get("pass") else ("undecided: " + check["undecided"] if check.get("undecided")
                                                 else "**not met**")
    text.append(table(["Check (issue 16)", "Measured", "Threshold", "Result"],
                      [["ASHL final accuracy within 1 point of BSP's",
                        f"{fmt(check.get('difference'), 4)} ({fmt(check.get('ashl_final_accuracy'), 4)} - "
                        f"{fmt(check.get('bsp_final_accuracy'), 4)})", check.get("threshold", "—"), verdict]]) + "\n")
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for name, color, label in (("ashl", "tab:blue", "ASHL"), ("bsp", "tab:gray", "BSP (limits lifted)")):
        for i, r in enumerate(runs.get(name, [])):
            t, a = zip(*r["curve"]) if r["curve"] else ((), ())
            ax.plot(t, a, color=color, alpha=0.8, label=None if i else label)
    ax.set(xlabel="training time (s; BSP's with the limits lifted, so not comparable)", ylabel="held-out accuracy",
           title="final accuracy")
    ax.legend()
    return figure(fig, out_dir, text, "final_accuracy")


@section("## Planning time on large clusters (`planning_time`)")
def planning_time_section(res, text, out_dir):
    text.append(f"`{res['model']}` (32x32x3, batch 32) planned on synthetic clusters, no testbed: every link at one "
                "speed, device speeds on four levels from the slowest to the spread times it, memory and latency "
                f"drawn per device; seconds of `planner.plan` on this machine, with {res['workers']} processes "
                "dividing groups (the planner's default: the machine's cores) and in one process.\n")
    text.append(table(["Devices", "Link Mbit/s", "Speed spread", "Seconds", "One process", "Plan", "Groups (sizes)",
                       "Idle", "Examples/s"],
                      [[r["devices"], fmt(r["link_mbit"], 0), fmt(r["spread"], 0), fmt(r["seconds"], 2),
                        fmt(r["one_process_seconds"], 2)
                        + ("" if r["same_plan_in_one_process"] else " (**another plan**)"),
                        r["kind"], f"{r['groups']} ({', '.join(map(str, r['group_sizes']))})", r["idle"],
                        fmt(r["examples_per_sec"], 1)] for r in res["regimes"]]) + "\n")
    text.append(f"Slowest: {fmt(res['max_seconds'], 1)} s (issue 41: every regime within {fmt(res['bound_s'], 0)} s): "
                + ("pass" if res["within_bound"] else f"**not met** in {res['over_bound']} of {len(res['regimes'])} "
                   "regimes") + f"; in one process {fmt(max(r['one_process_seconds'] for r in res['regimes']), 1)} s"
                + ("" if res["same_plans_in_one_process"] else ", **with another plan**") + ".\n")


@section("## The job's cost model against the main job, per phase (`job_prediction`)")
def job_prediction_section(res, text, out_dir):
    text.append(f"`{res['model']}` on {res['dataset']}: the main job (`edgemesh run`, the cached profile, the plan "
                f"with the number of groups shown, no target) trained {fmt(res['budget_s'], 0)} s per row group; "
                "predicted (the plan's cost of the job, `engine/core/job_cost.py`) → measured, per phase and group: "
                "step, local iterations per commit, commit (push + pull) and examples/s.\n")
    arrow = lambda r, k, d=1: f"{fmt(r['predicted'][k], d)} → {fmt(r['measured'][k], d)}"  # noqa: E731
    text.append(table(["Cluster", "Groups", "Strategy", "Phase", "Group", "Examples/s", "Measured ÷ predicted",
                       "Step ms", "Iterations per commit", "Commit ms", "Term that missed most"],
                      [[run["cluster"], run["groups"], run["strategy"], r["phase"], r["group"],
                        arrow(r, "examples_per_sec"), fmt(r["ratio"], 3), arrow(r, "step_ms"), arrow(r, "local_steps"),
                        arrow(r, "commit_ms", 0), (r.get("missed") or {}).get("term", "—")]
                       for run in res["runs"] for r in run["rows"]]) + "\n")
    text.append(f"Largest error |measured ÷ predicted - 1|: {fmt(100 * (res['max_error'] or 0), 1)}% (issue 45: within "
                f"{fmt(100 * res['bound'], 0)}%): " + ("pass" if res["within_bound"] else "**not met**") + "; by "
                "strategy " + ", ".join(f"{k} {fmt(100 * v, 1)}%" for k, v in res["max_error_by_strategy"].items())
                + "; by phase " + ", ".join(f"{k} {fmt(100 * v, 1)}%" for k, v in res["max_error_by_phase"].items())
                + ".\n")
    lost = [f"{run['cluster']} {run['groups']} {run['strategy']}: {x['group']} at {fmt(x['t'], 1)} s ({x['why']})"
            for run in res["runs"] for x in run.get("lost", [])]
    if lost:
        text.append("Groups the chief lost during a run (their rows measure the fault too): " + "; ".join(lost) + ".\n")
