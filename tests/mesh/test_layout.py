"""Layout files and validation: every bad layout names the dim/device and the expected value."""
import pytest

from edgemesh_tf.mesh.layout import Layout, layout_from_dict, load_layout, local_devices, normalize_device

DIMS = {"batch": 32, "conv1": 64, "conv2": 128}


def _layout(**kw):
    base = dict(mesh={"model": 2}, devices=["cpu:0", "cpu:1"], rules={"conv1": "model"}, sizes={"conv1": [40, 24]})
    base.update(kw)
    return layout_from_dict(base)


def test_valid_uneven_layout_roundtrip(tmp_path):
    lay = _layout().validate(DIMS, local_devices(2))
    assert lay.split_sizes("conv1", 64) == (40, 24)
    assert lay.split_sizes("conv2", 128) is None
    path = tmp_path / "l.yaml"
    from edgemesh_tf.mesh.layout import save_layout
    save_layout(lay, str(path), header="test layout")
    assert load_layout(str(path)) == lay
    assert path.read_text().startswith("# test layout")


def test_even_split_when_sizes_absent():
    lay = _layout(rules={"conv2": "model"}, sizes={})
    assert lay.validate(DIMS).split_sizes("conv2", 128) == (64, 64)


@pytest.mark.parametrize("kw, needle", [
    (dict(rules={"convX": "model"}, sizes={}), "unknown dimension 'convX'"),
    (dict(sizes={"conv1": [40, 20]}), "add up to 60, expected 64"),
    (dict(sizes={"conv1": [64, 0]}), "device /job:localhost/replica:0/task:0/device:CPU:1"),
    (dict(sizes={"conv1": [64]}), "expected 2"),
    (dict(rules={"conv1": "rows"}), "unknown mesh dim"),
    (dict(devices=["cpu:0"]), "needs 2 devices"),
    (dict(devices=["cpu:0", "cpu:0"]), "more than once"),
    (dict(sizes={"conv2": [64, 64]}), "which no rule splits"),
])
def test_invalid_layouts_name_the_problem(kw, needle):
    with pytest.raises(ValueError) as e:
        _layout(**kw).validate(DIMS)
    assert needle in str(e.value)


def test_uneven_dim_without_sizes_suggests_sizes():
    with pytest.raises(ValueError, match=r"conv1.*sizes: \{conv1: \[22, 21, 21\]\}"):
        layout_from_dict(dict(mesh={"model": 3}, devices=["cpu:0", "cpu:1", "cpu:2"],
                              rules={"conv1": "model"})).validate(DIMS)


def test_unknown_device_is_named():
    with pytest.raises(ValueError, match="unknown device '/gpu:0'"):
        _layout(devices=["cpu:0", "/gpu:0"]).validate(DIMS, local_devices(2))


def test_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("mesh: {model: 2}\ndevices: [cpu:0, cpu:1]\nrulez: {}\n")
    with pytest.raises(ValueError, match=r"bad.yaml: unknown key\(s\) \['rulez'\]"):
        load_layout(str(bad))
    bad.write_text("mesh: [oops\n")
    with pytest.raises(ValueError, match="bad.yaml: not valid YAML"):
        load_layout(str(bad))
    with pytest.raises(ValueError, match="missing.yaml does not exist"):
        load_layout(str(tmp_path / "missing.yaml"))


def test_shipped_layouts_load():
    import glob
    import os
    root = os.path.join(os.path.dirname(__file__), "..", "..", "layouts")
    names = glob.glob(os.path.join(root, "digits_*.yaml")) + [os.path.join(root, "single.yaml")]
    assert len(names) >= 3
    for name in names:
        assert isinstance(load_layout(name), Layout)


def test_normalize_device():
    assert normalize_device("cpu:3") == "/job:localhost/replica:0/task:0/device:CPU:3"
    assert normalize_device("/job:worker/task:1/device:CPU:0") == "/job:worker/task:1/device:CPU:0"
