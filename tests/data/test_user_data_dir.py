"""The user's own images, ``dir:PATH``: one folder per class loads with a deterministic per-class
held-out split, resized on request, in grayscale or RGB; its shape and classes come from the image
headers; every unusable folder or file fails with one DatasetError naming it. PNGs written with
Pillow; no TensorFlow."""
import numpy as np
import pytest
from PIL import Image

from edgemesh_tf.data import DatasetError, dataset_shape, image_dir_dataset, image_shape_of, load_dataset


def _folder(root, counts, size=(6, 5), mode="RGB", ext="png", seed=1):
    """Writes ``counts[class]`` random images of ``size`` = (H, W) into root/class/; returns root."""
    rng = np.random.RandomState(seed)
    for c, n in counts.items():
        (root / c).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            shape = (size[0], size[1], 3) if mode == "RGB" else size
            Image.fromarray(rng.randint(0, 256, shape).astype(np.uint8), mode).save(root / c / ("%d.%s" % (i, ext)))
    return root


def test_classes_are_sorted_folders_and_pixels_are_scaled(tmp_path):
    root = _folder(tmp_path / "imgs", {"dog": 2, "cat": 2})
    d = load_dataset("dir:%s" % root, test_fraction=0.5)
    assert d.num_classes == 2 and d.image_shape == (6, 5, 3) and d.name == "dir:%s" % root
    assert d.train_x.dtype == np.float32 and d.train_y.dtype == np.int32
    pixels = {c: {np.asarray(Image.open(root / c / f), np.float32).tobytes() for f in ("0.png", "1.png")}
              for c in ("cat", "dog")}
    for x, y in zip(np.concatenate([d.train_x, d.test_x]), np.concatenate([d.train_y, d.test_y])):
        assert (x * 255.0).round().astype(np.float32).tobytes() in pixels[("cat", "dog")[y]]   # cat 0, dog 1


def test_the_split_is_stratified_and_deterministic_by_seed(tmp_path):
    root = _folder(tmp_path / "imgs", {"cat": 10, "dog": 5, "emu": 2, "fox": 1})
    d = load_dataset("dir:%s" % root)   # test_fraction 0.2
    assert d.num_classes == 4 and np.bincount(d.test_y, minlength=4).tolist() == [2, 1, 1, 0]
    assert np.bincount(d.train_y).tolist() == [8, 4, 1, 1]
    again = load_dataset("dir:%s" % root)
    np.testing.assert_array_equal(d.test_x, again.test_x)
    np.testing.assert_array_equal(d.train_x, again.train_x)
    assert not np.array_equal(d.test_x, load_dataset("dir:%s" % root, seed=5).test_x)
    half = load_dataset("dir:%s?test_fraction=0.5&seed=5" % root)
    assert np.bincount(half.test_y, minlength=4).tolist() == [5, 2, 1, 0]   # round(2.5) = 2; emu keeps one
    np.testing.assert_array_equal(half.test_x[half.test_y == 0],
                                  load_dataset("dir:%s" % root, test_fraction=0.5, seed=5).test_x[half.test_y == 0])


def test_hidden_and_other_files_are_skipped_and_extensions_any_case(tmp_path):
    root = _folder(tmp_path / "imgs", {"a": 2})
    _folder(root, {"b": 2}, ext="JPG")
    _folder(root, {"c": 2}, ext="bmp")
    _folder(root, {"d": 2}, ext="Gif")
    (root / "a" / "notes.txt").write_text("skipped")
    (root / "a" / ".hidden.png").write_bytes(b"not read")
    (root / ".cache").mkdir()
    (root / "README.md").write_text("a file next to the class folders")
    d = load_dataset("dir:%s" % root)
    assert d.num_classes == 4 and len(d.train_y) + len(d.test_y) == 8


def test_grayscale_when_every_image_is_else_rgb_or_as_asked(tmp_path):
    gray = _folder(tmp_path / "g", {"a": 2, "b": 2}, mode="L")
    assert load_dataset("dir:%s" % gray).image_shape == (6, 5, 1)
    assert load_dataset("dir:%s" % gray, color_mode="rgb").image_shape == (6, 5, 3)
    _folder(gray, {"c": 2})   # one RGB class: every image becomes RGB
    mixed = load_dataset("dir:%s" % gray)
    assert mixed.image_shape == (6, 5, 3)
    first_gray = mixed.train_x[mixed.train_y == 0][0]
    np.testing.assert_array_equal(first_gray[..., 0], first_gray[..., 2])
    assert load_dataset("dir:%s?color_mode=grayscale" % gray).image_shape == (6, 5, 1)
    with pytest.raises(ValueError, match="color_mode must be 'rgb' or 'grayscale'"):
        load_dataset("dir:%s" % gray, color_mode="cmyk")


