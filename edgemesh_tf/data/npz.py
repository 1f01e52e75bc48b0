"""A user's arrays as a dataset: an ``.npz`` file holding ``x_train, y_train, x_test, y_test``.

Images are NHWC, (N, H, W, C), or (N, H, W) for one channel: uint8 (scaled by 1/255) or float with
values in [0, 1]. Labels are integers in [0, num_classes), num_classes = the largest label + 1; every
class below it needs training examples. Everything is checked before training, and a bad file gets
one line naming it, the array and what was expected.
"""
from __future__ import annotations

import os
import zipfile

import numpy as np

from edgemesh_tf.data.dataset import Dataset
from edgemesh_tf.data.errors import fail

ARRAYS = ("x_train", "y_train", "x_test", "y_test")


def _open(path: str):
    if not os.path.isfile(path):
        raise fail(path, "no such file (expected an .npz with arrays %s)" % ", ".join(ARRAYS))
    try:
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise fail(path, "not an .npz file (np.savez writes one): %s" % e) from None
    if not hasattr(z, "files"):
        raise fail(path, "holds one array, not an .npz archive of %s" % ", ".join(ARRAYS))
    missing = [a for a in ARRAYS if a not in z.files]
    if missing:
        z.close()
        raise fail(path, "has no array %s (it holds %s; expected %s)" % (", ".join(missing), z.files or "none",
                                                                          ", ".join(ARRAYS)))
    return z


def _images(path: str, name: str, x: np.ndarray) -> np.ndarray:
    if x.ndim == 3:
        x = x[..., None]
    if x.ndim != 4 or x.shape[0] == 0:
        raise fail(path, "%s has shape %s; expected images (N, H, W, C) or (N, H, W), N >= 1" % (name, x.shape))
    if x.dtype == np.uint8:
        return x.astype(np.float32) / 255.0
    if not np.issubdtype(x.dtype, np.floating):
        raise fail(path, "%s is %s; expected uint8 or float images" % (name, x.dtype))
    x = x.astype(np.float32)
    if not np.all(np.isfinite(x)):
        raise fail(path, "%s holds NaN or infinite values" % name)
    lo, hi = float(x.min()), float(x.max())
    if lo < 0.0 or hi > 1.0:
        raise fail(path, "%s has values in [%g, %g]; float images must be in [0, 1] (divide uint8 by 255, or "
                         "store uint8)" % (name, lo, hi))
    return x


def _labels(path: str, name: str, y: np.ndarray, n: int, images: str) -> np.ndarray:
    if y.ndim != 1 or len(y) != n:
        raise fail(path, "%s has shape %s; expected (%d,), one label per image of %s" % (name, y.shape, n, images))
    if not np.issubdtype(y.dtype, np.integer):
        raise fail(path, "%s is %s; expected integer class labels" % (name, y.dtype))
    if len(y) and y.min() < 0:
        raise fail(path, "%s holds the label %d; labels must be in [0, num_classes)" % (name, int(y.min())))
    return y.astype(np.int32)


def npz_dataset(path: str | os.PathLike) -> Dataset:
    """The dataset of the ``.npz`` at ``path``; raises DatasetError naming the file and the array."""
    path = os.fspath(path)
    with _open(path) as z:
        tx, ex = _images(path, "x_train", z["x_train"]), _images(path, "x_test", z["x_test"])
        ty = _labels(path, "y_train", z["y_train"], len(tx), "x_train")
        ey = _labels(path, "y_test", z["y_test"], len(ex), "x_test")
    if tx.shape[1:] != ex.shape[1:]:
        raise fail(path, "x_train's images are %s but x_test's are %s; both splits need one image shape"
                   % (tx.shape[1:], ex.shape[1:]))
    num_classes = int(max(ty.max(), ey.max())) + 1
    if not set(range(num_classes)) <= set(ty.tolist()):
        empty = sorted(set(range(num_classes)) - set(ty.tolist()))
        raise fail(path, "y_train has no example of class %s (labels run 0..%d); every class needs training "
                         "examples" % (", ".join(map(str, empty[:5])), num_classes - 1))
    return Dataset("npz:" + path, tx, ty, ex, ey, num_classes)


def npz_shape(path: str | os.PathLike) -> tuple[tuple[int, int, int], int]:
    """((H, W, C) of the images, the number of classes) of the ``.npz`` at ``path``."""
    d = npz_dataset(path)
    return d.image_shape, d.num_classes
