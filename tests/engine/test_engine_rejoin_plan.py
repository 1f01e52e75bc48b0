"""The launcher's decisions for lost groups (engine/runtime/rejoin.py), without servers: which devices
answer is given (`probe.answers` replaced by the test's own set), group processes are recorded."""
import pytest

from edgemesh_tf.data import load_dataset
from edgemesh_tf.engine.core import records
from edgemesh_tf.engine.runtime import rejoin
from edgemesh_tf.engine.config import GroupSpec, JobConfig
from edgemesh_tf.models import get_model
from edgemesh_tf.planner.model_stats import model_stats
from edgemesh_tf.profiling.types import save_profile
from tests.planner.planner_util import flops_device, profile as make_profile

W = "/job:worker/task:%d"
NAMES = {W % i + "/device:CPU:0": n for i, n in enumerate(("a", "b", "c"))}


def _group(name, devices, batch=16):
    return GroupSpec(name, {"mesh": {"model": len(devices)}, "devices": list(devices)}, batch)


def _cfg(tmp_path, with_profile=True, **kw):
    devices = list(NAMES)
    path = None
    if with_profile:
        data = load_dataset("digits")
        spec = get_model("vgg", data.image_shape, data.num_classes)
        stats = model_stats(spec, 16)
        # Pi-class compute on fast links: splitting filters pays (the planner may leave a device idle otherwise)
        prof = make_profile(spec, [flops_device(n, stats, g, i, bw=10000.0, lat=0.1)
                                   for i, (n, g) in enumerate(zip("abc", (0.04, 0.01, 0.02)))], 16)
        path = str(tmp_path / "profile.json")
        save_profile(prof, path)
    return JobConfig(groups=(_group("abc", devices), _group("solo", [W % 9])), device_names=NAMES,
                     device_info={"a": {"speed": 1.0}, "b": {"speed": 0.25}, "c": {"speed": 0.5}},
                     profile_path=path, logdir=str(tmp_path), **kw)


def test_replan_divides_filters_over_the_devices_left_by_the_profile(tmp_path):
    cfg = _cfg(tmp_path)
    layout, how = rejoin.replan_layout(cfg, cfg.groups[0], ["a", "c"])
    assert layout["devices"] == [W % 0 + "/device:CPU:0", W % 2 + "/device:CPU:0"]
    assert layout["mesh"] == {"model": 2}
    assert "by the planner" in how and "a, c" in how
    split = {dim: s for dim, s in layout.get("sizes", {}).items()}
    assert split, "two devices 2:1 in speed should split some layer"
    assert all(s[0] > s[1] for s in split.values()), split  # the faster device takes more filters
    # without a profile: the fastest device left holds the whole model
    plain = _cfg(tmp_path, with_profile=False)
    layout, how = rejoin.replan_layout(plain, plain.groups[0], ["b", "c"])
    assert layout["devices"] == [W % 2 + "/device:CPU:0"] and layout["mesh"] == {"model": 1}
    assert "whole model on c" in how


def test_replan_is_calibrated_by_the_steps_timed_while_profiling(tmp_path):
    """c's whole step was timed at 3x what its layers add up to (a throttled device), a's as they add up:
    the re-plan, as every plan, believes the steps, so c takes fewer filters than its layers alone say."""
    import dataclasses

    from edgemesh_tf.planner.predict import predict
    from edgemesh_tf.profiling.types import load_profile

    cfg = _cfg(tmp_path)
    before, _ = rejoin.replan_layout(cfg, cfg.groups[0], ["a", "c"])
    prof = load_profile(cfg.profile_path)
    stats = model_stats(get_model("vgg", load_dataset("digits").image_shape, 10), prof.batch)

    def timed(d, factor):
        pred = predict([d], stats, {})
        return dataclasses.replace(d, whole_step_ms=pred.step_ms + (factor - 1) * pred.compute_ms[0])
    devices = tuple(timed(d, {"a": 1.0, "c": 3.0}.get(d.name, 1.0)) for d in prof.devices)
    save_profile(dataclasses.replace(prof, devices=devices), cfg.profile_path)
    after, how = rejoin.replan_layout(cfg, cfg.groups[0], ["a", "c"])
    c_before = sum(s[1] for s in before.get("sizes", {}).values())
    c_after = sum(s[1] for s in after.get("sizes", {}).values()) if len(after["devices"]) == 2 else 0
    assert c_after < c_before, (before, after, how)


