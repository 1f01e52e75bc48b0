"""A group's asynchronous round as the engine runs it in AHL, ready to time.

    pull      the global model from the ps into the replica's masters, then onto its slices
    H steps   local iterations on the group's layout
    push      the slices back to the masters, and their change to the ps (dense: AHL pushes dense)

This is `engine/runtime/group.py`'s round on the same replica graph (`engine/runtime/graph.py`), without the chief,
the control board, waits or a data stream (random examples, as `profile.step_timer.LayoutRunner`):
what a hybrid grid's group costs per local iteration, its commits paid. bench/edgemesh_claims.py
times the groups of a multi-group grid with it.
"""
from __future__ import annotations

import time

from edgemesh_tf.engine.runtime.graph import build_replica_graph, initialise
from edgemesh_tf.mesh.compat import tf
from edgemesh_tf.mesh.layout import Layout
from edgemesh_tf.layers import ModelSpec
from edgemesh_tf.profiling.step_timer import random_feed

PS_WAIT_S = 60.0  # the longest a group waits for the first group to initialise the global model


class RoundRunner:
    """One group's replica on a cluster. The runner built with ``initialize_ps`` sets the global
    model on the ps (from its own initial weights); the others wait for it (at most PS_WAIT_S).

    groups: every group's name (the ps counts commits per group); group: this one's.
    local_steps: H, local iterations per round (>= 1).
    step_ms() runs one round and returns its wall time over H (ms per local iteration, the pull and
    push included); close() frees the session.
    """

    def __init__(self, spec: ModelSpec, layout: Layout, batch: int, session_target: str, *, ps_device: str,
                 group: str, groups, local_steps: int, initialize_ps: bool, seed: int = 0, container: str = ""):
        if not (isinstance(local_steps, int) and local_steps >= 1):
            raise ValueError("local_steps must be an int >= 1 (local iterations per round), got %r" % (local_steps,))
        self.g = build_replica_graph(spec, layout, batch, list(groups), ps_device=ps_device, learning_rate=0.01,
                                     momentum=0.9, seed=seed, group=group, container=container)
        self.local_steps, self.scale = local_steps, 1.0 / len(groups)
        self.sess = tf.Session(session_target, graph=self.g.train.graph)
        initialise(self.sess.run, self.g)
        if initialize_ps:
            self.g.ps.initialize(self.sess, self.sess.run({n: v.read_value() for n, v in self.g.masters.items()}),
                                 timeout_s=PS_WAIT_S)
        else:
            self.g.ps.wait_until_initialized(self.sess, timeout_s=PS_WAIT_S)
        self.feed = random_feed(self.g.train, spec, batch, seed)

    def round_ms(self) -> float:
        """One round (pull, H steps, push); its wall time (ms)."""
        g, run = self.g, self.sess.run
        t0 = time.perf_counter()
        run(g.pull)
        run(g.train.copy_weights_to_slices)
        for _ in range(self.local_steps):
            run(g.train.train_op, self.feed)
        run(g.train.copy_slices_to_weights)
        run(g.push_dense, {g.ratio: 1.0, g.scale: self.scale})
        return (time.perf_counter() - t0) * 1e3

    def step_ms(self) -> float:
        """ms per local iteration: one round's wall time over H."""
        return self.round_ms() / self.local_steps

    def close(self) -> None:
        self.sess.close()
