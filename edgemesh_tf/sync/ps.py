"""Cluster-level parameter server on a TF `ps` task: the global model shared by the groups.

Everything runs on TensorFlow's own runtime: the global tensors and counters are resource
variables placed on the ps task; every client process (chief or group) builds the same
`ParameterServer` in its own graph and reaches them by name over gRPC. A resource variable's
shared name is its full name, so two graphs that create "global/w" on /job:ps/task:0 address the
same buffer on the ps server. They outlive client sessions: `tf.Session.reset(target)` clears them.

    ps = ParameterServer([("w", (3, 4)), ("b", (4,))], groups=["fast", "slow"],
                         ps_device=cluster.device("ps0"))
    with tf.device(cluster.device("fast")):
        push = ps.push_dense(deltas, scale=0.5, group="fast")
    with tf.Session(cluster.session_target) as sess:
        ps.initialize(sess, {"w": w0, "b": b0})       # chief only
        ps.wait_until_initialized(sess, timeout_s=60)  # everybody else
        sess.run(push.version)

Units: every byte count is in bytes, computed statically from shapes (float32 = 4 bytes per
element): a dense push or a pull moves 4 * elements; a sparse push of k entries moves k * (4 + the
index's bytes: 4 for int32, 8 for int64, as the pusher sends it; the ps widens it after the transfer).
Scalars (scale, version) are not counted.

Update rule: `W += scale * delta` (ASHL: scale = eta * D[i]). The ps itself checks every update it
receives: one that is not finite (NaN/Inf in scale * delta, or a sparse index out of range) is not
applied, and the "rejected" counter is incremented instead of the group's commit counter and the
version. The check is branch-free: a rejected update becomes an add of zeros.

Consistency: each variable update is atomic (the variable's lock), a push of several tensors is
not: a concurrent pull may see some tensors of a push and not others (asynchronous SGD). The
version a push returns is read after its increment, so it may already include concurrent pushes.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Mapping, Sequence

import numpy as np

from edgemesh_tf.cluster.rpc import run_idempotent
from edgemesh_tf.mesh.compat import tf
from edgemesh_tf.sync.compression import bytes_sent

COLLECTION = "edgemesh_parameter_server"
FLOAT_BYTES = 4
INDEX_BYTES = 8

TensorSpec = tuple  # (name, shape): one whole tensor of the global model, float32


@dataclasses.dataclass(frozen=True)
class Push:
    """Ops of one push. version: int64 scalar, the global version after the push (run it to push);
    accepted: bool scalar, False if the ps rejected the update; nbytes: bytes sent to the ps."""

    version: tf.Tensor
    accepted: tf.Tensor
    nbytes: int


def dense_bytes(shapes: Sequence[Sequence[int]]) -> int:
    """Bytes of float32 tensors of these shapes (a dense push or a pull)."""
    return sum(FLOAT_BYTES * int(np.prod(s, dtype=np.int64)) for s in shapes)


def sparse_bytes(k: int, index_bytes: int = INDEX_BYTES) -> int:
    """Bytes of a sparse push of k (flat index of index_bytes, float32 value) pairs."""
    return bytes_sent(k, index_bytes)


class ParameterServer:
    """The global model on `ps_device`, plus counters: commits per group, version, rejected.

    tensors: [(name, shape)] of whole float32 tensors; groups: names of the pushing groups;
    scope: variable-scope prefix on the ps (processes sharing a model must use the same scope,
    tensors and groups). The variables go into the collection COLLECTION only, never into
    GLOBAL_VARIABLES, so a client's own `global_variables_initializer` cannot reset the global model.
    """

    def __init__(self, tensors: Sequence[TensorSpec], groups: Sequence[str], ps_device: str = "/job:ps/task:0",
                 scope: str = "global"):
        if not tensors:
            raise ValueError("ParameterServer: no tensors")
        names = [n for n, _ in tensors]
        if len(set(names)) != len(names):
            raise ValueError("ParameterServer: duplicate tensor names in %r" % (names,))
        if len(set(groups)) != len(groups) or not groups:
            raise ValueError("ParameterServer: groups must be distinct and non-empty, got %r" % (list(groups),))
        self.ps_device, self.scope = ps_device, scope
        self.shapes = {n: tuple(int(d) for d in s) for n, s in tensors}
        self.names = names
        self.groups = list(groups)
        self.pull_bytes = dense_bytes(self.shapes.values())
        self.dense_push_bytes = self.pull_bytes
        with tf.device(ps_device), tf.variable_scope(scope, reuse=tf.AUTO_REUSE):
            self.vars = {n: self._var(n, self.shapes[n], tf.float32) for n in names}
            self.commits = {g: self._var("commits/" + g, (), tf.int64) for g in self.groups}
            self.pulls = {g: self._var("pulls/" + g, (), tf.int64) for g in self.groups}
            self.version = self._var("version", (), tf.int64)
            self.rejected = self._var("rejected", (), tf.int64)
            self.ready = self._var("ready", (), tf.int64)
        self._build_init()

    # -- graph construction -------------------------------------------------------------------------------------

    @staticmethod
    def _var(name, shape, dtype):
        return tf.get_variable(name, shape=shape, dtype=dtype, initializer=tf.zeros_initializer(),
                               trainable=False, use_resource=True, collections=[COLLECTION])

    def _build_init(self):
        with tf.name_scope(self.scope + "_init"):
            self._init_feeds = {n: tf.placeholder(tf.float32, self.shapes[n], name=n) for n in self.names}
            with tf.device(self.ps_device):
                assigns = [self.vars[n].assign(self._init_feeds[n], read_value=False) for n in self.names]
                zero = tf.constant(0, tf.int64)
                assigns += [v.assign(zero, read_value=False)
                            for v in list(self.commits.values()) + list(self.pulls.values())
                            + [self.version, self.rejected, self.ready]]
                self._init_values = tf.group(*assigns)
                self._ready_feed = tf.placeholder(tf.int64, [], name="ready_value")
                self._set_ready = self.ready.assign(self._ready_feed, read_value=False)
                self._zero_counters = tf.group(*[v.assign(zero, read_value=False) for v in
                                                 list(self.commits.values()) + list(self.pulls.values())
                                                 + [self.version, self.rejected]])
                self._count_feed = tf.placeholder(tf.int64, [], name="count_value")
                self._set_counts = {(kind, g): v.assign(self._count_feed, read_value=False)
                                    for kind, vs in (("commits", self.commits), ("pulls", self.pulls))
                                    for g, v in vs.items()}
                self._is_ready = self.ready.is_initialized()
                self._ready_value = self.ready.read_value()

    def _count(self, group: str, ok, deps):
        """Bumps commits[group] and version if ok, else rejected; returns the new version."""
        if group not in self.commits:
            raise KeyError("ParameterServer: unknown group %r (groups: %r)" % (group, self.groups))
        one = tf.cast(ok, tf.int64)
        with tf.control_dependencies(deps):
            bumps = [self.commits[group].assign_add(one, read_value=False),
                     self.rejected.assign_add(1 - one, read_value=False)]
            with tf.control_dependencies(bumps):
                return self.version.assign_add(one)

    def pull(self, device: str | Mapping[str, str] | None = None, group: str | None = None) -> dict[str, tf.Tensor]:
        """{name: tensor}: the global tensors, read on the ps and copied to `device` (default: the
        current device scope; a mapping gives each tensor's own device). Moves `pull_bytes` bytes. With `group`, the reads also count a pull of
        that group ("pulls/<group>", e.g. for BSP: nobody pushes round r+1 before all pulled it)."""
        with tf.name_scope(self.scope + "_pull"):
            with tf.device(self.ps_device):
                reads = {n: self.vars[n].read_value() for n in self.names}
                if group is not None:
                    with tf.control_dependencies(list(reads.values())):
                        bump = self.pulls[group].assign_add(1, read_value=False)
                    with tf.control_dependencies([bump]):
                        reads = {n: tf.identity(r) for n, r in reads.items()}
            out = {}
            for n, r in reads.items():
                with tf.device(device.get(n) if isinstance(device, Mapping) else device):
                    out[n] = tf.identity(r, name=n)
            return out

    def push_dense(self, deltas: Mapping[str, tf.Tensor], scale, group: str) -> Push:
        """W[n] += scale * deltas[n] for every tensor n (all of them must be given), on the ps.
        The deltas cross the network as they are (dense_push_bytes bytes); scale is a float scalar."""
        missing = set(self.names) - set(deltas)
        extra = set(deltas) - set(self.names)
        if missing or extra:
            raise ValueError("push_dense: deltas must have exactly the tensors %r; missing %r, unknown %r"
                             % (self.names, sorted(missing), sorted(extra)))
        with tf.name_scope(self.scope + "_push_dense"), tf.device(self.ps_device):
            scale = tf.cast(scale, tf.float32)
            scaled = {n: scale * tf.convert_to_tensor(deltas[n], tf.float32) for n in self.names}
            ok = tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(s)) for s in scaled.values()]))
            adds = [self.vars[n].assign_add(tf.where(ok, s, tf.zeros_like(s)), read_value=False)
                    for n, s in scaled.items()]
            version = self._count(group, ok, adds)
        return Push(version=version, accepted=ok, nbytes=self.dense_push_bytes)

    def push_sparse(self, name: str, indices, values, scale, group: str, k: int | None = None) -> Push:
        """W[name].flat[indices] += scale * values (a flat top-k update): only the indices (as given:
        int32 or int64) and the float32 values cross the network, k * (4 + 4 or 8) bytes; duplicate
        indices add up. k: static number of entries (taken from the shape of values when known)."""
        values = tf.convert_to_tensor(values, tf.float32)
        if k is None:
            k = values.shape.num_elements()
            if k is None:
                raise ValueError("push_sparse: pass k, the static number of entries, for values of shape %s"
                                 % values.shape)
        indices = tf.convert_to_tensor(indices)
        push = self.push_sparse_many({name: (indices, values)}, scale, group)
        return Push(version=push.version, accepted=push.accepted, nbytes=sparse_bytes(k, indices.dtype.size))

    def push_sparse_many(self, updates: Mapping[str, tuple], scale, group: str) -> Push:
        """One commit of flat top-k updates to several tensors: {name: (indices, values)}, each applied
        as in `push_sparse`; the ps accepts or rejects the commit as a whole and counts it once.
        nbytes is -1: the entry counts are only known when the push runs (``sparse_bytes`` each)."""
        for name in updates:
            if name not in self.vars:
                raise KeyError("push_sparse: unknown tensor %r (tensors: %r)" % (name, self.names))
        with tf.name_scope(self.scope + "_push_sparse"), tf.device(self.ps_device):
            scale = tf.cast(scale, tf.float32)
            prepared, checks = {}, []
            for name, (indices, values) in updates.items():
                size = int(np.prod(self.shapes[name], dtype=np.int64))
                indices = tf.reshape(tf.cast(indices, tf.int64), [-1])
                scaled = scale * tf.reshape(tf.convert_to_tensor(values, tf.float32), [-1])
                checks += [tf.reduce_all(tf.math.is_finite(scaled)),
                           tf.reduce_all(tf.logical_and(indices >= 0, indices < size))]
                prepared[name] = (indices, scaled)
            ok = tf.reduce_all(tf.stack(checks))
            adds = []
            for name, (indices, scaled) in prepared.items():
                shape = self.shapes[name]
                safe_idx = tf.where(ok, indices, tf.zeros_like(indices))
                safe_val = tf.where(ok, scaled, tf.zeros_like(scaled))
                if shape:  # flat -> nd by the shape's strides: an empty selection (an update and residual
                    # all zero send nothing) gives [0, rank], where unravel_index fails
                    strides = np.cumprod((1,) + tuple(shape[:0:-1]), dtype=np.int64)[::-1].copy()
                    nd = (safe_idx[:, None] // tf.constant(strides, tf.int64)) % tf.constant(shape, tf.int64)
                else:
                    nd = tf.zeros([tf.size(safe_idx), 0], tf.int64)
                adds.append(tf.scatter_nd_add(self.vars[name], nd, safe_val).op)
            version = self._count(group, ok, adds)
        return Push(version=version, accepted=ok, nbytes=-1)

    def counters(self) -> dict[str, tf.Tensor]:
        """{"commits/<group>": int64, "pulls/<group>": int64, ..., "version": int64, "rejected": int64}
        read on the ps."""
        with tf.name_scope(self.scope + "_counters"), tf.device(self.ps_device):
            out = {"commits/" + g: v.read_value() for g, v in self.commits.items()}
            out.update({"pulls/" + g: v.read_value() for g, v in self.pulls.items()})
            out["version"] = self.version.read_value()
            out["rejected"] = self.rejected.read_value()
        return out

    # -- session-time -------------------------------------------------------------------------------------------

    def initialize(self, sess, values: Mapping[str, np.ndarray], timeout_s: float = 60.0, token: int = 1) -> None:
        """Chief only: sets the global tensors to `values` (every tensor), zeroes the counters, then
        raises the ready flag that `wait_until_initialized` polls, to `token` (!= 0): the job's own,
        so that a group of the next job on the same servers does not take this job's flag for its own."""
        if not token:
            raise ValueError("initialize: the ready token must not be 0 (0 = not initialized)")
        missing = set(self.names) - set(values)
        if missing:
            raise ValueError("initialize: no values for %r" % sorted(missing))
        feeds = {}
        for n in self.names:
            v = np.asarray(values[n], np.float32)
            if v.shape != self.shapes[n]:
                raise ValueError("initialize: %r has shape %s, expected %s" % (n, v.shape, self.shapes[n]))
            feeds[self._init_feeds[n]] = v
        opts = tf.RunOptions(timeout_in_ms=int(timeout_s * 1000))
        sess.run(self._init_values, feeds, options=opts)
        sess.run(self._set_ready, {self._ready_feed: token}, options=opts)

    def reset_counters(self, sess, timeout_s: float = 60.0) -> None:
        """Chief only: zeroes the commit counters, version and rejected count (e.g. after the groups'
        warm-up pushes of zero updates), leaving the global tensors as they are."""
        sess.run(self._zero_counters, options=tf.RunOptions(timeout_in_ms=int(timeout_s * 1000)))

    def set_counters(self, sess, group: str, commits: int, pulls: int, timeout_s: float = 60.0) -> None:
        """Chief only: sets `group`'s commit and pull counts (a re-admitted group joins at the live
        groups' count, so that barriers and staleness gates do not wait for it to catch up)."""
        for kind, value in (("commits", commits), ("pulls", pulls)):
            run_idempotent(sess, self._set_counts[(kind, group)], {self._count_feed: int(value)}, timeout_s=timeout_s,
                           what="setting the %s count of group %s on %s" % (kind, group, self.ps_device))

    def is_initialized(self, sess, timeout_s: float = 10.0, token: int = 1) -> bool:
        """True once the chief's `initialize` with `token` has finished (one bounded poll)."""
        opts = tf.RunOptions(timeout_in_ms=max(1, int(timeout_s * 1000)))
        if not sess.run(self._is_ready, options=opts):
            return False
        return int(sess.run(self._ready_value, options=opts)) == token

    def wait_until_initialized(self, sess, timeout_s: float, poll_s: float = 0.1, token: int = 1) -> float:
        """Polls until the chief has initialized the global model with `token`; returns the seconds
        waited. Raises TimeoutError naming the ps task and the flag after `timeout_s` seconds."""
        start = time.monotonic()
        deadline = start + timeout_s
        last_error = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                if self.is_initialized(sess, timeout_s=remaining, token=token):
                    return time.monotonic() - start
            except (tf.errors.DeadlineExceededError, tf.errors.UnavailableError) as e:
                last_error = e
            time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
        raise TimeoutError("parameter server %s: global model %r (flag %s/ready = %d) not initialized by the chief "
                           "after %.1f s%s" % (self.ps_device, self.scope, self.scope, token, timeout_s,
                                               "; last error: %s" % last_error.message if last_error else ""))
