"""`edgemesh train --cluster FILE --sync STRATEGY`: hybrid training with a parameter server.

    edgemesh train --cluster layouts/edge4.yaml --sync ashl --target_accuracy 0.97 --time_budget_s 120

Every data-parallel group of `--layout` (a plan file; default: one group per worker) trains its
replica in its own client process; the chief (this process) evaluates, switches phases, saves
checkpoints to `<logdir>/checkpoints` (and resumes from them), writes TensorBoard logs to
`<logdir>/tb` and prints progress. The last line is the final record as JSON.
"""
from __future__ import annotations

import json
import sys

from absl import flags

from edgemesh_tf.engine import records
from edgemesh_tf.engine.config import COMPRESSIONS, STRATEGIES, SyncConfig

FLAGS = flags.FLAGS
_D = SyncConfig()


def define_flags(sync=None, logdir="runs/hybrid", time_budget_s=300.0, target_accuracy=None,
                 sync_help="With --cluster: hybrid training with this synchronisation strategy over a parameter "
                           "server (without it, --cluster trains one layout on the servers).",
                 profile_flag=True) -> None:
    """The flags of hybrid training (shared by `edgemesh train` and `edgemesh run`)."""
    flags.DEFINE_enum("sync", sync, list(STRATEGIES), sync_help)
    flags.DEFINE_integer("staleness", _D.staleness, "SSP's and SHL's bound: commits a group may run ahead.", lower_bound=0)
    flags.DEFINE_integer("local_steps", _D.local_steps, "Local SGD: local iterations between averagings.", lower_bound=1)
    flags.DEFINE_integer("ahl_h_preset", _D.ahl_h_preset, "ASHL: slowest group's iterations per commit in AHL.",
                         lower_bound=1)
    flags.DEFINE_integer("shl_h_preset", _D.shl_h_preset, "ASHL: slowest group's iterations per commit in SHL.",
                         lower_bound=1)
    flags.DEFINE_float("shl_loss", _D.shl_loss, "ASHL: switch AHL -> SHL at this global training loss; ADSP: the "
                       "target loss of its commit-rate search.")
    flags.DEFINE_integer("profile_steps", _D.profile_steps, "ASHL: iterations of the profiling round.", lower_bound=1)
    flags.DEFINE_float("adsp_period_s", _D.adsp_period_s, "ADSP: scheduling period (s).", lower_bound=0.01)
    flags.DEFINE_integer("adsp_commits", _D.adsp_commits, "ADSP: initial commits per period.", lower_bound=1)
    flags.DEFINE_enum("compression", None, list(COMPRESSIONS), "Top-k of pushes: none, fixed (--compression_ratio) "
                      "or ashl (per-link ratio). Default: ashl for --sync ashl, else none.")
    flags.DEFINE_float("compression_ratio", _D.ratio, "Fixed top-k ratio (fraction of entries).")
    flags.DEFINE_float("min_ratio", _D.min_ratio, "Smallest per-link top-k ratio.")
    flags.DEFINE_float("push_budget", _D.push_budget, "Per-link ratio: a push may take this fraction of its round's "
                       "compute.")
    flags.DEFINE_bool("error_feedback", _D.error_feedback, "Keep what top-k dropped for the next push.")
    flags.DEFINE_float("replan_interval_s", _D.replan_interval_s, "ASHL: re-plan H, D, R this often (s).")
    flags.DEFINE_float("drift", _D.drift, "ASHL: re-plan at once when a group's iteration time is off the plan's "
                       "by more than this fraction ...", lower_bound=0.01)
    flags.DEFINE_integer("drift_evals", _D.drift_evals, "... for this many evaluation intervals in a row.",
                         lower_bound=1)
    flags.DEFINE_float("time_budget_s", time_budget_s, "Hybrid: training wall-time budget (s).", lower_bound=0.1)
    flags.DEFINE_float("target_accuracy", target_accuracy, "Hybrid: stop at this held-out accuracy (0..1).")
    flags.DEFINE_float("eval_interval_s", 2.0, "Hybrid: seconds between the chief's evaluations.", lower_bound=0.05)
    flags.DEFINE_float("checkpoint_interval_s", 10.0, "Hybrid: seconds between checkpoints.", lower_bound=0.1)
    flags.DEFINE_float("wait_timeout_s", 60.0, "Hybrid: the longest wait for another process (s).", lower_bound=1.0)
    flags.DEFINE_float("lost_after_s", 10.0, "Hybrid: a group silent for this long (s) is declared lost.",
                       lower_bound=0.5)
    flags.DEFINE_float("ps_timeout_s", 10.0, "Hybrid: stop the job when the ps has not answered for this long (s).",
                       lower_bound=0.5)
    flags.DEFINE_integer("rejoin_limit", 3, "Hybrid: restart a lost group when its devices answer again (on the "
                         "ones that do, re-planned) at most this many times (0: never).", lower_bound=0)
    if profile_flag:  # `edgemesh run` profiles the devices itself
        flags.DEFINE_string("profile", None, "Hybrid: device profile JSON (edgemesh profile) from which a group that "
                            "lost a device has its filters re-divided over the devices it has left.")
    flags.DEFINE_float("startup_timeout_s", 180.0, "Hybrid: the longest wait for the group processes to start (s).",
                       lower_bound=1.0)
    flags.DEFINE_string("logdir", logdir, "Hybrid: run directory (checkpoints, TensorBoard, group logs).")


