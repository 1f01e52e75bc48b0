"""The memory model: a device's peak bytes above its idle TF server while it trains its share.

    memory_i = runtime_bytes
             + weight_factor     * 4 * sum_l params_per_unit_l * s_i,l
             + master_factor     * M_i                         (k > 1 devices in the group)
             + activation_factor * b * (image + sum_l in_l + sum_l act_l * s_i,l / U_l)
             + replica_factor * W_i + replica_split_bytes [k > 1]  (a replica of the engine only)
             + session_bytes + session_factor * P + session_per_device * k   (the host of the group's session)

s_i,l: units of dim l device i holds (U_l when replicated); b: examples per step; in_l: a layer's
gathered input, kept for the backward pass on every device; act_l: its output before pooling (the
ReLU output kept for backward); M_i: the bytes of the whole (master) tensors device i holds (weights,
state and momentum), W_i: of its weight and state ones alone, where the engine's placer puts them
(planner/masters.py: by the device's rank among its group's TF device strings; in expectation 2P/k
and P/k, but a model whose bytes sit in one tensor has one device hold nearly all of them; W_i = P in
a group of one). The factors stand for what the plain count misses:
- weight_factor: the weights, their momentum and gradient, and the partial-gradient and gathered
  copies the lowering makes of a share (3 if nothing else);
- master_factor: a split group's whole (master) tensors, M_i bytes on device i (training/graph.py;
  1 if nothing else). A one-device group's slices are its masters.
  An engine replica (engine/runtime/graph.py) also keeps an anchor and a residual of every whole weight
  with its master, and its pull and push pass whole tensors through buffers there (`replica=True`).
  Counted: 2 * W_i (the anchor and the residual). Fitted to replicas' peaks less the plain step's
  fitted prediction (bench/memory_fit.py), plus a constant on every device of a split group (the copies
  between masters and slices around each round, and their transfers' buffers), not in proportion to
  W_i (docs/DESIGN.md has the figures).
- fit_error: the largest factor by which a measured peak, plain or replica, exceeded the fit's
  prediction, less 1; the planner keeps it as headroom below every budget (`headroom`,
  planner/grid.py), so predicted x (1 + fit_error) reaches every peak the fit was measured on.
  model_errors: the same per model measured ((name, error) pairs): a plan of a measured model keeps
  its own (`headroom_for`). unseen_error: the same on each model left out of a fit of the others, the
  largest: a model never measured (a user's own) keeps it, as the fit misses such a model by that much.
- session_bytes, session_factor, session_per_device: the TF master of a session (the graph, its
  optimisation, a partition per device) costs the server it runs on 20-180 MiB, growing with the
  model and the devices (measured: about P + 20 MiB per device). The engine's group
  process opens its session on the group's first device; the benchmarks open theirs on a chief.
  Fitted apart, to the peaks of a session host that runs no op of the model.
- activation_factor: the activations, their gradients and the convolutions' scratch (1 if nothing else);
- runtime_bytes: the executor, its kernels and allocator arenas once a graph runs.

The shipped coefficients (`memory_fit.json`, written by `bench/memory_fit.py --write`) are fitted by
least squares to peaks measured on this machine's TF servers over models, batches and even splits;
`fit` is the pure part. `COUNTED` is the plain count (factors 3 and 1, no runtime): the model the
planner used before it was fitted.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Sequence

from edgemesh_tf.planner import masters
from edgemesh_tf.planner.model_stats import FLOAT_BYTES, DimStats, ModelStats

FIT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "memory_fit.json")


@dataclasses.dataclass(frozen=True)
class MemoryModel:
    """Coefficients of the formula above; bytes."""

    runtime_bytes: float
    weight_factor: float
    master_factor: float
    activation_factor: float
    source: str = ""
    session_bytes: float = 0.0
    session_factor: float = 0.0
    session_per_device: float = 0.0
    replica_factor: float = 2.0
    replica_split_bytes: float = 0.0
    fit_error: float = 0.0
    model_errors: tuple[tuple[str, float], ...] = ()
    unseen_error: float = 0.0

    def headroom_for(self, model: str | None) -> float:
        """The headroom of a plan of `model` (a zoo name): 1 + its own largest under-prediction
        where its peaks were measured (``model_errors``), else 1 + the larger of ``fit_error`` and
        ``unseen_error`` (a model the fit never saw, such as a user's own)."""
        return 1.0 + dict(self.model_errors).get(model, max(self.fit_error, self.unseen_error))

    @property
    def headroom(self) -> float:
        """The factor a plan keeps below each memory budget: 1 + ``fit_error`` (a device's predicted
        bytes times this must fit), so that a peak the model under-predicts as much as any it was
        fitted to (measured / predicted) does not OOM-kill the device."""
        return 1.0 + self.fit_error

    def session_host_bytes(self, stats: ModelStats, k: int = 1) -> int:
        """Bytes the server hosting the session of a training step of the model on `k` devices adds."""
        return int(self.session_bytes + self.session_factor * stats.param_bytes + self.session_per_device * k)

    def _bytes(self, stats: ModelStats, held: Sequence[int], k: int, rank: int, replica: bool) -> float:
        """The formula above: the coefficients times `features`, plus a replica's copies."""
        coefs = (self.runtime_bytes, self.weight_factor, self.master_factor, self.activation_factor)
        copies = self.replica_bytes(stats, k, rank) if replica else 0.0
        return sum(c * x for c, x in zip(coefs, features(stats, held, k, rank))) + copies

    def replica_bytes(self, stats: ModelStats, k: int, rank: int = 0) -> float:
        """What an engine replica adds to the device of `rank` in a `k`-device group (see the formula)."""
        return (self.replica_factor * masters.rank_bytes(stats, k)[rank][1]
                + (self.replica_split_bytes if k > 1 else 0.0))

    def fixed_bytes(self, stats: ModelStats, k: int = 1, replica: bool = False, rank: int = 0) -> int:
        """Bytes the device of `rank` (``masters.ranks``) in a `k`-device group holds whatever its
        shares: the runtime, every layer's gathered input, the whole (master) tensors it holds;
        `replica`: also the engine's anchors and residuals."""
        return self.fixed_bytes_by_rank(stats, k, replica)[rank]

    def fixed_bytes_by_rank(self, stats: ModelStats, k: int, replica: bool = False) -> list[int]:
        """``fixed_bytes`` of each rank of a `k`-device group: the terms every device shares, once, and
        each rank's masters (and a replica's copies)."""
        shared = self._bytes(stats, [0] * len(stats.dims), k, 0, replica) - self._master_bytes(stats, k, 0, replica)
        return [int(shared + self._master_bytes(stats, k, r, replica)) for r in range(k)]

    def _master_bytes(self, stats: ModelStats, k: int, rank: int, replica: bool) -> float:
        """The terms of the formula that depend on the device's rank: its masters, a replica's copies."""
        return (self.master_factor * master_bytes_held(stats, k, rank)
                + (self.replica_bytes(stats, k, rank) if replica else 0.0))

    def per_unit_bytes(self, dim: DimStats, batch: int) -> float:
        """Bytes one unit (filter, output unit) of `dim` adds on the device that holds it."""
        return (self.weight_factor * FLOAT_BYTES * dim.params_per_unit
                + self.activation_factor * batch * dim.act_bytes / dim.units)

    def device_bytes(self, stats: ModelStats, held: Sequence[int], k: int = 1, replica: bool = False,
                     rank: int = 0) -> int:
        """Peak bytes of the device of `rank` in a `k`-device group holding `held[l]` units of each dim
        (in `stats.dims` order)."""
        return int(math.ceil(self._bytes(stats, held, k, rank, replica)))

    def whole_model_bytes(self, stats: ModelStats, batch: int, replica: bool = False) -> tuple[float, float]:
        """(bytes independent of the batch, bytes per example) of the whole model on one device."""
        fixed = self.runtime_bytes + (self.weight_factor + (self.replica_factor if replica else 0)) * stats.param_bytes
        per_example = self.activation_factor * (stats.image_bytes + sum(d.in_bytes + d.act_bytes
                                                                         for d in stats.dims))
        return fixed, per_example

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "model_errors": dict(self.model_errors)}


