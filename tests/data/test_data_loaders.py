"""CIFAR-10 and MNIST loaders on tiny fake files written into tmp_path."""
import gzip
import os
import pickle

import numpy as np
import pytest

from edgemesh_tf.data import DatasetError, load_dataset
from edgemesh_tf.data.cifar10 import TEST_FILE, TRAIN_FILES

PER_BATCH = 3


def fake_cifar_rows(n, first_label):
    """uint8 (n, 3072) CHW rows: R plane 10, G 20, B 30, except red pixel (1, 2) = 255."""
    chw = np.empty((n, 3, 32, 32), np.uint8)
    chw[:, 0], chw[:, 1], chw[:, 2] = 10, 20, 30
    chw[:, 0, 1, 2] = 255
    labels = (np.arange(n) + first_label) % 10
    return chw.reshape(n, -1), labels


def write_cifar_pickle(d, str_keys=False):
    os.makedirs(d, exist_ok=True)
    for i, name in enumerate(TRAIN_FILES + [TEST_FILE]):
        data, labels = fake_cifar_rows(PER_BATCH, i)
        if str_keys:
            obj, proto = {"data": data, "labels": labels.tolist()}, 5
        else:  # like the official python-2 era files
            obj = {b"batch_label": b"x", b"data": data, b"labels": labels.tolist(),
                   b"filenames": [b"f"] * PER_BATCH}
            proto = 2
        with open(os.path.join(d, name), "wb") as f:
            pickle.dump(obj, f, protocol=proto)


def write_cifar_bin(d):
    os.makedirs(d, exist_ok=True)
    for i, name in enumerate(TRAIN_FILES + [TEST_FILE]):
        data, labels = fake_cifar_rows(PER_BATCH, i)
        rows = np.concatenate([labels[:, None].astype(np.uint8), data], axis=1)
        with open(os.path.join(d, name + ".bin"), "wb") as f:
            f.write(rows.tobytes())


def check_cifar(ds):
    assert ds.name == "cifar10" and ds.num_classes == 10
    assert ds.train_x.shape == (5 * PER_BATCH, 32, 32, 3) and ds.test_x.shape == (PER_BATCH, 32, 32, 3)
    assert ds.train_x.dtype == np.float32 and ds.train_y.dtype == np.int32
    assert ds.image_shape == (32, 32, 3)
    np.testing.assert_allclose(ds.train_x[0, 0, 0], [10 / 255, 20 / 255, 30 / 255], rtol=1e-6)
    assert ds.train_x[0, 1, 2, 0] == 1.0 and ds.train_x[0, 2, 1, 0] == pytest.approx(10 / 255)
    assert 0.0 <= ds.train_x.min() and ds.train_x.max() <= 1.0
    assert ds.train_y[:PER_BATCH].tolist() == [0, 1, 2]
    assert ds.train_y[PER_BATCH:2 * PER_BATCH].tolist() == [1, 2, 3]
    assert ds.test_y.tolist() == [5, 6, 7]


@pytest.mark.parametrize("sub", ["", "cifar-10-batches-py"])
def test_cifar_pickle(tmp_path, sub):
    write_cifar_pickle(str(tmp_path / sub) if sub else str(tmp_path))
    check_cifar(load_dataset("cifar10", tmp_path))


def test_cifar_pickle_str_keys(tmp_path):
    write_cifar_pickle(str(tmp_path), str_keys=True)
    check_cifar(load_dataset("cifar10", str(tmp_path)))


@pytest.mark.parametrize("sub", ["", "cifar-10-batches-bin"])
def test_cifar_binary(tmp_path, sub):
    write_cifar_bin(str(tmp_path / sub) if sub else str(tmp_path))
    check_cifar(load_dataset("cifar10", tmp_path))


def expect_error(path, *fragments, name="cifar10", root=None):
    with pytest.raises(DatasetError) as info:
        load_dataset(name, root if root is not None else path)
    msg = str(info.value)
    assert str(path) in msg
    for frag in fragments:
        assert frag in msg
    return msg


def test_cifar_missing_dir_and_empty_dir(tmp_path):
    expect_error(tmp_path / "nope", "does not exist")
    expect_error(tmp_path, "data_batch_1", "nothing is downloaded")


def test_cifar_missing_batch(tmp_path):
    write_cifar_pickle(str(tmp_path))
    os.remove(tmp_path / "data_batch_3")
    expect_error(tmp_path / "data_batch_3", "missing", root=tmp_path)


@pytest.mark.parametrize("content", [b"", b"not a pickle at all", None])
def test_cifar_corrupt_pickle(tmp_path, content):
    write_cifar_pickle(str(tmp_path))
    target = tmp_path / "data_batch_2"
    if content is None:  # truncated
        content = target.read_bytes()[:100]
    target.write_bytes(content)
    expect_error(target, "unpickling failed", root=tmp_path)


def test_cifar_wrong_keys_and_shapes(tmp_path):
    write_cifar_pickle(str(tmp_path))
    target = tmp_path / "test_batch"
    target.write_bytes(pickle.dumps({b"pixels": np.zeros((2, 3072), np.uint8)}))
    expect_error(target, "expected keys 'data' and 'labels'", root=tmp_path)
    target.write_bytes(pickle.dumps([1, 2, 3]))
    expect_error(target, "expected a dict", root=tmp_path)
    target.write_bytes(pickle.dumps({"data": np.zeros((2, 100), np.uint8), "labels": [0, 1]}))
    expect_error(target, "uint8 (N, 3072)", root=tmp_path)
    target.write_bytes(pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "labels": [0]}))
    expect_error(target, "expected 2 labels", root=tmp_path)
    target.write_bytes(pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "labels": [0, 10]}))
    expect_error(target, "labels in 0..9", root=tmp_path)


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo should-not-run",))


