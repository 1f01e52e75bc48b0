"""A folder of images as a dataset, in Keras's ``image_dataset_from_directory`` layout: one
sub-folder per class (class names = the sorted sub-folder names, label = the index), image files
(.png .jpg .jpeg .bmp .gif) in each; hidden files and other extensions are skipped.

A held-out split of ``test_fraction`` of each class (at least one image of a class with two or more)
is drawn with ``seed``. Images are read with Pillow as RGB, or as grayscale when every image is
grayscale (``color_mode`` chooses), to float32 in [0, 1]; ``image_size=(H, W)`` resizes them
(bilinear), else all must share one size. Errors name the folder or file and what was expected.
"""
from __future__ import annotations

import os

import numpy as np

from edgemesh_tf.data.dataset import Dataset
from edgemesh_tf.data.errors import fail, require_dir

EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif")


def _classes(root: str) -> list[tuple[str, list[str]]]:
    """[(class name, its image paths)], classes sorted, files sorted."""
    names = sorted(d for d in os.listdir(root) if not d.startswith(".") and os.path.isdir(os.path.join(root, d)))
    if not names:
        raise fail(root, "holds no class folders; expected one sub-folder of images per class")
    out = []
    for name in names:
        folder = os.path.join(root, name)
        files = sorted(os.path.join(folder, f) for f in os.listdir(folder)
                       if not f.startswith(".") and f.lower().endswith(EXTENSIONS))
        if not files:
            raise fail(folder, "class %r has no image files (%s)" % (name, " ".join(EXTENSIONS)))
        out.append((name, files))
    return out


def _read(path: str, mode: str, size: tuple[int, int] | None):
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im = im.convert(mode)
            if size is not None and im.size != (size[1], size[0]):
                im = im.resize((size[1], size[0]), Image.BILINEAR)
            return np.asarray(im, np.float32) / 255.0
    except (OSError, UnidentifiedImageError, ValueError) as e:
        raise fail(path, "cannot be read as an image: %s" % e) from None


def _color_mode(classes, color_mode: str | None) -> str:
    if color_mode is not None:
        if color_mode not in ("rgb", "grayscale"):
            raise ValueError("color_mode must be 'rgb' or 'grayscale', got %r" % (color_mode,))
        return "RGB" if color_mode == "rgb" else "L"
    from PIL import Image

    for _, files in classes:
        for f in files:
            try:
                with Image.open(f) as im:
                    if im.mode not in ("L", "1", "I", "I;16"):
                        return "RGB"
            except OSError as e:
                raise fail(f, "cannot be read as an image: %s" % e) from None
    return "L"


def image_dir_dataset(path: str | os.PathLike, test_fraction: float = 0.2, seed: int = 0,
                      image_size: tuple[int, int] | None = None, color_mode: str | None = None) -> Dataset:
    """The dataset of the class folders under ``path`` (see the module docstring)."""
    root = require_dir(path)
    if not 0.0 < test_fraction < 1.0:
        raise ValueError("test_fraction must be in (0, 1), got %r" % (test_fraction,))
    classes = _classes(root)
    mode = _color_mode(classes, color_mode)
    rng = np.random.RandomState(seed)
    splits = {"train": ([], []), "test": ([], [])}
    shape, first = None, None
    for label, (_, files) in enumerate(classes):
        images = []
        for f in files:
            x = _read(f, mode, image_size)
            if shape is None:
                shape, first = x.shape, f
            elif x.shape != shape:
                raise fail(f, "is %s but %s is %s; give image_size=(H, W) to resize every image to one size"
                           % ("x".join(map(str, x.shape[:2])), first, "x".join(map(str, shape[:2]))))
            images.append(x)
        order = rng.permutation(len(images))
        n_test = min(len(images) - 1, max(1, int(round(test_fraction * len(images))))) if len(images) > 1 else 0
        for i, idx in enumerate(order):
            xs, ys = splits["test" if i < n_test else "train"]
            xs.append(images[idx])
            ys.append(label)
    (tx, ty), (ex, ey) = splits["train"], splits["test"]
    if not ex:
        raise fail(root, "too few images for a held-out split (every class has one image)")

    def stack(xs):
        x = np.stack(xs).astype(np.float32)
        return x[..., None] if x.ndim == 3 else x

    return Dataset("dir:" + root, stack(tx), np.asarray(ty, np.int32), stack(ex), np.asarray(ey, np.int32),
                   len(classes))
