"""Critical paths of mtf's ring collectives, by hand."""
import pytest

from edgemesh_tf.planner.collectives import allconcat_latency_ms, allreduce_latency_ms


def test_allconcat_paths():
    assert allconcat_latency_ms([5.0]) == 0.0
    assert allconcat_latency_ms([1.0, 2.0]) == 3.0
    # 4 devices: a part travels 2 hops; worst is 3 -> 2 -> 1 (lat 20+10, 10+5) or its mirror.
    assert allconcat_latency_ms([2.0, 5.0, 10.0, 20.0]) == pytest.approx(max(30 + 15, 22 + 7, 30 + 22, 15 + 7, 22 + 30))


def test_allreduce_paths():
    lat = [1.0, 1.0, 1.0, 1.0]
    # small tensor: one shard; 4 devices: chain to the centre (1 hop), combine (1), broadcast (1)
    assert allreduce_latency_ms(lat, 16) == pytest.approx(3 * 2.0)
    # large divisible tensor: rotated shards, same depth on a uniform ring
    assert allreduce_latency_ms(lat, 4096) == pytest.approx(3 * 2.0)
    assert allreduce_latency_ms([1.0, 3.0], 8) == pytest.approx(4.0)
    assert allreduce_latency_ms([7.0], 8) == 0.0
