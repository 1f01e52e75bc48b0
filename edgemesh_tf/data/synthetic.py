"""A learnable synthetic dataset for throughput work: a fixed mean image per class plus noise.

Images float32 (N, H, W, C) in [0, 1]; labels int32, balanced over the classes.
"""
from __future__ import annotations

import numpy as np

from edgemesh_tf.data.dataset import Dataset


def synthetic(image_shape: tuple[int, int, int] = (32, 32, 3), num_classes: int = 10,
              train_size: int = 4096, test_size: int = 1024, seed: int = 0,
              noise: float = 0.2) -> Dataset:
    """Generate x = clip(mean[y] + noise * N(0, 1), 0, 1), deterministic for `seed`.

    The class means are drawn uniformly in [0.2, 0.8] per pixel and shared by train and test,
    so a classifier can learn them; `noise` is the per-pixel Gaussian standard deviation.
    """
    shape = tuple(int(d) for d in image_shape)
    if len(shape) != 3 or min(shape) < 1:
        raise ValueError(f"image_shape must be (H, W, C) of positive ints, got {image_shape}")
    for label, value in (("num_classes", num_classes), ("train_size", train_size), ("test_size", test_size)):
        if int(value) < 1:
            raise ValueError(f"{label} must be >= 1, got {value}")
    if noise < 0:
        raise ValueError(f"noise must be >= 0, got {noise}")
    rng = np.random.default_rng(seed)
    means = rng.uniform(0.2, 0.8, size=(num_classes,) + shape).astype(np.float32)

    def split(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.permutation(np.arange(n) % num_classes).astype(np.int32)
        x = rng.standard_normal(size=(n,) + shape, dtype=np.float32)
        x *= np.float32(noise)
        x += means[y]
        np.clip(x, 0.0, 1.0, out=x)
        return x, y

    train_x, train_y = split(int(train_size))
    test_x, test_y = split(int(test_size))
    return Dataset("synthetic", train_x, train_y, test_x, test_y, num_classes=int(num_classes))
