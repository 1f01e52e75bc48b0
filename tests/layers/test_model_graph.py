"""The model as plain data: costs for every layer, split checks that name the layer, plain mtf
inside a model (mtf_op), and what the summary says a plan split."""
import numpy as np
import pytest

from edgemesh_tf import layers as L
from edgemesh_tf.cli.run import plan_lines
from edgemesh_tf.layers.kind import LayerKind, NoCost, register, KINDS
from edgemesh_tf.mesh.layout import split_layout


def _squash(images, n):
    from edgemesh_tf.mesh.compat import mtf, tf
    x = L.conv2d(images, "conv1", 5, activation="relu")
    x = L.mtf_op(x, lambda t: mtf.square(t) * 0.5, lambda t: tf.square(t) * 0.5, name="half_square")
    return L.dense(L.flatten(x), "logits", n, gain=1.0)


def test_a_layout_cannot_split_a_layer_without_its_own_dim():
    spec = L.build_model(_squash, (8, 8, 1), 3)
    for dim, words in (("half_square", "(mtf_op) has no split dim of its own (it needs whole inputs"),):
        with pytest.raises(ValueError) as e:
            spec.check_splittable([dim])
        assert words in str(e.value) and "['conv1', 'logits']" in str(e.value)
    spec.check_splittable(["batch", "conv1", "logits"])  # the split dims are fine


def test_a_kind_without_a_cost_is_refused_naming_the_layer():
    class Scale(LayerKind):
        kind, follows = "test_scale_nocost", True

        def output_shape(self, layer, in_shapes):
            return in_shapes[0]
    if "test_scale_nocost" not in KINDS:
        register(Scale())
    from edgemesh_tf.layers.graph import add_layer
    with pytest.raises(NoCost, match="layer 'scale1': its kind 'test_scale_nocost' defines no cost"):
        L.build_model(lambda x, n: L.dense(L.flatten(add_layer("test_scale_nocost", [x], "scale1")), "logits", n),
                      (4, 4, 1), 2)


def test_mtf_op_models_cannot_be_saved_as_json():
    with pytest.raises(ValueError, match="layer 'half_square' \\(mtf_op\\) holds Python functions"):
        L.build_model(_squash, (8, 8, 1), 3).to_dict()


@pytest.mark.slow
def test_mtf_op_runs_replicated_under_an_uneven_split_as_plain_tf():
    from tfref import BATCH, run_mesh, run_plain

    from edgemesh_tf.mesh.layout import local_devices

    spec = L.build_model(_squash, (8, 8, 1), 3)
    rng = np.random.RandomState(0)
    batches = [(rng.rand(BATCH, 8, 8, 1).astype(np.float32), rng.randint(0, 3, BATCH).astype(np.int32))
               for _ in range(3)]
    losses, grads, _ = run_mesh(spec, split_layout({"conv1": (3, 2), "logits": (1, 2)}, local_devices(2)), batches)
    want_losses, want_grads, _ = run_plain(spec, batches)
    np.testing.assert_allclose(losses, want_losses, atol=1e-5)
    assert set(grads) == set(want_grads) == {"conv1/kernel", "conv1/bias", "logits/kernel", "logits/bias"}
    for name, g in want_grads.items():
        np.testing.assert_allclose(grads[name], g, atol=1e-5, rtol=1e-5)


def test_shares_and_the_summary_name_each_device_and_its_units():
    spec = L.build_model(_squash, (8, 8, 1), 3)
    layout = split_layout({"conv1": (3, 2)}, ["/job:worker/task:0", "/job:worker/task:1"])
    assert layout.shares(spec.split_dims()) == {"conv1": {"/job:worker/task:0": 3, "/job:worker/task:1": 2}}
    planned = {"kind": "grid", "predicted_examples_per_sec": 224.1, "best_alternative": ["all_replicated", 170.0],
               "splits": {"group0": {"conv1": {"jetson0": 3, "pi1": 2}}}}
    assert plan_lines(planned) == ["plan: grid (predicted 224 examples/s; the best alternative, all_replicated, 170)",
                                   "  group0 splits conv1: jetson0 3 / pi1 2"]
    assert "no layer split" in plan_lines(dict(planned, splits={}))[1]
    assert plan_lines(dict(planned, best_alternative=["all_replicated", 223.5]))[0].endswith(", 224, a tie)")
    same = dict(planned, best_alternative=["all_replicated", 224.1], splits={})  # a grid of one-device groups
    assert plan_lines(same)[0].endswith(", 224, the same layout: every group one device)")


def test_summary_lists_each_layer_with_its_split_dim_params_and_flops():
    def net(images, n):
        x = L.avg_pool2d(L.relu(L.batch_norm(L.conv2d(images, "conv1", 6, kernel=5, padding="valid"))), 2)
        return L.dense(L.flatten(x), "logits", n, gain=1.0)

    spec = L.build_model(net, (12, 12, 1), 10, name="tiny")
    rows = {line.split()[0]: line.split() for line in str(spec).splitlines()[2:]}
    assert str(spec).splitlines()[0] == "model 'tiny': 12x12x1 images, 10 classes"
    assert rows["conv1"][1:5] == ["conv2d", "8x8x6", "conv1", str(5 * 5 * 6 + 6)]
    assert rows["batch_norm_1"][1:6] == ["batch_norm", "8x8x6", "on", "conv1", "12"]  # gamma, beta; not the stats
    assert rows["avg_pool2d_1"][1:5] == ["avg_pool2d", "4x4x6", "on", "conv1"]
    assert rows["flatten_1"][1:5] == ["flatten", "96", "-", "0"]
    assert rows["total"][-2] == str(156 + 12 + 96 * 10 + 10)


def test_options_of_per_channel_layers_are_keywords():
    with pytest.raises(TypeError, match="positional"):  # batch_norm(x, "bn1") would read "bn1" as the momentum
        L.build_model(lambda x, n: L.dense(L.flatten(L.batch_norm(x, "bn1")), "logits", n), (4, 4, 1), 2)
