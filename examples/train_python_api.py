"""A CNN of its own, profiled, planned and trained on the emulated pi4 cluster from Python.

    .venv/bin/python examples/train_python_api.py [LOGDIR [CLUSTER]]   # from the repo root, as root; ~1 min

CLUSTER is a cluster file (default layouts/pi4.yaml).

The model is defined inline with the mesh API for the built-in 8x8x1 `digits`: every conv2d and
dense names a split dim (its filters / units) that the planner may divide unevenly across the
devices of a group; batch norm and ReLU run on those slices, the next conv gathers them.
Exits 1 if the target accuracy was not reached.
"""
import sys

import edgemesh_tf as em
from edgemesh_tf import layers as L

TARGET, BUDGET_S = 0.9, 90


def model(images: L.Tensor, num_classes: int) -> L.Tensor:
    x = L.relu(L.batch_norm(L.conv2d(images, "conv1", 32)))          # 3x3 SAME, 8x8x32
    x = L.relu(L.batch_norm(L.conv2d(x, "conv2", 64, strides=2)))    # strided: 4x4x64
    x = L.conv2d(x, "conv3", 128, activation="relu")                  # 4x4x128
    x = L.global_avg_pool(x)                                          # 128 per example
    return L.dense(x, "logits", num_classes, gain=1.0)


if __name__ == "__main__":
    spec = em.load_model(model, dataset="digits", name="small_bn_cnn")
    logdir = sys.argv[1] if len(sys.argv) > 1 else None
    cluster_file = sys.argv[2] if len(sys.argv) > 2 else "layouts/pi4.yaml"
    with em.start(cluster_file) as cluster:        # the emulated testbed, torn down at the end
        profile = em.profile(cluster, spec, batch=32)    # per-device layer times, links, memory
        plan = em.plan(profile, spec, strategy="ashl")   # groups x uneven filter division
        print(em.format_table(plan), flush=True)
        result = em.train(cluster, spec, plan, strategy="ashl", dataset="digits", target_accuracy=TARGET,
                          time_budget_s=BUDGET_S, logdir=logdir)
    print("accuracy %.4f, time to target %s s, stopped: %s, %.1f s of training, %.0f examples/s, %.2f MB sent, "
          "logs in %s" % (result.accuracy, result.time_to_target_s, result.why, result.train_s,
                          result.examples_per_sec, result.bytes_sent / 1e6, result.logdir))
    sys.exit(0 if result.time_to_target_s is not None else 1)
