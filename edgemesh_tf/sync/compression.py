"""Top-k sparsification with error feedback for a flat float32 update vector (TF graph ops).

``TopKCompressor.compress(update, ratio)`` sends the entries of ``acc = update + residual`` with
the largest magnitudes, ``k = max(1, ceil(ratio·size))`` of them, and keeps the rest in the
residual (``residual := acc − sent``), so nothing is lost, only delayed (error feedback).

k is exact for ``size <= exact_max_size`` (``tf.math.top_k``). Above it k is APPROXIMATE: a
magnitude threshold is estimated from a uniform random sample (with replacement) of the entries
(>= ``sample_fraction``·size and enough that ~``min_sample_k`` sampled entries lie above the
threshold), and every entry at or above it is sent. The count has a relative spread of about
``1/sqrt(sampled k)`` (about 6% for the defaults); zeros are not sent, so an all-zero ``acc``
sends nothing. The sampled threshold is faster than ``tf.math.top_k`` on large tensors, and both far
faster than ``tf.sort`` (docs/DESIGN.md has the timings). ``ratio >= 1`` always sends every entry
(on both paths).

Wire size: each sent entry is a float32 value (4 bytes) and an index (4 bytes as int32, the
dtype returned here; 8 bytes if sent as int64).
"""
from __future__ import annotations

import math

from edgemesh_tf.mesh.compat import tf

VALUE_BYTES = 4


def bytes_sent(k: int, index_bytes: int = 4) -> int:
    """Bytes on the wire for ``k`` sparse entries: ``k·(4 + index_bytes)`` (int32 index: 4, int64: 8)."""
    if index_bytes not in (4, 8):
        raise ValueError(f"index_bytes must be 4 (int32) or 8 (int64), got {index_bytes!r}")
    return int(k) * (VALUE_BYTES + index_bytes)


def dense_bytes(size: int) -> int:
    """Bytes of the uncompressed float32 vector: ``4·size``."""
    return int(size) * VALUE_BYTES


def decompress(indices, values, size: int):
    """Dense float32 ``[size]`` vector with ``values`` at ``indices`` and zeros elsewhere."""
    indices = tf.cast(indices, tf.int64)
    return tf.scatter_nd(indices[:, None], tf.cast(values, tf.float32),
                         tf.constant([size], tf.int64))


class TopKCompressor:
    """Top-k compressor for one flat float32 update vector of ``size`` entries.

    Holds the error-feedback ``residual`` (float32 ``[size]``, zeros, non-trainable, a resource
    variable on ``device``, in ``collections``, default ``LOCAL_VARIABLES``: per-worker state that
    each worker initialises itself; run ``initializer`` or the local-variables initialiser).
    """

    def __init__(self, size: int, device: str | None = None, name: str = "topk_compressor",
                 exact_max_size: int = 65536, sample_fraction: float = 0.01,
                 min_sample_k: int = 256, collections=None):
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"TopKCompressor {name!r}: size must be an int >= 1 entries, got {size!r}")
        if not 0 < sample_fraction <= 1:
            raise ValueError(f"TopKCompressor {name!r}: sample_fraction must be in (0, 1], "
                             f"got {sample_fraction!r}")
        self.size = size
        self.device = device
        self.name = name
        self.exact = size <= exact_max_size
        self.sample_fraction = float(sample_fraction)
        self.min_sample_k = int(min_sample_k)
        if collections is None:
            collections = [tf.GraphKeys.LOCAL_VARIABLES]
        with tf.device(device), tf.name_scope(name):
            self.residual = tf.Variable(tf.zeros([size], tf.float32), trainable=False,
                                        name="residual", collections=collections,
                                        use_resource=True)
        self.initializer = self.residual.initializer

    def _k(self, ratio):
        """``max(1, ceil(ratio·size))`` as an int32 tensor (<= size)."""
        if isinstance(ratio, (int, float)):
            if not 0 < ratio <= 1:
                raise ValueError(f"TopKCompressor {self.name!r}: ratio must be in (0, 1], "
                                 f"got {ratio!r}")
            return tf.constant(max(1, min(self.size, math.ceil(ratio * self.size))), tf.int32), []
        r = tf.cast(ratio, tf.float64)
        checks = [tf.debugging.assert_greater(r, tf.constant(0.0, tf.float64),
                                              message=f"{self.name}: ratio must be > 0"),
                  tf.debugging.assert_less_equal(r, tf.constant(1.0, tf.float64),
                                                 message=f"{self.name}: ratio must be <= 1")]
        x = r * self.size
        x = x - 1e-6 * x  # a float32 ratio such as 0.1 must not round k up
        k = tf.clip_by_value(tf.cast(tf.math.ceil(x), tf.int32), 1, self.size)
        return k, checks

    def compress(self, update, ratio):
        """Compress ``update`` (float32 ``[size]``) keeping about ``ratio`` of its entries.

        ``ratio``: python float or scalar tensor in (0, 1]. Returns ``(indices int32 [n],
        values float32 [n], residual_assign_op)``; ``n = k`` exactly on the exact path, about k
        on the sampled path. The assign op stores ``acc − sent`` in the residual; run it with
        (or after) the send so the next step sees it.
        """
        with tf.device(self.device), tf.name_scope(self.name + "_compress"):
            update = tf.reshape(tf.cast(update, tf.float32), [self.size])
            k, checks = self._k(ratio)
            with tf.control_dependencies(checks):
                acc = update + self.residual.read_value()
            mag = tf.abs(acc)
            if self.exact:
                indices = tf.math.top_k(mag, k, sorted=False).indices
            else:
                indices = self._sampled_indices(mag, k)
            values = tf.gather(acc, indices)
            new_residual = tf.tensor_scatter_nd_update(acc, indices[:, None],
                                                       tf.zeros_like(values))
            assign = self.residual.assign(new_residual, read_value=False)
        return indices, values, assign

    def _sampled_indices(self, mag, k):
        size = self.size
        kf = tf.cast(k, tf.float64)
        # sample size m: >= fraction·size and >= min_sample_k·size/k (so ~min_sample_k lie above)
        m = tf.maximum(tf.constant(math.ceil(self.sample_fraction * size), tf.float64),
                       self.min_sample_k * size / kf)
        m = tf.cast(tf.minimum(tf.math.ceil(m), float(size)), tf.int32)
        sample = tf.gather(mag, tf.random.uniform([m], 0, size, dtype=tf.int32))
        k_s = tf.cast(tf.math.round(kf * tf.cast(m, tf.float64) / size), tf.int32)
        k_s = tf.clip_by_value(k_s, 1, m)
        threshold = tf.math.top_k(sample, k_s, sorted=True).values[k_s - 1]
        smallest_positive = tf.constant(1.1754944e-38, tf.float32)
        mask = tf.logical_or(mag >= tf.maximum(threshold, smallest_positive), k >= size)
        return tf.cast(tf.reshape(tf.where(mask), [-1]), tf.int32)
