"""Property: every malformed cluster, layout or profile file gives the project's own InputError,
naming the file, never another exception (>= 1000 generated files in all)."""
import copy
import json
import math
import os

import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from edgemesh_tf.cluster.spec import load_cluster
from edgemesh_tf.errors import InputError
from edgemesh_tf.mesh.layout import load_layout
from edgemesh_tf.models import get_model
from edgemesh_tf.profiling.types import load_profile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIGITS_VGG_DIMS = get_model("vgg", (8, 8, 1), 10).dims(32)  # the model digits_2x2.yaml is written for
EXAMPLES = 400  # per kind of file: 1200 in all
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

with open(os.path.join(ROOT, "layouts", "edge4.yaml")) as f:
    CLUSTER = yaml.safe_load(f)
with open(os.path.join(ROOT, "layouts", "digits_2x2.yaml")) as f:
    LAYOUT = yaml.safe_load(f)
PROFILE = {"model": "vgg", "batch": 32, "image_shape": [8, 8, 1], "num_classes": 10, "ps_bandwidth_mbit": 1000.0,
           "devices": [{"name": f"edge{i}", "device": f"/job:worker/task:{i}/device:CPU:0",
                        "layers": [{"name": "conv1", "compute_ms": 1.5 * (i + 1), "spread_ms": 0.1},
                                   {"name": "fc1", "compute_ms": 0.7 * (i + 1), "spread_ms": 0.0}],
                        "memory_bytes": 2 ** 30, "bandwidth_mbit": 100.0 / (i + 1), "latency_ms": 2.0 * (i + 1),
                        "step_overhead_ms": 1.0, "peak_memory_bytes": 10 ** 7} for i in range(2)]}

# Values that no field of these files accepts where a number, a name or a list is expected.
NOT_A_NUMBER = st.one_of(st.text(max_size=5), st.booleans(), st.lists(st.integers(), max_size=2),
                         st.just(math.nan), st.just(math.inf), st.just(-math.inf), st.dictionaries(
                             st.text(max_size=3), st.integers(), max_size=2))
NEGATIVE = st.one_of(st.integers(max_value=-1), st.floats(max_value=-1e-6, allow_nan=False))
BAD_TOP = st.one_of(st.none(), st.integers(), st.text(max_size=10), st.lists(st.integers(), max_size=3))


SAFE_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _write(tmp_path, name, data, raw=False):
    path = tmp_path / name
    # every example rewrites the same file: removed first, since on ext4 truncating a file that holds
    # data flushes it to disk on close (auto_da_alloc: ~0.2 ms idle, ~3 ms while the disk is busy, x1200)
    path.unlink(missing_ok=True)
    if raw:
        path.write_bytes(data)
    elif name.endswith(".json"):
        path.write_text(json.dumps(data, allow_nan=True))
    else:  # libyaml's emitter when there is one (the same data loads back; the Python one took ~20%)
        path.write_text(yaml.dump(data, Dumper=SAFE_DUMPER))
    return str(path)


def _check(load, path):
    try:
        load(path)
    except InputError as e:
        assert path in str(e) or os.path.basename(path) in str(e), str(e)
        return
    raise AssertionError("%s loaded without an error: %s" % (path, open(path, "rb").read()[:300]))


garbage = st.one_of(st.binary(max_size=60).map(lambda b: b"\xff\xfe" + b),
                    st.sampled_from([b"{", b"[1, 2", b"devices: [", b"- : -\n  :", b"\x00\x01", b"key: 'unterminated"]))