def test_mixed_sizes_name_the_first_file_that_differs_and_image_size_resizes(tmp_path):
    root = _folder(tmp_path / "g", {"a": 3, "b": 3}, size=(6, 5), mode="L")
    _folder(root, {"b": 1}, size=(9, 7), mode="L")   # overwrites b/0.png with a larger image
    first, other = root / "a" / "0.png", root / "b" / "0.png"
    for load in (load_dataset, dataset_shape):
        with pytest.raises(DatasetError) as e:
            load("dir:%s" % root)
        assert str(e.value).startswith("%s: is 9x7 (HxW) but %s is 6x5" % (other, first)), e.value
        assert "give image_size=(H, W)" in str(e.value)
    d = load_dataset("dir:%s" % root, image_size=(8, 4))
    assert d.image_shape == (8, 4, 1) and 0.0 <= d.train_x.min() and d.train_x.max() <= 1.0
    assert load_dataset("dir:%s?image_size=8x4&color_mode=rgb" % root).image_shape == (8, 4, 3)
    with pytest.raises(ValueError, match="image_size must be"):
        load_dataset("dir:%s" % root, image_size=(8, 0))


def test_shape_and_classes_come_from_the_headers(tmp_path):
    root = _folder(tmp_path / "g", {"a": 2, "b": 2, "c": 3}, size=(7, 4))
    name = "dir:%s" % root
    assert dataset_shape(name) == ((7, 4, 3), 3) == (load_dataset(name).image_shape, 3)
    assert image_shape_of(name, image_size=(3, 3), color_mode="grayscale") == (3, 3, 1)
    assert image_shape_of(name + "?image_size=5x6&test_fraction=0.5") == (5, 6, 3)
    with open(root / "c" / "2.png", "r+b") as f:   # the pixels of one image cut off: its header is still read
        f.truncate(60)
    assert dataset_shape(name) == ((7, 4, 3), 3)
    with pytest.raises(DatasetError, match="2.png: cannot be read as an image"):
        load_dataset(name)


def test_folder_errors_name_the_folder_or_the_file(tmp_path):
    for load in (load_dataset, dataset_shape):
        with pytest.raises(DatasetError, match="nope: dataset directory does not exist"):
            load("dir:%s" % (tmp_path / "nope"))
    (tmp_path / "file.png").write_bytes(b"")
    with pytest.raises(DatasetError, match="file.png: expected a dataset directory, found a file"):
        load_dataset("dir:%s" % (tmp_path / "file.png"))
    (tmp_path / "flat").mkdir()
    Image.new("RGB", (4, 4)).save(tmp_path / "flat" / "0.png")
    with pytest.raises(DatasetError, match="flat: holds no class folders; expected one sub-folder"):
        load_dataset("dir:%s" % (tmp_path / "flat"))
    root = _folder(tmp_path / "e", {"a": 2})
    (root / "b").mkdir()
    (root / "b" / "notes.txt").write_text("not an image")
    for load in (load_dataset, dataset_shape):
        with pytest.raises(DatasetError) as e:
            load("dir:%s" % root)
        assert str(e.value).startswith("%s: class 'b' has no image files" % (root / "b")), e.value
    (root / "b" / "x.png").write_bytes(b"not a png")
    for load in (load_dataset, dataset_shape):
        with pytest.raises(DatasetError) as e:
            load("dir:%s" % root)
        assert str(e.value).startswith("%s: cannot be read as an image" % (root / "b" / "x.png")), e.value


def test_one_image_per_class_leaves_no_held_out_split(tmp_path):
    root = _folder(tmp_path / "one", {"a": 1, "b": 1})
    with pytest.raises(DatasetError, match="one: every class holds one image; expected two or more"):
        image_dir_dataset(root)
    with pytest.raises(ValueError, match=r"test_fraction must be in \(0, 1\)"):
        image_dir_dataset(root, test_fraction=0.0)
