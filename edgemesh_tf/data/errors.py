"""The one error type raised for unusable dataset files or directories."""
from __future__ import annotations

import os


class DatasetError(ValueError):
    """A dataset directory or file is missing, truncated or corrupt.

    The message always starts with the offending path and states what was expected.
    """


def fail(path: str | os.PathLike, message: str) -> DatasetError:
    """Build a DatasetError reading "<path>: <message>" (to be raised by the caller)."""
    return DatasetError(f"{os.fspath(path)}: {message}")


def require_dir(path: str | os.PathLike) -> str:
    """Return `path` as a str if it is an existing directory, else raise DatasetError."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise fail(path, "dataset directory does not exist")
    if not os.path.isdir(path):
        raise fail(path, "expected a dataset directory, found a file")
    return path
