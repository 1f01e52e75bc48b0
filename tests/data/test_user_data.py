"""The user's own data: ``npz:PATH`` arrays and ``dir:PATH`` class folders load as datasets (values,
shapes, labels, a deterministic stratified held-out split, resizing), and every malformed input fails
with one error naming the file, array or class and what was expected. No TensorFlow."""
import numpy as np
import pytest
from PIL import Image

from edgemesh_tf.data import (DatasetError, absolute_dataset_name, check_dataset_name, dataset_shape,
                              load_dataset)


def _npz(path, **over):
    rng = np.random.RandomState(0)
    arrays = dict(x_train=rng.randint(0, 256, (12, 5, 4, 3)).astype(np.uint8), y_train=np.arange(12) % 3,
                  x_test=rng.randint(0, 256, (6, 5, 4, 3)).astype(np.uint8), y_test=np.arange(6) % 3)
    arrays.update(over)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return arrays


def test_npz_uint8_and_float_arrays_load_scaled_with_their_labels(tmp_path):
    a = _npz(tmp_path / "d.npz")
    d = load_dataset("npz:%s" % (tmp_path / "d.npz"))
    np.testing.assert_allclose(d.train_x, a["x_train"] / 255.0, rtol=1e-6)
    assert d.image_shape == (5, 4, 3) and d.num_classes == 3 and d.test_y.dtype == np.int32
    _npz(tmp_path / "g.npz", x_train=np.full((12, 5, 4), 0.5, np.float32), x_test=np.zeros((6, 5, 4), np.float64))
    g = load_dataset("npz:%s" % (tmp_path / "g.npz"))
    assert g.image_shape == (5, 4, 1) and g.train_x.dtype == np.float32 and float(g.train_x.max()) == 0.5
    assert dataset_shape("npz:%s" % (tmp_path / "g.npz")) == ((5, 4, 1), 3)


@pytest.mark.parametrize("over, words", [
    (dict(y_test=None), ["has no array y_test", "x_train, y_train, x_test, y_test"]),
    (dict(x_test=np.zeros((6, 4, 4, 3), np.uint8)), ["x_train's images are (5, 4, 3)", "x_test's are (4, 4, 3)"]),
    (dict(y_train=np.arange(11) % 3), ["y_train has shape (11,)", "(12,)"]),
    (dict(y_train=np.arange(12) * 0.5), ["y_train is float64", "integer"]),
    (dict(y_train=np.arange(12) % 3 - 1), ["y_train holds the label -1"]),
    (dict(y_test=np.arange(6) % 5), ["y_train has no example of class 3, 4"]),
    (dict(x_train=np.full((12, 5, 4, 3), 2.0, np.float32)), ["x_train has values in [2, 2]", "[0, 1]"]),
    (dict(x_train=np.full((12, 5, 4, 3), np.nan, np.float32)), ["x_train holds NaN"]),
    (dict(x_train=np.zeros((12, 20), np.uint8)), ["x_train has shape (12, 20)", "(N, H, W, C)"]),
])
def test_npz_errors_name_the_file_the_array_and_what_was_expected(tmp_path, over, words):
    _npz(tmp_path / "d.npz", **over)
    with pytest.raises(DatasetError) as e:
        load_dataset("npz:%s" % (tmp_path / "d.npz"))
    assert str(e.value).startswith(str(tmp_path / "d.npz")), e.value
    for w in words:
        assert w in str(e.value), e.value


def test_npz_missing_or_not_an_archive(tmp_path):
    with pytest.raises(DatasetError, match="no such file"):
        load_dataset("npz:%s" % (tmp_path / "none.npz"))
    (tmp_path / "bad.npz").write_text("hello")
    with pytest.raises(DatasetError, match="bad.npz: not an .npz file"):
        load_dataset("npz:%s" % (tmp_path / "bad.npz"))