def sync_config() -> SyncConfig:
    return SyncConfig(strategy=FLAGS.sync, staleness=FLAGS.staleness, local_steps=FLAGS.local_steps,
                      ahl_h_preset=FLAGS.ahl_h_preset, shl_h_preset=FLAGS.shl_h_preset, shl_loss=FLAGS.shl_loss,
                      profile_steps=FLAGS.profile_steps, adsp_period_s=FLAGS.adsp_period_s,
                      adsp_commits=FLAGS.adsp_commits, compression=FLAGS.compression, ratio=FLAGS.compression_ratio,
                      min_ratio=FLAGS.min_ratio, push_budget=FLAGS.push_budget, error_feedback=FLAGS.error_feedback,
                      replan_interval_s=FLAGS.replan_interval_s, drift=FLAGS.drift, drift_evals=FLAGS.drift_evals)


def run(model: str, layout_path: str, layout_given: bool) -> None:
    """Runs the job described by the flags; raises SystemExit with a clear message on bad input."""
    from edgemesh_tf.cli import cluster_from_flag
    from edgemesh_tf.engine.job import default_groups, groups_of_plan, job_config, run_job
    from edgemesh_tf.planner import load_plan
    from edgemesh_tf.profile.types import load_profile

    try:
        cluster = cluster_from_flag(FLAGS.cluster, "edgemesh train")
        if FLAGS.profile:
            load_profile(FLAGS.profile)  # a malformed profile is named now, not when a device is lost
        if layout_given:
            groups = groups_of_plan(cluster, load_plan(layout_path), layout_path, FLAGS.batch_size)
        else:
            groups = default_groups(cluster, FLAGS.batch_size)
        cfg = job_config(cluster, groups, model=model, dataset=FLAGS.dataset, data_path=FLAGS.data_path,
                         learning_rate=FLAGS.learning_rate, momentum=FLAGS.momentum, seed=FLAGS.seed,
                         eval_interval_s=FLAGS.eval_interval_s, checkpoint_interval_s=FLAGS.checkpoint_interval_s,
                         time_budget_s=FLAGS.time_budget_s, target_accuracy=FLAGS.target_accuracy,
                         max_steps=FLAGS.steps if FLAGS["steps"].present else None,
                         wait_timeout_s=FLAGS.wait_timeout_s, startup_timeout_s=FLAGS.startup_timeout_s,
                         lost_after_s=FLAGS.lost_after_s, ps_timeout_s=FLAGS.ps_timeout_s,
                         rejoin_limit=FLAGS.rejoin_limit, profile_path=FLAGS.profile or None, logdir=FLAGS.logdir,
                         sync=sync_config())
    except ValueError as e:
        raise SystemExit("edgemesh train: %s" % e)
    try:
        final = run_job(cfg, cluster, emulate=FLAGS.emulate, emit=records.print_line)
    except (RuntimeError, TimeoutError) as e:  # PSLost, every group lost, a wait that timed out
        raise SystemExit("edgemesh train: %s" % e)
    print("done: %s; accuracy %.4f after %.1f s, %d steps, %.2f MB sent, %.1f s waiting; tensorboard --logdir %s/tb"
          % (final["why"], final["accuracy"], final["t"], final["global_steps"], final["bytes_sent"] / 1e6,
             final["wait_s"], cfg.logdir), flush=True)
    print(json.dumps({k: v for k, v in final.items() if k != "curve"}), flush=True)
    bad = {g: c for g, c in final["group_exit_codes"].items() if c and g not in final["lost_groups"]}
    if bad:
        sys.exit("edgemesh train: group processes exited with errors %s; see %s/groups/*.log" % (bad, cfg.logdir))
