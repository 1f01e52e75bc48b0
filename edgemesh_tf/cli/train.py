"""`edgemesh train`: train a reference CNN under a layout over local CPU devices, or (with
`--cluster FILE --sync STRATEGY`) hybrid training over a cluster's parameter server (cli/hybrid.py).

    edgemesh train --layout layouts/digits_uneven.yaml --model vgg --dataset digits --steps 300 --seed 0
    edgemesh train --cluster layouts/edge4.yaml --sync ashl --target_accuracy 0.97

Prints one JSON line per step ({"step", "loss", "examples_per_sec"}) and a final line with the
held-out accuracy.
"""
from absl import flags

from edgemesh_tf.cli import hybrid
from edgemesh_tf.data import DATASET_NAMES
from edgemesh_tf.models import MODEL_NAMES

FLAGS = flags.FLAGS
flags.DEFINE_string("layout", "layouts/digits_uneven.yaml", "Layout file (YAML/JSON), see layouts/.")
flags.DEFINE_enum("model", "vgg", list(MODEL_NAMES), "Reference model.")
flags.DEFINE_enum("dataset", "digits", list(DATASET_NAMES), "Dataset.")
flags.DEFINE_string("data_path", None, "Directory holding the cifar10 / mnist files (nothing is downloaded).")
flags.DEFINE_integer("steps", 300, "Train until this global step.", lower_bound=1)
flags.DEFINE_integer("batch_size", 32, "Global batch size (split by the layout's batch sizes).", lower_bound=1)
flags.DEFINE_float("learning_rate", 0.02, "SGD learning rate.", lower_bound=0.0)
flags.DEFINE_float("momentum", 0.9, "Momentum.", lower_bound=0.0)
flags.DEFINE_integer("seed", 0, "Seed for weights and data order.")
flags.DEFINE_string("checkpoint_dir", None, "Save here at the end (and every --checkpoint_every); resume from it.")
flags.DEFINE_integer("checkpoint_every", 0, "Steps between checkpoints (0: only at the end).", lower_bound=0)
flags.DEFINE_integer("eval_every", 100, "Steps between held-out evaluations (0: only at the end).", lower_bound=0)
flags.DEFINE_integer("intra_op_threads", 1, "TF intra-op threads per process.", lower_bound=1)
flags.DEFINE_string("cluster", None, "Cluster file: run the layout's devices (/job:worker/task:N) on its TF servers "
                    "instead of in-process CPU devices.")
flags.DEFINE_integer("group", None, "With a plan file of several data-parallel groups: train this group (0-based).",
                     lower_bound=0)
flags.DEFINE_bool("emulate", True, "With --cluster: start the emulated testbed of the cluster file for the run.")
hybrid.define_flags()


def main(argv):
    if len(argv) > 1:
        raise SystemExit("edgemesh train: unexpected arguments %s" % argv[1:])
    from edgemesh_tf.data import load_dataset
    from edgemesh_tf.planner import load_plan
    from edgemesh_tf.models import get_model
    from edgemesh_tf.train.loop import train

    if FLAGS.sync:
        if not FLAGS.cluster:
            raise SystemExit("edgemesh train: --sync %s needs --cluster FILE (a cluster with a ps task)" % FLAGS.sync)
        hybrid.run(FLAGS.model, FLAGS.layout, FLAGS["layout"].present)
        return
    try:
        layout = _layout_of_plan(load_plan(FLAGS.layout), FLAGS.layout, FLAGS.group)
        data = load_dataset(FLAGS.dataset, FLAGS.data_path)
        spec = get_model(FLAGS.model, data.image_shape, data.num_classes)
        try:
            layout.validate(spec.dims(FLAGS.batch_size))
        except ValueError as e:
            raise ValueError("%s: %s" % (FLAGS.layout, e)) from None
    except ValueError as e:
        raise SystemExit("edgemesh train: %s" % e)
    kwargs = dict(steps=FLAGS.steps, batch_size=FLAGS.batch_size, learning_rate=FLAGS.learning_rate,
                  momentum=FLAGS.momentum, seed=FLAGS.seed, checkpoint_dir=FLAGS.checkpoint_dir,
                  checkpoint_every=FLAGS.checkpoint_every, eval_every=FLAGS.eval_every,
                  intra_op_threads=FLAGS.intra_op_threads)
    if not FLAGS.cluster:
        train(spec, data, layout, **kwargs)
        return
    from edgemesh_tf.cluster.reach import reachable_cluster
    from edgemesh_tf.cluster.spec import load_cluster
    try:
        cluster = load_cluster(FLAGS.cluster)
        known = {d.device_string for d in cluster.devices}
        for dev in layout.devices:
            if dev not in known:
                raise ValueError("layout %s: device %r is not in cluster %s; expected one of %s"
                                 % (FLAGS.layout, dev, FLAGS.cluster, sorted(known)))
    except ValueError as e:
        raise SystemExit("edgemesh train: %s" % e)
    with reachable_cluster(cluster, FLAGS.emulate) as (_, target, _):
        train(spec, data, layout, session_target=target, master_device=cluster.master.device_string, **kwargs)


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
