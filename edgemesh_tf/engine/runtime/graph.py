"""A group's (or the chief's) graph: its model replica under its layout, joined to the parameter
server and the control board.

    pull      global model (ps) -> the replica's whole (master) variables and the anchors
    push      delta = master - anchor (+ residual) -> the ps, dense or top-k (`ratio` < 1)
    publish   a dense push that also moves each anchor by what it added to the ps, in one run: a
              group alone (rules.py) then starts its next delta from what the ps holds, without a
              pull, and the ps and the anchors stay equal even when steps run beside the push
              (engine/runtime/solo_commit.py)
The replica trains on its slices; `copy_weights_to_slices` / `copy_slices_to_weights` move the whole
weights and state between masters and slices around a round (momentum stays in the slices, the group's
own). Bytes: a pull moves `ps.pull_bytes`; a dense push `ps.dense_push_bytes`; a top-k push 8 bytes
per entry (float32 value + int32 index; the ps widens the index after the transfer), counted when it
runs. A warm process reuses a graph it built for an earlier job (`replica_graph`).
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from edgemesh_tf.engine.runtime.control import ControlBoard
from edgemesh_tf.mesh.compat import tf
from edgemesh_tf.mesh.layout import Layout
from edgemesh_tf.layers import ModelSpec
from edgemesh_tf.sync.compression import TopKCompressor
from edgemesh_tf.sync.ps import ParameterServer, sparse_bytes
from edgemesh_tf.training.graph import TrainGraph, build_train_graph


@dataclasses.dataclass
class ReplicaGraph:
    """Handles into a replica graph (see the module docstring). ratio / scale: float32 scalar
    placeholders of a push; push_dense / push_sparse / publish: fetches {"version", "accepted", "bytes"};
    select: push_sparse's top-k selection at `ratio` alone (on the masters' devices: nothing is sent,
    nothing changes), which ASHL's profiling round times as the authors' compression time."""

    train: TrainGraph
    ps: ParameterServer
    board: ControlBoard
    masters: dict
    pull: tf.Operation
    ratio: tf.Tensor
    scale: tf.Tensor
    push_dense: dict
    push_sparse: dict
    publish: dict
    select: tf.Tensor | None
    local_init: tf.Operation
    counters: dict


def _master_variables(g: TrainGraph) -> dict:
    by_name = {v.name[:-2]: v for v in g.graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)}
    return {name: by_name[name] for name in g.weights}


def build_replica_graph(spec: ModelSpec, layout: Layout, batch_size: int, groups, *, ps_device: str,
                        learning_rate: float, momentum: float, seed: int, group: str | None,
                        error_feedback: bool = True, container: str = "", weight_decay: float = 0.0) -> ReplicaGraph:
    """The replica of `group` (None: the chief's evaluation replica, which never pushes)."""
    g = build_train_graph(spec, layout, batch_size, learning_rate=learning_rate, momentum=momentum, seed=seed,
                          master_device=layout.devices[0], container=container, weight_decay=weight_decay)
    masters = _master_variables(g)
    on = {n: v.device for n, v in masters.items()}  # each tensor's pull, anchor, residual and delta live with its master
    with g.graph.as_default():
        ps = ParameterServer([(n, tuple(v.shape.as_list())) for n, v in masters.items()], groups, ps_device)
        board = ControlBoard(groups, ps_device)
        counters = ps.counters()
        local = []
        with tf.container(container):
            anchors = {}
            for n, v in masters.items():
                with tf.device(on[n]):
                    anchors[n] = tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False, use_resource=True,
                                             collections=[tf.GraphKeys.LOCAL_VARIABLES], name="anchor/" + n)
            local += list(anchors.values())
            pulled = ps.pull(device=on, group=group)
            pull = tf.group(*[masters[n].assign(pulled[n], read_value=False) for n in masters],
                            *[anchors[n].assign(pulled[n], read_value=False) for n in masters], name="pull")
        with tf.container(container), tf.device(layout.devices[0]):
            ratio = tf.placeholder(tf.float32, [], name="ratio")
            scale = tf.placeholder(tf.float32, [], name="scale")
            push_dense = push_sparse = publish = {}
            select = None
            if group is not None:
                comps = {n: TopKCompressor(int(v.shape.num_elements()), device=on[n],
                                           name="topk/" + n.replace("/", "_")) for n, v in masters.items()}
                local += [c.residual for c in comps.values()]
                deltas = {}
                for n in masters:
                    with tf.device(on[n]):
                        deltas[n] = tf.reshape(masters[n].read_value() - anchors[n].read_value(), [-1])
                push_dense, pushed = _dense(ps, masters, deltas, comps, scale, group, error_feedback)
                publish = _publish(push_dense, pushed, anchors, scale)
                push_sparse, select = _sparse(ps, deltas, comps, ratio, scale, group, error_feedback)
        local_init = tf.variables_initializer(local)
    return ReplicaGraph(train=g, ps=ps, board=board, masters=masters, pull=pull, ratio=ratio,
                        scale=scale, push_dense=push_dense, push_sparse=push_sparse, publish=publish,
                        select=select, local_init=local_init, counters=counters)


