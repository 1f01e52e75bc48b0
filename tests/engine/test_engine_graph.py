"""A replica graph of a split group (engine/runtime/graph.py): every whole tensor's pull, anchor, residual
and delta live with its master, the masters spread over the group's devices, and a round trip
(pull, train, copy to the masters, dense push) moves the ps by exactly the replica's change."""
import numpy as np
import pytest

from edgemesh_tf.engine.runtime.graph import build_replica_graph
from edgemesh_tf.mesh.build import session_config
from edgemesh_tf.mesh.compat import tf
from edgemesh_tf.mesh.layout import Layout, local_devices

pytestmark = [pytest.mark.slow]


def _split_replica(spec):
    """Three local devices and group g0's replica of `spec`, every dim split 2:1 over the first two
    (the third holds the ps)."""
    d = local_devices(3)
    dims = spec.split_dims()
    layout = Layout(mesh=(("model", 2),), devices=tuple(d[:2]), rules=tuple((n, "model") for n in dims),
                    sizes=tuple((n, (s - s // 3, s // 3)) for n, s in dims.items()))
    return d, build_replica_graph(spec, layout, 16, ["g0"], ps_device=d[2], learning_rate=0.05, momentum=0.9,
                                  seed=1, group="g0")


def test_a_split_replica_keeps_each_tensor_with_its_master_and_pushes_its_change(vgg_digits, digits):
    d, g = _split_replica(vgg_digits)
    assert len({v.device for v in g.masters.values()}) == 2
    anchors = {v.name[len("anchor/"):-2]: v for v in g.train.graph.get_collection(tf.GraphKeys.LOCAL_VARIABLES)
               if v.name.startswith("anchor/")}
    assert set(anchors) == set(g.masters)
    assert all(anchors[n].device == g.masters[n].device for n in g.masters)
    x, y = digits.train_x[:16], digits.train_y[:16]
    with tf.Session(graph=g.train.graph, config=session_config(3)) as sess:
        sess.run([g.train.init_op, g.local_init])
        g.ps.initialize(sess, sess.run({n: v.read_value() for n, v in g.masters.items()}))
        sess.run(g.pull)
        sess.run(g.train.copy_masters_to_slices)
        before = sess.run({n: v.read_value() for n, v in g.ps.vars.items()})
        for _ in range(2):
            sess.run(g.train.train_op, {g.train.images: x, g.train.labels: y})
        sess.run(g.train.copy_slices_to_masters)
        trained = sess.run({n: v.read_value() for n, v in g.masters.items()})
        sess.run(g.push_dense, {g.scale: 1.0})
        after = sess.run({n: v.read_value() for n, v in g.ps.vars.items()})
    assert max(float(np.max(np.abs(after[n] - trained[n]))) for n in g.masters) < 1e-6
    assert max(float(np.max(np.abs(after[n] - before[n]))) for n in g.masters) > 1e-4  # it trained


def _crossings(ops, devices, min_elements=1024):
    """Tensors of at least `min_elements` that an op of `ops` on one of `devices` reads from another of
    them: bytes a round sends over the group's own links."""
    def task(device):
        spec = tf.DeviceSpec.from_string(device or "")
        return (spec.job, spec.task, spec.device_index)
    def where(op):  # TF's placer runs an op on a resource where the resource lives
        handles = [t.op.device for t in op.inputs if t.dtype == tf.resource]
        return task(handles[0] if handles else op.device)
    group = {task(x) for x in devices}
    seen, todo, out = set(), list(ops), []
    while todo:
        op = todo.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        for t in op.inputs:
            a, b = where(t.op), where(op)
            n = t.shape.num_elements() if t.shape.is_fully_defined() else None
            if a in group and b in group and a != b and n is not None and n >= min_elements:
                out.append("%s (%s) -> %s (%s)" % (t.name, a, op.name, b))
            todo.append(t.op)
        todo.extend(op.control_inputs)
    return out


def test_a_split_replicas_pull_push_and_publish_send_nothing_between_its_devices(vgg_digits):
    """The pull, the pushes (dense and top-k, with the residuals they clear or keep) and the publish
    (a dense push whose anchors move with it) each run where their tensor's master lives: only the
    masters-to-slices copies cross the group's links. (A residual cleared with zeros made on the group's first device sent half the model over
    the link on every dense push.)"""
    d, g = _split_replica(vgg_digits)
    assert len({v.device for v in g.masters.values()}) == 2
    for name, ops in (("pull", [g.pull]), ("publish", [g.publish["version"].op]),
                      ("dense push", [g.push_dense["version"].op]), ("top-k push", [g.push_sparse["version"].op])):
        assert _crossings(ops, d[:2]) == [], name
    assert _crossings([g.train.copy_masters_to_slices], d[:2])  # the check sees a crossing where one is
