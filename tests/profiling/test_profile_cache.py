"""The profile cache: a rerun on the same devices, model and batch reuses the profile; any change to
them, a stale or damaged entry, or a run that finds the profile off measures again."""
import dataclasses
import json
import os

from edgemesh_tf.cluster.spec import load_cluster
from edgemesh_tf.models import load_model
from edgemesh_tf.profiling import cache
from edgemesh_tf.profiling.types import DeviceProfile, LayerTiming, Profile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _cluster(name="pi4.yaml"):
    return load_cluster(os.path.join(ROOT, "layouts", name))


def _profile(step_ms=12.5):
    return Profile("vgg_wide", 32, (8, 8, 1), 10, (DeviceProfile("pi1", "/job:worker/task:0",
                                                                (LayerTiming("conv1", 2.0),), 1 << 28, 100.0, 1.0,
                                                                whole_step_ms=step_ms),))


def _key(cluster=None, model="vgg_wide", batch=32, emulate=True):
    spec = load_model(model, (8, 8, 1), 10)
    return cache.profile_key(cluster or _cluster(), spec, batch, emulate)


def test_the_key_changes_with_each_device_field_the_model_the_batch_and_emulation():
    c = _cluster()
    base = _key(c)
    assert base == _key(_cluster())  # the same file read twice: the same key
    pi1 = c.devices.index(next(d for d in c.devices if d.name == "pi1"))
    for field, value in (("speed", 9.0), ("memory_mib", 64), ("bandwidth_mbit", 10.0), ("latency_ms", 5.0),
                         ("port", 1), ("host", "10.0.0.9"), ("simd_bits", 256)):
        devices = list(c.devices)
        devices[pi1] = dataclasses.replace(devices[pi1], **{field: value})
        assert _key(dataclasses.replace(c, devices=tuple(devices))) != base, field
    assert _key(c, model="vgg") != base
    assert _key(c, batch=16) != base
    assert _key(c, emulate=False) != base
    # the file's path is not part of what was measured
    assert _key(dataclasses.replace(c, path="/elsewhere/pi4.yaml")) == base


def test_a_stored_profile_is_reused_until_it_is_stale(tmp_path):
    key, p = _key(), _profile()
    path = cache.store(str(tmp_path), key, p, {"batch": 32}, now=1000.0)
    got = cache.load_cached(str(tmp_path), key, max_age_s=3600, now=1000.0 + 3599)
    assert got is not None and got.profile == p and got.path == path and got.age_s(1000.0 + 3599) == 3599
    assert cache.load_cached(str(tmp_path), key, max_age_s=3600, now=1000.0 + 3601) is None
    assert cache.load_cached(str(tmp_path), _key(batch=16), now=1000.0) is None  # another key: not there
    assert json.load(open(path))["for"] == {"batch": 32}  # a person can read what it was measured for


def test_a_damaged_entry_is_measured_again_not_an_error(tmp_path):
    key = _key()
    path = cache.store(str(tmp_path), key, _profile(), {})
    with open(path, "w") as f:
        f.write('{"measured_at": 1, "profile": {"model": ')
    assert cache.load_cached(str(tmp_path), key) is None
    with open(path, "w") as f:
        json.dump({"measured_at": 1e18, "profile": {"model": "x"}}, f)  # fields missing
    assert cache.load_cached(str(tmp_path), key) is None


def test_off_profile_names_the_groups_beyond_the_tolerance_either_way():
    reference = {"a": 100.0, "b": 100.0, "c": 100.0, "d": 100.0}
    measured = {"a": 149.0, "b": 151.0, "c": 66.0, "d": 0.0}
    assert cache.off_profile(reference, measured, tolerance=0.5) == {"b": (100.0, 151.0), "c": (100.0, 66.0)}
    assert cache.off_profile(reference, {}, tolerance=0.5) == {}


def test_drop_removes_the_entry_once(tmp_path):
    path = cache.store(str(tmp_path), _key(), _profile(), {})
    assert cache.drop(path) and not os.path.exists(path)
    assert not cache.drop(path)


