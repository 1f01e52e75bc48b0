"""The step's fed learning rate and weight decay: one step from zero momentum on an uneven layout is
w - lr * (g + weight_decay * w), PyTorch's SGD as the ASHL authors train (sync/schedule.sgd_momentum_step)."""
import numpy as np

from edgemesh_tf.mesh.build import session_config
from edgemesh_tf.mesh.compat import tf
from edgemesh_tf.mesh.layout import Layout, local_devices
from edgemesh_tf.sync.schedule import sgd_momentum_step
from edgemesh_tf.training.graph import build_train_graph
from edgemesh_tf.training.loop import restore_or_init

B, LR, WD = 32, 0.07, 0.01


def test_one_step_matches_sgd_with_weight_decay_at_the_fed_rate(vgg_digits, digits):
    d = local_devices(2)
    dims = vgg_digits.split_dims()
    layout = Layout(mesh=(("model", 2),), devices=tuple(d), rules=tuple((n, "model") for n in dims),
                    sizes=tuple((n, (s * 5 // 8, s - s * 5 // 8)) for n, s in dims.items()))
    g = build_train_graph(vgg_digits, layout, B, learning_rate=0.5, momentum=0.9, seed=3, weight_decay=WD)
    feed = {g.images: digits.train_x[:B], g.labels: digits.train_y[:B]}
    with tf.Session(graph=g.graph, config=session_config(2)) as sess:
        restore_or_init(sess, g, checkpoint_dir=None)
        w0, grads = sess.run([g.weights, g.gradients], feed)
        sess.run(g.train_op, {**feed, g.learning_rate: LR})  # the fed rate, not the build's 0.5
        w1 = sess.run(g.weights, feed)
    for name in w0:
        expected, _ = sgd_momentum_step(w0[name], grads[name], 0.0, LR, momentum=0.9, weight_decay=WD)
        np.testing.assert_allclose(w1[name], expected, atol=2e-6, err_msg=name)
    assert any(float(np.max(np.abs(w0[n]))) > 0.05 for n in w0)  # the decay term is not negligible
