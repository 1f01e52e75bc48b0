"""Pairing consecutive layers would save at most a few % of a split group's bytes on the zoo's VGGs."""
import pytest
from specs import sequential

from edgemesh_tf.models.zoo import get_model
from edgemesh_tf.planner import model_stats
from edgemesh_tf.planner.pairing import best_pairing, unpaired_bytes


@pytest.mark.parametrize("name,image,most", [("vgg16", (32, 32, 1), 0.01), ("vgg", (32, 32, 3), 0.04),
                                             ("vgg_wide", (32, 32, 3), 0.04), ("vgg_m", (32, 32, 3), 0.04)])
def test_pairing_saves_little_on_the_zoos_vggs(name, image, most):
    dims = model_stats(get_model(name, image, 10), 1).dims
    paired, pairs = best_pairing(dims)
    assert pairs and (1 - most) * unpaired_bytes(dims) <= paired <= unpaired_bytes(dims)


def test_pairing_pays_where_a_wide_layer_feeds_a_narrow_one():
    """Megatron's case: the wide hidden layer's output stays split, only the narrow output is summed."""
    spec = sequential("mlp", (4, 4, 1), 10, [("dense", "wide", 1024), ("dense", "narrow", 16),
                                             ("dense", "logits", 10, False)])
    dims = model_stats(spec, 1).dims
    paired, pairs = best_pairing(dims)
    assert pairs == (("wide", "narrow"),)
    assert paired == 4 * 16 * 2 + 2 * 4 * 16  # the narrow output's allreduce; the logits' input gradient's
    assert unpaired_bytes(dims) == 2 * 4 * (1024 + 16)