class FakeGroups:
    def __init__(self, names):
        self.restarts = {g: 0 for g in names}
        self.started = {g: 0.0 for g in names}
        self.alive = {g: True for g in names}
        self.starts, self.stops = [], []

    def running(self, g):
        return self.alive[g]

    def start(self, g, launch, layout=None):
        self.restarts[g] += 1
        self.started[g] = 1e9
        self.alive[g] = True
        self.starts.append((g, launch, layout))
        return 1000 + len(self.starts)

    def stop_one(self, g):
        self.alive[g] = False
        self.stops.append(g)


def test_rejoiner_restarts_lost_groups_on_what_answers(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path, rejoin_limit=2)
    answering = set()
    monkeypatch.setattr(rejoin.probe, "answers", lambda address, timeout_s: address in answering)
    monkeypatch.setattr(rejoin, "PROBE_S", 0.0)
    groups = FakeGroups(["abc", "solo"])
    launch = {n: (None, "grpc://" + n, 1.0) for n in "abc"}
    r = rejoin.Rejoiner(cfg, groups, launch, {n: n + ":1" for n in "abc"})
    groups.alive["abc"] = False  # its process died with device b
    assert r.tick({"abc": 5.0}, 1.0) == [] and groups.starts == []  # nothing answers yet
    answering |= {"a:1", "c:1"}
    [rec] = r.tick({"abc": 5.0}, 1.0)
    assert isinstance(rec, records.Restarted) and rec.devices == ["a", "c"] and "by the planner" in rec.layout
    g, target, layout = groups.starts[-1]
    assert g == "abc" and target == launch["a"] and len(layout["devices"]) == 2
    assert r.tick({"abc": 5.0}, 1.0) == []  # restarted since the loss: it is joining, left alone
    # re-admitted (live) on a and c; b answers again -> the reduced client is stopped
    answering.add("b:1")
    [rec] = r.tick({}, 1.0)
    assert isinstance(rec, records.Restarting) and "device(s) b answer again" in rec.why and groups.stops == ["abc"]
    # the chief declares it lost as its process left: it comes back on all three, its own layout
    [rec] = r.tick({"abc": 2e9}, 1.0)
    assert rec.devices == ["a", "b", "c"] and rec.layout == "its own layout" and groups.starts[-1][2] is None
    # the limit: after rejoin_limit restarts it stays lost, said once
    groups.alive["abc"] = False
    [rec] = r.tick({"abc": 3e9}, 1.0)
    assert isinstance(rec, records.RejoinStopped) and "restarted 2 times" in rec.why
    assert r.tick({"abc": 3e9}, 1.0) == [] and len(groups.starts) == 2


def test_rejoiner_reports_a_group_that_cannot_be_replanned(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path)
    monkeypatch.setattr(rejoin.probe, "answers", lambda address, timeout_s: address == "b:1")
    monkeypatch.setattr(rejoin, "PROBE_S", 0.0)

    def no_fit(*a, **k):
        raise ValueError("device b: the plan needs 9 bytes but its memory_bytes budget is 1")
    monkeypatch.setattr(rejoin, "replan_layout", no_fit)
    groups = FakeGroups(["abc", "solo"])
    groups.alive["abc"] = False
    r = rejoin.Rejoiner(cfg, groups, {n: (None, n, 1.0) for n in "abc"}, {n: n + ":1" for n in "abc"})
    [rec] = r.tick({"abc": 1.0}, 1.0)
    assert isinstance(rec, records.RejoinFailed) and "cannot be re-planned over ['b']" in rec.why
    assert "memory_bytes" in rec.why and groups.starts == []
    assert r.tick({"abc": 1.0}, 1.0) == []  # said once
    # rejoin_limit 0: never restarts
    off = rejoin.Rejoiner(_cfg(tmp_path, rejoin_limit=0), groups, {}, {})
    assert off.tick({"abc": 1.0}, 1.0) == []