def test_the_default_directory_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("EDGEMESH_PROFILE_CACHE", str(tmp_path / "own"))
    assert cache.default_cache_dir() == str(tmp_path / "own")
    monkeypatch.delenv("EDGEMESH_PROFILE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.default_cache_dir() == os.path.join(str(tmp_path), "edgemesh_tf", "profiles")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache.default_cache_dir() == os.path.expanduser("~/.cache/edgemesh_tf/profiles")


def _flops_profile(cluster, spec, batch):
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tests", "planner"))
    from planner_util import flops_device, profile
    from edgemesh_tf.planner import model_stats

    stats = model_stats(spec, batch)
    return profile(spec, [dataclasses.replace(flops_device(d.name, stats, 4.0 * d.speed, i), device=d.device_string)
                          for i, d in enumerate(cluster.workers)], batch)


def test_the_main_job_plans_from_the_cached_profile_without_touching_the_servers(tmp_path, monkeypatch):
    from edgemesh_tf.engine.config import SyncConfig
    from edgemesh_tf.engine.runtime.job import groups_of_plan
    from edgemesh_tf.main_job import check_profile, profile_and_plan
    from edgemesh_tf.profiling import run

    import sys
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from specs import sequential

    c = _cluster("edge4.yaml")
    spec = sequential("m", (8, 8, 1), 4, [("conv", "conv1", 8, True), ("dense", "fc", 64), ("dense", "out", 4, False)])
    stored = _flops_profile(c, spec, 32)
    cache.store(str(tmp_path / "cache"), cache.profile_key(c, spec, 32, True), stored, {})
    measured = []
    monkeypatch.setattr(run, "profile_servers", lambda *a, **k: measured.append(1) or stored)

    profile, result, profile_path, plan_path, used = profile_and_plan(
        c, spec, 32, None, str(tmp_path / "run"), SyncConfig(), cache_dir=str(tmp_path / "cache"))
    assert measured == [] and profile == stored and used["reused"] and used["entry"].startswith(str(tmp_path))
    assert os.path.exists(profile_path) and os.path.exists(plan_path)
    # --reprofile measures (and stores the new profile); another batch is another entry: measured too
    _, _, _, _, again = profile_and_plan(c, spec, 32, None, str(tmp_path / "run"), SyncConfig(),
                                         cache_dir=str(tmp_path / "cache"), reprofile=True)
    _, _, _, _, other = profile_and_plan(c, spec, 16, None, str(tmp_path / "run"), SyncConfig(),
                                         cache_dir=str(tmp_path / "cache"))
    assert measured == [1, 1] and not again["reused"] and not other["reused"] and again["entry"] != other["entry"]
    # --groups K plans K groups on the same profile (`edgemesh run --groups 2` beside the planner's choice)
    _, forced, _, _, _ = profile_and_plan(c, spec, 32, None, str(tmp_path / "run"), SyncConfig(),
                                          cache_dir=str(tmp_path / "cache"), groups=2)
    assert len(forced.groups) == 2 and measured == [1, 1]

    # the first job on a fresh profile records its groups' iteration times in the entry; a job reusing the
    # profile keeps it when its groups iterate within 1.5x of those, and drops it when they take 2x
    names = [g.name for g in groups_of_plan(c, result, plan_path, 32)]

    def final(factor):
        return {"group_time": {n: {"iteration_ms": 10.0 * (i + 1) * factor} for i, n in enumerate(names)}}
    assert check_profile(final(1.0), again) == {"off": {}, "dropped": None}
    reused = cache.load_cached(str(tmp_path / "cache"), cache.profile_key(c, spec, 32, True))
    assert reused.iteration_ms == {n: 10.0 * (i + 1) for i, n in enumerate(names)}
    _, _, _, _, rerun = profile_and_plan(c, spec, 32, None, str(tmp_path / "run"), SyncConfig(),
                                         cache_dir=str(tmp_path / "cache"))
    assert rerun["reused"] and rerun["profiled_iteration_ms"] == reused.iteration_ms
    assert check_profile(final(1.3), rerun) == {"off": {}, "dropped": None} and os.path.exists(rerun["entry"])
    checked = check_profile(final(2.0), rerun)
    assert set(checked["off"]) == set(names) and checked["dropped"] == rerun["entry"]
    assert checked["off"][names[0]] == [10.0, 20.0]
    assert not os.path.exists(rerun["entry"])
