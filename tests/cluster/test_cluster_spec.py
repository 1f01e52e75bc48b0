"""Cluster files: validation errors name file, device and field; TF_CONFIG; quota planning."""
import copy
import json
import os
import subprocess
import sys

import pytest

from edgemesh_tf.cluster import calibration, server, simd, spec, tf_config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOOD = {
    "name": "t",
    "devices": [
        {"name": "w0", "role": "worker", "port": 2300, "speed": 1.0, "bandwidth_mbit": 100, "latency_ms": 2},
        {"name": "w1", "role": "worker", "port": 2301, "speed": 0.5, "memory_mib": 512},
        {"name": "ps0", "role": "ps", "port": 2310},
        {"name": "boss", "role": "chief", "port": 2320},
    ],
}


def _bad(mutate):
    data = copy.deepcopy(GOOD)
    mutate(data)
    return data


@pytest.mark.parametrize("mutate, device, field", [
    (lambda d: d["devices"][1].update(colour="red"), "w1", "colour"),
    (lambda d: d["devices"][1].update(name="w0"), "w0", "name"),
    (lambda d: d["devices"][1].update(port=2300), "w1", "port"),
    (lambda d: d["devices"][0].update(speed=0), "w0", "speed"),
    (lambda d: d["devices"][0].update(speed=-1.5), "w0", "speed"),
    (lambda d: d["devices"][0].update(bandwidth_mbit=0), "w0", "bandwidth_mbit"),
    (lambda d: d["devices"][0].update(bandwidth_mbit="fast"), "w0", "bandwidth_mbit"),
    (lambda d: d["devices"][1].update(latency_ms=-1), "w1", "latency_ms"),
    (lambda d: d["devices"][1].update(memory_mib=1.5), "w1", "memory_mib"),
    (lambda d: d["devices"][1].update(role="gpu"), "w1", "role"),
    (lambda d: d["devices"][1].update(port=70000), "w1", "port"),
    (lambda d: d["devices"][1].update(host="0.0.0.0"), "w1", "host"),
    (lambda d: d["devices"].append({"name": "c2", "role": "chief", "port": 2321}), "c2", "role"),
    (lambda d: d["devices"].pop(2), None, "role"),  # no ps
    (lambda d: d.update(colour="red"), None, "colour"),
    (lambda d: d["devices"][0].update(cpu_cores=0.3), "w0", "cpu_cores"),  # with a speed
    (lambda d: d["devices"][2].update(cpu_cores=0), "ps0", "cpu_cores"),
    (lambda d: d["devices"][2].update(cpu_cores=2.5), None, "cpu_budget_cores"),  # more than the budget
    (lambda d: d["devices"][2].update(cpu_cores=1.65), None, "cpu_budget_cores"),  # leaves < 0.1 to speeds
    (lambda d: d["devices"][1].update(medium="wifi"), "w1", "medium"),  # no such medium
    (lambda d: d["devices"][1].update(medium=["a"]), "w1", "medium"),
    (lambda d: d.update(media={"wifi": {"bandwidth_mbit": 100}}), None, "media"),  # used by no device
    (lambda d: d.update(media={"wifi": 100}), None, "media"),
    (lambda d: d.update(media=[1]), None, "media"),
    (lambda d: (d.update(media={"wifi": {"bandwidth_mbit": -1}}), d["devices"][1].update(medium="wifi")), None,
     "media.wifi.bandwidth_mbit"),
    (lambda d: d["devices"][2].update(simd_bits=64), "ps0", "simd_bits"),  # no such width
    (lambda d: d["devices"][2].update(simd_bits=True), "ps0", "simd_bits"),
    (lambda d: d["devices"][1].update(simd_bits=128), "w1", "simd_bits"),  # with a relative speed
])
def test_validation_names_file_device_and_field(tmp_path, mutate, device, field):
    import yaml

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_bad(mutate)))
    with pytest.raises(spec.ClusterFileError) as e:
        spec.load_cluster(str(path))
    msg = str(e.value)
    assert msg.startswith(str(path) + ":"), msg
    assert "field %r" % field in msg, msg
    if device:
        assert "device %r" % device in msg, msg
    if field == "role" and device is None:
        assert "'ps'" in msg


