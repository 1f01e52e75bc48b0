"""Single-process training checkpoints are training/checkpoint.py's: whole weights and momentum
buffers by name, the global step in the state; a checkpoint that lacks a tensor or has another
shape is named with the tensor."""
import numpy as np
import pytest

from edgemesh_tf.training import checkpoint
from edgemesh_tf.mesh.build import session_config
from edgemesh_tf.mesh.compat import tf
from edgemesh_tf.mesh.layout import single_device_layout
from edgemesh_tf.training.graph import build_train_graph
from edgemesh_tf.training.loop import restore_or_init, save

B = 16


def _graph(spec):
    return build_train_graph(spec, single_device_layout("cpu:0"), B, learning_rate=0.05, seed=1)


def test_save_then_restore_in_a_fresh_session(vgg_digits, digits, tmp_path):
    g = _graph(vgg_digits)
    feed = {g.images: digits.train_x[:B], g.labels: digits.train_y[:B]}
    with tf.Session(graph=g.graph, config=session_config(1)) as sess:
        assert restore_or_init(sess, g, str(tmp_path)) == 0
        sess.run(g.train_op, feed)
        sess.run(g.train_op, feed)
        prefix = save(sess, g, str(tmp_path))
        trained = sess.run(g.weights)
    weights, state = checkpoint.load(prefix)
    assert checkpoint.latest(str(tmp_path)) == prefix and state == {"step": 2}
    assert set(trained) < set(weights) and any(n.startswith("momentum/") for n in weights)
    with tf.Session(graph=g.graph, config=session_config(1)) as sess:
        assert restore_or_init(sess, g, str(tmp_path)) == 2
        restored = sess.run(g.weights)
    for name in trained:
        np.testing.assert_array_equal(restored[name], trained[name], err_msg=name)


def test_missing_or_misshapen_tensor_is_named(vgg_digits, tmp_path):
    g = _graph(vgg_digits)
    with tf.Session(graph=g.graph, config=session_config(1)) as sess:
        restore_or_init(sess, g, None)
        prefix = save(sess, g, str(tmp_path / "a"))
    weights, state = checkpoint.load(prefix)
    del weights["conv1/kernel"]
    checkpoint.save(str(tmp_path / "b"), weights, state)
    weights["conv1/kernel"] = np.zeros((1, 2), np.float32)
    checkpoint.save(str(tmp_path / "c"), weights, state)
    for d, found in (("b", "none"), ("c", r"\[1, 2\]")):
        with tf.Session(graph=g.graph, config=session_config(1)) as sess:
            with pytest.raises(ValueError, match=r"ckpt-1: tensor conv1/kernel should have shape \[3, 3, 1, 32\], "
                                                 r"found " + found):
                restore_or_init(sess, g, str(tmp_path / d))
