"""The profiler on the emulated edge2 cluster (speeds 1 and 1/3, 100 and 50 Mbit/s, 2 and 5 ms),
and its fitting helpers."""
import os
import time

import pytest

from edgemesh_tf.mesh.layout import Layout, single_device_layout
from edgemesh_tf.profiling.profiler import fit_link, passes_per_run, robust_median, whole_steps_that_fit
from edgemesh_tf.profiling.types import load_profile, save_profile

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_fit_link_recovers_latency_and_bandwidth():
    sizes = [16 << 10, 128 << 10, 512 << 10] * 3
    times = [4.0 + n * 8 / 20e3 for n in sizes]  # 2 ms one way (4 ms round trip), 20 Mbit/s
    latency_ms, mbit = fit_link(sizes, times)
    assert latency_ms == pytest.approx(2.0) and mbit == pytest.approx(20.0)


def test_large_transfers_are_timed_only_where_the_small_ones_are_quick():
    from edgemesh_tf.profiling.profiler import LARGE_TRANSFER_IF_MS, large_transfers
    sizes = [16 << 10, 512 << 10, 512 << 10, 512 << 10]
    assert large_transfers(sizes, [1.0, 5.0, 6.0, 300.0])  # 1 Gbit/s: 512 KB in ~5 ms (one outlier)
    assert not large_transfers(sizes, [2.0, 420.0, 430.0, 5.0])  # 10 Mbit/s: 8 MB would take 7 s a run
    assert not large_transfers([512 << 10], [LARGE_TRANSFER_IF_MS])


def test_robust_median_drops_outliers():
    med, iqr = robust_median([10.0, 10.5, 9.5, 10.2, 9.8, 80.0])
    assert med == pytest.approx(10.0) and iqr < 2  # 80 dropped: median of the other five


def test_long_layers_are_timed_one_pass_per_run_and_short_ones_chained():
    assert passes_per_run(one_pass_run_ms=400.0, round_trip_ms=1.0, reps=3) == 1  # VGG-16 on a Pi, 1 Gbit/s
    assert passes_per_run(one_pass_run_ms=30.0, round_trip_ms=10.0, reps=3) == 3  # small layer behind 5 ms
    assert passes_per_run(one_pass_run_ms=21.0 * 2.0, round_trip_ms=2.0, reps=3) == 1  # exactly 20 round trips
    assert passes_per_run(one_pass_run_ms=41.0, round_trip_ms=2.0, reps=3) == 3


@pytest.mark.emulator
def test_profile_edge2(vgg_digits, tmp_path):
    from edgemesh_tf.cluster import emulated_cluster, load_cluster
    from edgemesh_tf.profiling.profiler import DeviceToProfile, profile_devices
    from edgemesh_tf.profiling.step_timer import LayoutRunner, measure_side_by_side

    cluster = load_cluster(os.path.join(ROOT, "layouts", "edge2.yaml"))
    with emulated_cluster(cluster) as em:
        devices = [DeviceToProfile(d.name, em.device(d.name), d.memory_mib << 20, em.devices[d.name].pid)
                   for d in cluster.workers]
        t0 = time.perf_counter()
        # Batch 256: layers of a few ms would be timed within one 10 ms cgroup period, where the
        # quota's quantisation, not the configured speed, decides the ratio.
        profile = profile_devices(vgg_digits, 256, devices, em.session_target, em.device("chief"),
                                  whole_step_devices=("fast",), split_step_devices=("fast", "slow"),
                                  split_step_sizes={"conv1": (24, 8), "conv2": (48, 16)},  # by speed, unevenly
                                  whole_beside_split=("fast",),  # fast's whole step interleaved with the split
                                  testbed_limits=em)  # set up with the limits lifted: timed under them
        assert time.perf_counter() - t0 < 60
        fast, slow = profile.device("fast"), profile.device("slow")
        assert [t.name for t in fast.layers] == list(vgg_digits.split_dims())
        assert slow.layer_ms("conv2") > 1.8 * fast.layer_ms("conv2")  # configured 3x slower
        assert 70 < fast.bandwidth_mbit < 130 and 35 < slow.bandwidth_mbit < 65
        assert slow.latency_ms > fast.latency_ms > 0
        assert fast.peak_memory_bytes > 0 and fast.memory_bytes == 1024 << 20
        # a real step of the whole model, timed on the one device asked for; it runs the layers summed
        # above (and more: the optimizer, the input fed), so it is of their order
        assert slow.whole_step_ms == 0 and 0.3 * sum(t.compute_ms for t in fast.layers) < fast.whole_step_ms
        assert profile.split_step_devices == ("fast", "slow") and profile.split_step_ms > 0
        assert profile.split_step_sizes == {"conv1": (24, 8), "conv2": (48, 16)}
        path = str(tmp_path / "p.json")
        save_profile(profile, path)
        assert load_profile(path) == profile
        # A layout's training step, timed side by side with another on the same servers.
        single = single_device_layout(em.device("fast"))
        both = Layout(mesh=(("model", 2),), devices=(em.device("fast"), em.device("slow")))
        runners = {name: LayoutRunner(vgg_digits, lay, 32, em.session_target, em.device("chief"), container=name)
                   for name, lay in (("single", single), ("both", both))}
        try:
            times = measure_side_by_side(runners, steps=3, round_steps=1, warmup=1)
        finally:
            for r in runners.values():
                r.close()
        assert all(len(v) >= 3 and min(v) > 0 for v in times.values())


