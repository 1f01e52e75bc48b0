"""Top-k with error feedback: exact values by hand, send-all, error feedback, sampled threshold."""
import numpy as np
import pytest

from edgemesh_tf.mesh.compat import tf
from edgemesh_tf.sync.compression import TopKCompressor, bytes_sent, decompress, dense_bytes


def _session(graph):
    return tf.Session(graph=graph, config=tf.ConfigProto(
        intra_op_parallelism_threads=2, inter_op_parallelism_threads=2))


def _build(size, ratio, **kw):
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(7)
        comp = TopKCompressor(size, device="/cpu:0", **kw)
        upd = tf.placeholder(tf.float32, [size])
        r = tf.placeholder(tf.float32, []) if ratio is None else ratio
        idx, val, assign = comp.compress(upd, r)
        dense = decompress(idx, val, size)
    return g, comp, upd, r, idx, val, assign, dense


def test_exact_topk_by_hand_and_residual():
    g, comp, upd, _, idx, val, assign, dense = _build(6, 0.5)
    assert comp.exact
    with _session(g) as s:
        s.run(comp.initializer)
        x = np.array([0.1, -5, 3, 0.2, -4, 1], np.float32)
        i, v, d, _ = s.run([idx, val, dense, assign], {upd: x})
        assert i.dtype == np.int32 and sorted(i) == [1, 2, 4]   # k = ceil(0.5*6) = 3
        assert dict(zip(i, v)) == {1: -5, 2: 3, 4: -4}
        np.testing.assert_array_equal(d, [0, -5, 3, 0, -4, 0])
        np.testing.assert_allclose(s.run(comp.residual), [0.1, 0, 0, 0.2, 0, 1], rtol=1e-6)
        # a zero update now sends what was held back: top 3 of the residual
        i, v, _ = s.run([idx, val, assign], {upd: np.zeros(6, np.float32)})
        assert sorted(i) == [0, 3, 5]
        np.testing.assert_allclose(s.run(comp.residual), 0)


def test_k_rounding_and_ratio_one_sends_everything():
    for size, exact_max in ((1000, 65536), (50000, 0)):
        g, comp, upd, r, idx, val, assign, dense = _build(size, None, exact_max_size=exact_max)
        with _session(g) as s:
            s.run(comp.initializer)
            x = np.random.default_rng(0).normal(size=size).astype(np.float32)
            x[3] = 0.0
            i, d, _ = s.run([idx, dense, assign], {upd: x, r: 1.0})
            assert len(i) == size
            np.testing.assert_array_equal(d, x)
            np.testing.assert_array_equal(s.run(comp.residual), 0)
            if comp.exact:  # float32 0.1 is 0.100000001: k must still be 100, not 101
                assert len(s.run(idx, {upd: x, r: 0.1})) == 100
                assert len(s.run(idx, {upd: x, r: 1e-9})) == 1  # k >= 1
            with pytest.raises(tf.errors.InvalidArgumentError, match="ratio must be > 0"):
                s.run(idx, {upd: x, r: 0.0})
    with tf.Graph().as_default():
        comp = TopKCompressor(10)
        with pytest.raises(ValueError, match=r"ratio must be in \(0, 1\], got 1.5"):
            comp.compress(tf.zeros([10]), 1.5)


@pytest.mark.parametrize("size,exact_max", [(2000, 65536), (20000, 0)])
def test_error_feedback_running_sums_converge(size, exact_max):
    ratio, steps = 0.02, 300
    g, comp, upd, _, idx, val, assign, dense = _build(size, ratio, exact_max_size=exact_max)
    rng = np.random.default_rng(1)
    mean = rng.normal(size=size).astype(np.float32)
    true_sum = np.zeros(size, np.float64)
    sent_sum = np.zeros(size, np.float64)
    errors = []
    with _session(g) as s:
        s.run(comp.initializer)
        for step in range(steps):
            x = mean + rng.normal(scale=2.0, size=size).astype(np.float32)
            d, _ = s.run([dense, assign], {upd: x})
            true_sum += x
            sent_sum += d
            errors.append(np.linalg.norm(true_sum - sent_sum) / np.linalg.norm(true_sum))
            # step after step, nothing is lost: sent + residual == sum of the updates (float32 rounding)
            residual = s.run(comp.residual)
            np.testing.assert_allclose(sent_sum + residual, true_sum, atol=1e-3 * (step + 1) ** 0.5)
    # the residual stays bounded, so the relative error of the running sum shrinks
    assert errors[-1] < 0.2 and errors[-1] < 0.5 * errors[steps // 10]
    # without error feedback 98% of each update would be dropped for good
    assert errors[-1] < 0.3 * np.sqrt(1 - ratio)


def test_sampled_threshold_picks_about_k_on_1m():
    size = 1 << 20
    g, comp, upd, r, idx, val, assign, dense = _build(size, None)
    assert not comp.exact
    x = np.random.default_rng(2).standard_t(df=3, size=size).astype(np.float32)
    with _session(g) as s:
        s.run(comp.initializer)
        for ratio in (0.01, 0.1):
            k = int(np.ceil(ratio * size))
            i, v = s.run([idx, val], {upd: x, r: ratio})
            assert abs(len(i) - k) <= 0.2 * k
            assert len(np.unique(i)) == len(i)
            # what is sent is the largest: its smallest magnitude bounds everything left out
            kept = np.zeros(size, bool)
            kept[i] = True
            assert np.abs(x[~kept]).max() <= np.abs(v).min()


def test_bytes_and_variable_placement():
    assert bytes_sent(10) == 80 and bytes_sent(10, index_bytes=8) == 120
    assert dense_bytes(1000) == 4000
    with pytest.raises(ValueError, match="index_bytes must be 4"):
        bytes_sent(1, index_bytes=2)
    with tf.Graph().as_default():
        comp = TopKCompressor(100, device="/job:worker/task:1", name="w1")
        assert comp.residual.device == "/job:worker/task:1"
        assert comp.residual in tf.local_variables()
        assert comp.residual not in tf.trainable_variables()
        assert comp.residual not in tf.global_variables()
        with pytest.raises(ValueError, match="'w1b': size must be an int >= 1"):
            TopKCompressor(0, name="w1b")
