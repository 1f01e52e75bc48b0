"""`edgemesh server`: one TF server for one task, until SIGTERM/SIGINT.

    TF_CONFIG='{"cluster": {...}, "task": {"type": "worker", "index": 0}}' edgemesh server
    edgemesh server --cluster layouts/edge4.yaml --device edge0
"""
import os
import sys

from absl import flags, logging

from edgemesh_tf.cluster import server, spec, tf_config

SUMMARY = "serve one TF task (from TF_CONFIG, or --cluster and --device) until stopped"
FLAGS = flags.FLAGS
flags.DEFINE_string("tf_config", None, "TF_CONFIG JSON or a path to it (default: the TF_CONFIG environment variable).")
flags.DEFINE_string("cluster", None, "Cluster file; with --device, used instead of TF_CONFIG.")
flags.DEFINE_string("device", None, "Device name in --cluster.")
flags.DEFINE_string("ready_file", None, "Written with the server target once the server is up.")
flags.DEFINE_integer("intra_op_threads", 0, "Intra-op threads (0 = TF default).")
flags.DEFINE_integer("inter_op_threads", 0, "Inter-op threads (0 = TF default).")
flags.DEFINE_boolean("facts", True, "Answer `edgemesh cluster check`'s query of this server's versions (imports "
                     "TensorFlow's py-function machinery: ~2 s more at start); the emulated testbed's servers "
                     "start without it.")


def main(argv):
    del argv
    try:
        if FLAGS.cluster or FLAGS.device:
            if not (FLAGS.cluster and FLAGS.device):
                raise ValueError("--cluster and --device go together")
            cfg = tf_config.tf_config(spec.load_cluster(FLAGS.cluster), FLAGS.device)
        else:
            cfg = server.parse_tf_config(FLAGS.tf_config)
    except (ValueError, OSError, KeyError) as e:
        sys.exit("edgemesh server: %s" % e)
    code = server.serve_until_signal(cfg, FLAGS.ready_file, intra_op_threads=FLAGS.intra_op_threads,
                                     inter_op_threads=FLAGS.inter_op_threads, facts=FLAGS.facts)
    logging.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    # TF's gRPC server cannot be stopped; skipping interpreter teardown avoids hangs in its destructors.
    os._exit(code)
