"""A folder of images as a dataset, in Keras's ``image_dataset_from_directory`` layout: one
sub-folder per class (class names = the sorted sub-folder names, label = the index), image files
(.png .jpg .jpeg .bmp .gif, any case) in each; hidden files and folders and other extensions are
skipped.

A held-out split of ``test_fraction`` of each class (at least one image of a class with two or more,
and never all of them) is drawn with ``seed``. Images are read with Pillow to float32 in [0, 1]:
``color_mode="rgb"`` gives 3 channels, ``"grayscale"`` 1; by default grayscale when every image is
grayscale (Pillow modes 1, L, LA, I, I;16), else rgb. ``image_size=(H, W)`` resizes every image
(bilinear), else all must share one size. Errors name the folder or file and what was expected.
``image_dir_shape`` reads the image headers only, not the pixels.
"""
from __future__ import annotations

import os

import numpy as np

from edgemesh_tf.data.dataset import Dataset
from edgemesh_tf.data.errors import fail, require_dir

EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif")
COLOR_MODES = {"rgb": "RGB", "grayscale": "L"}
_GRAY = ("1", "L", "LA", "I", "I;16", "I;16L", "I;16B")


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
            raise fail(folder, "class %r has no image files; expected images (%s) in it" % (name, " ".join(EXTENSIONS)))
        out.append((name, files))
    return out


def _unreadable(path: str, e: Exception):
    return fail(path, "cannot be read as an image (expected %s): %s" % (" ".join(EXTENSIONS), e))


def _scan(root: str, image_size: tuple[int, int] | None, color_mode: str | None):
    """(classes, Pillow mode, (H, W)) of the class folders under ``root``, from the image headers."""
    from PIL import Image, UnidentifiedImageError

    if color_mode is not None and color_mode not in COLOR_MODES:
        raise ValueError("color_mode must be 'rgb' or 'grayscale', got %r" % (color_mode,))
    if image_size is not None:
        image_size = tuple(int(v) for v in image_size)
        if len(image_size) != 2 or min(image_size) < 1:
            raise ValueError("image_size must be (H, W) with H, W >= 1, got %r" % (image_size,))
    classes = _classes(root)
    gray, size, first = True, None, None
    for _, files in classes:
        for f in files:
            try:
                with Image.open(f) as im:
                    mode, (w, h) = im.mode, im.size
            except (OSError, UnidentifiedImageError, ValueError) as e:
                raise _unreadable(f, e) from None
            gray = gray and mode in _GRAY
            if size is None:
                size, first = (h, w), f
            elif image_size is None and (h, w) != size:
                raise fail(f, "is %dx%d (HxW) but %s is %dx%d; expected one image size: give image_size=(H, W) to "
                              "resize every image (dir:PATH?image_size=HxW on the command line)" % (h, w, first, *size))
    mode = COLOR_MODES[color_mode] if color_mode is not None else ("L" if gray else "RGB")
    return classes, mode, image_size or size


def _read(path: str, mode: str, size: tuple[int, int]) -> np.ndarray:
    """The image at ``path`` as float32 (H, W) or (H, W, 3) in [0, 1], resized to ``size`` = (H, W)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im = im.convert(mode)
            if im.size != (size[1], size[0]):
                im = im.resize((size[1], size[0]), Image.BILINEAR)
            return np.asarray(im, np.float32) / np.float32(255.0)
    except (OSError, UnidentifiedImageError, ValueError) as e:
        raise _unreadable(path, e) from None


def image_dir_shape(path: str | os.PathLike, image_size: tuple[int, int] | None = None,
                    color_mode: str | None = None, **_split) -> tuple[tuple[int, int, int], int]:
    """((H, W, C), number of classes) that ``image_dir_dataset(path, ...)`` gives, from the folder
    listing and the image headers (no pixel is decoded). The split options are accepted and unused."""
    classes, mode, (h, w) = _scan(require_dir(path), image_size, color_mode)
    return (h, w, 1 if mode == "L" else 3), len(classes)


def image_dir_dataset(path: str | os.PathLike, test_fraction: float = 0.2, seed: int = 0,
                      image_size: tuple[int, int] | None = None, color_mode: str | None = None) -> Dataset:
    """The dataset of the class folders under ``path`` (see the module docstring): float32
    (N, H, W, C) images in [0, 1], int32 (N,) labels, a per-class held-out split."""
    root = require_dir(path)
    if not 0.0 < test_fraction < 1.0:
        raise ValueError("test_fraction must be in (0, 1), got %r" % (test_fraction,))
    classes, mode, size = _scan(root, image_size, color_mode)
    rng = np.random.RandomState(seed)
    train, test = ([], []), ([], [])
    for label, (_, files) in enumerate(classes):
        n = len(files)
        n_test = min(n - 1, max(1, int(round(test_fraction * n)))) if n > 1 else 0
        for i, idx in enumerate(rng.permutation(n)):
            xs, ys = test if i < n_test else train
            xs.append(_read(files[idx], mode, size))
            ys.append(label)
    if not test[0]:
        raise fail(root, "every class holds one image; expected two or more in a class for the held-out split")

    def stack(split):
        x = np.stack(split[0])
        return (x[..., None] if x.ndim == 3 else x), np.asarray(split[1], np.int32)

    return Dataset("dir:" + root, *stack(train), *stack(test), len(classes))