def _dense(ps, masters, deltas, comps, scale, group, error_feedback) -> tuple[dict, dict]:
    """Dense push of delta + residual; the residual is then empty. Returns (its fetches, {tensor: what
    it pushed, before the scale})."""
    full = {}
    for n in masters:
        with tf.device(masters[n].device):
            d = deltas[n] + comps[n].residual.read_value() if error_feedback else deltas[n]
            full[n] = tf.reshape(d, masters[n].shape)
    push = ps.push_dense(full, scale, group)
    with tf.control_dependencies([push.version]):
        clear = []
        for n, c in comps.items():  # zeros made where the residual lives, not sent over the group's links
            with tf.device(masters[n].device):
                clear.append(c.residual.assign(tf.zeros_like(c.residual), read_value=False))
    with tf.control_dependencies(clear):
        version = tf.identity(push.version)
    return {"version": version, "accepted": push.accepted, "bytes": tf.constant(push.nbytes, tf.int64)}, full


def _publish(push_dense: dict, pushed: dict, anchors: dict, scale) -> dict:
    """The dense push, then each anchor += scale * what was pushed (nothing when the ps refused the
    push), on the anchor's device: the same values the ps added, read once in the same run."""
    moved = []
    with tf.control_dependencies([push_dense["version"]]):
        for n, d in pushed.items():
            with tf.device(anchors[n].device):
                step = tf.cast(scale, tf.float32) * d
                moved.append(anchors[n].assign_add(tf.where(push_dense["accepted"], step, tf.zeros_like(step)),
                                                   read_value=False))
    with tf.control_dependencies(moved):
        version = tf.identity(push_dense["version"])
    return {**push_dense, "version": version}


def _sparse(ps, deltas, comps, ratio, scale, group, error_feedback) -> tuple[dict, tf.Tensor]:
    """Top-k of each tensor's delta (+ residual with error feedback); the rest stays in the residual.
    Returns (the push's fetches, the selection alone: its values made where they are, not sent)."""
    parts, keep = {}, []
    for n, delta in deltas.items():
        indices, values, assign = comps[n].compress(delta, ratio)
        parts[n] = (indices, values)
        keep.append(assign)
    if not error_feedback:  # the compressor always adds the residual; without feedback it stays zero
        keep = []
    push = ps.push_sparse_many(parts, scale, group)
    entries = tf.add_n([tf.size(v, out_type=tf.int64) for _, v in parts.values()])
    with tf.control_dependencies([push.version] + keep):
        version = tf.identity(push.version)
    index_bytes = next(iter(parts.values()))[0].dtype.size  # the compressor's int32 index
    sums = []
    for _, v in parts.values():  # a scalar of each tensor's values where they are made, so none is pruned or sent
        with tf.device(v.device):
            sums.append(tf.reduce_sum(v))
    select = tf.add_n(sums, name="select")
    return {"version": version, "accepted": push.accepted, "bytes": entries * sparse_bytes(1, index_bytes)}, select



def initialise(run: Callable, g: ReplicaGraph) -> None:
    """Every variable of `g` to its initial value, the slices too, through `run` (a session's run): a
    round copies the weights only, so momentum's slices get theirs (zero) from one whole copy here."""
    run([g.train.init_op, g.local_init])
    run(g.train.copy_masters_to_slices)

GRAPHS_KEPT = 4  # graphs a warm process keeps (engine/runtime/warm.py): a benchmark interleaves a few configurations
_graphs: dict[str, ReplicaGraph] = {}  # by graph_key, oldest first


def graph_key(spec, layout, batch_size: int, groups, **kwargs) -> str:
    """What `build_replica_graph(spec, layout, batch_size, groups, **kwargs)` depends on, but its
    seed. The seed only draws the initial values of the group's own variables, which no step ever
    reads: the warm-up re-initialises them, and each round pulls the global model (initialised by
    the chief from its own graph) into them first."""
    kwargs = {k: v for k, v in kwargs.items() if k != "seed"}
    return repr((spec, layout.to_dict(), batch_size, tuple(groups), sorted(kwargs.items())))


def replica_graph(spec, layout, batch_size: int, groups, **kwargs) -> tuple[ReplicaGraph, bool]:
    """(the replica graph, whether it was built now): a warm process that ran a job with the same
    `graph_key` reuses that job's graph (~3 s of building on edge4); a new session gets new state."""
    key = graph_key(spec, layout, batch_size, groups, **kwargs)
    if key in _graphs:
        return _graphs[key], False
    g = _graphs[key] = build_replica_graph(spec, layout, batch_size, groups, **kwargs)
    while len(_graphs) > GRAPHS_KEPT:
        del _graphs[next(iter(_graphs))]
    return g, True
