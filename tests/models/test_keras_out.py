"""Keras out (``engine/runtime/export.py``, ``models/keras_out.py``): a run's checkpoint goes out as a
``model.keras`` that plain Keras loads and that predicts what the mesh model predicts; a model that
came in as Keras goes out with the same layers, names and classes, holding the trained weights; a
model with a layer Keras has no equivalent for is refused before training."""
import os
import subprocess
import sys

import numpy as np
import pytest

from model_eval import plain_logits
from edgemesh_tf.training import checkpoint
from edgemesh_tf.engine.runtime.export import export_run
from edgemesh_tf.layers import build_model
from edgemesh_tf import layers as L
from edgemesh_tf.models import load_model
from edgemesh_tf.models.keras_in import read_keras
from edgemesh_tf.models.keras_out import check_exportable

pytestmark = [pytest.mark.subprocess]
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PREDICT = ("import sys, numpy as np, keras; m = keras.models.load_model(sys.argv[1]); "
           "np.save(sys.argv[3], m.predict(np.load(sys.argv[2]), verbose=0))")


def _keras_predict(model_path, x, tmp_path):
    np.save(tmp_path / "x.npy", x)
    subprocess.run([sys.executable, "-c", PREDICT, model_path, str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                   check=True, timeout=300, capture_output=True)
    return np.load(tmp_path / "y.npy")


def test_a_mesh_api_model_goes_out_as_keras_that_predicts_what_it_predicts(tmp_path):
    spec = load_model(os.path.join(ROOT, "examples", "lenet_bn.py"), (32, 32, 1), 10)
    x = np.random.RandomState(0).rand(4, 32, 32, 1).astype(np.float32)
    rng = np.random.RandomState(1)
    _, initial = plain_logits(spec, x)
    weights = {n: (v + (0.5 if "moving_variance" in n else 0.05 * rng.standard_normal(v.shape))).astype(np.float32)
               for n, v in initial.items()}   # as if trained: every tensor moved, the moving statistics too
    want, _ = plain_logits(spec, x, weights)
    checkpoint.save(str(tmp_path / "run" / "checkpoints"), weights, {})
    out = export_run(spec.source, "digits32", None, str(tmp_path / "run"), str(tmp_path / "export"))
    assert os.path.isfile(out["keras"]) and os.path.isfile(os.path.join(out["saved_model"], "saved_model.pb"))
    assert 0.0 <= out["keras_accuracy"] <= 1.0
    np.testing.assert_allclose(_keras_predict(out["keras"], x, tmp_path), want, rtol=1e-5, atol=1e-5)


def test_a_keras_model_goes_out_with_its_layers_names_and_the_trained_weights(tmp_path, keras_dir):
    path = os.path.join(keras_dir, "batch_norm_relu_softmax.keras")
    spec = load_model(path, (8, 8, 2), 3)
    _, before = read_keras(path)
    trained = {"%s/%s" % (layer, n): a + 1.0 for layer, arrays in before.items()
               for n, a in zip(("kernel", "bias") if len(arrays) == 2 else ("gamma", "beta", "moving_mean",
                                                                            "moving_variance"), arrays)}
    checkpoint.save(str(tmp_path / "run" / "checkpoints"), trained, {})
    out = export_run(path, None, None, str(tmp_path / "run"), str(tmp_path / "export"))
    assert "keras_accuracy" not in out   # no dataset given: nothing to evaluate on
    cfg_in, _ = read_keras(path)
    cfg_out, after = read_keras(out["keras"])
    layers = lambda c: [(x["class_name"], x["config"]["name"]) for x in c["config"]["layers"]]  # noqa: E731
    assert layers(cfg_out) == layers(cfg_in)   # the softmax output is there again
    for layer, arrays in before.items():
        for a, b in zip(arrays, after[layer]):
            np.testing.assert_allclose(b, a + 1.0, rtol=1e-6)
    assert spec.layer("logits").get("activation") is None


def test_a_layer_without_a_keras_equivalent_is_refused_before_training():
    def model(images, num_classes):
        x = L.mtf_op(L.conv2d(images, "conv1", 4), lambda x: x, lambda tf, x: x, name="mine")
        return L.dense(L.flatten(x), "logits", num_classes)

    with pytest.raises(ValueError, match="layer 'mine': kind 'mtf_op' has no Keras equivalent"):
        check_exportable(build_model(model, (8, 8, 1), 3))
