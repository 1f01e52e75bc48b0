"""Per-layer workloads of a model: the forward+backward pass of each splittable layer dim alone.

Each layer's input is generated on the device itself (stateful random op, so grappler cannot fold
it), the layer runs forward, then backward to its weights and (except for the first layer) to its
input, as one slice of the real training step does. ``reps`` copies are chained in one op so that a
remote device's network round trip is paid once per run, not once per layer execution.
"""
from __future__ import annotations

from edgemesh_tf.layers import KINDS
from edgemesh_tf.models.shapes import LayerShape


class _Probe:
    """The context a layer kind's ``tf_forward`` gets while profiled: training mode; state
    updates (batch norm's running statistics) are not timed."""

    training = True

    def update(self, layer, weight, value) -> None:
        pass


def build_layer_op(tf, layer: LayerShape, device: str, reps: int):
    """An op (scalar) that runs ``reps`` forward+backward passes of ``layer``'s segment on ``device``
    (the layer and the per-channel layers on its slices, each built by its kind, random weights)."""
    with tf.device(device):
        total = tf.constant(0.0)
        for _ in range(reps):
            x = tf.random.uniform(layer.in_shape) + 0.0 * total  # chains the reps in sequence
            y, wrt, shape = x, [] if layer.first else [x], layer.in_shape[1:]
            for node in layer.segment.layers:
                kind = KINDS[node.kind]
                weights = kind.weights(node, [shape])
                w = {wt.name: tf.random.normal(list(wt.shape), stddev=0.05) + (1.0 if wt.init == "ones" else 0.0)
                     for wt in weights}
                wrt += [w[wt.name] for wt in weights if wt.trainable]
                y = kind.tf_forward(tf, node, [y], w, _Probe())
                shape = tuple(y.shape.as_list()[1:])
            grads = tf.gradients(tf.reduce_sum(y * 1e-3), wrt)
            total = total + tf.add_n([tf.reduce_sum(g) for g in grads])
        return total


def build_transfer_op(tf, nbytes: int, src: str, dst: str):
    """An op on ``dst`` that needs ``nbytes`` of float32 held on ``src``: one transfer src -> dst.
    The bytes are a variable (the graph's initializer fills it once): a run moves them and does not
    make them, which on a throttled device took as long as the transfer at 1 Gbit/s."""
    with tf.device(src):
        x = tf.Variable(tf.zeros([max(1, nbytes // 4)]), trainable=False, use_resource=True)
    with tf.device(dst):
        return tf.reduce_sum(x.read_value())


def build_noop_op(tf, device: str):
    """A trivial op on ``device``: the fixed cost of one run there (round trip, scheduling)."""
    with tf.device(device):
        return tf.random.uniform([])