def test_a_calibrated_profile_round_trips_through_its_file(tmp_path):
    from edgemesh_tf.profiling.types import DeviceProfile, LayerTiming, Profile
    p = Profile("vgg", 32, (8, 8, 1), 10, (DeviceProfile("a", "/job:worker/task:0", (LayerTiming("conv1", 2.0),),
                                                         1 << 30, 100.0, 1.0, whole_step_ms=12.5,
                                                         split_overhead_ms=2.0),),
                compute_scale=0.8, split_step_ms=30.0, split_step_devices=("a",), split_step_sizes={"conv1": (8,)})
    save_profile(p, str(tmp_path / "p.json"))
    assert load_profile(str(tmp_path / "p.json")) == p
    bad = tmp_path / "neg.json"
    bad.write_text(p.to_json().replace('"compute_scale": 0.8', '"compute_scale": -1'))
    with pytest.raises(ValueError, match=r"neg.json: field 'compute_scale' must be a finite number > 0"):
        load_profile(str(bad))
    bad.write_text(p.to_json().replace('"split_step_devices": [\n  "a"\n ]', '"split_step_devices": ["zz"]'))
    with pytest.raises(ValueError, match=r"neg.json: field 'split_step_devices' must be a list of the profile's device "
                                         r"names \(\['a'\]\), got \['zz'\]"):
        load_profile(str(bad))
    bad.write_text(p.to_json().replace('"conv1": [\n   8\n  ]', '"conv1": [8, 0]'))
    with pytest.raises(ValueError, match=r"neg.json: field 'split_step_sizes' must map each split layer to 1 positive "
                                         r"unit counts \(one per split step device\), got \{'conv1': \[8, 0\]\}"):
        load_profile(str(bad))


def test_a_shared_medium_comes_from_the_cluster_file_and_round_trips(tmp_path):
    from edgemesh_tf.cluster.spec import load_cluster
    from edgemesh_tf.profiling.run import with_media
    from edgemesh_tf.profiling.types import DeviceProfile, LayerTiming, Profile
    cluster = load_cluster(os.path.join(ROOT, "layouts", "pi4wifi.yaml"))
    p = Profile("vgg", 32, (8, 8, 1), 10, tuple(DeviceProfile(d.name, d.device_string, (LayerTiming("conv1", 2.0),),
                                                              1 << 30, 150.0, 2.0) for d in cluster.workers))
    p = with_media(p, cluster)
    assert {(d.medium, d.medium_mbit) for d in p.devices} == {("wifi", 200.0)}
    save_profile(p, str(tmp_path / "p.json"))
    assert load_profile(str(tmp_path / "p.json")) == p
    bad = tmp_path / "bad.json"
    bad.write_text(p.to_json().replace('"medium_mbit": 200.0', '"medium_mbit": 0.0', 1))
    with pytest.raises(ValueError, match=r"bad.json: device 'jetson0': fields 'medium' and 'medium_mbit' go together"):
        load_profile(str(bad))
    wired = with_media(p, load_cluster(os.path.join(ROOT, "layouts", "pi4.yaml")))
    assert {(d.medium, d.medium_mbit) for d in wired.devices} == {("", 0.0)}


def test_bad_profile_file_is_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"model": "vgg"}')
    with pytest.raises(ValueError, match=r"bad.json: field 'image_shape' must be a list of 3 positive integers"):
        load_profile(str(bad))


def test_median_interval_is_the_order_statistics_of_its_coverage():
    from edgemesh_tf.profiling.profiler import median_interval
    assert median_interval([5.0, 1.0, 4.0, 2.0, 3.0]) == (1.0, 5.0)  # n = 5: min and max cover 94%
    xs = [float(i) for i in range(1, 16)]  # n = 15: x_(4), x_(12) cover 96.5%; x_(5), x_(11) 88%
    assert median_interval(xs) == (4.0, 12.0)
    assert median_interval(xs, coverage=0.85) == (5.0, 11.0)


def test_steps_are_timed_until_the_median_is_settled():
    from edgemesh_tf.profiling.profiler import median_settled
    assert not median_settled([100.0] * 4)  # fewer than the least
    assert median_settled([100.0, 101.0, 99.0, 102.0, 98.0])  # within +-4%
    noisy = [100.0, 140.0, 95.0, 102.0, 101.0]  # a throttling stall
    assert not median_settled(noisy)
    assert not median_settled(noisy + [99.0, 100.0])
    assert median_settled(noisy + [99.0, 100.0, 98.0, 101.0, 100.0])  # n = 10: the stall is outside (x_(2), x_(9))
    assert median_settled([100.0, 180.0] * 6) and not median_settled([100.0, 180.0] * 5)  # at most 11 steps


