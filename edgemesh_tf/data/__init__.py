"""Datasets as in-memory numpy arrays (no TensorFlow here, nothing downloaded).

`load_dataset(name, path=None, **kw)` returns a `Dataset`: float32 NHWC images in [0, 1] and
int32 labels. `name` is a built-in dataset or the user's own data: `npz:PATH` (arrays x_train,
y_train, x_test, y_test: `npz.py`) or `dir:PATH` (a folder of class folders of images: `image_dir.py`;
options after a `?`: `dir:photos?image_size=32x32&test_fraction=0.1&color_mode=grayscale&seed=1`). `batches(x, y, batch_size, seed)` streams shuffled full batches forever;
`padded_batches(x, y, batch_size)` yields every example once, in order, for evaluation.
"""
from __future__ import annotations

import os

from edgemesh_tf.data.cifar10 import cifar10
from edgemesh_tf.data.dataset import Dataset, batches, padded_batches
from edgemesh_tf.data.digits import digits
from edgemesh_tf.data.digits32 import digits32
from edgemesh_tf.data.errors import DatasetError
from edgemesh_tf.data.image_dir import image_dir_dataset
from edgemesh_tf.data.mnist import mnist
from edgemesh_tf.data.npz import npz_dataset
from edgemesh_tf.data.synthetic import synthetic

_BUILTIN = {"digits": digits, "digits32": digits32, "synthetic": synthetic}  # generated or shipped: take no path
_FROM_FILES = {"cifar10": cifar10, "mnist": mnist}     # read from a user-given directory
DATASET_NAMES = tuple(sorted({**_BUILTIN, **_FROM_FILES}))
IMAGE_SHAPES = {"digits": (8, 8, 1), "digits32": (32, 32, 1), "mnist": (28, 28, 1), "cifar10": (32, 32, 3),
                "synthetic": (32, 32, 3)}
"""(H, W, C) of each dataset's images (synthetic: its default), for sizing a model without loading data."""
USER_DATA = {"npz": npz_dataset, "dir": image_dir_dataset}
"""The user's own data: ``npz:PATH`` and ``dir:PATH``."""


_DIR_OPTIONS = {"image_size": lambda v: tuple(int(x) for x in v.lower().split("x")), "test_fraction": float,
                "color_mode": str, "seed": int}


def _user(name: str):
    prefix, sep, path = name.partition(":")
    return (USER_DATA[prefix], path) if sep and prefix in USER_DATA else (None, None)


def _options(name: str, path: str) -> tuple[str, dict]:
    """``dir:PATH?image_size=32x32&test_fraction=0.1&color_mode=grayscale&seed=1``: (PATH, options)."""
    path, _, query = path.partition("?")
    options = {}
    for item in filter(None, query.split("&")):
        key, _, value = item.partition("=")
        if key not in _DIR_OPTIONS or not name.startswith("dir:"):
            raise ValueError("dataset %r: unknown option %r (dir: takes %s)" % (name, key, ", ".join(_DIR_OPTIONS)))
        try:
            options[key] = _DIR_OPTIONS[key](value)
        except ValueError:
            raise ValueError("dataset %r: option %s=%r is not valid (e.g. image_size=32x32, test_fraction=0.1, "
                             "color_mode=grayscale, seed=1)" % (name, key, value)) from None
    return path, options


def check_dataset_name(name: str) -> str:
    """``name`` if it names a dataset (a built-in one, ``npz:PATH`` or ``dir:PATH``), else ValueError
    listing what is valid. Files are not read here (``load_dataset`` checks them)."""
    loader, path = _user(name)
    if loader is not None and not path.partition("?")[0]:
        raise ValueError("dataset %r: give the path after the colon (%s)" % (name, name + "PATH"))
    if loader is not None:
        _options(name, path)
    if loader is None and name.strip().lower() not in DATASET_NAMES:
        raise ValueError("unknown dataset %r; expected one of %s, npz:PATH (arrays x_train, y_train, x_test, y_test) "
                         "or dir:PATH (one folder of images per class)" % (name, ", ".join(DATASET_NAMES)))
    return name


def absolute_dataset_name(name: str) -> str:
    """``name`` with the path of ``npz:PATH`` / ``dir:PATH`` made absolute (every process of a job
    reads the same file, whatever its working directory); other names unchanged."""
    loader, path = _user(check_dataset_name(name))
    if loader is None:
        return name
    path, sep, query = path.partition("?")
    return "%s:%s%s%s" % (name.partition(":")[0], os.path.abspath(path), sep, query)


def dataset_shape(name: str, path: str | os.PathLike | None = None) -> tuple[tuple[int, int, int], int]:
    """((H, W, C), number of classes) of dataset ``name``: a built-in one's without loading it
    (10 classes), the user's data's by reading it."""
    check_dataset_name(name)
    if _user(name)[0] is None and name.strip().lower() in IMAGE_SHAPES:
        return IMAGE_SHAPES[name.strip().lower()], 10
    data = load_dataset(name, path)
    return data.image_shape, data.num_classes


def load_dataset(name: str, path: str | os.PathLike | None = None, **kw) -> Dataset:
    """Load dataset `name` (one of DATASET_NAMES, `npz:PATH` or `dir:PATH`); `path` is required for
    cifar10 and mnist only.

    Extra keyword arguments go to the loader (e.g. `train_size=` for synthetic; `test_fraction=`,
    `image_size=(H, W)`, `color_mode=`, `seed=` for `dir:`).
    Raises ValueError for a bad name or path use, DatasetError for unusable files.
    """
    loader, user_path = _user(check_dataset_name(name))
    if loader is not None:
        if path is not None:
            raise ValueError(f"dataset {name!r} takes its path after the colon, not path= (got {os.fspath(path)!r})")
        user_path, options = _options(name, user_path)
        return loader(user_path, **{**options, **kw})
    key = name.strip().lower()
    if key in _FROM_FILES:
        if path is None:
            raise ValueError(f"dataset {name!r} needs path= (a directory holding its files); "
                             f"nothing is downloaded")
        return _FROM_FILES[key](path, **kw)
    if key in _BUILTIN:
        if path is not None:
            raise ValueError(f"dataset {name!r} takes no path (got {os.fspath(path)!r})")
        return _BUILTIN[key](**kw)
    raise ValueError(f"unknown dataset {name!r}; valid names: {', '.join(DATASET_NAMES)}")


__all__ = ["DATASET_NAMES", "IMAGE_SHAPES", "Dataset", "DatasetError", "absolute_dataset_name", "batches", "check_dataset_name", "cifar10",
           "dataset_shape", "digits", "digits32", "image_dir_dataset", "load_dataset", "mnist", "npz_dataset",
           "padded_batches", "synthetic"]
