"""The in-memory dataset record, a deterministic batch iterator for training (`batches`) and
every example once in padded full batches for evaluation (`padded_batches`).

Images are float32 NHWC arrays, shape (N, H, W, C), values in [0, 1]; labels are int32,
shape (N,), values in [0, num_classes).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np


@dataclass(frozen=True)
class Dataset:
    """A train/test split held in memory.

    train_x: float32 (N_train, H, W, C) in [0, 1];  train_y: int32 (N_train,)
    test_x:  float32 (N_test, H, W, C) in [0, 1];   test_y:  int32 (N_test,)
    """

    name: str
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int

    def __post_init__(self) -> None:
        for split, x, y in (("train", self.train_x, self.train_y), ("test", self.test_x, self.test_y)):
            if x.ndim != 4 or x.dtype != np.float32:
                raise ValueError(f"{self.name}: {split}_x must be float32 (N, H, W, C), got {x.dtype} {x.shape}")
            if y.ndim != 1 or y.dtype != np.int32 or len(y) != len(x):
                raise ValueError(f"{self.name}: {split}_y must be int32 ({len(x)},), got {y.dtype} {y.shape}")
        if self.train_x.shape[1:] != self.test_x.shape[1:]:
            raise ValueError(f"{self.name}: train images {self.train_x.shape[1:]} "
                             f"!= test images {self.test_x.shape[1:]}")
        if self.num_classes < 1:
            raise ValueError(f"{self.name}: num_classes must be >= 1, got {self.num_classes}")

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(H, W, C) of one image."""
        return tuple(int(d) for d in self.train_x.shape[1:])


def batches(x: np.ndarray, y: np.ndarray, batch_size: int, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield (x[idx], y[idx]) batches forever, shapes (batch_size, ...) and (batch_size,).

    Each epoch draws a fresh permutation from one `np.random.RandomState(seed)`, so the stream
    is identical for the same seed. Batches are always full: the N % batch_size examples left
    over at the end of an epoch are skipped (a different few each epoch).
    """
    n = len(x)
    if len(y) != n:
        raise ValueError(f"x has {n} examples but y has {len(y)}")
    if not 1 <= batch_size <= n:
        raise ValueError(f"batch_size must be in [1, {n}] (the number of examples), got {batch_size}")
    return _batch_stream(x, y, batch_size, np.random.RandomState(seed))


def _batch_stream(x, y, batch_size, rng):
    per_epoch = len(x) // batch_size
    while True:
        order = rng.permutation(len(x))
        for b in range(per_epoch):
            idx = order[b * batch_size:(b + 1) * batch_size]
            yield x[idx], y[idx]


def padded_batches(x: np.ndarray, y: np.ndarray, batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
    """Every example once, in order, as (xb, yb, n): full batches of `batch_size` (a graph built for
    one batch size can run them), the last padded by repeating its first example; n = the real
    examples in the batch (the first n rows)."""
    if len(y) != len(x):
        raise ValueError(f"x has {len(x)} examples but y has {len(y)}")
    for start in range(0, len(x), batch_size):
        xb, yb = x[start:start + batch_size], y[start:start + batch_size]
        n = len(xb)
        if n < batch_size:
            xb = np.concatenate([xb, xb[:1].repeat(batch_size - n, 0)])
            yb = np.concatenate([yb, yb[:1].repeat(batch_size - n, 0)])
        yield xb, yb, n