def test_layouts_timed_in_turn_on_one_server_each_get_a_settled_median(vgg_digits):
    """``layout_steps_ms`` builds every layout at once on the same server (each in its own container,
    so the same variable names do not collide) and steps them in turn; each gets its own median."""
    from edgemesh_tf.mesh.compat import tf
    from edgemesh_tf.profiling.profiler import layout_steps_ms

    server = tf.distribute.Server.create_local_server()
    dev = "/job:localhost/replica:0/task:0/device:CPU:0"
    got = layout_steps_ms(vgg_digits, 8, {"one": single_device_layout(dev), "again": single_device_layout(dev)},
                          server.target, dev, repeats=3)
    assert set(got) == {"one", "again"} and all(ms > 0 for ms in got.values())
    assert 1 / 3 < got["one"] / got["again"] < 3  # one layout twice, timed in turn: the same order


def test_runners_step_in_turn_with_uncounted_steps_dropped():
    """``step_in_turn`` (pure, no TF): warm-up steps, then turns of uncounted and counted steps per
    runner until none wants more; the uncounted step of each turn is not among the times."""
    from edgemesh_tf.profiling.step_timer import measure_side_by_side, step_in_turn

    class Counter:
        def __init__(self):
            self.n = 0

        def step_ms(self):
            self.n += 1
            return float(self.n)  # the step's ordinal: which steps were counted shows in the times

    a, b = Counter(), Counter()
    times = step_in_turn({"a": a, "b": b}, lambda name, v: len(v) < (2 if name == "a" else 3), warmup=1, uncounted=1)
    assert times == {"a": [3.0, 5.0], "b": [3.0, 5.0, 7.0]}  # step 1 warm-up; 2, 4, 6 uncounted
    assert (a.n, b.n) == (5, 7)
    c = Counter()
    assert measure_side_by_side({"c": c}, 4, round_steps=3, warmup=2) == {"c": [3.0, 4.0, 5.0, 6.0, 7.0, 8.0]}


def test_set_up_done_comes_after_every_runners_first_step_and_before_any_other():
    """``step_in_turn(set_up_done=...)``: the emulated testbed's limits come back (set_up_done) once each
    runner has run the step that sets its graph up, before the other warm-up steps and every timed one."""
    from edgemesh_tf.profiling.step_timer import step_in_turn

    log = []

    class Runner:
        def __init__(self, name):
            self.name = name

        def step_ms(self):
            log.append(self.name)
            return 1.0

    step_in_turn({"a": Runner("a"), "b": Runner("b")}, lambda name, v: len(v) < 2, warmup=2, uncounted=1,
                 set_up_done=lambda: log.append("limits back"))
    assert log[:3] == ["a", "b", "limits back"] and log.count("limits back") == 1
    assert len(log) == 3 + 2 + 2 * (2 * 2)  # one more warm-up each, then two turns of (uncounted, timed) each
    log.clear()
    step_in_turn({"a": Runner("a")}, lambda name, v: len(v) < 1, set_up_done=lambda: log.append("limits back"))
    assert log == ["limits back", "a"]  # no warm-up: back before the first timed step


def test_first_runs_run_each_op_alone_with_the_limits_lifted_and_restore_them_also_on_failure():
    """``_first_runs``: every op's first run (its set-up on the device) between lift and restore, one
    op per run (TF sets a graph up per fetch); the limits come back when a run fails."""
    from edgemesh_tf.profiling.profiler import _first_runs

    log = []

    class Testbed:
        def lift_limits(self):
            log.append("lift")

        def restore_limits(self):
            log.append("restore")

    class Session:
        def run(self, op):
            if op == "bad":
                raise RuntimeError("device gone")
            log.append(op)

    _first_runs(Session(), ["a", "b", "c"], Testbed())
    assert log == ["lift", "a", "b", "c", "restore"]
    log.clear()
    with pytest.raises(RuntimeError, match="device gone"):
        _first_runs(Session(), ["a", "bad", "c"], Testbed())
    assert log == ["lift", "a", "restore"]


def test_a_whole_step_is_timed_only_where_it_fits_beside_what_the_device_still_holds(caplog):
    """After the layer timings a server keeps some of what it freed (the allocator holds it): a device
    whose budget holds a whole step when idle may not beside that, and is then not timed whole."""
    mib = 1 << 20
    budgets = {"jetson0": 1024 * mib, "pi1": 512 * mib, "pi2": 256 * mib}
    held = {"jetson0": 300 * mib, "pi2": 80 * mib}  # pi1: no pid, nothing read
    with caplog.at_level("INFO"):
        assert whole_steps_that_fit(["jetson0", "pi1", "pi2"], 200 * mib, held, budgets) == ["jetson0", "pi1"]
    assert "not timing pi2's whole step: it still holds 80 MiB" in caplog.text and "256 MiB budget" in caplog.text
    assert whole_steps_that_fit(["pi2"], 176 * mib, held, budgets) == ["pi2"]  # exactly its budget: fits
    assert whole_steps_that_fit(["pi2"], 177 * mib, held, budgets) == []
