"""Where a split's whole (master) variables live: spread over the group's devices by bytes (the
default), or all on the first device. On "first" the first device of a split held the whole model
on top of its slices (VGG-16, batch 32, 4 ways: 402 MiB against ~141 on the others)."""
from types import SimpleNamespace

import numpy as np
import pytest

from edgemesh_tf.mesh.build import session_config
from edgemesh_tf.mesh.compat import tf
from edgemesh_tf.mesh.layout import Layout, local_devices
from edgemesh_tf.planner import masters, model_stats
from edgemesh_tf.training.graph import build_train_graph
from edgemesh_tf.training.loop import restore_or_init


def _layout(spec, k):
    dims = spec.split_dims()
    d = local_devices(k)
    return Layout(mesh=(("model", k),), devices=tuple(d), rules=tuple((n, "model") for n in dims),
                  sizes=tuple((n, tuple([s // k] * (k - 1) + [s - (k - 1) * (s // k)])) for n, s in dims.items()))


def _master_bytes(g):
    by_device = {}
    for n in g.weights:
        v = [x for x in g.graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES) if x.name[:-2] == n][0]
        by_device[v.device] = by_device.get(v.device, 0) + 4 * v.shape.num_elements()
    return by_device


@pytest.fixture(scope="module")
def spread3(vgg_digits):
    """The default (spread) train graph of a 3-way split, batch 8: two tests only read it."""
    return build_train_graph(vgg_digits, _layout(vgg_digits, 3), 8)


def test_spread_puts_the_masters_on_every_device_with_balanced_bytes(spread3):
    g = spread3
    spread = _master_bytes(g)
    assert len(spread) == 3, spread
    total, biggest = sum(spread.values()), max(4 * v for v in _param_counts(g))
    # greedy by bytes: no device holds more than an even share plus the largest tensor
    assert max(spread.values()) <= total / 3 + biggest, spread


def _param_counts(g):
    return [int(np.prod(v.shape.as_list())) for v in g.graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)
            if v.name[:-2] in g.weights]


def test_first_keeps_every_master_on_the_first_device(vgg_digits):
    layout = _layout(vgg_digits, 3)
    g = build_train_graph(vgg_digits, layout, 8, master_placement="first")
    assert len(_master_bytes(g)) == 1


def test_an_unknown_placement_is_refused_by_name(vgg_digits):
    with pytest.raises(ValueError, match="master placement.*'ps'"):
        build_train_graph(vgg_digits, _layout(vgg_digits, 2), 8, master_placement="ps")


def test_spread_and_first_train_to_the_same_weights(vgg_digits, digits):
    layout = _layout(vgg_digits, 2)
    x, y = digits.train_x[:16], digits.train_y[:16]
    got = []
    for how in ("spread", "first"):
        g = build_train_graph(vgg_digits, layout, 16, seed=3, master_placement=how)
        with tf.Session(graph=g.graph, config=session_config(2)) as sess:
            restore_or_init(sess, g, checkpoint_dir=None)
            for _ in range(2):
                sess.run(g.train_op, {g.images: x, g.labels: y})
            sess.run(g.copy_slices_to_masters)
            got.append(sess.run({n: v for n, v in g.weights.items()}, {g.images: x, g.labels: y}))
    assert max(float(np.max(np.abs(got[0][k] - got[1][k]))) for k in got[0]) < 1e-6


def test_slices_are_gathered_where_their_master_lives(spread3):
    """copy_slices_to_masters concatenates each split tensor on its master's device. mtf's default (the
    first slice's device) made device 0 of a split receive every split tensor whole and forward it:
    an engine replica's device 0 peaked ~1.5 x the model's bytes above its peers (bench/memory_fit.py)."""
    g = spread3
    concats, todo = [], [g.copy_slices_to_masters]
    while todo:  # tf.group nests NoOps (one per device) over the assigns
        op = todo.pop()
        todo += op.control_inputs
        if op.type == "AssignVariableOp" and op.inputs[1].op.type == "ConcatV2":
            concats.append((op.inputs[1].op.device, op.inputs[0].op.device))
    assert len(concats) >= 4, concats  # every split tensor of vgg (weights and biases of split layers)
    assert all(at == master for at, master in concats), concats
    assert len({master for _, master in concats}) > 1  # the masters, hence the gathers, are spread


def test_the_planner_places_every_master_where_the_engine_does(spread3, vgg_digits):
    """planner.masters replays mtf's placer from the model alone: the cost model's push, pull and copy
    bytes per device rest on it (a model whose bytes sit in one tensor has one device holding them)."""
    layout = _layout(vgg_digits, 3)
    stats = model_stats(vgg_digits, 8)
    on = {v.name[:-2]: v.device for v in spread3.graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)}
    group = [SimpleNamespace(device=d) for d in reversed(layout.devices)]  # ties go by device string, not order
    predicted = masters.master_devices(group, stats)
    graph_names = [t.name if t.kind != "momentum" else "momentum/" + t.name[len("momentum/"):].replace("/", "_")
                   for t in stats.tensors]
    assert set(graph_names) <= set(on) and len(graph_names) == len(spread3.weights) * 2 - sum(
        t.kind == "state" for t in stats.tensors)
    assert [tf.DeviceSpec.from_string(on[n]) for n in graph_names] == [
        tf.DeviceSpec.from_string(group[i].device) for i in predicted]
    assert len(set(predicted)) == 3


def test_a_round_s_copies_move_the_weights_and_leave_momentum_in_the_slices(spread3, digits):
    """copy_slices_to_weights / copy_weights_to_slices (an engine round's) move the weights and state only:
    the step reads momentum from the slices, so copying it to its masters and back moved it for nothing."""
    g = spread3
    variables = {v.name[:-2]: v for v in g.graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)}
    momentum = {n: v for n, v in variables.items() if n.startswith("momentum/")}
    weights = {n: variables[n] for n in g.weights}
    assert momentum and weights
    feed = {g.images: digits.train_x[:8], g.labels: digits.train_y[:8]}
    with tf.Session(graph=g.graph, config=session_config(3)) as sess:
        restore_or_init(sess, g, checkpoint_dir=None)
        sess.run(g.train_op, feed)
        sess.run(g.copy_slices_to_weights)
        masters_now, from_slices = sess.run(weights), sess.run(g.weights, feed)
        assert all(np.array_equal(masters_now[n], from_slices[n]) for n in weights)
        assert all(not np.any(m) for m in sess.run(momentum).values())  # the weights' copy left them alone
        sess.run(g.copy_weights_to_slices)  # ... and the slices keep theirs
        sess.run(g.copy_slices_to_masters)  # the whole copy (checkpoints) still carries them
        assert any(np.any(m) for m in sess.run(momentum).values())