def _folder(root, counts, size=(6, 5), mode="RGB"):
    rng = np.random.RandomState(1)
    for c, n in counts.items():
        (root / c).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            shape = (size[0], size[1], 3) if mode == "RGB" else size
            Image.fromarray(rng.randint(0, 256, shape).astype(np.uint8), mode).save(root / c / ("%d.png" % i))
    return root


def test_a_folder_of_class_folders_loads_with_a_stratified_deterministic_split(tmp_path):
    root = _folder(tmp_path / "imgs", {"cat": 10, "dog": 5, "emu": 2})
    (root / "cat" / "notes.txt").write_text("skipped")
    (root / ".hidden").mkdir()
    d = load_dataset("dir:%s" % root, test_fraction=0.2)
    assert d.num_classes == 3 and d.image_shape == (6, 5, 3)
    assert np.bincount(d.test_y).tolist() == [2, 1, 1] and np.bincount(d.train_y).tolist() == [8, 4, 1]
    again = load_dataset("dir:%s" % root, test_fraction=0.2)
    np.testing.assert_array_equal(d.test_x, again.test_x)
    other = load_dataset("dir:%s" % root, test_fraction=0.2, seed=5)
    assert not np.array_equal(d.test_x, other.test_x)
    assert 0.0 <= d.train_x.min() and d.train_x.max() <= 1.0


def test_grayscale_folders_load_one_channel_and_resize_on_request(tmp_path):
    root = _folder(tmp_path / "g", {"a": 3, "b": 3}, size=(6, 5), mode="L")
    _folder(root, {"b": 1}, size=(9, 9), mode="L")   # overwrites b/0.png with a larger image
    with pytest.raises(DatasetError, match="0.png: is 9x9 but .*0.png is 6x5; give image_size"):
        load_dataset("dir:%s" % root)
    d = load_dataset("dir:%s" % root, image_size=(8, 8))
    assert d.image_shape == (8, 8, 1)
    assert load_dataset("dir:%s" % root, image_size=(8, 8), color_mode="rgb").image_shape == (8, 8, 3)


def test_folder_errors_name_the_folder_or_file(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        load_dataset("dir:%s" % (tmp_path / "nope"))
    (tmp_path / "flat").mkdir()
    with pytest.raises(DatasetError, match="flat: holds no class folders"):
        load_dataset("dir:%s" % (tmp_path / "flat"))
    root = _folder(tmp_path / "e", {"a": 2})
    (root / "b").mkdir()
    with pytest.raises(DatasetError, match="class 'b' has no image files"):
        load_dataset("dir:%s" % root)
    (root / "b" / "x.png").write_bytes(b"not a png")
    with pytest.raises(DatasetError, match="x.png: cannot be read as an image"):
        load_dataset("dir:%s" % root)


def test_dataset_names_are_checked_and_paths_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert absolute_dataset_name("npz:d.npz") == "npz:%s" % (tmp_path / "d.npz")
    assert absolute_dataset_name("digits32") == "digits32"
    with pytest.raises(ValueError, match="unknown dataset 'cifar'; .*npz:PATH .*dir:PATH"):
        check_dataset_name("cifar")
    with pytest.raises(ValueError, match="give the path after the colon"):
        check_dataset_name("npz:")


def test_dir_options_after_a_question_mark_reach_the_loader(tmp_path):
    root = _folder(tmp_path / "o", {"a": 4, "b": 4})
    d = load_dataset("dir:%s?image_size=3x2&test_fraction=0.5&color_mode=grayscale" % root)
    assert d.image_shape == (3, 2, 1) and len(d.test_y) == 4
    assert absolute_dataset_name("dir:o?image_size=3x2").endswith("/o?image_size=3x2")
    with pytest.raises(ValueError, match="unknown option 'size'"):
        check_dataset_name("dir:o?size=3")
    with pytest.raises(ValueError, match="option image_size='big' is not valid"):
        load_dataset("dir:%s?image_size=big" % root)
