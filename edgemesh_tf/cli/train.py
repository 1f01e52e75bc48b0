"""`edgemesh train`: train a reference CNN under a layout over local CPU devices, or (with
`--cluster FILE --sync STRATEGY`) hybrid training over a cluster's parameter server (cli/hybrid.py).

    edgemesh train --layout layouts/digits_uneven.yaml --model vgg --dataset digits --steps 300 --seed 0
    edgemesh train --cluster layouts/edge4.yaml --sync ashl --target_accuracy 0.97 --max_steps 5000

Two modes, each with its own flags; a flag of the other mode is an error, not ignored:
- single-layout training (no --sync): one layout, one process (or, with --cluster, the layout's
  devices on the cluster's servers), until the GLOBAL step --steps. Prints one JSON line per step
  ({"step", "loss", "examples_per_sec"}) and a final line with the held-out accuracy.
- hybrid training (--cluster FILE --sync S): the job flags generated from the configuration
  (`hybrid.define_flags`); its step limit is --max_steps, LOCAL iterations summed over all groups.
"""
from __future__ import annotations

import dataclasses

from absl import flags

from edgemesh_tf.cli import hybrid

SUMMARY = "train a CNN under one layout, or hybrid training with --cluster FILE --sync STRATEGY"
FLAGS = flags.FLAGS
flags.DEFINE_string("layout", "layouts/digits_uneven.yaml", "Layout file (YAML/JSON, see layouts/); with --sync, a "
                    "plan file whose groups are the data-parallel groups (default then: one group per worker).")
flags.DEFINE_integer("steps", 300, "Single-layout training: train until this GLOBAL step (one step: one batch of "
                     "--batch_size over the layout). Not with --sync: hybrid training stops after --max_steps local "
                     "iterations summed over its groups.", lower_bound=1)
flags.DEFINE_integer("batch_size", 32, "Single layout: the global batch (split by the layout's batch sizes). With "
                     "--sync: examples per group per local iteration (a plan's own batch sizes win).", lower_bound=1)
flags.DEFINE_string("checkpoint_dir", None, "Single layout: save here at the end (and every --checkpoint_every); "
                    "resume from it. (Hybrid training checkpoints to <logdir>/checkpoints.)")
flags.DEFINE_integer("checkpoint_every", 0, "Single layout: steps between checkpoints (0: only at the end).",
                     lower_bound=0)
flags.DEFINE_integer("eval_every", 100, "Single layout: steps between held-out evaluations (0: only at the end).",
                     lower_bound=0)
flags.DEFINE_integer("intra_op_threads", 1, "Single layout: TF intra-op threads per process.", lower_bound=1)
flags.DEFINE_string("cluster", None, "Cluster file. Without --sync: run the layout's devices (/job:worker/task:N) on "
                    "its TF servers instead of in-process CPU devices; with --sync: the cluster of hybrid training "
                    "(it needs a ps task).")
flags.DEFINE_integer("group", None, "Single layout, with a plan file of several data-parallel groups: train this "
                     "group (0-based).", lower_bound=0)
flags.DEFINE_bool("emulate", True, "With --cluster: start the emulated testbed of the cluster file for the run "
                  "(else use its real servers).")
JOB_FLAGS = tuple(hybrid.define_flags("train"))  # model, dataset, ..., sync, staleness, ... (engine/config.py)

# Which flags each mode reads; every other flag of this module is an error in that mode.
SINGLE_LAYOUT_ONLY = ("steps", "checkpoint_dir", "checkpoint_every", "eval_every", "intra_op_threads", "group")
BOTH_MODES = ("layout", "batch_size", "cluster", "emulate", "model", "dataset", "data_path", "learning_rate",
              "momentum", "seed", "server_timeout_s")
HYBRID_ONLY = tuple(f for f in JOB_FLAGS if f not in BOTH_MODES)
HELP_GROUPS = [("Cluster and layout (both modes)", ("cluster", "layout", "batch_size", "emulate")),
               ("Single-layout training (without --sync)", SINGLE_LAYOUT_ONLY), *hybrid.help_groups("train")]


@dataclasses.dataclass(frozen=True)
class SingleLayout:
    """What single-layout training runs: `train(load_model(model), load_dataset(dataset, data_path),
    layout of (layout, group), **kwargs)`, on `cluster`'s servers (emulated or not) if given; real
    servers must all answer within server_timeout_s (cluster/ready.py)."""

    layout: str
    group: int | None
    model: str
    dataset: str
    data_path: str | None
    cluster: str | None
    emulate: bool
    kwargs: dict
    server_timeout_s: float = 30.0  # cluster.ready.SERVER_TIMEOUT_S


