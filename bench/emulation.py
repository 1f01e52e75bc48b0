"""Emulated testbed check: does each device deliver the speed, bandwidth and latency of its file?

    python bench/emulation.py --cluster layouts/edge4.yaml     # prints JSON; exit 1 if off by >15%
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from edgemesh_tf.cluster import emulated_cluster, measure  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("cluster", "layouts/edge4.yaml", "Cluster file.")
flags.DEFINE_float("tolerance", 0.15, "Allowed relative error of every figure.")
flags.DEFINE_integer("rounds", 3, "Interleaved rounds of compute timing per device (the fastest counts).")
flags.DEFINE_enum("network", "auto", ["auto", "netns", "userspace"], "Network emulation.")
flags.DEFINE_enum("compute", "auto", ["auto", "cgroup-v1", "cgroup-v2", "step-delay", "off"], "Compute emulation.")


def main(argv):
    del argv
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    with emulated_cluster(FLAGS.cluster, network=FLAGS.network, compute=FLAGS.compute) as cluster:
        result = measure.measure(cluster, tolerance=FLAGS.tolerance, rounds=FLAGS.rounds)
    print(json.dumps(result, indent=1))
    return 0 if result["all_within_tolerance"] else 1


if __name__ == "__main__":
    app.run(main)
