"""`edgemesh run`: the main job on the built-in default (what `make run` starts).

    edgemesh run [--cluster layouts/pi4.yaml] [--model vgg_wide] [--dataset cifar10 --data_path DIR]
                 [--dataset npz:FILE | dir:FOLDER]  (your own data: README, Bring your data)
                 [--sync ashl] [--target_accuracy 0.97] [--time_budget_s 240] [--logdir runs/run-...]

Starts the emulated testbed of the cluster file, profiles the devices, plans the layout (written to
the run directory), trains with the strategy until the target accuracy or the time budget, prints
a summary (accuracy, time, throughput per device, where the time went) and the TensorBoard
command, and tears the testbed down. Without root the testbed falls back to user-space emulation
and says so.

Its flags are generated from the fields of `MainJob` (--cluster, --batch_size, --emulate),
`JobSettings` and `SyncConfig` (engine/config.py: help, defaults, checks); its defaults differ from
`edgemesh train --cluster`'s only where `config.COMMAND_DEFAULTS` says.
"""
import json
import os

from absl import flags

from edgemesh_tf.cli import hybrid
from edgemesh_tf.engine.core import job_cost, records

SUMMARY = "the main job: start the testbed of a cluster file, profile, plan, train, summarise"
FLAGS = flags.FLAGS
JOB_FLAGS = tuple(hybrid.define_flags("run"))
HELP_GROUPS = hybrid.help_groups("run")


def memory_cell(d: dict) -> str:
    """A device's predicted and peak memory (MiB) with their ratio, as far as they are known (the peak:
    on the emulated testbed, what its memory group was charged while training)."""
    predicted, peak = d.get("predicted_memory_mib"), d.get("peak_memory_mib")
    if predicted is None and peak is None:
        return "-"
    cell = "%s -> %s" % ("-" if predicted is None else "%.0f" % predicted, "-" if peak is None else "%.0f" % peak)
    return cell + (" (x%.2f)" % (peak / predicted) if predicted and peak is not None else "")


def plan_lines(p: dict) -> list[str]:
    """What the planner chose and why: its prediction against the best alternative, and each split."""
    best, predicted = p["best_alternative"], p["predicted_examples_per_sec"]
    tie = best and abs(best[1] - predicted) <= 0.005 * predicted  # e.g. a grid of one-device groups
    same = tie and p["kind"] == "grid" and not p["splits"]  # the grid's groups are the alternative's own
    why = (" (predicted %.0f examples/s; the best alternative, %s, %.0f%s)" % (
        predicted, *best, ", the same layout: every group one device" if same else ", a tie" if tie else "")
           if best else " (predicted %.0f examples/s)" % predicted)
    lines = ["plan: %s%s" % (p["kind"], why)]
    if not p["splits"]:
        lines.append("  no layer split: the planner predicts no split pays on these devices")
    for group, dims in p["splits"].items():
        for dim, by in dims.items():
            lines.append("  %s splits %s: %s" % (group, dim, " / ".join("%s %d" % kv for kv in by.items())))
    return lines


def near_tie_lines(t: dict | None) -> list[str]:
    """The plans the cost model could not tell apart, as predicted and as timed on the cluster, and which was kept."""
    if not t:
        return []
    return ["near tie (plans predicted within %.0f%% of each other, timed on the cluster before training in %.0f s): "
            "%s; kept %d group(s)%s" % (100 * t["tolerance"], t.get("seconds", 0.0), "; ".join(
                "%d group(s) (%s) predicted %.0f, timed %.0f examples/s" % (
                    c["groups"], " | ".join("+".join(g) for g in c.get("devices", [])), c["predicted"], c["timed"])
                for c in t["candidates"]), t["kept"], "" if t["kept"] == t["planned"] else
            " instead of the prediction's %d" % t["planned"])]


def profile_cache_lines(c: dict | None) -> list[str]:
    """What the set-up reused from the profile cache, and whether the run found the profile still true."""
    if not c:
        return []
    if c["reused"]:
        lines = ["set-up reused the device profile measured %s ago (%s); --reprofile measures again"
                 % (records.human_duration(c["age_s"]), c["entry"])]
    elif c["entry"]:
        lines = ["profile kept for the next run on these devices, model and batch: %s" % c["entry"]]
    else:
        lines = []
    for group, (reference, measured) in (c.get("off") or {}).items():
        lines.append("profile check: %s iterated in %.1f ms where the first run on this profile measured %.1f ms: "
                     "the devices have changed since they were profiled%s" % (group, measured, reference,
                                                     "; the cached profile is dropped, the next run measures "
                                                     "them again" if c.get("dropped") else ""))
    return lines