def _check_mode(hybrid_mode: bool) -> None:
    """Raises ValueError naming every flag given that the mode does not read."""
    given = lambda names: ["--" + n for n in names if FLAGS[n].present]  # noqa: E731
    if hybrid_mode:
        if not FLAGS.cluster:
            raise ValueError("--sync %s needs --cluster FILE (a cluster with a ps task)" % FLAGS.sync)
        if FLAGS["steps"].present:
            raise ValueError("--steps is the global step of single-layout training; hybrid training (--sync) counts "
                             "local iterations summed over all groups: use --max_steps N")
        wrong = given(SINGLE_LAYOUT_ONLY)
        if wrong:
            raise ValueError("%s: only for single-layout training (without --sync), not for hybrid training "
                             "(--sync %s)" % (", ".join(wrong), FLAGS.sync))
    else:
        if FLAGS["max_steps"].present:
            raise ValueError("--max_steps is hybrid training's limit in local iterations summed over groups "
                             "(--cluster FILE --sync S); single-layout training trains until the global step --steps")
        wrong = given(HYBRID_ONLY)
        if wrong:
            raise ValueError("%s: only for hybrid training (--cluster FILE --sync STRATEGY); without --sync, "
                             "`edgemesh train` trains one layout" % ", ".join(wrong))
        if FLAGS["emulate"].present and not FLAGS.cluster:
            raise ValueError("--emulate/--noemulate needs --cluster FILE (without it, training runs in-process)")


def hybrid_job_from_flags() -> hybrid.HybridJob:
    """`edgemesh train --cluster FILE --sync S`'s job from the flags, nothing started."""
    _check_mode(hybrid_mode=True)
    return hybrid.config_from_flags()


def single_layout_from_flags() -> SingleLayout:
    """Single-layout training's arguments from the flags, nothing loaded or started."""
    _check_mode(hybrid_mode=False)
    from edgemesh_tf.data import check_dataset_name  # no TensorFlow

    try:
        check_dataset_name(FLAGS.dataset)
    except ValueError as e:
        raise ValueError("--dataset: %s" % e) from None
    kwargs = dict(steps=FLAGS.steps, batch_size=FLAGS.batch_size, learning_rate=FLAGS.learning_rate,
                  momentum=FLAGS.momentum, seed=FLAGS.seed, checkpoint_dir=FLAGS.checkpoint_dir,
                  checkpoint_every=FLAGS.checkpoint_every, eval_every=FLAGS.eval_every,
                  intra_op_threads=FLAGS.intra_op_threads)
    return SingleLayout(FLAGS.layout, FLAGS.group, FLAGS.model, FLAGS.dataset, FLAGS.data_path, FLAGS.cluster,
                        FLAGS.emulate, kwargs, FLAGS.server_timeout_s)


def main(argv):
    if len(argv) > 1:
        raise SystemExit("edgemesh train: unexpected arguments %s" % argv[1:])
    if FLAGS.sync:
        try:
            job = hybrid_job_from_flags()
        except ValueError as e:
            raise SystemExit("edgemesh train: %s" % e)
        hybrid.run(job)
        return
    try:
        run = single_layout_from_flags()
    except ValueError as e:
        raise SystemExit("edgemesh train: %s" % e)
    # TensorFlow only after the flags are checked: a bad flag is named at once, not after its import
    from edgemesh_tf.data import load_dataset
    from edgemesh_tf.planner import load_plan
    from edgemesh_tf.models import load_model
    from edgemesh_tf.training.loop import train

    try:
        layout = _layout_of_plan(load_plan(run.layout), run.layout, run.group)
        data = load_dataset(run.dataset, run.data_path)
        spec = load_model(run.model, data.image_shape, data.num_classes)
        try:
            spec.check_splittable(dim for dim, _ in layout.rules)
            layout.validate(spec.dims(run.kwargs["batch_size"]))
        except ValueError as e:
            raise ValueError("%s: %s" % (run.layout, e)) from None
    except ValueError as e:
        raise SystemExit("edgemesh train: %s" % e)
    if not run.cluster:
        train(spec, data, layout, **run.kwargs)
        return
    from edgemesh_tf.cluster.reach import ServersNotAnswering, reach_servers
    from edgemesh_tf.cluster.spec import load_cluster
    try:
        cluster = load_cluster(run.cluster)
        known = {d.device_string for d in cluster.devices}
        for dev in layout.devices:
            if dev not in known:
                raise ValueError("layout %s: device %r is not in cluster %s; expected one of %s"
                                 % (run.layout, dev, run.cluster, sorted(known)))
    except ValueError as e:
        raise SystemExit("edgemesh train: %s" % e)
    from edgemesh_tf.cluster.watch import DeviceDied, raise_if_died
    try:
        with reach_servers(cluster, run.emulate, server_timeout_s=run.server_timeout_s) as servers:
            try:
                train(spec, data, layout, session_target=servers.target,
                      master_device=cluster.master.device_string, **run.kwargs)
            except Exception:  # a step failed: a testbed device killed (past its memory budget) is named
                if servers.testbed is not None:
                    raise_if_died(servers.testbed.check)
                raise
    except (ServersNotAnswering, DeviceDied) as e:  # a real server missing (named with its start command); a dead one
        raise SystemExit("edgemesh train: %s" % e)


def _layout_of_plan(plan, path: str, group):
    """The layout to train: the plan's only group, or group ``group`` of several."""
    n = len(plan.groups)
    if group is None and n > 1:
        raise ValueError("%s has %d data-parallel groups; train one with --group N (0..%d), or plan a single group "
                         "with `edgemesh plan --groups 1`" % (path, n, n - 1))
    index = group or 0
    if index >= n:
        raise ValueError("%s: --group %d does not exist; the plan has groups 0..%d" % (path, index, n - 1))
    return plan.groups[index].layout
