"""`edgemesh tf-config`: one TF_CONFIG JSON per device of a cluster file, plus its start command and
why its server is needed (`tf_config.role_needs`: every one is; the chief's too, since the job's
client connects to it).

    edgemesh tf-config --cluster layouts/edge4.yaml --out_dir runs/tf_config
    # then on each host:  TF_CONFIG="$(cat runs/tf_config/edge0.json)" edgemesh server
"""
import json
import os

from absl import flags

from edgemesh_tf.cli import cluster_from_flag
from edgemesh_tf.cluster import server, tf_config
from edgemesh_tf.cluster.ready import SERVER_TIMEOUT_S

SUMMARY = "write a TF_CONFIG JSON and a start command for each device of a cluster file"
FLAGS = flags.FLAGS
flags.DEFINE_string("cluster", None, "Cluster file (YAML).")
flags.DEFINE_string("out_dir", None, "Write <device>.json and <device>.sh here (default: print only).")


def main(argv):
    del argv
    cluster = cluster_from_flag(FLAGS.cluster, "edgemesh tf-config")
    if FLAGS.out_dir:
        os.makedirs(FLAGS.out_dir, exist_ok=True)
    print("# Start the server of EVERY device below on its host before `edgemesh run|train|profile --noemulate`;\n"
          "# they wait at most --server_timeout_s (%.0f s) for all to answer, then stop naming the missing ones."
          % SERVER_TIMEOUT_S)
    print("# " + server.SECURITY_NOTE)
    for d in cluster.devices:
        needs = tf_config.role_needs(cluster, d)
        config = tf_config.tf_config(cluster, d)
        command = tf_config.server_command(cluster, d)
        if FLAGS.out_dir:
            with open(os.path.join(FLAGS.out_dir, d.name + ".json"), "w") as f:
                json.dump(config, f, indent=1)
            with open(os.path.join(FLAGS.out_dir, d.name + ".sh"), "w") as f:
                f.write("#!/bin/sh\n# Start %s (%s) on %s.\n# %s: %s\nexec env %s\n"
                        % (d.name, d.device_string, d.host, d.role, needs, command))
            os.chmod(os.path.join(FLAGS.out_dir, d.name + ".sh"), 0o755)
        print("# %s  %s  %s\n#   %s: %s\n%s" % (d.name, d.device_string, d.address, d.role, needs, command))
