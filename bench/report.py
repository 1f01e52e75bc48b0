"""Renders bench/REPORT.md and its PNG plots from the JSON that bench/suite.py recorded.

    python bench/report.py [--results bench/results] [--out bench]

Reads only <results>/machine.json and <results>/<benchmark>.json (each: status, command, seconds,
error, result = the benchmark's own JSON), so a report can be regenerated, or tested, from recorded
input. Every figure in the report is taken from those files; nothing is measured here.
"""
import argparse
import json
import os

from report_common import LABELS, MIB, _compact, _figure, _status_line, fmt, plt, result, table  # noqa: F401  (LABELS: the tests read it here)
from report_claims import claims_section
from report_final import final_section
from report_tta import tta_section, tta_variants_section

ORDER = ("uneven_split", "emulation", "emulation_pi4", "planner", "edgemesh_claims", "time_to_accuracy", "faults",
         "tta_variants", "final_accuracy", "planner_wifi", "planner_pi4", "own_model", "setup_time")
NOT_IN_MAKE_BENCH = ("tta_variants", "final_accuracy", "planner_wifi", "planner_pi4", "own_model",
                     "setup_time")  # run by their own make targets; absent is "not run"


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
            "name": name, "status": "not run" if name in NOT_IN_MAKE_BENCH else "failed",
            "error": f"not run: {name}.json is not in {results_dir}"}
    return machine, records


# --- planner, emulation, uneven split, faults ------------------------------------------------

def _identity_scatter(ax, points, xlabel, ylabel, title) -> None:
    """(x, y, label) points against the y = x line, both axes from 0."""
    top = max(max(x, y) for x, y, _ in points) * 1.15
    ax.plot([0, top], [0, top], color="grey", lw=0.8, label="y = x")
    ax.scatter([x for x, _, _ in points], [y for _, y, _ in points], color="tab:red", zorder=3)
    for x, y, label in points:
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(5, -10), fontsize=8)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title, xlim=(0, top), ylim=(0, top))


def drift_by_round(res) -> dict | None:
    """The machine's drift between profiling and measuring, round by round (pure). The calibration
    makes the cost model predict a device's whole step alone as the profiler timed it, so that
    device's predicted ÷ measured step alone is its step at profiling over the same step timed
    minutes later. {"device", "drift": that ratio by round, "relative_max_errors": each round's
    largest |ratio / drift - 1| over the layouts (a ratio of two steps measured side by side),
    "worst": the layout it was}; None without a calibrated device's step alone measured by round."""
    lays = res.get("layouts") or {}
    calibrated = [d for d in (res.get("calibration") or {}).get("whole_step_ms", {})
                  if f"alone:{d}" in lays and lays[f"alone:{d}"].get("predicted_over_measured_by_round")]
    if not calibrated:
        return None
    device = calibrated[0]
    drift = lays[f"alone:{device}"]["predicted_over_measured_by_round"]
    rel, worst = [], []
    for i, d in enumerate(drift):
        errors = {k: abs(v["predicted_over_measured_by_round"][i] / d - 1.0) for k, v in lays.items()
                  if len(v.get("predicted_over_measured_by_round", ())) > i}
        worst.append(max(errors, key=errors.get))
        rel.append(round(errors[worst[-1]], 3))
    return {"device": device, "drift": drift, "relative_max_errors": rel, "worst": worst}


