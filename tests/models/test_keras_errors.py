"""A Keras model the mesh API cannot hold fails on reading with one line that names the Keras layer,
its class and what is supported (or the file and what was expected). Hand-written configs in the
``.keras`` file's format; no TensorFlow or Keras."""
import numpy as np
import pytest

from edgemesh_tf.models.keras_in import load_keras, spec_from_keras


def _tensor(name):
    return {"class_name": "__keras_tensor__", "config": {"keras_history": [name, 0, 0]}}


def _layer(cls, name, inputs, **cfg):
    nodes = [{"args": [[_tensor(i) for i in inputs]] if len(inputs) > 1 else [_tensor(inputs[0])], "kwargs": {}}]
    return {"class_name": cls, "config": dict(name=name, **cfg), "inbound_nodes": nodes}


def _model(*layers, shape=(8, 8, 1)):
    inp = {"class_name": "InputLayer", "config": {"name": "input_layer", "batch_shape": [None, *shape]},
           "inbound_nodes": []}
    return {"class_name": "Functional", "config": {"name": "m", "layers": [inp, *layers],
                                                   "input_layers": [["input_layer", 0, 0]],
                                                   "output_layers": [[layers[-1]["config"]["name"], 0, 0]]}}


CONV = dict(filters=4, kernel_size=[3, 3], strides=[1, 1], padding="same", data_format="channels_last",
            dilation_rate=[1, 1], groups=1, activation="relu", use_bias=True)
HEAD = [_layer("Flatten", "flatten", ["c1"]), _layer("Dense", "logits", ["flatten"], units=3, activation=None)]


def _read(*layers):
    return spec_from_keras(_model(*layers), {}, "m")


def test_a_layer_outside_the_list_is_named_with_its_class_and_the_supported_list():
    with pytest.raises(ValueError) as e:
        _read(_layer("Conv2D", "c0", ["input_layer"], **CONV), _layer("LSTM", "c1", ["c0"], units=4), *HEAD)
    msg = str(e.value)
    assert "'c1' (LSTM)" in msg and "supported:" in msg and "DepthwiseConv2D" in msg and "\n" not in msg


@pytest.mark.parametrize("setting,value", [("groups", 2), ("data_format", "channels_first"),
                                           ("activation", "softmax"), ("activation", "hard_sigmoid")])
def test_an_unsupported_setting_is_named(setting, value):
    with pytest.raises(ValueError, match=r"Keras layer 'c1' \(Conv2D\): .*%s" % value):
        _read(_layer("Conv2D", "c1", ["input_layer"], **dict(CONV, **{setting: value})), *HEAD)


def test_a_shared_layer_a_nested_model_and_a_subclassed_model_are_refused():
    shared = _layer("Conv2D", "c1", ["input_layer"], **CONV)
    shared["inbound_nodes"] *= 2
    with pytest.raises(ValueError, match="'c1' .*called 2 times"):
        _read(shared, *HEAD)
    with pytest.raises(ValueError, match="'c1' \\(Sequential\\): a nested model"):
        _read(_layer("Sequential", "c1", ["input_layer"], layers=[]), *HEAD)
    with pytest.raises(ValueError, match="a MyNet model; save a Sequential or Functional model"):
        spec_from_keras({"class_name": "MyNet", "config": {}}, {})


def test_a_reserved_layer_name_says_to_rename_the_layer():
    with pytest.raises(ValueError, match="Keras layer 'flat' \\(Flatten\\): .*reserved.*rename the Keras layer"):
        _read(_layer("Conv2D", "c1", ["input_layer"], **CONV), _layer("Flatten", "flat", ["c1"]),
              _layer("Dense", "logits", ["flat"], units=3))


def test_weights_missing_from_the_file_name_the_layer():
    with pytest.raises(ValueError, match="Keras layer 'c1' \\(Conv2D\\): the file holds 0 weights for it; expected 2"):
        _read(_layer("Conv2D", "c1", ["input_layer"], **CONV), *HEAD)


def test_the_spec_keeps_keras_names_and_drops_the_output_softmax():
    dense = dict(units=3, activation="softmax", use_bias=False)
    spec, weights = spec_from_keras(_model(_layer("Conv2D", "c1", ["input_layer"], **dict(CONV, use_bias=False)),
                                           HEAD[0], _layer("Dense", "logits", ["flatten"], **dense)),
                                    {"c1": [np.zeros((3, 3, 1, 4))],
                                     "logits": [np.zeros((256, 3))]}, "m")
    assert [x.name for x in spec.layers] == ["c1", "flatten", "logits"]
    assert spec.layer("logits").get("activation") is None and spec.num_classes == 3
    assert set(spec.split_dims()) == {"c1", "logits"} and set(weights) == {"c1/kernel", "logits/kernel"}


def test_a_file_that_is_not_a_keras_model_is_named(tmp_path):
    bad = tmp_path / "model.keras"
    bad.write_text("not a zip")
    with pytest.raises(ValueError, match="model file .*model.keras: not a Keras 3 model file"):
        load_keras(str(bad), (8, 8, 1), 3)


def test_a_sequential_model_without_an_input_layer_reads_its_build_shape():
    layers = [{"class_name": "Conv2D", "config": dict(CONV, name="c1")},
              {"class_name": "Flatten", "config": {"name": "flatten"}},
              {"class_name": "Dense", "config": {"name": "logits", "units": 3, "activation": "softmax"}}]
    model = {"class_name": "Sequential", "config": {"name": "s", "layers": layers, "build_input_shape": [None, 6, 6, 2]}}
    spec, _ = spec_from_keras(model, {"c1": [np.zeros((3, 3, 2, 4)), np.zeros(4)],
                                      "logits": [np.zeros((144, 3)), np.zeros(3)]}, "s")
    assert spec.image_shape == (6, 6, 2) and [x.inputs for x in spec.layers] == [("input",), ("c1",), ("flatten",)]
