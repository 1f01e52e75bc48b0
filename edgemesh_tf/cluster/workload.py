"""The fixed conv workload that defines "compute speed" (calibration and bench/emulation.py)."""
from __future__ import annotations

# batch 16 of 32x32x32 activations, two 3x3 conv layers with 32 filters: ~0.6 GFLOP per step,
# ~60 ms on one unthrottled core of this machine.
BATCH, SIZE, CHANNELS, LAYERS = 64, 32, 32, 2
WORKLOAD_ID = "conv%dx%dx%dx%d-b%d" % (LAYERS, SIZE, SIZE, CHANNELS, BATCH)
FLOP_PER_STEP = 2 * 9 * BATCH * SIZE * SIZE * CHANNELS * CHANNELS * LAYERS  # multiply-adds x 2 (2.4 GFLOP)


def build(tf, device: str | None = None, steps: int = 1):
    """Builds the workload in the current graph; returns an op whose run is `steps` steps, one
    after the other (several steps per run keep a remote device's network round trip small)."""
    with tf.compat.v1.device(device):
        total = tf.constant(0.0)
        for _ in range(steps):
            # Stateful random inputs: constants would be folded away by grappler. Adding 0*total
            # chains the steps so they run in sequence.
            x = tf.random.uniform([BATCH, SIZE, SIZE, CHANNELS]) + 0.0 * total
            for _ in range(LAYERS):
                k = tf.random.uniform([3, 3, CHANNELS, CHANNELS], -0.1, 0.1)
                x = tf.nn.relu(tf.nn.conv2d(x, k, strides=1, padding="SAME"))
            total = total + tf.reduce_sum(x)
        return total


def time_steps(session, op, steps: int, warmup: int = 2) -> list[float]:
    """Wall time of each of `steps` runs (s), after `warmup` untimed runs."""
    import time

    for _ in range(warmup):
        session.run(op)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        session.run(op)
        times.append(time.perf_counter() - t)
    return times
