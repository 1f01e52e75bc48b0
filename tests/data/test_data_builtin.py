"""Digits, synthetic data, batches() and load_dataset() dispatch."""
import numpy as np
import pytest

from edgemesh_tf.data import DATASET_NAMES, Dataset, batches, load_dataset


@pytest.fixture(scope="module")
def digits_ds():
    return load_dataset("digits")


def test_digits_shapes_and_split(digits_ds):
    ds = digits_ds
    assert ds.name == "digits" and ds.num_classes == 10 and ds.image_shape == (8, 8, 1)
    assert ds.train_x.shape == (1437, 8, 8, 1) and ds.test_x.shape == (360, 8, 8, 1)
    assert ds.train_x.dtype == np.float32 and ds.train_y.dtype == np.int32
    assert ds.train_x.min() == 0.0 and ds.train_x.max() == 1.0
    # stratified: every class is present in both splits in about the same proportion
    train_frac = np.bincount(ds.train_y, minlength=10) / len(ds.train_y)
    test_frac = np.bincount(ds.test_y, minlength=10) / len(ds.test_y)
    np.testing.assert_allclose(train_frac, test_frac, atol=0.01)


def test_digits_deterministic(digits_ds):
    again = load_dataset("digits")
    np.testing.assert_array_equal(again.test_x, digits_ds.test_x)
    np.testing.assert_array_equal(again.train_y, digits_ds.train_y)


def test_batches_deterministic_full_and_reshuffled():
    x = np.arange(10, dtype=np.float32).reshape(10, 1, 1, 1)
    y = np.arange(10, dtype=np.int32)
    take = lambda it, k: [next(it) for _ in range(k)]
    a, b = take(batches(x, y, 4, seed=7), 6), take(batches(x, y, 4, seed=7), 6)
    c = take(batches(x, y, 4, seed=8), 6)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert xa.shape == (4, 1, 1, 1) and ya.shape == (4,)
        np.testing.assert_array_equal(ya, yb)
        np.testing.assert_array_equal(xa[:, 0, 0, 0], ya)  # x and y stay paired
    assert any(not np.array_equal(ya, yc) for (_, ya), (_, yc) in zip(a, c))
    epochs = [np.concatenate([a[2 * e][1], a[2 * e + 1][1]]) for e in range(3)]
    assert all(len(set(e.tolist())) == 8 for e in epochs)  # no repeats within an epoch
    assert not all(np.array_equal(epochs[0], e) for e in epochs[1:])  # reshuffled


def test_batches_rejects_bad_sizes():
    x, y = np.zeros((3, 1, 1, 1), np.float32), np.zeros(3, np.int32)
    with pytest.raises(ValueError, match="batch_size"):
        batches(x, y, 4, seed=0)
    with pytest.raises(ValueError, match="examples"):
        batches(x, y[:2], 1, seed=0)


def test_synthetic_learnable_and_deterministic():
    kw = dict(image_shape=(6, 5, 3), num_classes=4, train_size=400, test_size=80, seed=3)
    ds = load_dataset("synthetic", **kw)
    assert ds.train_x.shape == (400, 6, 5, 3) and ds.test_x.shape == (80, 6, 5, 3)
    assert ds.train_x.dtype == np.float32 and ds.train_y.dtype == np.int32
    assert 0.0 <= ds.train_x.min() and ds.train_x.max() <= 1.0
    assert np.bincount(ds.train_y).tolist() == [100] * 4
    means = np.stack([ds.train_x[ds.train_y == c].mean(0).ravel() for c in range(4)])
    gaps = [np.abs(means[i] - means[j]).mean() for i in range(4) for j in range(i + 1, 4)]
    assert min(gaps) > 0.1
    # nearest-class-mean on the test split is far above chance (0.25)
    dist = ((ds.test_x.reshape(80, 1, -1) - means[None]) ** 2).sum(-1)
    assert (dist.argmin(1) == ds.test_y).mean() > 0.9
    np.testing.assert_array_equal(load_dataset("synthetic", **kw).train_x, ds.train_x)


def test_load_dataset_errors(tmp_path):
    with pytest.raises(ValueError) as info:
        load_dataset("imagenet")
    assert all(n in str(info.value) for n in DATASET_NAMES)
    for name in ("cifar10", "mnist"):
        with pytest.raises(ValueError, match="path.*nothing is downloaded"):
            load_dataset(name)
    with pytest.raises(ValueError, match="takes no path"):
        load_dataset("digits", tmp_path)


def test_dataset_validates_arrays():
    x, y = np.zeros((2, 4, 4, 1), np.float32), np.zeros(2, np.int32)
    assert Dataset("t", x, y, x, y, 2).image_shape == (4, 4, 1)
    with pytest.raises(ValueError, match="float32"):
        Dataset("t", x.astype(np.float64), y, x, y, 2)
    with pytest.raises(ValueError, match="int32"):
        Dataset("t", x, y.astype(np.int64), x, y, 2)
