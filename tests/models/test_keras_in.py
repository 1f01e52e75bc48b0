"""Keras in: a saved Keras model read as a mesh-API model (``models/keras_in.py``) predicts what Keras
predicts, and a Keras layer or setting outside the supported list fails with one line naming it.

Property tests: ``keras_cases.py`` (run in its own process: Keras runs eagerly, the tests' TensorFlow
in graph mode) saves small models covering every supported layer and setting with random weights and
Keras's predictions; each is read back, built in plain TF and under an uneven three-way split in
mtf with the file's weights, and both equal Keras within 1e-5. The error tests read hand-written
configs, without TensorFlow.
"""
import os

import numpy as np
import pytest

from model_eval import plain_logits
from edgemesh_tf.models.keras_in import keras_weights, load_keras, spec_from_keras

CASES = ("conv_valid5_relu", "conv_same_stride2_rect", "conv_dilated_nobias", "depthwise", "pools", "avg_same",
         "batch_norm_relu_softmax", "residual_concat", "dropout_activation", "relu6_softmax_layer", "sequential")
pytestmark = [pytest.mark.subprocess]
SOFTMAX_OUT = {"batch_norm_relu_softmax", "dropout_activation", "relu6_softmax_layer", "sequential"}


def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _predict(spec, weights, x, split: bool):
    """Evaluation-mode outputs of ``spec`` with ``weights`` on ``x``: plain TF, or the mtf model under
    an uneven split of every split dim over three devices."""
    from edgemesh_tf.mesh.build import session_config
    from edgemesh_tf.mesh.compat import tf
    from edgemesh_tf.mesh.layout import local_devices, split_layout
    from edgemesh_tf.training.graph import build_train_graph

    if not split:
        return plain_logits(spec, x, weights)[0]
    shares = {dim: (n - n // 2 - n // 4, n // 4, n // 2) if n >= 4 else (n,) for dim, n in spec.split_dims().items()}
    layout = split_layout({d: s for d, s in shares.items() if len(s) == 3 and min(s) > 0}, local_devices(3))
    g = build_train_graph(spec, layout, len(x), learning_rate=0.0, momentum=0.0, seed=0)
    with tf.Session(graph=g.graph, config=session_config(3)) as sess:
        sess.run(g.init_op)
        with g.graph.as_default():
            by_name = {v.name[:-2]: v for v in tf.global_variables()}
            for name in weights:
                by_name[name].load(weights[name], sess)
            sess.run(g.copy_masters_to_slices)
        return sess.run(g.logits, {g.images: x, g.labels: np.zeros(len(x), np.int32)})


@pytest.mark.parametrize("case", CASES)
def test_converted_model_predicts_what_keras_predicts(keras_dir, case):
    path = os.path.join(keras_dir, case + ".keras")
    with np.load(os.path.join(keras_dir, case + ".npz")) as z:
        x, want = z["x"], z["y"]
    spec = load_keras(path, tuple(x.shape[1:]), want.shape[-1])
    w = keras_weights(path)
    assert set(w) == {"%s/%s" % (layer.name, n) for layer in spec.layers
                      for n in [wt.name for wt in layer.kind_def.weights(layer, spec.input_shapes(layer))]}
    for split in (False, True):
        got = _predict(spec, w, x, split)
        got = _softmax(got) if case in SOFTMAX_OUT else got
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg="%s split=%s" % (case, split))