COUNTED = MemoryModel(0.0, 3.0, 1.0, 1.0, "counted: weights, momentum, gradient, masters and activations once, "
                                          "no runtime")


def features(stats: ModelStats, held: Sequence[int], k: int = 1, rank: int = 0
             ) -> tuple[float, float, float, float]:
    """(1, weight bytes held, master bytes held, activation bytes held): the terms the coefficients
    multiply, for the device of `rank` (``masters.ranks``) in a `k`-device group."""
    weights = FLOAT_BYTES * sum(d.params_per_unit * h for d, h in zip(stats.dims, held))
    whole = master_bytes_held(stats, k, rank)
    acts = stats.batch * (stats.image_bytes + sum(d.in_bytes for d in stats.dims)
                          + sum(d.act_bytes * h / d.units for d, h in zip(stats.dims, held)))
    return 1.0, float(weights), float(whole), float(acts)


def master_bytes_held(stats: ModelStats, k: int, rank: int) -> float:
    """M_i: bytes of the whole (master) tensors the device of `rank` holds in a `k`-device group (0 in a
    group of one, whose slices are its masters)."""
    return masters.rank_bytes(stats, k)[rank][0] if k > 1 else 0.0


Point = tuple[ModelStats, Sequence[int], int, int, float]
"""A measured peak: (stats, units held per dim, devices in the group, the device's rank, peak bytes)."""


