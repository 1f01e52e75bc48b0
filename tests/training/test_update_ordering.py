"""The training step's reads of a variable happen before its update, in every run.

mtf's own step leaves them unordered (docs/DESIGN.md: 4 of 30 runs gave wrong first-layer updates on
TF 2.21). Fresh graphs and sessions, repeated: each run's weights after two steps must equal plain
TF's (MomentumOptimizer) within 1e-6.
"""
import numpy as np
import pytest

from edgemesh_tf.mesh.build import session_config
from edgemesh_tf.mesh.compat import tf
from edgemesh_tf.mesh.layout import Layout, local_devices
from edgemesh_tf.training.graph import build_train_graph
from edgemesh_tf.training.loop import restore_or_init
from tfref import run_plain

pytestmark = [pytest.mark.slow]

LR, MOM, SEED, B, RUNS = 0.05, 0.9, 5, 32, 12


def test_repeated_runs_update_exactly_like_plain_tf(vgg_digits, digits):
    d = local_devices(4)
    dims = vgg_digits.split_dims()
    layout = Layout(mesh=(("batch", 2), ("model", 2)), devices=tuple(d),
                    rules=(("batch", "batch"),) + tuple((n, "model") for n in dims),
                    sizes=(("batch", (20, 12)),) + tuple((n, (s * 5 // 8, s - s * 5 // 8)) for n, s in dims.items()))
    feeds = [(digits.train_x[i * B:(i + 1) * B], digits.train_y[i * B:(i + 1) * B]) for i in range(2)]
    expected = run_plain(vgg_digits, feeds, lr=LR, momentum=MOM, seed=SEED)[2]
    worst = []
    for _ in range(RUNS):
        g = build_train_graph(vgg_digits, layout, B, learning_rate=LR, momentum=MOM, seed=SEED)
        with tf.Session(graph=g.graph, config=session_config(4)) as sess:
            restore_or_init(sess, g, checkpoint_dir=None)
            for a, b in feeds:
                sess.run(g.train_op, {g.images: a, g.labels: b})
            got = sess.run(g.weights, {g.images: feeds[0][0], g.labels: feeds[0][1]})
        worst.append(max(float(np.max(np.abs(got[k] - expected[k]))) for k in expected))
    assert max(worst) < 1e-6, worst