def test_simd_bits_caps_onednn_of_that_device_only():
    data = _bad(lambda d: d["devices"][2].update(cpu_cores=0.3, simd_bits=128))
    assert spec.parse_cluster(_bad(lambda d: d["devices"][2].update(simd_bits=256))).device("ps0").simd_bits == 256
    c = spec.parse_cluster(data)
    assert c.device("ps0").simd_bits == 128 and c.device("w0").simd_bits is None
    assert simd.server_env(128) == {"ONEDNN_MAX_CPU_ISA": "SSE41"}
    assert simd.server_env(256) == {"ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert simd.server_env(512) == {} and simd.server_env(None) == {}
    with pytest.raises(ValueError, match="simd_bits must be one of"):
        simd.server_env(100)


def test_unreadable_and_invalid_yaml(tmp_path):
    with pytest.raises(spec.ClusterFileError, match="cannot read"):
        spec.load_cluster(str(tmp_path / "missing.yaml"))
    (tmp_path / "x.yaml").write_text("devices: [")
    with pytest.raises(spec.ClusterFileError, match="x.yaml: not valid YAML"):
        spec.load_cluster(str(tmp_path / "x.yaml"))


@pytest.mark.parametrize("name", ["edge4", "homo4"])
def test_default_layouts(name):
    c = spec.load_cluster(os.path.join(REPO, "layouts", name + ".yaml"))
    assert [d.role for d in c.devices].count("worker") == 4
    assert c.by_role("ps") and c.chief is not None
    assert c.cpu_budget_cores <= 1.7
    if name == "edge4":
        speeds = [d.speed for d in c.workers]
        assert [round(speeds[0] / s) for s in speeds] == [1, 2, 3, 4]
        assert [d.bandwidth_mbit for d in c.workers] == [100, 50, 20, 10]
        assert all(2 <= d.latency_ms <= 20 for d in c.workers)


@pytest.mark.parametrize("name", ["pi4", "pi4wifi"])
def test_realistic_edge_layouts(name):
    """Pi/Jetson-class quotas (0.1-0.4 core, <= 1 core together) and SIMD width, budgets that bind, 1 Gbit/s at
    <= 0.5 ms wired; the Wi-Fi variant's workers share one medium."""
    c = spec.load_cluster(os.path.join(REPO, "layouts", name + ".yaml"))
    cores = [d.cpu_cores for d in c.workers]
    assert all(0.1 <= x <= 0.4 for x in cores) and sum(cores) <= c.cpu_budget_cores <= 1.0
    assert min(d.memory_mib for d in c.workers) <= 256 and all(d.speed is None for d in c.devices)
    # edge CPUs compute with 128-bit NEON; the wired ps and chief with this machine's own ISA
    assert {d.simd_bits for d in c.workers} == {128} and {d.simd_bits for d in c.devices if d.role != "worker"} == {None}
    if name == "pi4":
        assert all(d.bandwidth_mbit == 1000 and d.latency_ms <= 0.5 for d in c.devices) and not c.media
    else:
        assert dict(c.media) == {"wifi": 200.0} and {d.medium for d in c.workers} == {"wifi"}


def test_tf_config_standard_format():
    c = spec.parse_cluster(GOOD, "good.yaml")
    cfg = tf_config.tf_config(c, "w1")
    assert cfg == {"cluster": {"chief": ["127.0.0.1:2320"], "worker": ["127.0.0.1:2300", "127.0.0.1:2301"],
                               "ps": ["127.0.0.1:2310"]}, "task": {"type": "worker", "index": 1}}
    assert c.device("boss").device_string == "/job:chief/task:0"
    assert "edgemesh server" in tf_config.server_command(c, "w1")


@pytest.mark.subprocess
def test_tf_config_cli_writes_one_file_per_device(tmp_path):
    out = tmp_path / "cfg"
    p = subprocess.run([sys.executable, "-m", "edgemesh_tf.cli.main", "tf-config", "--cluster",
                        os.path.join(REPO, "layouts", "edge4.yaml"), "--out_dir", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "# security: a TensorFlow server runs any graph" in p.stdout and "private network" in p.stdout
    c = spec.load_cluster(os.path.join(REPO, "layouts", "edge4.yaml"))
    for d in c.devices:
        cfg = json.loads((out / (d.name + ".json")).read_text())
        assert cfg["task"] == {"type": d.role, "index": d.task_index}
        assert cfg["cluster"]["worker"][0] == "127.0.0.1:2300"
        assert "TF_CONFIG=" in (out / (d.name + ".sh")).read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text("devices: [{name: a, role: worker, port: 1}]")
    p = subprocess.run([sys.executable, "-m", "edgemesh_tf.cli.main", "tf-config", "--cluster", str(bad)],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "bad.yaml" in p.stderr and "'ps'" in p.stderr


def test_quotas_follow_calibration_and_budget():
    # A machine where speed is not proportional to the quota (fixed overhead per step).
    points = tuple((c, 1.0 / (0.02 + 0.05 / c)) for c in (0.1, 0.2, 0.4, 0.8, 1.6))
    calib = calibration.CpuCalibration(key="k", period_us=10000, points=points)
    cores = calibration.quotas({"a": 1.0, "b": 0.5, "c": 0.25}, 1.2, calib)
    assert sum(cores.values()) == pytest.approx(1.2, rel=1e-3)
    assert calib.speed(cores["b"]) / calib.speed(cores["a"]) == pytest.approx(0.5, rel=1e-3)
    assert calib.speed(cores["c"]) / calib.speed(cores["a"]) == pytest.approx(0.25, rel=1e-3)


def test_parse_tf_config_from_env_file_and_errors(tmp_path, monkeypatch):
    cfg = tf_config.tf_config(spec.parse_cluster(GOOD), "ps0")
    monkeypatch.setenv("TF_CONFIG", json.dumps(cfg))
    assert server.parse_tf_config() == cfg
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    assert server.parse_tf_config(str(tmp_path / "c.json")) == cfg
    monkeypatch.delenv("TF_CONFIG")
    with pytest.raises(ValueError, match="no TF_CONFIG"):
        server.parse_tf_config()
    with pytest.raises(ValueError, match="out of range"):
        server.parse_tf_config(json.dumps({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 3}}))
