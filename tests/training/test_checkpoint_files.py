"""Checkpoints of the global model and strategy state: round trip, latest, pruning, torn writes."""
import os

import numpy as np
import pytest

from edgemesh_tf.training import checkpoint


def test_round_trip_latest_and_pruning(tmp_path):
    d = str(tmp_path)
    assert checkpoint.latest(d) is None
    w = {"conv1/kernel": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(2, np.float32)}
    for i in range(5):
        checkpoint.save(d, {k: v + i for k, v in w.items()}, {"phase": "ahl", "i": i}, keep=3)
    prefix = checkpoint.latest(d)
    assert prefix.endswith("ckpt-5")
    weights, state = checkpoint.load(prefix)
    np.testing.assert_array_equal(weights["conv1/kernel"], w["conv1/kernel"] + 4)
    assert state == {"phase": "ahl", "i": 4}
    assert sorted(os.listdir(d)) == ["ckpt-%d.%s" % (n, e) for n in (3, 4, 5) for e in ("json", "npz")]


def test_a_torn_write_leaves_the_previous_checkpoint_latest(tmp_path):
    d = str(tmp_path)
    checkpoint.save(d, {"w": np.zeros(3, np.float32)}, {"n": 1})
    with open(os.path.join(d, "ckpt-2.npz"), "wb") as f:  # killed before its JSON was written
        f.write(b"partial")
    assert checkpoint.latest(d).endswith("ckpt-1")


def test_unreadable_checkpoint_names_the_file(tmp_path):
    prefix = os.path.join(str(tmp_path), "ckpt-1")
    with open(prefix + ".json", "w") as f:
        f.write("{not json")
    open(prefix + ".npz", "wb").close()
    with pytest.raises(ValueError, match="checkpoint .*ckpt-1 is unreadable"):
        checkpoint.load(prefix)


def test_a_checkpoint_of_another_plan_or_model_is_named_with_what_differs(tmp_path):
    """A resume restores tensors and group state by name: another job's checkpoint (other groups,
    a missing tensor, another shape) gets one message naming the checkpoint, each difference and
    the way out; this job's own checkpoint (or one of a single process, no groups) passes."""
    weights = {"conv1/w": np.zeros((3, 3, 1, 8)), "logits/w": np.zeros((8, 10))}
    state = {"controls": {"fast": {}, "slow": {}}}
    prefix = checkpoint.save(str(tmp_path), weights, state)
    shapes = {"conv1/w": (3, 3, 1, 8), "logits/w": (8, 10)}
    assert checkpoint.mismatch(prefix, weights, state, ["slow", "fast"], shapes) is None
    assert checkpoint.mismatch(prefix, weights, {}, ["g0"], shapes) is None
    why = checkpoint.mismatch(prefix, weights, state, ["jetson0", "pi1"], shapes)
    assert prefix in why and "['fast', 'slow'], this job's ['jetson0', 'pi1']" in why and "--logdir" in why
    why = checkpoint.mismatch(prefix, weights, state, ["fast", "slow"], {**shapes, "conv2/w": (3, 3, 8, 16)})
    assert "tensor conv2/w should have shape [3, 3, 8, 16], found none" in why and "groups" not in why
    why = checkpoint.mismatch(prefix, weights, state, ["fast", "slow"], {**shapes, "conv1/w": (3, 3, 1, 16)})
    assert "tensor conv1/w should have shape [3, 3, 1, 16], found [3, 3, 1, 8]" in why
