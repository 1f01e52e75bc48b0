"""Malformed models fail when they are defined, before any graph is built, with errors naming the
layer (its kind) or the dim and what was expected."""
import pytest

from edgemesh_tf import layers as L
from edgemesh_tf.mesh.layout import local_devices, split_layout
from edgemesh_tf.training.graph import build_train_graph

D3 = local_devices(3)


def with_logits(body):
    """A model function: ``body(images)``, then dense logits."""
    def fn(x, n):
        return L.dense(body(x), "logits", n, gain=1.0)
    return fn


def _model(body, shape=(8, 8, 1)):
    return L.build_model(with_logits(body), shape, 3, name="bad")


def test_a_layer_name_used_twice():
    with pytest.raises(ValueError, match=r"conv2d 'conv': the name is already taken by an earlier layer"):
        _model(lambda x: L.flatten(L.conv2d(L.conv2d(x, "conv", 4), "conv", 4)))
    with pytest.raises(ValueError, match=r"'logits': the name is already taken"):
        _model(lambda x: L.dense(L.flatten(x), "logits", 4))
    with pytest.raises(ValueError, match=r"conv2d 'flat': the name is reserved \(batch, "):
        _model(lambda x: L.flatten(L.conv2d(x, "flat", 4)))
    with pytest.raises(ValueError, match=r"conv2d 'conv 1': a name must start with a letter"):
        _model(lambda x: L.flatten(L.conv2d(x, "conv 1", 4)))


def test_an_unknown_activation():
    with pytest.raises(ValueError, match=r"layer 'act' \(activation\): unknown activation 'mish'"):
        _model(lambda x: L.flatten(L.activation(x, "mish", name="act")))
    with pytest.raises(ValueError, match=r"layer 'conv' \(conv2d\): unknown activation 'Relu'"):
        _model(lambda x: L.flatten(L.conv2d(x, "conv", 4, activation="Relu")))


def test_a_valid_kernel_larger_than_its_input():
    with pytest.raises(ValueError, match=r"layer 'conv' \(conv2d\): output shape \(0, 0, 4\) has an empty axis"):
        _model(lambda x: L.flatten(L.conv2d(x, "conv", 4, kernel=9, padding="valid")))
    with pytest.raises(ValueError, match=r"layer 'conv' \(conv2d\): output shape \(4, 0, 4\)"):  # dilated: span 9
        _model(lambda x: L.flatten(L.conv2d(x, "conv", 4, kernel=(5, 5), dilation=(1, 2), padding="valid")))
    with pytest.raises(ValueError, match=r"layer 'pool' \(max_pool2d\): output shape"):
        _model(lambda x: L.flatten(L.max_pool2d(x, 3, padding="valid", name="pool")), shape=(2, 2, 1))


def test_dense_on_a_feature_map_says_to_flatten():
    with pytest.raises(ValueError, match=r"layer 'fc' \(dense\): dense needs features .* flatten\(\)"):
        _model(lambda x: L.dense(L.conv2d(x, "conv", 4), "fc", 8))


def test_strides_with_dilation():
    with pytest.raises(ValueError, match=r"layer 'conv' \(conv2d\): strides \(2, 2\) with dilation \(2, 2\)"):
        _model(lambda x: L.flatten(L.conv2d(x, "conv", 4, strides=2, dilation=2)))
    with pytest.raises(ValueError, match=r"layer 'dw' \(depthwise_conv2d\): strides \(1, 2\) with dilation"):
        _model(lambda x: L.flatten(L.depthwise_conv2d(x, strides=(1, 2), dilation=(2, 1), name="dw")))
    with pytest.raises(ValueError, match=r"layer 'dw' \(depthwise_conv2d\): strides \(1, 2\): TensorFlow's depthwise "
                       r"convolution takes the same stride in rows and columns"):
        _model(lambda x: L.flatten(L.depthwise_conv2d(x, strides=(1, 2), name="dw")))


def test_a_model_function_that_does_not_return_its_last_layer():
    def early(x, n):
        h = L.conv2d(x, "conv", 4)
        L.dense(L.flatten(h), "logits", n)
        return h
    with pytest.raises(ValueError, match=r"model 'm': the model function returned 'conv', not its last layer "
                                         r"'logits'"):
        L.build_model(early, (8, 8, 1), 3, name="m")
    with pytest.raises(ValueError, match=r"model 'm': the model function must return the logits Tensor"):
        L.build_model(lambda x, n: L.dense(L.flatten(x), "logits", n).shape, (8, 8, 1), 3, name="m")
    with pytest.raises(ValueError, match=r"model 'm': the last layer 'fc' gives shape \(4,\) per example; "
                                         r"expected \(3,\)"):
        L.build_model(lambda x, n: L.dense(L.flatten(x), "fc", 4), (8, 8, 1), 3, name="m")


def _pooled(x, n):
    x = L.max_pool2d(L.conv2d(x, "conv", 6), 2, name="pool")
    return L.dense(L.flatten(x, name="flatten"), "logits", n)


@pytest.mark.parametrize("dim, error", [
    ("flat", "rule names unknown dimension 'flat'"), ("conv9", "rule names unknown dimension 'conv9'"),
    ("h", "rule names unknown dimension 'h'"), ("c_in", "rule names unknown dimension 'c_in'"),
    ("pool", r"cannot split 'pool': layer 'pool' \(max_pool2d\) has no split dim of its own \(it runs on the "
             r"slices of the dim it follows\)"),
    ("flatten", r"cannot split 'flatten': layer 'flatten' \(flatten\) has no split dim of its own \(it needs "
                r"whole inputs and runs replicated\)")])
def test_a_layout_that_splits_no_split_dim_of_the_model(dim, error):
    spec = L.build_model(_pooled, (8, 8, 1), 3)
    assert spec.dims(4) == {"batch": 4, "conv": 6, "logits": 3}
    layout = split_layout({dim: (1, 2, 3)}, D3)
    with pytest.raises(ValueError, match=r"rule names unknown dimension '%s'; the model's dimensions are "
                                         r"\['batch', 'conv', 'logits'\]" % dim):
        layout.validate(spec.dims(4))
    with pytest.raises(ValueError, match=error):
        build_train_graph(spec, layout, 4)  # checked before any graph is built
    split_layout({"conv": (1, 2, 3)}, D3).validate(spec.dims(4))  # a split dim is fine