def planner_section(rec, out_dir, name="planner", where="") -> tuple[str, list[str]]:
    res = result(rec)
    text = [f"## Planner: predicted against measured step time{where}\n", _status_line(rec)]
    if not res:
        return "\n".join(text), []
    pts = res.get("layouts") or {k: res[k] for k in ("planned", "even") if k in res}  # (older records: two)
    old = "uncalibrated_max_error" not in res  # records before the plan calibrated: the calibrated figure beside
    other = "calibrated_over_measured" if old else "uncalibrated_over_measured"
    rows = [[k, fmt(v["predicted_step_ms"], 1, " ms"), fmt(v["measured_median_step_ms"], 1, " ms"),
             fmt(v["predicted_over_measured"], 3), fmt(v.get(other), 3), v.get("steps")]
            for k, v in pts.items()]
    text.append(f"`{res['model']}` on {res['dataset']}, batch {res['batch']}, one group over the workers of "
                f"`{res['cluster']}` (planned and even split; `even:3`: the even split over the three fastest), "
                "and each worker alone (`alone:`, the groups of the "
                "all-replicated alternative); measured steps are medians over the number of steps shown.\n")
    text.append(table(["Layout", "Predicted", "Measured", "Predicted ÷ measured",
                       "Calibrated ÷ measured (`planner/calibrate.py`, not used by the plan)" if old
                       else "Uncalibrated ÷ measured (layer times as profiled)", "Steps"], rows) + "\n")
    describe = lambda lay: ", ".join(lay["devices"]) + ", " + (", ".join(
        f"{d} {v}" for d, v in lay["sizes"].items() if v != "replicated") or "every layer whole")
    plans = res.get("planned_layouts") or ([res["planned_layout"]] if res.get("planned_layout") else [])
    if plans and all(p == plans[0] for p in plans):
        text.append(f"The one-group plan: {describe(plans[0])}.\n")
    elif plans:  # each round plans on its own profile: the planned row compares each with its own plan
        text.append("The one-group plan of each round: "
                    + "; ".join(f"round {i + 1}: {describe(p)}" for i, p in enumerate(plans)) + ".\n")
    text.append(f"Planned over even throughput: {fmt(res.get('planned_over_even_throughput'), 3)}×.\n")
    if "prediction_max_error" in res:
        ok = res.get("predictions_within_15pct", res["prediction_max_error"] <= 0.15)  # the benchmark's verdict
        text.append(f"Largest prediction error: {fmt(100 * res['prediction_max_error'], 1)}% (issue 15: within 15%): "
                    + ("pass" if ok else "**not met**") + (f"; uncalibrated {fmt(100 * res['uncalibrated_max_error'], 1)}%"
                                                            if not old else "") + ".\n")
    if res.get("repeat_max_errors"):
        text.append(f"Each figure is the median over {res['repeats']} rounds of profiling, planning and measuring on "
                    "one testbed (this machine's speed drifts by ~12% over minutes); each round's largest error: "
                    + ", ".join(f"{fmt(100 * e, 1)}%" for e in res["repeat_max_errors"]) + ".\n")
    drift = drift_by_round(res)
    if drift and res.get("repeat_max_errors"):
        d = drift["device"]
        text.append(f"The machine's drift between profiling and measuring: the calibration makes the cost model "
                    f"predict {d}'s step alone as the profiler timed it, so `alone:{d}`'s predicted ÷ measured is the "
                    "same step at profiling over the same step measured minutes later: "
                    + ", ".join(fmt(x, 3) for x in drift["drift"]) + " by round. Relative to it (two steps of one "
                    "round, measured side by side), each round's largest error: " + ", ".join(
                        f"{fmt(100 * e, 1)}% (`{w}`)" for e, w in zip(drift["relative_max_errors"], drift["worst"]))
                    + ".\n")
        untimed = sorted({w.split(":", 1)[1] for w in drift["worst"] if w.startswith("alone:")}
                         - set(res["calibration"]["whole_step_ms"]))
        if untimed:
            text.append(f"{', '.join(untimed)} timed no whole step while profiling (the profiler runs only what the "
                        "memory model says a device holds within its budget), so " + ("its" if len(untimed) == 1 else "their")
                        + " layer times are scaled by the factor of the timed device nearest in speed "
                        "(`planner/calibrate.py`).\n")
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
    return _figure(fig, out_dir, text, name)


def emulation_section(rec, out_dir, name="emulation") -> tuple[str, list[str]]:
    res = result(rec)
    text = [f"## Emulation fidelity: configured against measured (`{name}`)\n", _status_line(rec)]
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
    return _figure(fig, out_dir, text, name)


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


def own_model_section(rec, out_dir) -> tuple[str, list[str]]:
    res = result(rec)
    text = ["## A user's own model against plain TensorFlow on one device (`make bench-own-model`)\n", _status_line(rec)]
    if not res:
        return "\n".join(text), []
    text.append(f"`{res['model']}` on {res['dataset']}, cluster `{res['cluster']}`. Plain TF: the same network and "
                f"initial weights on one device, {res['epochs']} epochs of SGD with momentum; edgemesh: profile, plan "
                f"and ASHL ({res['lr_schedule']} learning rate) to the plain-TF median less one point "
                f"({fmt(res['target'], 4)}).\n")
    rows = [[s, fmt(res["plain_tf_one_device"][s], 4), fmt(r["accuracy"], 4), "yes" if r["reached"] else "**no**",
             fmt(r["time_to_target_s"], 1, " s"), fmt(r["setup_s"], 1, " s"),
             r["planned"]["kind"] + (" (splits " + ", ".join(sorted({d for g in r["planned"]["splits"].values()
                                                                    for d in g})) + ")"
                                     if r["planned"]["splits"] else ", no split")]
            for s, r in res["edgemesh"].items()]
    text.append(table(["Seed", "Plain TF", "edgemesh final", "Target reached", "Time to target", "Set-up", "Plan"],
                      rows) + "\n")
    judged = res.get("target_judged_on", "each evaluation's fixed 1,000-image subset")
    text.append(f"Medians: plain TF {fmt(res['plain_tf_median'], 4)}, edgemesh {fmt(res['edgemesh_median'], 4)} "
                f"(the target is judged on {judged}, the final accuracy on the whole test set after the commits in flight land, so a run may end below the target it reached).\n")
    return "\n".join(text), []


