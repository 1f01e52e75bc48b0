"""Cost of edgemesh's uneven lowering against the same work written by hand in plain TF.

    python -m bench.uneven_split [--steps 40] [--batch 64] [--model vgg]

One training step (forward, backward, momentum update) of the reference model on 32x32x3 synthetic
images, on the same two in-process CPU devices, five ways:
  plain_tf            unsplit, plain TF (tf.train.MomentumOptimizer)
  plain_tf_53         filters of every layer split 5:3 by hand: kernel split by sizes, one conv per
                      device, concat (what a user writes without edgemesh)
  edgemesh_unsplit    edgemesh, one device
  edgemesh_53         edgemesh, every layer's filters split 5:3 (uneven lowering)
  virtual_processors  mtf's stock PlacementMeshImpl faking 5:3 with 8 virtual processors (5+3)
measured side by side (interleaved rounds, so the machine's noise hits all alike). Prints one JSON
object: median step times (ms) and their ratios.
"""
import statistics
import time
from types import SimpleNamespace

import numpy as np

from bench import cli
from edgemesh_tf.mesh import Layout, local_devices, mtf, placement_mesh_impl, session_config, single_device_layout, tf
from edgemesh_tf.models import PlainModel, get_model
from edgemesh_tf.profiling import measure_side_by_side
from edgemesh_tf.training import build_train_graph, restore_or_init


def _ms(sess, fetches, feed) -> float:
    """Wall time of one sess.run (ms)."""
    t0 = time.perf_counter()
    sess.run(fetches, feed)
    return (time.perf_counter() - t0) * 1e3


def plain_step(spec, batch, splits, devices, feed, seed=0):
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(seed)
        with tf.device(devices[0]):
            x = tf.placeholder(tf.float32, [batch, *spec.image_shape])
            y = tf.placeholder(tf.int32, [batch])
        model = PlainModel(spec, seed, splits=splits, devices=devices)
        with tf.device(devices[0]):
            loss = model.loss(x, y)
            step = tf.train.MomentumOptimizer(0.01, 0.9).minimize(loss)
        init = tf.global_variables_initializer()
    sess = tf.Session(graph=graph, config=session_config(2))
    sess.run(init)
    return SimpleNamespace(sess=sess, step_ms=lambda: _ms(sess, [loss, step], {x: feed[0], y: feed[1]}))


def mesh_step(spec, batch, layout, feed, mesh_impl=None):
    g = build_train_graph(spec, layout, batch, learning_rate=0.01, mesh_impl=mesh_impl)
    sess = tf.Session(graph=g.graph, config=session_config(2))
    restore_or_init(sess, g, checkpoint_dir=None)
    feed_dict = {g.images: feed[0], g.labels: feed[1]}
    return SimpleNamespace(sess=sess, step_ms=lambda: _ms(sess, [g.loss, g.train_op], feed_dict))


def main():
    args = cli.parser(__doc__, (("steps", 40, "measured steps per configuration (>= 30)"), ("batch", 64),
                                ("model", "vgg"), ("round", 5, "steps per configuration per round"))).parse_args()
    spec, devices = get_model(args.model, (32, 32, 3), 10), local_devices(2)
    dims = spec.split_dims()
    splits = {name: (round(size * 5 / 8), size - round(size * 5 / 8)) for name, size in dims.items()}  # 5:3
    rules = tuple((name, "model") for name in dims)
    uneven = Layout(mesh=(("model", 2),), devices=tuple(devices), rules=rules, sizes=tuple(splits.items()))
    single = single_device_layout(devices[0])
    virtual = placement_mesh_impl.PlacementMeshImpl(mtf.Shape([mtf.Dimension("model", 8)]), mtf.LayoutRules(
        [r for r in rules if dims[r[0]] % 8 == 0]), [devices[0]] * 5 + [devices[1]] * 3)
    rng = np.random.RandomState(0)
    feed = (rng.rand(args.batch, *spec.image_shape).astype(np.float32), rng.randint(0, 10, args.batch).astype(np.int32))
    runners = {"plain_tf": plain_step(spec, args.batch, {}, devices, feed),
               "plain_tf_53": plain_step(spec, args.batch, splits, devices, feed),
               "edgemesh_unsplit": mesh_step(spec, args.batch, single, feed),
               "edgemesh_53": mesh_step(spec, args.batch, uneven, feed),
               "virtual_processors": mesh_step(spec, args.batch, single, feed, mesh_impl=virtual)}
    # 3 warm-up steps each (graph optimisation and first allocations), then interleaved rounds of --round steps
    times = measure_side_by_side(runners, args.steps, args.round, warmup=3)
    for r in runners.values():
        r.sess.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {"model": args.model, "batch": args.batch, "image_shape": list(spec.image_shape), "devices": 2,
           "split": {k: list(v) for k, v in splits.items()}, "steps_per_config": len(times["plain_tf"]),
           "median_step_ms": {k: round(v, 2) for k, v in med.items()},
           "uneven_over_plain_tf": round(med["edgemesh_53"] / med["plain_tf_53"], 3),
           "unsplit_over_plain_tf": round(med["edgemesh_unsplit"] / med["plain_tf"], 3),
           "virtual_processors_over_edgemesh": round(med["virtual_processors"] / med["edgemesh_53"], 3)}
    return cli.emit(out)


if __name__ == "__main__":
    main()
