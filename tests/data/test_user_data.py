"""The user's own arrays, ``npz:PATH``: uint8 and float images load scaled with their labels, the
shape and classes are read without the image values, and every malformed file fails with one
DatasetError naming the file, the array (or class) and what was expected. Also the dataset names
the configuration accepts. No TensorFlow."""
import zipfile

import numpy as np
import pytest

from edgemesh_tf.data import (DATASET_NAMES, DatasetError, absolute_dataset_name, check_dataset_name,
                              dataset_shape, image_shape_of, load_dataset, num_classes_of)


def _npz(path, **over):
    """Writes an .npz of 12 train and 6 test 5x4x3 uint8 images of 3 classes, with ``over`` replacing
    arrays (None: left out); returns the arrays written."""
    rng = np.random.RandomState(0)
    arrays = dict(x_train=rng.randint(0, 256, (12, 5, 4, 3)).astype(np.uint8), y_train=np.arange(12) % 3,
                  x_test=rng.randint(0, 256, (6, 5, 4, 3)).astype(np.uint8), y_test=np.arange(6) % 3)
    arrays.update(over)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return arrays


def test_uint8_images_are_scaled_and_labels_kept(tmp_path):
    a = _npz(tmp_path / "d.npz")
    d = load_dataset("npz:%s" % (tmp_path / "d.npz"))
    np.testing.assert_allclose(d.train_x, a["x_train"] / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(d.test_y, a["y_test"])
    assert d.image_shape == (5, 4, 3) and d.num_classes == 3 and d.name == "npz:%s" % (tmp_path / "d.npz")
    assert d.train_x.dtype == np.float32 and d.test_y.dtype == np.int32 and d.test_x.shape == (6, 5, 4, 3)


def test_float_and_grayscale_images_and_keras_style_labels(tmp_path):
    _npz(tmp_path / "g.npz", x_train=np.full((12, 5, 4), 0.5, np.float64), x_test=np.zeros((6, 5, 4), np.float16),
         y_train=(np.arange(12) % 3).reshape(12, 1).astype(np.uint8))
    g = load_dataset("npz:%s" % (tmp_path / "g.npz"))
    assert g.image_shape == (5, 4, 1) and g.train_x.dtype == np.float32 and float(g.train_x.max()) == 0.5
    assert g.train_y.tolist() == (np.arange(12) % 3).tolist() and g.train_y.dtype == np.int32


def test_shape_and_classes_come_from_headers_and_labels_only(tmp_path):
    name = "npz:%s" % (tmp_path / "d.npz")
    _npz(tmp_path / "d.npz", y_test=np.array([0, 1, 2, 3, 0, 1]), y_train=np.arange(12) % 4)
    assert dataset_shape(name) == ((5, 4, 3), 4)
    assert image_shape_of(name) == (5, 4, 3) and num_classes_of(name) == 4
    # the image values are not read: a NaN image is found only by loading
    _npz(tmp_path / "d.npz", x_train=np.full((12, 5, 4, 3), np.nan, np.float32))
    assert image_shape_of(name) == (5, 4, 3)
    with pytest.raises(DatasetError, match="x_train holds NaN"):
        load_dataset(name)
    # a compressed archive is read the same way
    np.savez_compressed(tmp_path / "c.npz", **_npz(tmp_path / "unused.npz"))
    assert dataset_shape("npz:%s" % (tmp_path / "c.npz")) == ((5, 4, 3), 3)


RAGGED = np.empty(12, object)
RAGGED[:] = [np.zeros((5, 4, 3), np.uint8)] * 11 + [np.zeros((2, 2, 3), np.uint8)]


@pytest.mark.parametrize("over, words", [
    (dict(y_test=None), ["has no array y_test", "holds x_train, y_train, x_test", "x_train, y_train, x_test, y_test"]),
    (dict(x_train=None, extra=np.zeros(3)), ["has no array x_train", "holds y_train, x_test, y_test, extra"]),
    (dict(x_test=np.zeros((6, 4, 4, 3), np.uint8)), ["x_train's images are (5, 4, 3)", "x_test's are (4, 4, 3)"]),
    (dict(x_test=np.zeros((6, 5, 4), np.uint8)), ["x_train's images are (5, 4, 3)", "x_test's are (5, 4, 1)"]),
    (dict(y_train=np.arange(11) % 3), ["y_train has shape (11,)", "expected (12,)", "x_train"]),
    (dict(y_test=np.zeros((6, 2), int)), ["y_test has shape (6, 2)", "expected (6,)"]),
    (dict(y_train=np.arange(12) * 0.5), ["y_train is float64", "expected integer class labels"]),
    (dict(y_train=(np.arange(12) % 2).astype(bool)), ["y_train is bool", "integer"]),
    (dict(y_train=np.arange(12) % 3 - 1), ["y_train holds the label -1", "[0, num_classes)"]),
    (dict(y_test=np.array([0, 1, 2, 7, 0, 1])), ["y_train has no example of class 3, 4, 5, 6", "0..7"]),
    (dict(y_train=np.arange(12) % 3 * 2), ["y_train has no example of class 1, 3", "every class"]),
    (dict(x_train=np.full((12, 5, 4, 3), 2.0, np.float32)), ["x_train has values in [2, 2]", "[0, 1]"]),
    (dict(x_test=np.full((6, 5, 4, 3), -0.5)), ["x_test has values in [-0.5, -0.5]", "[0, 1]"]),
    (dict(x_train=np.full((12, 5, 4, 3), np.nan, np.float32)), ["x_train holds NaN", "[0, 1]"]),
    (dict(x_test=np.full((6, 5, 4, 3), np.inf)), ["x_test holds NaN or infinite"]),
    (dict(x_train=np.zeros((12, 20), np.uint8)), ["x_train has shape (12, 20)", "(N, H, W, C)"]),
    (dict(x_train=np.zeros((12, 5, 4, 3), np.int16)), ["x_train is int16", "uint8"]),
    (dict(x_test=np.zeros((0, 5, 4, 3), np.uint8), y_test=np.zeros(0, int)), ["x_test has shape (0, 5, 4, 3)",
                                                                               "no images", "N >= 1"]),
    (dict(x_train=RAGGED), ["x_train is an object array (ragged", "equal-sized images"]),
])
def test_npz_errors_name_the_file_the_array_and_what_was_expected(tmp_path, over, words):
    path = tmp_path / "d.npz"
    _npz(path, **over)
    for load in (load_dataset, dataset_shape):
        if load is dataset_shape and any("values" in w or "NaN" in w for w in words):
            continue  # values are checked when loading only
        with pytest.raises(DatasetError) as e:
            load("npz:%s" % path)
        assert str(e.value).startswith(str(path) + ": "), e.value
        for w in words:
            assert w in str(e.value), (w, str(e.value))


def test_a_missing_file_or_not_an_archive_is_named(tmp_path):
    for name, message in (("none.npz", "no such file (expected an .npz"), ("bad.npz", "not an .npz file"),
                          ("one.npy", "holds one array, not an .npz archive"), ("folder", "no such file")):
        if name == "bad.npz":
            (tmp_path / name).write_text("hello")
        elif name == "one.npy":
            np.save(tmp_path / name, np.zeros(3))
        elif name == "folder":
            (tmp_path / name).mkdir()
        for load in (load_dataset, dataset_shape):
            with pytest.raises(DatasetError) as e:
                load("npz:%s" % (tmp_path / name))
            assert str(e.value).startswith(str(tmp_path / name) + ": " + message), e.value
            assert "x_train, y_train, x_test, y_test" in str(e.value)


def test_a_zip_that_is_not_numpy_names_the_array(tmp_path):
    with zipfile.ZipFile(tmp_path / "z.npz", "w") as z:
        for a in ("x_train", "y_train", "x_test", "y_test"):
            z.writestr(a + ".npy", b"not numpy")
    with pytest.raises(DatasetError, match=r"z.npz: array x_train cannot be read \(expected an .npz"):
        load_dataset("npz:%s" % (tmp_path / "z.npz"))


def test_dataset_names_are_checked_without_reading_files_and_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert check_dataset_name("npz:missing.npz") == "npz:missing.npz"   # the file is read when loading
    assert absolute_dataset_name("npz:d.npz") == "npz:%s" % (tmp_path / "d.npz")
    assert absolute_dataset_name("dir:o?image_size=3x2") == "dir:%s?image_size=3x2" % (tmp_path / "o")
    assert absolute_dataset_name("digits32") == "digits32"
    with pytest.raises(ValueError) as e:
        check_dataset_name("cifar")
    assert all(n in str(e.value) for n in DATASET_NAMES + ("npz:PATH", "dir:PATH")), e.value
    with pytest.raises(ValueError, match="did you mean npz:data.npz"):
        check_dataset_name("data.npz")
    (tmp_path / "photos").mkdir()
    with pytest.raises(ValueError, match="did you mean dir:photos"):
        check_dataset_name("photos")
    for bad, message in (("npz:", "give the path after the colon"), ("dir:?seed=1", "give the path after"),
                         ("dir:o?size=3", "unknown option 'size'"), ("npz:d.npz?seed=1", "unknown option 'seed'"),
                         ("dir:o?image_size=32", "option image_size='32' is not valid; expected image_size=HxW"),
                         ("dir:o?test_fraction=1", "option test_fraction='1' is not valid"),
                         ("dir:o?color_mode=rgba", "color_mode=rgb or grayscale")):
        with pytest.raises(ValueError, match=message):
            check_dataset_name(bad)
    with pytest.raises(ValueError, match="takes its path after the colon, not path="):
        load_dataset("npz:d.npz", tmp_path)


def test_the_job_settings_take_npz_and_dir_names_and_name_a_bad_one(tmp_path, monkeypatch):
    from edgemesh_tf.engine.config import JobSettings

    monkeypatch.chdir(tmp_path)
    assert JobSettings(dataset="npz:my.npz").dataset == "npz:%s" % (tmp_path / "my.npz")
    assert JobSettings(dataset="dir:photos?image_size=8x8").dataset == "dir:%s?image_size=8x8" % (tmp_path / "photos")
    assert JobSettings(dataset="mnist", data_path="m").dataset == "mnist"
    with pytest.raises(ValueError) as e:
        JobSettings(dataset="imagenet")
    assert "dataset" in str(e.value) and "unknown dataset 'imagenet'" in str(e.value), e.value
    assert all(n in str(e.value) for n in DATASET_NAMES + ("npz:PATH", "dir:PATH")), e.value
