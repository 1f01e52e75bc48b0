"""Training in one process over local CPU devices under any layout, with checkpoint and resume.

Checkpoints are `training/checkpoint.py`'s (whole tensors by name, the hybrid chief's format): the
master weights and momentum buffers, with the global step in the state."""
from __future__ import annotations

import json
import time
from typing import Callable

import numpy as np

from edgemesh_tf.data import Dataset, batches, padded_batches
from edgemesh_tf.training import checkpoint
from edgemesh_tf.mesh.build import session_config
from edgemesh_tf.mesh.compat import tf
from edgemesh_tf.mesh.layout import Layout, local_devices
from edgemesh_tf.layers import ModelSpec
from edgemesh_tf.models import initial_weights
from edgemesh_tf.training.graph import TrainGraph, build_train_graph


def evaluate(sess: tf.Session, g: TrainGraph, x: np.ndarray, y: np.ndarray) -> float:
    """Accuracy (0..1) of the current weights on all of (x, y); the last batch is padded."""
    correct = 0
    for xb, yb, n in padded_batches(x, y, g.batch_size):
        logits = sess.run(g.logits, {g.images: xb, g.labels: yb})
        correct += int(np.sum(np.argmax(logits[:n], axis=1) == yb[:n]))
    return correct / max(1, len(x))


def _saved_variables(g: TrainGraph) -> dict:
    """{name: variable} of what a checkpoint holds: the master weights and momentum buffers (whole
    tensors, so a checkpoint restores under any layout; the global step goes in the state)."""
    with g.graph.as_default():
        return {v.op.name: v for v in tf.global_variables() if v.op.name != g.global_step.op.name}


def restore_or_init(sess: tf.Session, g: TrainGraph, checkpoint_dir: str | None,
                    initial: dict | None = None) -> int:
    """Restores the latest checkpoint in ``checkpoint_dir`` if any, else starts from ``initial``
    ({name: whole tensor}, e.g. a Keras model's weights; None: the initializers'); returns the step
    to start at. Errors name the checkpoint and the tensor."""
    prefix = checkpoint.latest(checkpoint_dir) if checkpoint_dir else None
    sess.run(g.init_op)
    if prefix:
        weights, state = checkpoint.load(prefix)
        saved = _saved_variables(g)
        problems = checkpoint.tensor_problems(weights, {name: v.shape.as_list() for name, v in saved.items()})
        if problems:
            raise ValueError("checkpoint %s: %s" % (prefix, problems[0]))
        # each variable's initializer, fed the saved value instead of its initial one
        values = [(v, weights[name]) for name, v in saved.items()] + [(g.global_step, int(state["step"]))]
        sess.run([v.initializer for v, _ in values], {v.initializer.inputs[1]: x for v, x in values})
    elif initial:
        values = [(v, initial[name]) for name, v in _saved_variables(g).items() if name in initial]
        sess.run([v.initializer for v, _ in values], {v.initializer.inputs[1]: x for v, x in values})
    sess.run(g.copy_masters_to_slices)
    return int(sess.run(g.global_step))


def save(sess: tf.Session, g: TrainGraph, checkpoint_dir: str) -> str:
    """Writes whole (master) tensors and the global step; returns the checkpoint's path prefix."""
    sess.run(g.copy_slices_to_masters)
    weights, step = sess.run([_saved_variables(g), g.global_step])
    return checkpoint.save(checkpoint_dir, weights, {"step": int(step)})


def train(spec: ModelSpec, data: Dataset, layout: Layout, *, steps: int, batch_size: int = 32,
          learning_rate: float = 0.02, momentum: float = 0.9, seed: int = 0, checkpoint_dir: str | None = None,
          checkpoint_every: int = 0, eval_every: int = 0, intra_op_threads: int = 1,
          session_target: str = "", master_device: str | None = None,
          emit: Callable[[dict], None] = lambda rec: print(json.dumps(rec), flush=True)) -> dict:
    """Trains until global step ``steps`` (resuming from ``checkpoint_dir``); returns the final record.

    Emits one record per step: step, loss, examples_per_sec (and accuracy every ``eval_every``
    steps), then a final record with the held-out accuracy. Batches are a function of (seed, step),
    so a resumed run sees the same data as an uninterrupted one.

    session_target: "" for in-process CPU devices; a grpc:// master for a layout whose devices are
    TF servers (then ``master_device`` holds the whole variables and the input placeholders).
    """
    if session_target:
        config = tf.ConfigProto(allow_soft_placement=False)
        tf.Session.reset(session_target)  # resource variables outlive sessions on the servers
    else:
        layout.validate(available_devices=local_devices(_device_count(layout)))
        config = session_config(_device_count(layout), intra_op_threads)
    g = build_train_graph(spec, layout, batch_size, learning_rate=learning_rate, momentum=momentum, seed=seed,
                          master_device=master_device)
    with tf.Session(session_target, graph=g.graph, config=config) as sess:
        start = restore_or_init(sess, g, checkpoint_dir, initial_weights(spec))
        stream = batches(data.train_x, data.train_y, batch_size, seed)
        for _ in range(start):
            next(stream)
        losses = []
        t_start = time.perf_counter()
        for step in range(start, steps):
            xb, yb = next(stream)
            t0 = time.perf_counter()
            loss, _ = sess.run([g.loss, g.train_op], {g.images: xb, g.labels: yb})
            dt = time.perf_counter() - t0
            if not np.isfinite(loss):
                raise FloatingPointError("loss became %s at step %d; lower --learning_rate" % (loss, step + 1))
            losses.append(float(loss))
            rec = {"step": step + 1, "loss": float(loss), "examples_per_sec": round(batch_size / dt, 1)}
            if eval_every and (step + 1) % eval_every == 0:
                rec["accuracy"] = round(evaluate(sess, g, data.test_x, data.test_y), 4)
            emit(rec)
            if checkpoint_dir and checkpoint_every and (step + 1) % checkpoint_every == 0:
                save(sess, g, checkpoint_dir)
        elapsed = time.perf_counter() - t_start
        if checkpoint_dir:
            save(sess, g, checkpoint_dir)
        final = {"final": True, "steps": steps, "accuracy": round(evaluate(sess, g, data.test_x, data.test_y), 4),
                 "loss": losses[-1] if losses else None, "losses": losses,
                 "examples_per_sec": round(batch_size * len(losses) / elapsed, 1) if losses else None}
        emit({k: v for k, v in final.items() if k != "losses"})
        return final


def _device_count(layout: Layout) -> int:
    """In-process CPU devices needed: the highest CPU index the layout names, plus one."""
    idx = [int(d.rsplit(":", 1)[1]) for d in layout.devices if d.upper().rsplit(":", 2)[-2].endswith("CPU")]
    return max(idx) + 1 if idx else 1
