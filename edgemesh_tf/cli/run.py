"""`edgemesh run`: the main job on the built-in default (what `make run` starts).

    edgemesh run [--cluster layouts/edge4.yaml] [--model vgg] [--dataset digits --data_path DIR]
                 [--sync ashl] [--target_accuracy 0.97] [--time_budget_s 240] [--logdir runs/run-...]

Starts the emulated testbed of the cluster file, profiles the devices, plans the layout (written to
the run directory), trains with the strategy until the target accuracy or the time budget, prints
a summary (accuracy, time, throughput per device, where the time went) and the TensorBoard
command, and tears the testbed down. Without root the testbed falls back to user-space emulation
and says so.
"""
import json
import os
import time

from absl import flags

from edgemesh_tf.cli import hybrid
from edgemesh_tf.engine import records
from edgemesh_tf.data import DATASET_NAMES
from edgemesh_tf.models import MODEL_NAMES

FLAGS = flags.FLAGS
flags.DEFINE_string("cluster", "layouts/edge4.yaml", "Cluster file.")
flags.DEFINE_enum("model", "vgg", list(MODEL_NAMES), "Reference model.")
flags.DEFINE_enum("dataset", "digits", list(DATASET_NAMES), "Dataset (digits is built in).")
flags.DEFINE_string("data_path", None, "Directory holding the cifar10 / mnist files (nothing is downloaded).")
flags.DEFINE_integer("batch_size", 32, "Examples per group per local iteration.", lower_bound=1)
flags.DEFINE_float("learning_rate", 0.02, "SGD learning rate.", lower_bound=0.0)
flags.DEFINE_integer("seed", 0, "Seed for weights and data order.")
flags.DEFINE_bool("emulate", True, "Start the emulated testbed of the cluster file (else use its real servers).")
hybrid.define_flags(sync="ashl", logdir=None, time_budget_s=240.0, target_accuracy=0.97,
                    sync_help="Synchronisation strategy.", profile_flag=False)


def summary_text(s: dict) -> str:
    """The summary a person reads at the end of the job."""
    lines = ["", "== %s on %s, %s, cluster %s (%s network, %s compute) ==" % (
        s["model"], s["dataset"], s["strategy"], s["cluster"], s["testbed"]["network"], s["testbed"]["compute"])]
    reached = ("target %.3f reached at %.1f s" % (s["target_accuracy"], s["time_to_target_s"])
               if s["time_to_target_s"] is not None else "stopped: %s" % s["why"])
    lines.append("accuracy %.4f (the final global model) after %.1f s of training (%s); set-up %.1f s"
                 % (s["accuracy"], s["train_s"], reached, s["setup_s"]))
    lines.append("phases: " + " -> ".join("%s at %.1f s" % (p, t) for p, _, t in s["phase_transitions"]))
    lines.append("throughput: %.0f examples/s in total, %d iterations, %.2f MB sent" % (
        s["examples_per_sec"], s["global_steps"], s["bytes_sent"] / 1e6))
    lines.append("  %-10s %-12s %11s %9s %12s" % ("device", "group", "examples/s", "GFLOP/s", "utilisation"))
    for name, d in s["devices"].items():
        lines.append("  %-10s %-12s %11.0f %9.2f %11.0f%%" % (name, d["group"], d["examples_per_sec"],
                                                           d["compute_gflops"], 100 * d["utilisation"]))
    lines.append("where the time went (share of the training time): compute / communication / waiting / other")
    for g, t in s["group_time"].items():
        total = max(s["train_s"], 1e-9)
        lines.append("  %-12s %5.0f%% / %5.0f%% / %5.0f%% / %5.0f%%" % (
            g, 100 * t["compute_s"] / total, 100 * t["communication_s"] / total, 100 * t["waiting_s"] / total,
            100 * t["other_s"] / total))
    lines.append("layout: %s   profile: %s   summary: %s" % (s["plan"], s["profile"],
                                                            os.path.join(s["logdir"], "summary.json")))
    lines.append(s["tensorboard"])
    return "\n".join(lines)


def main(argv):
    if len(argv) > 1:
        raise SystemExit("edgemesh run: unexpected arguments %s" % argv[1:])
    from edgemesh_tf.engine.main_job import MainJob, run_main_job
    logdir = FLAGS.logdir or os.path.join("runs", time.strftime("run-%Y%m%d-%H%M%S"))
    try:
        job = MainJob(cluster=FLAGS.cluster, model=FLAGS.model, dataset=FLAGS.dataset, data_path=FLAGS.data_path,
                      sync=hybrid.sync_config(), batch=FLAGS.batch_size, target_accuracy=FLAGS.target_accuracy,
                      time_budget_s=FLAGS.time_budget_s, eval_interval_s=FLAGS.eval_interval_s,
                      checkpoint_interval_s=FLAGS.checkpoint_interval_s, logdir=logdir, emulate=FLAGS.emulate,
                      learning_rate=FLAGS.learning_rate, seed=FLAGS.seed)
    except ValueError as e:
        raise SystemExit("edgemesh run: %s" % e)

    try:
        summary = run_main_job(job, emit=records.print_line)
    except (ValueError, OSError, RuntimeError, TimeoutError) as e:  # bad input, PSLost, every group lost
        raise SystemExit("edgemesh run: %s" % e)
    print(summary_text(summary), flush=True)
    print(json.dumps({k: v for k, v in summary.items() if k not in ("devices", "group_time")}), flush=True)
