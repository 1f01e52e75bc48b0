"""padded_batches: every example once, in order, in full batches; the last padded with its first example."""
import numpy as np
import pytest

from edgemesh_tf.data import padded_batches


def test_last_batch_padded_with_its_first_example():
    x = np.arange(7 * 2, dtype=np.float32).reshape(7, 2)
    y = np.arange(7, dtype=np.int32)
    out = list(padded_batches(x, y, 3))
    assert [n for _, _, n in out] == [3, 3, 1]
    assert all(xb.shape == (3, 2) and yb.shape == (3,) for xb, yb, _ in out)
    np.testing.assert_array_equal(np.concatenate([xb[:n] for xb, _, n in out]), x)
    np.testing.assert_array_equal(np.concatenate([yb[:n] for _, yb, n in out]), y)
    xb, yb, _ = out[-1]
    np.testing.assert_array_equal(xb, x[[6, 6, 6]])
    np.testing.assert_array_equal(yb, [6, 6, 6])
    assert xb.dtype == x.dtype and yb.dtype == y.dtype


def test_exact_multiple_and_small_inputs():
    x, y = np.zeros((6, 1)), np.ones(6, np.int32)
    assert [n for _, _, n in padded_batches(x, y, 3)] == [3, 3]
    assert [(xb.shape[0], n) for xb, _, n in padded_batches(x[:2], y[:2], 5)] == [(5, 2)]
    assert list(padded_batches(x[:0], y[:0], 4)) == []


def test_mismatched_lengths_rejected():
    with pytest.raises(ValueError, match="5 examples but y has 4"):
        list(padded_batches(np.zeros((5, 1)), np.zeros(4), 2))
