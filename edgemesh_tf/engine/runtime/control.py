"""The control board on the parameter server: how the chief steers groups and groups report back.

Small float64 vectors (resource variables on the ps task, shared by name like the global model):
  control/global  [phase index, stop flag, chief heartbeat (unix s)]    written by the chief
  control/<g>     GroupControl.to_vector()                              written by the chief
  stats/<g>       STAT_FIELDS                                           written by group g
Every process builds the same `ControlBoard` in its own graph. Reads and writes are whole-vector
assigns, so a reader never sees half of an update.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from edgemesh_tf.cluster.rpc import run_idempotent
from edgemesh_tf.engine.core.rules import CUMULATIVE, GLOBAL_FIELDS, STAT_FIELDS, GroupControl  # noqa: F401 (re-exported)
from edgemesh_tf.sync.schedule import PHASES
from edgemesh_tf.mesh.compat import tf

COLLECTION = "edgemesh_control_board"


class ControlBoard:
    """The control and stats vectors of `groups` on `ps_device` (see the module docstring)."""

    def __init__(self, groups: Sequence[str], ps_device: str, scope: str = "board"):
        self.groups = list(groups)
        self.ps_device = ps_device
        sizes = {"control/global": len(GLOBAL_FIELDS)}
        for g in self.groups:
            sizes["control/" + g] = len(GroupControl.FIELDS)
            sizes["stats/" + g] = len(STAT_FIELDS)
        self._feeds, self._assigns, self._reads, inits = {}, {}, {}, []
        with tf.device(ps_device), tf.variable_scope(scope, reuse=tf.AUTO_REUSE):
            for name, n in sizes.items():
                var = tf.get_variable(name, shape=[n], dtype=tf.float64, initializer=tf.zeros_initializer(),
                                      trainable=False, use_resource=True, collections=[COLLECTION])
                feed = tf.placeholder(tf.float64, [n], name=name.replace("/", "_") + "_value")
                self._feeds[name] = feed
                self._assigns[name] = var.assign(feed, read_value=False)
                self._reads[name] = var.read_value()
                inits.append(var.initializer)
        self._init = tf.group(*inits)

    def initialize(self, sess, timeout_s: float) -> None:
        """Chief only, before the ps raises its ready flag: zeroes every vector."""
        run_idempotent(sess, self._init, timeout_s=timeout_s, what="initialising the control board on %s"
                       % self.ps_device)

    # -- fetches (combine them with other fetches in one sess.run) --

    def control_fetches(self) -> dict:
        """What a group reads at the start of a round: the global vector and every group's control."""
        return {n: self._reads[n] for n in self._reads if n.startswith("control/")}

    def stats_fetches(self) -> dict:
        return {n: self._reads[n] for n in self._reads if n.startswith("stats/")}

    # -- decoding (every vector by its field names) --

    @staticmethod
    def global_of(values: Mapping) -> dict[str, float]:
        """{"phase": index, "stop": 0/1, "heartbeat": unix s (0 until the chief starts training)}."""
        return dict(zip(GLOBAL_FIELDS, (float(x) for x in values["control/global"])))

    @classmethod
    def phase_of(cls, values: Mapping) -> str:
        return PHASES[int(round(cls.global_of(values)["phase"]))]

    @classmethod
    def stopped(cls, values: Mapping) -> bool:
        return cls.global_of(values)["stop"] > 0.5

    @classmethod
    def heartbeat_of(cls, values: Mapping) -> float:
        """The chief's last heartbeat (unix s); 0 before training starts."""
        return cls.global_of(values)["heartbeat"]

    def controls_of(self, values: Mapping) -> dict[str, GroupControl]:
        return {g: GroupControl.from_vector(values["control/" + g]) for g in self.groups}

    def stats_of(self, values: Mapping) -> dict[str, dict[str, float]]:
        return {g: dict(zip(STAT_FIELDS, (float(x) for x in values["stats/" + g]))) for g in self.groups}

    # -- writes --

    def write(self, sess, vectors: Mapping[str, Sequence[float]], timeout_s: float) -> None:
        """Assigns whole vectors, e.g. {"control/global": [...], "control/g0": [...]}."""
        ops, feeds = self.assigns(vectors)
        run_idempotent(sess, ops, feeds, timeout_s=timeout_s,
                       what="writing %s on %s" % (", ".join(sorted(vectors)), self.ps_device))

    def assigns(self, vectors: Mapping[str, Sequence[float]]) -> tuple[list, dict]:
        """(ops, feeds) that assign whole vectors: to run with other fetches in one sess.run."""
        unknown = set(vectors) - set(self._feeds)
        if unknown:
            raise KeyError("control board has no vectors %s" % sorted(unknown))
        return ([self._assigns[n] for n in vectors],
                {self._feeds[n]: np.asarray(v, np.float64) for n, v in vectors.items()})

    def stats_vector(self, group: str, stats: Mapping[str, float]) -> dict[str, list[float]]:
        """{"stats/<group>": vector} of a group's report (missing fields are 0)."""
        return {"stats/" + group: [float(stats.get(f, 0.0)) for f in STAT_FIELDS]}

    def write_global(self, sess, phase: str, stop: bool, heartbeat: float, timeout_s: float) -> None:
        fields = {"phase": PHASES.index(phase), "stop": float(stop), "heartbeat": heartbeat}
        self.write(sess, {"control/global": [fields[f] for f in GLOBAL_FIELDS]}, timeout_s)

    def write_controls(self, sess, controls: Mapping[str, GroupControl], timeout_s: float) -> None:
        self.write(sess, {"control/" + g: c.to_vector() for g, c in controls.items()}, timeout_s)
