"""Critical paths of mtf's ring collectives, by hand."""
import pytest

from edgemesh_tf.planner.collectives import allconcat_latency_ms, allreduce_latency_ms, direct_latency_ms


def test_allconcat_paths():
    assert allconcat_latency_ms([5.0]) == 0.0
    assert allconcat_latency_ms([1.0, 2.0]) == 3.0
    # 4 devices: a part travels 2 hops; worst is 3 -> 2 -> 1 (lat 20+10, 10+5) or its mirror.
    assert allconcat_latency_ms([2.0, 5.0, 10.0, 20.0]) == pytest.approx(max(30 + 15, 22 + 7, 30 + 22, 15 + 7, 22 + 30))


def test_direct_latency():
    assert direct_latency_ms([3.0]) == 0.0
    assert direct_latency_ms([2.0, 5.0, 10.0, 20.0]) == 30.0


def test_allreduce_paths():
    lat = [1.0, 1.0, 1.0, 1.0]
    # small tensor: one shard; 4 devices: chain to the centre (1 hop), combine (1), broadcast (1)
    assert allreduce_latency_ms(lat, 16) == pytest.approx(3 * 2.0)
    # large divisible tensor: rotated shards, same depth on a uniform ring
    assert allreduce_latency_ms(lat, 4096) == pytest.approx(3 * 2.0)
    assert allreduce_latency_ms([1.0, 3.0], 8) == pytest.approx(4.0)
    assert allreduce_latency_ms([7.0], 8) == 0.0


def test_simulated_step_by_hand():
    from planner_util import device
    from specs import sequential

    from edgemesh_tf.planner import model_stats
    from edgemesh_tf.planner.simulate import simulate_step_ms

    spec = sequential("m", (8, 8, 1), 4, [("dense", "fc", 4), ("dense", "out", 4, False)])
    stats = model_stats(spec, batch=10)
    a = device("a", {"fc": 40.0, "out": 2.0}, bw=8.0, lat=1.0, overhead=3.0, task=0)   # 1000 bytes/ms
    b = device("b", {"fc": 80.0, "out": 4.0}, bw=16.0, lat=2.0, overhead=5.0, task=1)  # 2000 bytes/ms
    # start: 1.5 round trips + the 2560-byte input batch over the device's link
    ta, tb = 1.5 * 3 + 2.56, 1.5 * 5 + 1.28
    # fc split 3:1 at half the profile batch: compute 15 and 10 ms, a third of it forward
    da, db = ta + 5, tb + 10 / 3
    # gather: the other's part arrives one hop (1 + 2 ms) after it is done, then the bytes; or, when
    # later, once the owner's link has sent it (a sends 3 units: 0.12 ms)
    ta, tb = max(max(da, db + 3) + 0.04, db + 0.02 + 3), max(max(db, da + 3) + 0.06, da + 0.12 + 3)
    # out replicated (1 and 2 ms), forward then backward; fc backward (first layer: no allreduce)
    ta, tb = ta + 1 + 10, tb + 2 + 20 / 3
    expected = max(ta + 1.5, tb + 2.5)
    assert simulate_step_ms([a, b], stats, {"fc": (3, 1)}, profile_batch=20) == pytest.approx(expected)


def test_simulated_gather_waits_for_the_large_share_owners_uplink():
    from planner_util import device
    from specs import sequential

    from edgemesh_tf.planner import model_stats
    from edgemesh_tf.planner.simulate import simulate_step_ms

    spec = sequential("m", (8, 8, 1), 4, [("dense", "fc", 8), ("dense", "out", 4, False)])
    stats = model_stats(spec, batch=10)
    devs = [device("d%d" % i, {"fc": 0.0, "out": 0.0}, bw=8.0, lat=0.0, overhead=0.0, task=i) for i in range(3)]
    # the input batch (2.56 ms), then d1 and d2 receive 7 units (0.28 ms) but d0 sends its 6 units to
    # both of them: 0.48 ms
    assert simulate_step_ms(devs, stats, {"fc": (6, 1, 1)}, 10) == pytest.approx(2.56 + 0.48)
    assert simulate_step_ms(devs, stats, {"fc": (3, 3, 2)}, 10) == pytest.approx(2.56 + 0.24)
