"""Shared fixtures. TF's C++ logs are silenced for readable test output."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def digits():
    from edgemesh_tf.data import load_dataset
    return load_dataset("digits")


@pytest.fixture(scope="session")
def vgg_digits(digits):
    from edgemesh_tf.models import get_model
    return get_model("vgg", digits.image_shape, digits.num_classes)
