"""Each reference model builds and trains a step under an uneven layout, for every input shape
(and the width variant ``vgg_m`` on digits32's 32x32x1, and ``vgg16`` on 32x32x3)."""
import numpy as np
import pytest

from edgemesh_tf.mesh.build import session_config
from edgemesh_tf.mesh.compat import tf
from edgemesh_tf.mesh.layout import Layout, local_devices
from edgemesh_tf.models import get_model
from edgemesh_tf.planner.model_stats import model_stats
from edgemesh_tf.training.graph import build_train_graph
from edgemesh_tf.training.loop import restore_or_init


CASES = [(name, shape) for name in ("vgg", "resnet") for shape in ((8, 8, 1), (28, 28, 1), (32, 32, 3))]


@pytest.mark.slow  # 9 cases, ~15 s together
@pytest.mark.parametrize("name,shape", CASES + [("vgg_m", (32, 32, 1)), ("vgg16", (32, 32, 3))])
def test_model_trains_under_uneven_layout(name, shape):
    spec = get_model(name, shape, 10)
    dims = spec.split_dims()
    d = local_devices(2)
    layout = Layout(mesh=(("model", 2),), devices=tuple(d), rules=tuple((n, "model") for n in dims),
                    sizes=tuple((n, (s - s // 3, s // 3)) for n, s in dims.items()))
    g = build_train_graph(spec, layout, 4, learning_rate=0.005, momentum=0.0)
    rng = np.random.RandomState(0)
    x = rng.rand(4, *shape).astype(np.float32)
    y = rng.randint(0, 10, 4).astype(np.int32)
    with tf.Session(graph=g.graph, config=session_config(2)) as sess:
        restore_or_init(sess, g, checkpoint_dir=None)
        losses = [sess.run([g.loss, g.train_op], {g.images: x, g.labels: y})[0] for _ in range(3)]
        logits = sess.run(g.logits, {g.images: x, g.labels: y})
        weights = sess.run(g.weights, {g.images: x, g.labels: y})
    assert logits.shape == (4, 10)
    assert sum(np.size(w) for w in weights.values()) * 4 == model_stats(spec, 1).param_bytes
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]


def test_unknown_model_and_shape():
    with pytest.raises(ValueError, match="unknown model 'alexnet'"):
        get_model("alexnet", (8, 8, 1), 10)
    with pytest.raises(ValueError, match="image shape"):
        get_model("vgg", (64, 64, 3), 10)


def test_vgg16_is_weight_heavy_and_needs_32x32():
    spec = get_model("vgg16", (32, 32, 3), 10)
    stats = model_stats(spec, 1)
    assert len([d for d in stats.dims if d.name.startswith("conv")]) == 13
    assert 58e6 < stats.param_bytes < 62e6  # ~15 M float32 parameters
    biggest = max(stats.dims, key=lambda d: d.units)
    assert biggest.units == 512
    with pytest.raises(ValueError, match="model 'vgg16': needs 32x32 images"):
        get_model("vgg16", (28, 28, 1), 10)
