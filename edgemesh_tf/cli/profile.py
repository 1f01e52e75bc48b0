"""`edgemesh profile`: measure every worker of a cluster for a model (ASHL's short pre-training).

    edgemesh profile --cluster layouts/edge4.yaml --model vgg --dataset digits --batch 32 --out runs/edge4.profile.json

With --emulate (default) the emulated testbed of the cluster file is started for the duration;
with --noemulate the servers must already run at the file's addresses (`edgemesh server`): each must
answer within --server_timeout_s, else the command stops naming the missing ones.
"""
import json

from absl import flags

from edgemesh_tf.cluster.ready import SERVER_TIMEOUT_S

SUMMARY = "measure every worker of a cluster for a model: the planner's input"
FLAGS = flags.FLAGS
flags.DEFINE_string("cluster", "layouts/edge4.yaml", "Cluster file (YAML).")
flags.DEFINE_string("model", "vgg", "The model: a zoo name (vgg, vgg_wide, resnet, vgg16, vgg_m), a model file "
                    "that defines model(images, num_classes), or a Keras model file (.keras).")
flags.DEFINE_string("dataset", "digits", "Dataset whose image shape and classes the model takes (no image is "
                    "loaded): a built-in one, npz:FILE (its arrays' headers and labels are read) or "
                    "dir:FOLDER[?options] (its images' headers are read; README: Bring your data).")
flags.DEFINE_integer("batch", 32, "Examples per device step.", lower_bound=1)
flags.DEFINE_integer("repeats", 5, "Timed repeats per measurement.", lower_bound=3)
flags.DEFINE_bool("emulate", True, "Start the emulated testbed for the cluster file.")
flags.DEFINE_float("server_timeout_s", SERVER_TIMEOUT_S, "With --noemulate: the longest wait (s) for every TF "
                   "server of the cluster file to answer; past it the command stops, naming each missing task, its "
                   "address and the command that starts it.", lower_bound=1.0)
flags.DEFINE_string("out", "runs/profile.json", "Where to write the profile (JSON).")


def main(argv):
    if len(argv) > 1:
        raise SystemExit("edgemesh profile: unexpected arguments %s" % argv[1:])
    import os

    from edgemesh_tf.data import dataset_shape

    try:  # a bad dataset name or file is named before TensorFlow is imported
        image_shape, num_classes = dataset_shape(FLAGS.dataset)
    except ValueError as e:
        raise SystemExit("edgemesh profile: --dataset: %s" % e)

    from edgemesh_tf.cluster import load_cluster
    from edgemesh_tf.cluster.reach import reach_servers
    from edgemesh_tf.models import load_model
    from edgemesh_tf.planner.calibrate import steps_to_time
    from edgemesh_tf.profiling.run import budgets, profile_servers
    from edgemesh_tf.profiling.types import save_profile

    try:
        spec = load_model(FLAGS.model, image_shape, num_classes)
        cluster = load_cluster(FLAGS.cluster)
        with reach_servers(cluster, FLAGS.emulate, server_timeout_s=FLAGS.server_timeout_s) as servers:
            profile = profile_servers(cluster, spec, FLAGS.batch, servers, repeats=FLAGS.repeats,
                                      **steps_to_time(budgets(cluster), spec, FLAGS.batch))
    except (ValueError, RuntimeError, TimeoutError) as e:  # bad input; a server missing or dead (named); no answer
        raise SystemExit("edgemesh profile: %s" % e)
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.out)), exist_ok=True)
    save_profile(profile, FLAGS.out)
    for d in profile.devices:
        print(json.dumps({"device": d.name, "layers_ms": {t.name: t.compute_ms for t in d.layers},
                          "bandwidth_mbit": d.bandwidth_mbit, "latency_ms": d.latency_ms,
                          "step_overhead_ms": d.step_overhead_ms, "peak_memory_bytes": d.peak_memory_bytes}))
    print("wrote %s" % FLAGS.out)