def _cluster_mutation(draw):
    data = copy.deepcopy(CLUSTER)
    dev = draw(st.integers(0, len(data["devices"]) - 1))
    kind = draw(st.sampled_from(["number", "negative", "name", "role", "port", "unknown", "delete", "top",
                                 "devices", "dup", "host", "no_ps"]))
    d = data["devices"][dev]
    if kind == "number":
        d[draw(st.sampled_from(["speed", "memory_mib", "bandwidth_mbit", "latency_ms", "port"]))] = draw(NOT_A_NUMBER)
    elif kind == "negative":
        d[draw(st.sampled_from(["speed", "memory_mib", "bandwidth_mbit", "latency_ms", "port"]))] = draw(NEGATIVE)
    elif kind == "name":
        d["name"] = draw(st.one_of(st.just(""), st.text(min_size=1, max_size=6).filter(
            lambda s: any(not (c.isalnum() or c in "-_") for c in s)), st.none(),
            NOT_A_NUMBER.filter(lambda v: not isinstance(v, str))))
    elif kind == "role":
        d["role"] = draw(st.one_of(st.text(max_size=6).filter(lambda s: s not in ("chief", "worker", "ps")), st.none()))
    elif kind == "port":
        d["port"] = draw(st.one_of(st.integers(min_value=65536), st.just(0), st.none(), st.floats(0.5, 100.5).filter(lambda x: x != int(x))))
    elif kind == "unknown":
        d[draw(st.text(min_size=1, max_size=6).filter(lambda s: s not in d and s not in (
            "name", "role", "host", "port", "speed", "memory_mib", "bandwidth_mbit", "latency_ms")))] = 1
    elif kind == "delete":
        del d[draw(st.sampled_from(["name", "role", "port"]))]
    elif kind == "top":
        return draw(BAD_TOP)
    elif kind == "devices":
        data["devices"] = draw(st.one_of(st.just([]), st.none(), st.text(max_size=4), st.lists(BAD_TOP, min_size=1, max_size=2)))
    elif kind == "dup":
        data["devices"].append(dict(d))
    elif kind == "host":
        d["host"] = draw(st.sampled_from(["0.0.0.0", "::", "", None, 5]))
    else:
        data["devices"] = [x for x in data["devices"] if x["role"] != "ps"]
    return data


@SETTINGS
@given(st.data())
def test_malformed_cluster_files(tmp_path, data):
    if data.draw(st.integers(0, 9)) == 0:
        path = _write(tmp_path, "cluster.yaml", data.draw(garbage), raw=True)
    else:
        path = _write(tmp_path, "cluster.yaml", _cluster_mutation(data.draw))
    _check(load_cluster, path)


def _layout_mutation(draw):
    data = copy.deepcopy(LAYOUT)
    kind = draw(st.sampled_from(["mesh", "devices", "rules", "sizes_sum", "sizes_type", "unknown", "delete", "top",
                                 "dup_device", "zero"]))
    if kind == "mesh":
        data["mesh"][draw(st.sampled_from(["batch", "model"]))] = draw(st.one_of(NOT_A_NUMBER, NEGATIVE, st.just(0)))
    elif kind == "devices":
        data["devices"] = draw(st.one_of(st.lists(st.sampled_from(["cpu:0", "cpu:1"]), max_size=3), st.none(),
                                         st.text(max_size=4), st.integers()))
    elif kind == "rules":
        data["rules"] = draw(st.one_of(st.dictionaries(st.sampled_from(["conv1", "fc1"]), st.text(max_size=4).filter(
            lambda s: s not in ("batch", "model")), min_size=1), st.lists(st.integers(), max_size=2), st.integers()))
    elif kind == "sizes_sum":
        data["sizes"]["conv2"] = [draw(st.integers(1, 100)), draw(st.integers(1, 100))]
        if sum(data["sizes"]["conv2"]) == 64:
            data["sizes"]["conv2"][0] += 1
    elif kind == "sizes_type":
        data["sizes"]["conv1"] = draw(st.one_of(NOT_A_NUMBER, st.lists(NOT_A_NUMBER, min_size=2, max_size=2)))
    elif kind == "unknown":
        data[draw(st.text(min_size=1, max_size=6).filter(lambda s: s not in ("mesh", "devices", "rules", "sizes")))] = 1
    elif kind == "delete":
        del data[draw(st.sampled_from(["mesh", "devices"]))]
    elif kind == "top":
        return draw(BAD_TOP)
    elif kind == "dup_device":
        data["devices"][1] = data["devices"][0]
    else:
        data["sizes"]["conv1"] = [32, 0]
    return data