def test_cifar_pickle_refuses_arbitrary_globals(tmp_path):
    write_cifar_pickle(str(tmp_path))
    target = tmp_path / "data_batch_1"
    target.write_bytes(pickle.dumps({b"data": _Evil(), b"labels": []}))
    expect_error(target, "refusing to load global", root=tmp_path)


def test_cifar_binary_wrong_size(tmp_path):
    write_cifar_bin(str(tmp_path))
    target = tmp_path / "data_batch_4.bin"
    target.write_bytes(target.read_bytes()[:-1])
    expect_error(target, "3073-byte records", root=tmp_path)


# ----------------------------------------------------------------------------- MNIST

MNIST_FILES = {"train": (5, [3, 1, 4, 1, 5]), "t10k": (2, [9, 0])}


def idx(magic, dims, payload):
    head = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in dims)
    return head + bytes(payload)


def write_mnist(d, gz=False, overrides=None):
    files = {}
    for split, (n, labels) in MNIST_FILES.items():
        pixels = np.tile(np.arange(28 * 28) % 256, n).astype(np.uint8)
        files[f"{split}-images-idx3-ubyte"] = idx(2051, (n, 28, 28), pixels)
        files[f"{split}-labels-idx1-ubyte"] = idx(2049, (n,), labels)
    files.update(overrides or {})
    for name, blob in files.items():
        path = os.path.join(d, name + (".gz" if gz else ""))
        with (gzip.open(path, "wb") if gz else open(path, "wb")) as f:
            f.write(blob)


@pytest.mark.parametrize("gz", [False, True])
def test_mnist(tmp_path, gz):
    write_mnist(str(tmp_path), gz=gz)
    ds = load_dataset("mnist", tmp_path)
    assert ds.name == "mnist" and ds.num_classes == 10 and ds.image_shape == (28, 28, 1)
    assert ds.train_x.shape == (5, 28, 28, 1) and ds.test_x.shape == (2, 28, 28, 1)
    assert ds.train_x.dtype == np.float32 and ds.test_y.dtype == np.int32
    assert ds.train_y.tolist() == [3, 1, 4, 1, 5] and ds.test_y.tolist() == [9, 0]
    assert ds.train_x.min() == 0.0 and ds.train_x.max() == 1.0
    assert ds.train_x[0, 0, 1, 0] == pytest.approx(1 / 255)  # row-major pixel order


def test_mnist_missing(tmp_path):
    expect_error(tmp_path / "nope", "does not exist", name="mnist")
    write_mnist(str(tmp_path))
    os.remove(tmp_path / "t10k-labels-idx1-ubyte")
    expect_error(tmp_path / "t10k-labels-idx1-ubyte", "missing", ".gz", name="mnist", root=tmp_path)


def test_mnist_bad_magic(tmp_path):
    write_mnist(str(tmp_path), overrides={"train-images-idx3-ubyte": idx(1234, (5, 28, 28), [0] * 5 * 784)})
    msg = expect_error(tmp_path / "train-images-idx3-ubyte", name="mnist", root=tmp_path)
    assert msg.endswith("train-images-idx3-ubyte: expected IDX magic 2051, got 1234")


def test_mnist_labels_magic_and_truncation(tmp_path):
    write_mnist(str(tmp_path), overrides={"t10k-labels-idx1-ubyte": idx(2051, (2,), [1, 2])})
    expect_error(tmp_path / "t10k-labels-idx1-ubyte", "magic 2049, got 2051", name="mnist", root=tmp_path)
    write_mnist(str(tmp_path), overrides={"train-images-idx3-ubyte": idx(2051, (5, 28, 28), [0] * 100)})
    expect_error(tmp_path / "train-images-idx3-ubyte", "expected 3936 bytes", name="mnist", root=tmp_path)
    write_mnist(str(tmp_path), overrides={"train-images-idx3-ubyte": b"\x00\x00"})
    expect_error(tmp_path / "train-images-idx3-ubyte", "only 2 bytes", name="mnist", root=tmp_path)


def test_mnist_label_count_and_range(tmp_path):
    write_mnist(str(tmp_path), overrides={"train-labels-idx1-ubyte": idx(2049, (4,), [1, 2, 3, 4])})
    expect_error(tmp_path / "train-labels-idx1-ubyte", "expected 5 labels", name="mnist", root=tmp_path)
    write_mnist(str(tmp_path), overrides={"train-labels-idx1-ubyte": idx(2049, (5,), [1, 2, 3, 4, 10])})
    expect_error(tmp_path / "train-labels-idx1-ubyte", "labels in 0..9", name="mnist", root=tmp_path)


def test_mnist_corrupt_gz(tmp_path):
    write_mnist(str(tmp_path), gz=True)
    target = tmp_path / "train-images-idx3-ubyte.gz"
    target.write_bytes(target.read_bytes()[:20])
    expect_error(target, "cannot read", name="mnist", root=tmp_path)
    target.write_bytes(b"definitely not gzip")
    expect_error(target, "cannot read", name="mnist", root=tmp_path)