def summary_text(s: dict) -> str:
    """The summary a person reads at the end of the job."""
    lines = ["", "== %s on %s, %s, cluster %s (%s network, %s compute) ==" % (
        s["model"], s["dataset"], s["strategy"], s["cluster"], s["testbed"]["network"], s["testbed"]["compute"])]
    reached = ("target %.3f reached at %.1f s in the periodic evaluation" % (s["target_accuracy"], s["time_to_target_s"])
               if s["time_to_target_s"] is not None else "stopped: %s" % s["why"])
    if s.get("initial_weights"):
        lines.append("started from the weights in %s (not from random initial values)" % s["initial_weights"])
    lines.append("accuracy %.4f (the final global model) after %.1f s of training (%s); set-up %.1f s"
                 % (s["accuracy"], s["train_s"], reached, s["setup_s"]))
    lines.extend(profile_cache_lines(s.get("profile_cache")))
    lines.append("phases: " + " -> ".join("%s at %.1f s" % (p, t) for p, _, t in s["phase_transitions"]))
    lines.append("throughput: %.0f examples/s in total, %d iterations, %.2f MB sent" % (
        s["examples_per_sec"], s["global_steps"], s["bytes_sent"] / 1e6))
    lines.append("  %-10s %-12s %11s %9s %12s  %s" % ("device", "group", "examples/s", "GFLOP/s", "utilisation",
                                                     "memory MiB: predicted -> peak while training"))
    for name, d in s["devices"].items():
        lines.append("  %-10s %-12s %11.0f %9.2f %11.0f%%  %s" % (name, d["group"], d["examples_per_sec"],
                                                               d["compute_gflops"], 100 * d["utilisation"],
                                                               memory_cell(d)))
    lines.extend(plan_lines(s["planned"]))
    if s["idle_devices"]:
        lines.append("  idle: %s (the planner predicts the job faster without %s; see %s)" % (
            ", ".join(s["idle_devices"]), "them" if len(s["idle_devices"]) > 1 else "it", s["plan"]))
    lines.extend(near_tie_lines(s.get("near_tie")))
    pvm = s.get("predicted_vs_measured")
    if pvm and pvm["rows"]:
        lines.append("predicted -> measured per phase and group (a round: local iterations, a commit, a wait)%s:"
                     % ("; one group: nothing between groups to coordinate" if pvm["groups"] == 1 else ""))
        lines.extend(job_cost.format_rows(pvm["rows"]))
    lines.append("where the time went (share of the training time): compute / communication / waiting / other")
    for g, t in s["group_time"].items():
        total = max(s["train_s"], 1e-9)
        lines.append("  %-12s %5.0f%% / %5.0f%% / %5.0f%% / %5.0f%%" % (
            g, 100 * t["compute_s"] / total, 100 * t["communication_s"] / total, 100 * t["waiting_s"] / total,
            100 * t["other_s"] / total))
    lines.append("layout: %s   profile: %s   summary: %s" % (s["plan"], s["profile"],
                                                            os.path.join(s["logdir"], "summary.json")))
    e = s.get("export")
    if e and "error" in e:
        lines.append("not exported: %s (the trained model is in %s)" % (
            e["error"], os.path.join(s["logdir"], "final_model")))
    elif e:
        lines.append("exported: %s (test accuracy by plain Keras %.4f), SavedModel %s" % (
            e["keras"], e["keras_accuracy"], e["saved_model"]))
    lines.append(s["tensorboard"])
    return "\n".join(lines)


def main(argv):
    if len(argv) > 1:
        raise SystemExit("edgemesh run: unexpected arguments %s" % argv[1:])
    from edgemesh_tf.main_job import run_main_job
    try:
        job = hybrid.main_job_from_flags()
    except ValueError as e:
        raise SystemExit("edgemesh run: %s" % e)

    try:
        summary = run_main_job(job, emit=records.print_line)
    except (ValueError, OSError, RuntimeError, TimeoutError) as e:  # bad input, PSLost, every group lost
        raise SystemExit("edgemesh run: %s" % e)
    print(summary_text(summary), flush=True)
    print(json.dumps({k: v for k, v in summary.items() if k not in ("devices", "group_time")}), flush=True)
