"""Width variants of the reference models: ``vgg_m`` for digits32 (0.5-2 M parameters, a dense push
of at least 1 s at 10 Mbit/s), built in plain TF here and with mtf in test_reference_models."""
import math

import numpy as np
import pytest

from edgemesh_tf.mesh.build import session_config
from edgemesh_tf.mesh.compat import tf
from edgemesh_tf.models import MODEL_NAMES, get_model
from edgemesh_tf.models.plain_tf import PlainModel
from edgemesh_tf.planner.model_stats import model_stats

SHAPE = (32, 32, 1)  # digits32
LINK_BYTES_PER_S = 10e6 / 8  # 10 Mbit/s


def _params(spec) -> int:
    return model_stats(spec, 1).param_bytes // 4


def test_vgg_m_size_and_push_time():
    spec = get_model("vgg_m", SHAPE, 10)
    n = _params(spec)
    assert "vgg_m" in MODEL_NAMES
    assert 500_000 <= n <= 2_000_000, n
    assert n == 1_039_490
    assert 4 * n / LINK_BYTES_PER_S >= 1.0  # a dense float32 push on edge4's 10 Mbit/s link, s
    assert _params(get_model("vgg", SHAPE, 10)) < n


def test_width_multiplies_hidden_layers_only():
    base, wide = get_model("vgg", SHAPE, 10), get_model("vgg", SHAPE, 10, width=1.25)
    assert get_model("vgg_m", SHAPE, 10).layers == wide.layers
    a_dims, b_dims = base.split_dims(), wide.split_dims()
    assert list(a_dims) == list(b_dims) and list(a_dims)[-1] == "logits"
    for name in list(a_dims)[:-1]:
        assert b_dims[name] == round(a_dims[name] * 1.25), name

    def same_but_width(x):
        return x.kind, x.name, x.inputs, [kv for kv in x.config if kv[0] not in ("filters", "units")]
    # the same layers (pools included), only the widths differ
    assert [same_but_width(x) for x in base.layers] == [same_but_width(x) for x in wide.layers]
    assert b_dims["logits"] == 10  # the logits keep num_classes
    assert list(get_model("resnet", SHAPE, 10, width=0.5).split_dims().items())[0] == ("stem", 16)
    with pytest.raises(ValueError, match="width must be"):
        get_model("vgg", SHAPE, 10, width=0)
    with pytest.raises(ValueError, match="unknown model 'vgg_xl'"):
        get_model("vgg_xl", SHAPE, 10)


def test_vgg_m_builds_in_plain_tf_with_the_same_parameters():
    spec = get_model("vgg_m", SHAPE, 10)
    graph = tf.Graph()
    with graph.as_default():
        x = tf.placeholder(tf.float32, [2, *SHAPE])
        model = PlainModel(spec, seed=0)
        logits = model.logits(x)
        init = tf.global_variables_initializer()
    assert sum(math.prod(v.shape.as_list()) for v in model.variables.values()) == _params(spec)
    with tf.Session(graph=graph, config=session_config(1)) as sess:
        sess.run(init)
        out = sess.run(logits, {x: np.random.RandomState(0).rand(2, *SHAPE).astype(np.float32)})
    assert out.shape == (2, 10) and np.all(np.isfinite(out))

