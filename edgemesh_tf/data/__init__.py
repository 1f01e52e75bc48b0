"""Datasets as in-memory numpy arrays (no TensorFlow here, nothing downloaded).

`load_dataset(name, path=None, **kw)` returns a `Dataset`: float32 NHWC images in [0, 1] and
int32 labels. `batches(x, y, batch_size, seed)` streams shuffled full batches forever;
`padded_batches(x, y, batch_size)` yields every example once, in order, for evaluation.
"""
from __future__ import annotations

import os

from edgemesh_tf.data.cifar10 import cifar10
from edgemesh_tf.data.dataset import Dataset, batches, padded_batches
from edgemesh_tf.data.digits import digits
from edgemesh_tf.data.digits32 import digits32
from edgemesh_tf.data.errors import DatasetError
from edgemesh_tf.data.mnist import mnist
from edgemesh_tf.data.synthetic import synthetic

_BUILTIN = {"digits": digits, "digits32": digits32, "synthetic": synthetic}  # generated or shipped: take no path
_FROM_FILES = {"cifar10": cifar10, "mnist": mnist}     # read from a user-given directory
DATASET_NAMES = tuple(sorted({**_BUILTIN, **_FROM_FILES}))
IMAGE_SHAPES = {"digits": (8, 8, 1), "digits32": (32, 32, 1), "mnist": (28, 28, 1), "cifar10": (32, 32, 3),
                "synthetic": (32, 32, 3)}
"""(H, W, C) of each dataset's images (synthetic: its default), for sizing a model without loading data."""


def load_dataset(name: str, path: str | os.PathLike | None = None, **kw) -> Dataset:
    """Load dataset `name` (one of DATASET_NAMES); `path` is required for cifar10 and mnist only.

    Extra keyword arguments go to the loader (e.g. `train_size=` for synthetic).
    Raises ValueError for a bad name or path use, DatasetError for unusable files.
    """
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


__all__ = ["DATASET_NAMES", "IMAGE_SHAPES", "Dataset", "DatasetError", "batches", "cifar10", "digits",
           "digits32", "load_dataset", "mnist", "padded_batches", "synthetic"]
