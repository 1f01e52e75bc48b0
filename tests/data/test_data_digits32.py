"""digits32: shapes, balance, determinism, disjoint originals, and that it is harder than digits."""
import time

import numpy as np
import pytest

from edgemesh_tf.data import DATASET_NAMES, IMAGE_SHAPES, load_dataset
from edgemesh_tf.data.digits32 import _upscaled_originals, digits32_with_sources, distort

pytestmark = [pytest.mark.slow]  # a 3 s build of digits32, shared, and more builds


@pytest.fixture(scope="module")
def built():
    t0 = time.perf_counter()
    ds, train_src, test_src = digits32_with_sources()
    return ds, train_src, test_src, time.perf_counter() - t0


def test_registered():
    assert "digits32" in DATASET_NAMES and IMAGE_SHAPES["digits32"] == (32, 32, 1)
    with pytest.raises(ValueError, match="takes no path"):
        load_dataset("digits32", "/tmp")


def test_shapes_values_and_build_time(built):
    ds, _, _, seconds = built
    assert ds.name == "digits32" and ds.num_classes == 10 and ds.image_shape == (32, 32, 1)
    assert ds.train_x.shape == (21552, 32, 32, 1) and ds.test_x.shape == (5400, 32, 32, 1)
    assert ds.train_x.dtype == np.float32 and ds.train_y.dtype == np.int32
    assert ds.train_x.min() == 0.0 and ds.train_x.max() == 1.0
    assert len(ds.test_y) >= 5000
    assert seconds < 20.0, f"building digits32 took {seconds:.1f} s"  # ~4 s here; slack for a busy machine


def test_label_balance(built):
    ds = built[0]
    for y in (ds.train_y, ds.test_y):
        frac = np.bincount(y, minlength=10) / len(y)
        assert np.all(np.abs(frac - 0.1) < 0.01), frac


def test_train_and_test_originals_are_disjoint(built):
    ds, train_src, test_src, _ = built
    assert len(train_src) == len(ds.train_y) and len(test_src) == len(ds.test_y)
    assert not set(train_src.tolist()) & set(test_src.tolist())
    assert len(set(train_src.tolist()) | set(test_src.tolist())) == 1797  # every original is used
    _, labels = _upscaled_originals()
    np.testing.assert_array_equal(ds.train_y, labels[train_src])
    np.testing.assert_array_equal(ds.test_y, labels[test_src])
    assert set(np.unique(train_src, return_counts=True)[1].tolist()) == {16}  # variants per original
    assert set(np.unique(test_src, return_counts=True)[1].tolist()) == {12}


def test_deterministic_for_a_seed(built):
    ds = built[0]
    again = load_dataset("digits32", train_variants=1, test_variants=1)
    other = load_dataset("digits32", train_variants=1, test_variants=1, seed=1)
    same = load_dataset("digits32", train_variants=1, test_variants=1)
    np.testing.assert_array_equal(again.train_x, same.train_x)
    np.testing.assert_array_equal(again.test_y, same.test_y)
    assert not np.array_equal(again.test_y, other.test_y)
    assert again.train_x.shape == (1347, 32, 32, 1) and ds.train_x.shape[0] == 16 * 1347


def test_distort_without_randomness_is_the_identity():
    """With every magnitude at 0 the sampling grid is the identity: the images come back as they are."""
    images, _ = _upscaled_originals()
    out = distort(images[:50], np.random.default_rng(0), rotation_deg=0.0, scale=(1.0, 1.0), shear=0.0,
                  shift_px=0.0, elastic_px=0.0, noise=0.0)
    np.testing.assert_allclose(out, images[:50], atol=1e-5)
    shifted = distort(images[:5], np.random.default_rng(0), rotation_deg=0.0, scale=(1.0, 1.0), shear=0.0,
                      shift_px=0.0, elastic_px=0.0, noise=0.2)
    assert np.abs(shifted - images[:5]).mean() > 0.05  # the noise is applied


def _one_nn_accuracy(ds, n_train=3000, n_test=1000):
    from sklearn.neighbors import KNeighborsClassifier

    xtr = ds.train_x[:n_train].reshape(min(n_train, len(ds.train_x)), -1)
    xte = ds.test_x[:n_test].reshape(min(n_test, len(ds.test_x)), -1)
    return KNeighborsClassifier(1).fit(xtr, ds.train_y[:n_train]).score(xte, ds.test_y[:n_test])


def test_harder_than_digits_but_not_noise(built):
    """1-nearest-neighbour on raw pixels: ~0.98 on digits, ~0.8 on digits32 (chance is 0.1)."""
    easy = _one_nn_accuracy(load_dataset("digits"))
    hard = _one_nn_accuracy(built[0])
    assert easy > 0.95
    assert hard < easy - 0.1, (easy, hard)
    assert hard > 0.5, hard  # still digits: a learner finds the signal


def test_a_process_builds_it_once_and_nobody_can_change_it():
    # a warm group process (engine/runtime/warm.py) serves many jobs from one build: no job may alter it
    first = load_dataset("digits32")
    assert load_dataset("digits32") is first
    for a in (first.train_x, first.train_y, first.test_x, first.test_y):
        with pytest.raises(ValueError, match="read-only"):
            a[0] = 0
