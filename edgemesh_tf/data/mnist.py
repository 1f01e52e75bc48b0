"""MNIST from IDX files in a local directory (never downloaded); plain or .gz.

Expected files (each may instead be `<name>.gz`): train-images-idx3-ubyte,
train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte.
Output images float32 (N, 28, 28, 1) in [0, 1]; labels int32 in 0..9.
"""
from __future__ import annotations

import gzip
import os
import zlib

import numpy as np

from edgemesh_tf.data.dataset import Dataset
from edgemesh_tf.data.errors import fail, require_dir

NUM_CLASSES = 10
IMAGES_MAGIC = 2051  # 0x00000803: unsigned bytes, 3 dimensions
LABELS_MAGIC = 2049  # 0x00000801: unsigned bytes, 1 dimension


def mnist(path: str | os.PathLike) -> Dataset:
    """Load MNIST from `path`: train (60000, 28, 28, 1), test (10000, 28, 28, 1) for the full set."""
    root = require_dir(path)
    train_x = _read_images(_find(root, "train-images-idx3-ubyte"))
    train_y = _read_labels(_find(root, "train-labels-idx1-ubyte"), len(train_x))
    test_x = _read_images(_find(root, "t10k-images-idx3-ubyte"))
    test_y = _read_labels(_find(root, "t10k-labels-idx1-ubyte"), len(test_x))
    return Dataset("mnist", train_x, train_y, test_x, test_y, NUM_CLASSES)


def _find(root: str, name: str) -> str:
    plain = os.path.join(root, name)
    for candidate in (plain, plain + ".gz"):
        if os.path.isfile(candidate):
            return candidate
    raise fail(plain, "MNIST file is missing (also looked for the .gz version)")


def _read(path: str) -> bytes:
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                return f.read()
        with open(path, "rb") as f:
            return f.read()
    except (OSError, EOFError, zlib.error) as e:
        raise fail(path, f"cannot read ({type(e).__name__}: {e})") from e


def _parse(path: str, magic: int, ndim: int) -> tuple[tuple[int, ...], np.ndarray]:
    """Check the IDX header; return (dims, uint8 payload of prod(dims) bytes)."""
    raw = _read(path)
    header = 4 * (1 + ndim)
    if len(raw) < 4:
        raise fail(path, f"expected IDX magic {magic}, file is only {len(raw)} bytes")
    got = int.from_bytes(raw[:4], "big")
    if got != magic:
        raise fail(path, f"expected IDX magic {magic}, got {got}")
    if len(raw) < header:
        raise fail(path, f"expected a {header}-byte IDX header, file is only {len(raw)} bytes")
    dims = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    expected = header + int(np.prod(dims, dtype=np.int64))
    if len(raw) != expected:
        raise fail(path, f"expected {expected} bytes for dims {dims}, got {len(raw)}")
    return dims, np.frombuffer(raw, dtype=np.uint8, offset=header)


def _read_images(path: str) -> np.ndarray:
    """IDX3 images -> float32 (N, rows, cols, 1) in [0, 1]."""
    dims, payload = _parse(path, IMAGES_MAGIC, 3)
    x = payload.reshape(dims + (1,)).astype(np.float32)
    x /= np.float32(255.0)
    return x


def _read_labels(path: str, count: int) -> np.ndarray:
    """IDX1 labels -> int32 (count,); the count must match the image file."""
    (n,), payload = _parse(path, LABELS_MAGIC, 1)
    if n != count:
        raise fail(path, f"expected {count} labels to match the image file, got {n}")
    if n and payload.max() >= NUM_CLASSES:
        raise fail(path, f"expected labels in 0..{NUM_CLASSES - 1}, got max {payload.max()}")
    return payload.astype(np.int32)
