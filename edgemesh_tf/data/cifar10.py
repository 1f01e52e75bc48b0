"""CIFAR-10 from a local directory (never downloaded), python-pickle or binary version.

Accepted layouts, searched in `path`, `path/cifar-10-batches-py`, `path/cifar-10-batches-bin`:
  pickle: data_batch_1 .. data_batch_5, test_batch   (dicts: b"data" uint8 (N, 3072), b"labels")
  binary: data_batch_1.bin .. data_batch_5.bin, test_batch.bin (records: 1 label byte + 3072 CHW bytes)
Output images float32 (N, 32, 32, 3) in [0, 1] (NHWC); labels int32 in 0..9.
"""
from __future__ import annotations

import os
import pickle

import numpy as np

from edgemesh_tf.data.dataset import Dataset
from edgemesh_tf.data.errors import fail, require_dir

NUM_CLASSES = 10
IMAGE_BYTES = 32 * 32 * 3
TRAIN_FILES = [f"data_batch_{i}" for i in range(1, 6)]
TEST_FILE = "test_batch"
_SUBDIRS = ("", "cifar-10-batches-py", "cifar-10-batches-bin")

# The only globals a CIFAR pickle needs (numpy arrays, under numpy 1.x or 2.x module names).
_SAFE_GLOBALS = {
    ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
}


class _SafeUnpickler(pickle.Unpickler):
    """Unpickler that refuses every global except those needed to rebuild numpy arrays."""

    def find_class(self, module: str, name: str):
        if (module, name) not in _SAFE_GLOBALS:
            raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")
        if module.startswith("numpy.core.") and hasattr(np, "_core"):
            module = "numpy._core." + module[len("numpy.core."):]
        return super().find_class(module, name)


def cifar10(path: str | os.PathLike) -> Dataset:
    """Load CIFAR-10 from `path`: train (50000, 32, 32, 3), test (10000, 32, 32, 3) for the full set."""
    root = require_dir(path)
    for sub in _SUBDIRS:
        d = os.path.join(root, sub) if sub else root
        if os.path.isfile(os.path.join(d, TRAIN_FILES[0])):
            read = _read_pickle_batch
            break
        if os.path.isfile(os.path.join(d, TRAIN_FILES[0] + ".bin")):
            read = _read_binary_batch
            break
    else:
        raise fail(root, "no CIFAR-10 batches found; expected data_batch_1..5 and test_batch "
                         "(python version) or data_batch_1.bin..5.bin and test_batch.bin (binary "
                         "version), directly or in cifar-10-batches-py/ or cifar-10-batches-bin/ "
                         "(extract the .tar.gz first; nothing is downloaded)")
    suffix = ".bin" if read is _read_binary_batch else ""
    parts = [read(os.path.join(d, name + suffix)) for name in TRAIN_FILES]
    test_x, test_y = read(os.path.join(d, TEST_FILE + suffix))
    train_x = np.concatenate([p[0] for p in parts])
    train_y = np.concatenate([p[1] for p in parts])
    return Dataset("cifar10", _to_nhwc(train_x), train_y, _to_nhwc(test_x), test_y, NUM_CLASSES)


def _to_nhwc(flat: np.ndarray) -> np.ndarray:
    """uint8 (N, 3072) rows of R, G, B planes -> float32 (N, 32, 32, 3) in [0, 1]."""
    x = flat.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).astype(np.float32)
    x /= np.float32(255.0)
    return x


def _check_labels(path: str, labels: np.ndarray) -> np.ndarray:
    if labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        raise fail(path, f"expected labels in 0..{NUM_CLASSES - 1}, got {labels.min()}..{labels.max()}")
    return labels.astype(np.int32)


def _open(path: str):
    if not os.path.isfile(path):
        raise fail(path, "CIFAR-10 batch file is missing")
    try:
        return open(path, "rb")
    except OSError as e:
        raise fail(path, f"cannot open: {e.strerror or e}") from e


def _read_pickle_batch(path: str) -> tuple[np.ndarray, np.ndarray]:
    """Python-version batch -> (uint8 (N, 3072), int32 (N,))."""
    with _open(path) as f:
        try:
            obj = _SafeUnpickler(f, encoding="bytes").load()
        except Exception as e:  # truncated, not a pickle, or unexpected content
            raise fail(path, f"expected a CIFAR-10 python pickle batch, unpickling failed "
                             f"({type(e).__name__}: {e})") from e
    if not isinstance(obj, dict):
        raise fail(path, f"expected a dict with keys 'data' and 'labels', got {type(obj).__name__}")
    keys = {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in obj.items()}
    if "data" not in keys or "labels" not in keys:
        raise fail(path, f"expected keys 'data' and 'labels', got {sorted(map(str, keys))}")
    data, labels = keys["data"], keys["labels"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 \
            or data.shape[1] != IMAGE_BYTES:
        got = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise fail(path, f"expected 'data' uint8 (N, {IMAGE_BYTES}), got {got}")
    try:
        labels = np.asarray(labels, dtype=np.int64).reshape(-1)
    except (TypeError, ValueError) as e:
        raise fail(path, f"expected 'labels' a list of ints, got {type(labels).__name__}") from e
    if len(labels) != len(data):
        raise fail(path, f"expected {len(data)} labels to match 'data', got {len(labels)}")
    return data, _check_labels(path, labels)


def _read_binary_batch(path: str) -> tuple[np.ndarray, np.ndarray]:
    """Binary-version batch -> (uint8 (N, 3072), int32 (N,))."""
    with _open(path) as f:
        raw = f.read()
    record = 1 + IMAGE_BYTES
    if len(raw) == 0 or len(raw) % record:
        raise fail(path, f"expected a whole number of {record}-byte records (1 label + {IMAGE_BYTES} "
                         f"image bytes), got {len(raw)} bytes")
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(-1, record)
    return rows[:, 1:], _check_labels(path, rows[:, 0].astype(np.int64))
