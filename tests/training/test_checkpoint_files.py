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