def fit(points: Sequence[Point], sessions: Sequence[tuple[ModelStats, int, float]] = (), source: str = ""
        ) -> MemoryModel:
    """Least-squares coefficients (each >= 0) of measured peaks (``Point``s); sessions: (stats,
    devices in the group, peak bytes of the session's host), fitted apart (none: no session term). The
    error minimised is relative (each point weighted by 1/peak), so small devices count as much as
    large ones."""
    if len(points) < 4:
        raise ValueError("fitting the memory model needs at least 4 measured points, got %d" % len(points))
    coef = _nnls_relative([features(s, h, k, r) for s, h, k, r, _ in points], [p for *_, p in points])
    session = _nnls_relative([(1.0, float(s.param_bytes), float(k)) for s, k, _ in sessions],
                             [p for *_, p in sessions]) if sessions else (0.0, 0.0, 0.0)
    return MemoryModel(*(float(c) for c in coef), source, *(float(c) for c in session))


def fit_replica(model: MemoryModel, points: Sequence[Point]) -> MemoryModel:
    """`model` with replica_factor and replica_split_bytes (each >= 0) fitted to peaks of engine
    replicas (``Point``s), less `model`'s plain prediction (relative least squares, as `fit`)."""
    if len(points) < 2:
        raise ValueError("fitting the replica terms needs at least 2 measured replica peaks, got %d" % len(points))
    rows = [(masters.rank_bytes(s, k)[r][1], float(k > 1)) for s, _, k, r, _ in points]
    extra = [peak - model.device_bytes(s, h, k, rank=r) for s, h, k, r, peak in points]
    factor, split = _nnls_relative(rows, extra, weights=[1.0 / peak for *_, peak in points])
    return dataclasses.replace(model, replica_factor=float(factor), replica_split_bytes=float(split))


def _nnls_relative(rows, peaks, weights=None) -> list[float]:
    """Non-negative least squares of peaks ~ rows . coef, each point weighted by 1 / its peak (or by
    `weights`)."""
    import numpy as np

    x, y = np.array(rows, dtype=float), np.array(peaks, dtype=float)
    if weights is None and (y <= 0).any():
        raise ValueError("measured peaks must be > 0 bytes, got %s" % sorted(y)[:3])
    w = 1.0 / y if weights is None else np.array(weights, dtype=float)
    active = list(range(x.shape[1]))
    while True:  # drop a negative coefficient and solve again
        coef = np.zeros(x.shape[1])
        sol = np.linalg.lstsq(x[:, active] * w[:, None], y * w, rcond=None)[0]
        coef[active] = sol
        if (coef >= 0).all():
            return list(coef)
        active.remove(active[int(np.argmin(sol))])


def load(path: str = FIT_PATH) -> MemoryModel:
    """The fitted model shipped with the planner; COUNTED if the file is absent."""
    if not os.path.exists(path):
        return COUNTED
    with open(path) as f:
        try:
            top = json.load(f)
            raw = top["model"]
            return MemoryModel(float(raw["runtime_bytes"]), float(raw["weight_factor"]), float(raw["master_factor"]),
                               float(raw["activation_factor"]), str(raw.get("source", path)),
                               float(raw.get("session_bytes", 0.0)), float(raw.get("session_factor", 0.0)),
                               float(raw.get("session_per_device", 0.0)), float(raw.get("replica_factor", 2.0)),
                               float(raw.get("replica_split_bytes", 0.0)),
                               float(raw.get("fit_error", top.get("fitted_max_abs_rel_error", 0.0))),
                               tuple(sorted((str(m), float(e)) for m, e in raw.get("model_errors", {}).items())),
                               float(raw.get("unseen_error", 0.0)))
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError("%s: expected {\"model\": {\"runtime_bytes\", \"weight_factor\", \"master_factor\", "
                             "\"activation_factor\"}} (bench/memory_fit.py --write), got an error: %s" % (path, e))


FITTED = load()