def setup_section(rec, out_dir) -> tuple[str, list[str]]:
    res = result(rec)
    text = ["## The main job's set-up: first run and rerun (`make bench-setup`)\n", _status_line(rec)]
    if not res:
        return "\n".join(text), []
    text.append(f"`edgemesh run --cluster {res['cluster']}` (the main job's defaults) with an empty profile cache, "
                f"then the same command again; each pair with a cache of its own, pairs one after another. "
                f"`setup_s` from each job's summary.json: the job's wall time but its training: servers, "
                f"profiling or the cached profile, planning, the groups' start and the testbed's teardown "
                f"(not the command's imports, ~4 s).\n")
    rows = [[i + 1, fmt(p["first"]["setup_s"], 1, " s"), fmt(p["rerun"]["setup_s"], 1, " s"),
             "yes" if p["rerun"]["reused"] else "**no**", fmt(p["first"]["train_s"], 1, " s"),
             fmt(p["rerun"]["train_s"], 1, " s"), fmt(p["first"]["accuracy"], 4), fmt(p["rerun"]["accuracy"], 4)]
            for i, p in enumerate(res["pairs"])]
    text.append(table(["Pair", "First set-up", "Rerun set-up", "Rerun reused the profile", "First training",
                       "Rerun training", "First accuracy", "Rerun accuracy"], rows) + "\n")
    med = res["median_setup_s"]
    text.append(f"Medians: first run {fmt(med['first'], 1, ' s')}, rerun {fmt(med['rerun'], 1, ' s')} "
                f"(rerun / first {fmt(res['rerun_over_first'], 2)}).\n")
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


SECTIONS = {"time_to_accuracy": tta_section, "edgemesh_claims": claims_section, "planner": planner_section,
            "emulation": emulation_section, "uneven_split": uneven_section, "faults": faults_section,
            "tta_variants": tta_variants_section, "final_accuracy": final_section, "own_model": own_model_section,
            "setup_time": setup_section,
            "emulation_pi4": lambda rec, out: emulation_section(rec, out, "emulation_pi4"),
            "planner_wifi": lambda rec, out: planner_section(rec, out, "planner_wifi",
                                                             " on a shared Wi-Fi channel (`make bench-wifi`)"),
            "planner_pi4": lambda rec, out: planner_section(rec, out, "planner_pi4",
                                                            " of VGG-16 on the Pi-class cluster (`make bench-pi4`)")}


def make_bench_seconds(records: dict) -> float:
    """Seconds of `make bench` by its benchmarks' records (all but NOT_IN_MAKE_BENCH; a partial re-run
    replaces its benchmark's time)."""
    return sum(r.get("seconds") or 0.0 for n, r in records.items() if n not in NOT_IN_MAKE_BENCH)


def render(results_dir: str, out_dir: str) -> str:
    """Writes <out_dir>/REPORT.md and its PNGs from the records in ``results_dir``; returns the path."""
    machine, records = load(results_dir)
    os.makedirs(out_dir, exist_ok=True)
    head = ["# edgemesh_tf benchmark report\n"]
    if machine.get("quick"):
        head.append("> **Quick smoke run** (`make bench QUICK=1`): every benchmark ran small, those not run were left out; "
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
                      [[n, r["status"] if r.get("status") in ("ok", "not run") else f"**failed** ({r.get('error')})",
                        fmt(r.get("seconds"), 0), f"`{r.get('command', '—')}`"] for n, r in records.items()]) + "\n")
    head.append(f"`make bench` as recorded here (the sum of its benchmarks' latest times): "
                f"{fmt(make_bench_seconds(records), 0)} s = {fmt(make_bench_seconds(records) / 60, 1)} min.\n")
    body = []
    for name in ("time_to_accuracy", "tta_variants", "final_accuracy", "edgemesh_claims", "planner", "planner_pi4",
                 "planner_wifi", "emulation", "emulation_pi4", "uneven_split", "faults", "own_model", "setup_time"):
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
