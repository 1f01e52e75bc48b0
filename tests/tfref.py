"""Helpers shared by the tests: run a few steps under a layout, or the same model in plain TF."""
import numpy as np

from edgemesh_tf.mesh.build import session_config
from edgemesh_tf.mesh.compat import tf
from edgemesh_tf.mesh.layout import Layout, local_devices, single_device_layout
from edgemesh_tf.models.plain_tf import PlainModel
from edgemesh_tf.training.graph import build_train_graph
from edgemesh_tf.training.loop import restore_or_init

LR, MOMENTUM, SEED, BATCH = 0.02, 0.9, 3, 32


def layouts(spec):
    d = local_devices(4)
    dims = spec.split_dims()
    rules = tuple((n, "model") for n in dims)
    five_three = tuple((n, (s * 5 // 8, s - s * 5 // 8)) for n, s in dims.items())
    return {
        "unsplit": single_device_layout(d[0]),
        "even2": Layout(mesh=(("model", 2),), devices=tuple(d[:2]), rules=rules),
        "uneven53": Layout(mesh=(("model", 2),), devices=tuple(d[:2]), rules=rules, sizes=five_three),
        "batch2x_filters2": Layout(mesh=(("batch", 2), ("model", 2)), devices=tuple(d),
                                   rules=(("batch", "batch"),) + rules, sizes=(("batch", (20, 12)),) + five_three),
    }


def feeds(data, steps):
    from edgemesh_tf.data import batches
    stream = batches(data.train_x, data.train_y, BATCH, SEED)
    return [next(stream) for _ in range(steps)]


def run_mesh(spec, layout, batches, fetch_grads=True):
    """Returns (losses per step, {var: gradient at step 0}, {var: weights after the last step})."""
    g = build_train_graph(spec, layout, BATCH, learning_rate=LR, momentum=MOMENTUM, seed=SEED)
    with tf.Session(graph=g.graph, config=session_config(4)) as sess:
        restore_or_init(sess, g, checkpoint_dir=None)
        grads = sess.run(g.gradients, {g.images: batches[0][0], g.labels: batches[0][1]}) if fetch_grads else {}
        losses = [sess.run([g.loss, g.train_op], {g.images: x, g.labels: y})[0] for x, y in batches]
        weights = sess.run(g.weights, {g.images: batches[0][0], g.labels: batches[0][1]})
    return np.array(losses), grads, weights


def run_plain(spec, batches, lr=LR, momentum=MOMENTUM, seed=SEED):
    """The same model and optimizer in plain TF (tf.train.MomentumOptimizer); returns
    (losses per step, {var: gradient at step 0}, {var: weights after the last step})."""
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(seed)
        x = tf.placeholder(tf.float32, [BATCH, *spec.image_shape])
        y = tf.placeholder(tf.int32, [BATCH])
        model = PlainModel(spec, seed)
        loss = model.loss(x, y)
        grads = dict(zip(model.variables, tf.gradients(loss, list(model.variables.values()))))
        step = tf.train.MomentumOptimizer(lr, momentum).minimize(loss)
        init = tf.global_variables_initializer()
    with tf.Session(graph=graph, config=session_config(1)) as sess:
        sess.run(init)
        g0 = sess.run(grads, {x: batches[0][0], y: batches[0][1]})
        losses = [sess.run([loss, step], {x: a, y: b})[0] for a, b in batches]
        weights = sess.run(model.variables)
    return np.array(losses), g0, weights
