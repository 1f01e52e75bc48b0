"""scikit-learn's handwritten digits (1797 images, 8x8, 10 classes): the default dataset.

The data ships inside scikit-learn, so nothing is downloaded. Images (N, 8, 8, 1) float32 in
[0, 1] (raw values 0..16 divided by 16); labels int32 in 0..9.
"""
from __future__ import annotations

import numpy as np

from edgemesh_tf.data.dataset import Dataset


def digits(test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """Load the digits with a deterministic stratified split.

    With the defaults: train 1437 images, test 360, each class in the same proportion in both.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    from sklearn.datasets import load_digits  # lazy: keep `import edgemesh_tf.data` light
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    x = (bunch.images.astype(np.float32) / np.float32(16.0))[..., None]
    y = bunch.target.astype(np.int32)
    train_x, test_x, train_y, test_y = train_test_split(
        x, y, test_size=test_fraction, random_state=seed, stratify=y)
    return Dataset("digits", np.ascontiguousarray(train_x), train_y,
                   np.ascontiguousarray(test_x), test_y, num_classes=10)