@SETTINGS
@given(st.data())
def test_malformed_layout_files(tmp_path, data):
    name = data.draw(st.sampled_from(["layout.yaml", "layout.json"]))
    if data.draw(st.integers(0, 9)) == 0:
        path = _write(tmp_path, name, data.draw(garbage), raw=True)
    else:
        path = _write(tmp_path, name, _layout_mutation(data.draw))
    _check(lambda p: load_layout(p, DIGITS_VGG_DIMS), path)


def _profile_mutation(draw):
    data = copy.deepcopy(PROFILE)
    dev = data["devices"][draw(st.integers(0, 1))]
    kind = draw(st.sampled_from(["top_number", "dev_number", "negative", "layer", "layers", "delete", "unknown",
                                 "top", "devices", "shape", "dup"]))
    if kind == "top_number":
        data[draw(st.sampled_from(["batch", "num_classes", "ps_bandwidth_mbit"]))] = draw(st.one_of(NOT_A_NUMBER, NEGATIVE))
    elif kind == "dev_number":
        dev[draw(st.sampled_from(["memory_bytes", "bandwidth_mbit", "latency_ms", "step_overhead_ms",
                                  "peak_memory_bytes"]))] = draw(NOT_A_NUMBER)
    elif kind == "negative":
        dev[draw(st.sampled_from(["memory_bytes", "bandwidth_mbit", "latency_ms"]))] = draw(NEGATIVE)
    elif kind == "layer":
        dev["layers"][0][draw(st.sampled_from(["compute_ms", "spread_ms"]))] = draw(st.one_of(NOT_A_NUMBER, NEGATIVE))
    elif kind == "layers":
        dev["layers"] = draw(st.one_of(st.none(), st.integers(), st.lists(BAD_TOP, min_size=1, max_size=2)))
    elif kind == "delete":
        if draw(st.booleans()):
            del data[draw(st.sampled_from(["model", "batch", "image_shape", "num_classes", "devices"]))]
        else:
            del dev[draw(st.sampled_from(["name", "device", "layers", "memory_bytes", "bandwidth_mbit", "latency_ms"]))]
    elif kind == "unknown":
        dev[draw(st.text(min_size=1, max_size=6).filter(lambda s: s not in dev))] = 1
    elif kind == "top":
        return draw(BAD_TOP)
    elif kind == "devices":
        data["devices"] = draw(st.one_of(st.just([]), st.none(), st.text(max_size=4), st.lists(BAD_TOP, min_size=1, max_size=2)))
    elif kind == "shape":
        data["image_shape"] = draw(st.one_of(st.lists(st.integers(1, 9), max_size=2), st.lists(st.integers(1, 9), min_size=4, max_size=5),
                                             st.lists(NEGATIVE, min_size=3, max_size=3), st.integers(), st.none()))
    else:
        data["devices"][1]["name"] = data["devices"][0]["name"]
    return data


@SETTINGS
@given(st.data())
def test_malformed_profile_files(tmp_path, data):
    if data.draw(st.integers(0, 9)) == 0:
        path = _write(tmp_path, "profile.json", data.draw(garbage), raw=True)
    else:
        path = _write(tmp_path, "profile.json", _profile_mutation(data.draw))
    _check(load_profile, path)


def test_valid_files_still_load(tmp_path):
    load_cluster(_write(tmp_path, "c.yaml", CLUSTER))
    load_layout(_write(tmp_path, "l.yaml", LAYOUT), DIGITS_VGG_DIMS)
    load_profile(_write(tmp_path, "p.json", PROFILE))
