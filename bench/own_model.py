"""A user's own model on the emulated cluster against the same network in plain TF on one device.

    python -m bench.own_model --model examples/lenet_bn.py --dataset digits32 [--seeds 0,1,2] [--epochs 30]

Per seed: plain TF on one device (the model file's network and initial weights via models/plain_tf.py,
SGD with momentum 0.9 at learning rate 0.02, batch 32, --epochs passes, batch norm's running statistics
at evaluation), then ``edgemesh_tf.run`` on --cluster (profile, plan, ASHL) at the same rate and momentum
to the plain-TF median less one point, judged on the whole test set, within --time_budget_s;
--lr_schedule constant (the default here) trains at that rate throughout as plain TF does, cosine is
ASHL's own decay. Prints one JSON object (`make bench-own-model` records it): each run's accuracy, the
plain-TF median, whether each edgemesh run reached the target, what the plan split.
"""
import os
import statistics
import sys
import time

import numpy as np

import edgemesh_tf as em
from bench import cli
from edgemesh_tf.data import batches, load_dataset, padded_batches
from edgemesh_tf.mesh import tf
from edgemesh_tf.models import PlainModel, load_model

WHOLE_TEST_SET = 10 ** 9  # eval_examples: every evaluation on the whole test set, as plain TF's accuracy is


def plain_tf_accuracy(model: str, dataset: str, seed: int, epochs: int, batch: int = 32, lr: float = 0.02) -> float:
    data = load_dataset(dataset)
    spec = load_model(model, data.image_shape, data.num_classes)
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(seed)
        x = tf.placeholder(tf.float32, [None, *spec.image_shape])
        y = tf.placeholder(tf.int32, [None])
        net = PlainModel(spec, seed)
        loss = net.loss(x, y)
        with tf.control_dependencies(net.updates):  # batch norm's running statistics
            step = tf.train.MomentumOptimizer(lr, 0.9).minimize(loss)
        logits = net.logits(x, training=False)
        init = tf.global_variables_initializer()
    with tf.Session(graph=graph) as sess:
        sess.run(init)
        stream = batches(data.train_x, data.train_y, batch, seed)
        for _ in range(epochs * max(1, len(data.train_x) // batch)):
            xb, yb = next(stream)
            sess.run(step, {x: xb, y: yb})
        correct = 0
        for xb, yb, n in padded_batches(data.test_x, data.test_y, batch):
            correct += int(np.sum(np.argmax(sess.run(logits, {x: xb})[:n], axis=1) == yb[:n]))
    return correct / len(data.test_x)


def edgemesh_run(args, seed: int, target: float) -> dict:
    """``edgemesh_tf.run`` (profile, plan, ASHL) to ``target`` at plain TF's learning rate and momentum."""
    summary = em.run(args.cluster, args.model, dataset=args.dataset, seed=seed, target_accuracy=target,
                     time_budget_s=args.time_budget_s, emit=lambda rec: None, learning_rate=0.02, momentum=0.9,
                     lr_schedule=args.lr_schedule, eval_examples=WHOLE_TEST_SET,
                     logdir=os.path.join("runs", "own_model-%d-%s" % (seed, time.strftime("%H%M%S"))))
    return {"accuracy": summary["accuracy"], "reached": summary["time_to_target_s"] is not None,
            **{k: summary[k] for k in ("time_to_target_s", "setup_s", "planned", "logdir")}}


def main(argv=None):
    args = cli.parser(__doc__, (
        ("model", None, None, {"required": True}), ("dataset", "digits32"), ("cluster", "layouts/pi4.yaml"),
        ("seeds", [0, 1, 2]), ("epochs", 30), ("time_budget_s", 240.0),
        ("lr_schedule", "constant", None, {"choices": ["constant", "cosine"]}))).parse_args(argv)
    t0 = time.monotonic()
    plain = {s: round(plain_tf_accuracy(args.model, args.dataset, s, args.epochs), 4) for s in args.seeds}
    reference = statistics.median(plain.values())
    target = round(reference - 0.01, 4)
    runs = {s: edgemesh_run(args, s, target) for s in args.seeds}
    out = {"model": args.model, "dataset": args.dataset, "cluster": args.cluster, "epochs": args.epochs,
           "lr_schedule": args.lr_schedule, "plain_tf_one_device": plain, "plain_tf_median": reference,
           "target": target, "target_judged_on": "the whole test set", "edgemesh": runs,
           "edgemesh_median": statistics.median(r["accuracy"] for r in runs.values()),
           "all_reached": all(r["reached"] for r in runs.values()),
           "any_split": any(r["planned"]["splits"] for r in runs.values()), "seconds": round(time.monotonic() - t0, 1)}
    return 0 if cli.emit(out)["all_reached"] else 1


if __name__ == "__main__":
    sys.exit(main())
