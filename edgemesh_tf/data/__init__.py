"""Datasets as in-memory numpy arrays (no TensorFlow here, nothing downloaded).

`load_dataset(name, path=None, **kw)` returns a `Dataset`: float32 NHWC images in [0, 1] and
int32 labels. `name` is a built-in dataset or the user's own data: `npz:PATH` (arrays x_train,
y_train, x_test, y_test: `npz.py`) or `dir:PATH` (a folder of class folders of images:
`image_dir.py`; its options as keyword arguments, `load_dataset("dir:photos", image_size=(32, 32))`,
or, where only a name fits (a flag, a config), after a `?`:
`dir:photos?image_size=32x32&test_fraction=0.1&color_mode=grayscale&seed=1`; `dir:PATH` alone takes
the defaults). `image_shape_of(name)` and `num_classes_of(name)` size a model without loading the
images. `batches(x, y, batch_size, seed)` streams shuffled full batches forever;
`padded_batches(x, y, batch_size)` yields every example once, in order, for evaluation.
"""
from __future__ import annotations

import os

from edgemesh_tf.data.cifar10 import cifar10
from edgemesh_tf.data.dataset import Dataset, batches, padded_batches
from edgemesh_tf.data.digits import digits
from edgemesh_tf.data.digits32 import digits32
from edgemesh_tf.data.errors import DatasetError
from edgemesh_tf.data.image_dir import image_dir_dataset, image_dir_shape
from edgemesh_tf.data.mnist import mnist
from edgemesh_tf.data.npz import npz_dataset, npz_shape
from edgemesh_tf.data.synthetic import synthetic

_BUILTIN = {"digits": digits, "digits32": digits32, "synthetic": synthetic}  # generated or shipped: take no path
_FROM_FILES = {"cifar10": cifar10, "mnist": mnist}     # read from a user-given directory
DATASET_NAMES = tuple(sorted({**_BUILTIN, **_FROM_FILES}))
IMAGE_SHAPES = {"digits": (8, 8, 1), "digits32": (32, 32, 1), "mnist": (28, 28, 1), "cifar10": (32, 32, 3),
                "synthetic": (32, 32, 3)}
"""(H, W, C) of each dataset's images (synthetic: its default), for sizing a model without loading data."""
USER_DATA = {"npz": npz_dataset, "dir": image_dir_dataset}
"""The user's own data: ``npz:PATH`` and ``dir:PATH``."""
_USER_SHAPES = {"npz": npz_shape, "dir": image_dir_shape}  # ((H, W, C), classes) without loading the images


def _size(v: str) -> tuple[int, int]:
    h, w = (int(x) for x in v.lower().split("x"))  # ValueError unless HxW
    if min(h, w) < 1:
        raise ValueError(v)
    return h, w


def _fraction(v: str) -> float:
    if not 0.0 < float(v) < 1.0:
        raise ValueError(v)
    return float(v)


def _color(v: str) -> str:
    if v not in ("rgb", "grayscale"):
        raise ValueError(v)
    return v


_DIR_OPTIONS = {"image_size": _size, "test_fraction": _fraction, "color_mode": _color, "seed": int}


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
            raise ValueError("dataset %r: option %s=%r is not valid; expected image_size=HxW (e.g. 32x32), "
                             "test_fraction in (0, 1), color_mode=rgb or grayscale, seed=an integer"
                             % (name, key, value)) from None
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
        hint = ("; did you mean npz:%s?" % name if name.lower().endswith(".npz") else
                "; did you mean dir:%s?" % name if os.path.isdir(name) else "")
        raise ValueError("unknown dataset %r; expected one of %s, npz:PATH (arrays x_train, y_train, x_test, y_test) "
                         "or dir:PATH (one folder of images per class)%s" % (name, ", ".join(DATASET_NAMES), hint))
    return name


def absolute_dataset_name(name: str) -> str:
    """``name`` with the path of ``npz:PATH`` / ``dir:PATH`` made absolute (every process of a job
    reads the same file, whatever its working directory); other names unchanged."""
    loader, path = _user(check_dataset_name(name))
    if loader is None:
        return name
    path, sep, query = path.partition("?")
    return "%s:%s%s%s" % (name.partition(":")[0], os.path.abspath(path), sep, query)


def dataset_shape(name: str, path: str | os.PathLike | None = None, **kw) -> tuple[tuple[int, int, int], int]:
    """((H, W, C), number of classes) of dataset ``name`` without loading its images: a built-in
    one's from IMAGE_SHAPES (10 classes; synthetic's ``image_shape=``/``num_classes=`` in ``kw``),
    ``npz:PATH``'s from the arrays' headers and the labels, ``dir:PATH``'s from the folder listing and
    the image headers (``kw``: the options of ``load_dataset``). Raises as ``load_dataset`` does
    for a bad name or file (the image values are checked when loading)."""
    check_dataset_name(name)
    prefix = name.partition(":")[0]
    if _user(name)[0] is not None:
        if path is not None:
            raise ValueError(f"dataset {name!r} takes its path after the colon, not path= (got {os.fspath(path)!r})")
        user_path, options = _options(name, name.partition(":")[2])
        return _USER_SHAPES[prefix](user_path, **{**options, **kw})
    key = name.strip().lower()
    if key == "synthetic":
        return tuple(kw.get("image_shape", IMAGE_SHAPES[key])), int(kw.get("num_classes", 10))
    return IMAGE_SHAPES[key], 10


def image_shape_of(name: str, path: str | os.PathLike | None = None, **kw) -> tuple[int, int, int]:
    """(H, W, C) of dataset ``name``'s images, without loading them (see ``dataset_shape``)."""
    return dataset_shape(name, path, **kw)[0]


def num_classes_of(name: str, path: str | os.PathLike | None = None, **kw) -> int:
    """The number of classes of dataset ``name``, without loading its images (see ``dataset_shape``)."""
    return dataset_shape(name, path, **kw)[1]


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


__all__ = ["DATASET_NAMES", "IMAGE_SHAPES", "Dataset", "DatasetError", "absolute_dataset_name", "batches",
           "check_dataset_name", "cifar10", "dataset_shape", "digits", "digits32", "image_dir_dataset",
           "image_dir_shape", "image_shape_of", "load_dataset", "mnist", "npz_dataset", "npz_shape", "num_classes_of",
           "padded_batches", "synthetic"]
