"""A user's arrays as a dataset: an ``.npz`` file holding ``x_train, y_train, x_test, y_test``.

Images are NHWC, (N, H, W, C), or (N, H, W) for one channel: uint8 (scaled by 1/255) or float
(cast to float32; values must be finite and in [0, 1], nothing is rescaled). Labels are integers,
shape (N,) (or (N, 1), as ``keras.datasets`` gives them), in [0, num_classes) with num_classes =
the largest label of both splits + 1; every class below it needs training examples. Everything
is checked before training, and a bad file gets one line naming it, the array and what was
expected. ``npz_shape`` reads the image arrays' headers and the labels only.
"""
from __future__ import annotations

import os
import zipfile

import numpy as np

from edgemesh_tf.data.dataset import Dataset
from edgemesh_tf.data.errors import fail

ARRAYS = ("x_train", "y_train", "x_test", "y_test")
_EXPECTED = "expected an .npz (np.savez) with arrays %s" % ", ".join(ARRAYS)


def _open(path: str):
    """The NpzFile at ``path`` holding every array of ARRAYS, else DatasetError."""
    if not os.path.isfile(path):
        raise fail(path, "no such file (%s)" % _EXPECTED)
    try:
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise fail(path, "not an .npz file (%s): %s" % (_EXPECTED, e)) from None
    if not hasattr(z, "files"):
        raise fail(path, "holds one array, not an .npz archive (%s)" % _EXPECTED)
    missing = [a for a in ARRAYS if a not in z.files]
    if missing:
        z.close()
        raise fail(path, "has no array %s (it holds %s; %s)" % (", ".join(missing), ", ".join(z.files) or "none",
                                                                 _EXPECTED))
    return z


def _header(path: str, z, name: str) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of array ``name`` from its .npy header, without reading its data."""
    try:
        member = name + ".npy" if name + ".npy" in z.zip.namelist() else name
        with z.zip.open(member) as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                a = np.asarray(z[name])
                shape, dtype = a.shape, a.dtype
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as e:
        raise fail(path, "array %s cannot be read (%s): %s" % (name, _EXPECTED, e)) from None
    return tuple(int(d) for d in shape), np.dtype(dtype)


def _image_shape(path: str, name: str, shape: tuple[int, ...], dtype: np.dtype) -> tuple[int, int, int]:
    """(H, W, C) of image array ``name`` of ``shape`` and ``dtype``, else DatasetError."""
    if dtype == object:
        raise fail(path, "%s is an object array (ragged images?); expected one uint8 or float array (N, H, W, C) "
                         "of equal-sized images" % name)
    if len(shape) not in (3, 4):
        raise fail(path, "%s has shape %s; expected images (N, H, W, C) or (N, H, W)" % (name, shape))
    if shape[0] == 0 or 0 in shape[1:]:
        raise fail(path, "%s has shape %s: no images; expected (N, H, W, C) with N >= 1" % (name, shape))
    if dtype != np.uint8 and not np.issubdtype(dtype, np.floating):
        raise fail(path, "%s is %s; expected uint8 (0..255) or float (in [0, 1]) images" % (name, dtype))
    return (shape[1], shape[2], shape[3] if len(shape) == 4 else 1)


def _scaled(path: str, name: str, x: np.ndarray) -> np.ndarray:
    """Images ``x`` as float32 (N, H, W, C) in [0, 1]: uint8 / 255, float as it is (checked)."""
    x = x[..., None] if x.ndim == 3 else x
    if x.dtype == np.uint8:
        return x.astype(np.float32) / np.float32(255.0)
    x = x.astype(np.float32)
    if not np.all(np.isfinite(x)):
        raise fail(path, "%s holds NaN or infinite values; expected float images in [0, 1]" % name)
    lo, hi = float(x.min()), float(x.max())
    if lo < 0.0 or hi > 1.0:
        raise fail(path, "%s has values in [%g, %g]; expected float images in [0, 1] (divide uint8 by 255, or "
                         "store uint8)" % (name, lo, hi))
    return x


def _labels(path: str, z, name: str, n: int, images: str) -> np.ndarray:
    """Labels ``name`` as int32 (n,), one per image of ``images``, none negative, else DatasetError."""
    shape, dtype = _header(path, z, name)
    if not np.issubdtype(dtype, np.integer):
        raise fail(path, "%s is %s; expected integer class labels 0..num_classes-1" % (name, dtype))
    if shape not in ((n,), (n, 1)):
        raise fail(path, "%s has shape %s; expected (%d,), one label per image of %s" % (name, shape, n, images))
    y = np.asarray(z[name]).reshape(-1)
    if len(y) and y.min() < 0:
        raise fail(path, "%s holds the label %d; expected labels in [0, num_classes)" % (name, int(y.min())))
    if len(y) and y.max() > np.iinfo(np.int32).max:
        raise fail(path, "%s holds the label %d; expected labels in [0, num_classes)" % (name, int(y.max())))
    return y.astype(np.int32)


def _checked(path: str, z) -> tuple[tuple[int, int, int], np.ndarray, np.ndarray, int]:
    """((H, W, C), y_train, y_test, num_classes) of the open archive ``z``: every check but the
    image values, the image arrays read by their headers only."""
    (tshape, tdtype), (eshape, edtype) = _header(path, z, "x_train"), _header(path, z, "x_test")
    image = _image_shape(path, "x_train", tshape, tdtype)
    test_image = _image_shape(path, "x_test", eshape, edtype)
    if image != test_image:
        raise fail(path, "x_train's images are %s but x_test's are %s; expected one image shape (H, W, C) in both "
                         "splits" % (image, test_image))
    ty = _labels(path, z, "y_train", tshape[0], "x_train")
    ey = _labels(path, z, "y_test", eshape[0], "x_test")
    num_classes = int(max(ty.max(), ey.max())) + 1
    empty = np.flatnonzero(np.bincount(ty, minlength=num_classes) == 0)
    if len(empty):
        listed = ", ".join(map(str, empty[:5])) + (", ..." if len(empty) > 5 else "")
        raise fail(path, "y_train has no example of class %s (labels run 0..%d over both splits); expected training "
                         "examples of every class" % (listed, num_classes - 1))
    return image, ty, ey, num_classes


def npz_dataset(path: str | os.PathLike) -> Dataset:
    """The dataset of the ``.npz`` at ``path``: float32 (N, H, W, C) images in [0, 1], int32 (N,)
    labels. Raises DatasetError naming the file and the array."""
    path = os.fspath(path)
    with _open(path) as z:
        _, ty, ey, num_classes = _checked(path, z)
        tx, ex = _scaled(path, "x_train", z["x_train"]), _scaled(path, "x_test", z["x_test"])
    return Dataset("npz:" + path, tx, ty, ex, ey, num_classes)


def npz_shape(path: str | os.PathLike) -> tuple[tuple[int, int, int], int]:
    """((H, W, C) of the images, the number of classes) of the ``.npz`` at ``path``, reading the
    image arrays' headers and the labels only (the image values are checked by ``npz_dataset``)."""
    path = os.fspath(path)
    with _open(path) as z:
        image, _, _, num_classes = _checked(path, z)
    return image, num_classes
