"""ASHL schedule: local iterations, data shares, compression ratios, SHL staleness, phases.

Pure Python (no TensorFlow). Formulas follow ASHL (DESIGN.md, "Sources we follow"); all times
are milliseconds (ms) per worker, measured by the profiling pre-training:

* ``T_max = max_i(T_iter[i]·H_preset + T_comm[i])``
* ``H[i] = max(1, round((T_max − T_comm[i]) / T_iter[i]))`` — the slowest worker gets ``H_preset``
* ``D[i] = H[i] / ΣH`` — the server applies ``W += η·D[i]·Δw[i]``
* ``R[i] = min(1, max(r_min, (T_max − T_other[i]) / T_push[i]))`` with
  ``T_other[i] = T_iter[i]·H[i] + other_ms[i]`` (compute plus the communication that is not the push)

Two rule sets live here. The project's own (``plan_rounds``: top-k ratios that fit each link,
compression in both phases; ``StalenessGate(rule="project")``; a constant learning rate) and ASHL
as published (``plan_rounds_published`` / ``published_plan``: Algorithm 2 with the preset ratio
``r_preset``, dense AHL, top-k SHL, data shares from SHL's H; ``StalenessGate(rule="published")``;
``lr_warmup_cosine`` + ``sgd_momentum_step`` with weight decay 5e-4, restarted at the switch). The
published rules follow the ASHL authors' public code (github.com/xiangunremarkable/ASHL,
``ASHL/ASHL/server.py``: ``ParameterServer.get_h``, ``SLocal``; ``client1.py``: ``Trainer``,
``sync2``, ``run_training_loop``); each function says which lines it follows.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

PHASES = ("profiling", "ahl", "shl", "train")  # "train": the single phase of the non-ASHL strategies


@dataclass(frozen=True)
class WorkerTiming:
    """Profiled timings of one worker, all in ms.

    ``iter_ms``: one local iteration (forward+backward+local update), > 0.
    ``comm_ms``: one commit's whole communication (push of the update + pull of the weights), >= 0.
    ``push_ms``: the push part of ``comm_ms`` at full size (uncompressed), >= 0.
    ``other_ms``: the communication of a commit that is not the push (e.g. the pull), >= 0.
    ``compress_ms``: selecting the top-k of one update, >= 0; counted only by the published rule
      for compressed (SHL) rounds (the authors' ``cm_dict``, their client's ``time_gc``).
    """

    name: str
    iter_ms: float
    comm_ms: float
    push_ms: float
    other_ms: float
    compress_ms: float = 0.0

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"WorkerTiming.name must be a non-empty string, got {self.name!r}")
        if not (isinstance(self.iter_ms, (int, float)) and math.isfinite(self.iter_ms)
                and self.iter_ms > 0):
            raise ValueError(
                f"worker {self.name!r}: iter_ms must be a finite number > 0 ms, got {self.iter_ms!r}")
        for field in ("comm_ms", "push_ms", "other_ms", "compress_ms"):
            v = getattr(self, field)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(
                    f"worker {self.name!r}: {field} must be a finite number >= 0 ms, got {v!r}")


def _check_timings(timings: Sequence[WorkerTiming]) -> list[WorkerTiming]:
    timings = list(timings)
    if not timings:
        raise ValueError("timings must hold at least one WorkerTiming, got none")
    seen = set()
    for t in timings:
        if not isinstance(t, WorkerTiming):
            raise TypeError(f"timings must be WorkerTiming objects, got {type(t).__name__}")
        if t.name in seen:
            raise ValueError(f"duplicate worker name {t.name!r} in timings; names must be unique")
        seen.add(t.name)
    return timings


def t_max_ms(timings: Sequence[WorkerTiming], h_preset: int = 8) -> float:
    """``T_max = max_i(iter_ms[i]·h_preset + comm_ms[i])`` in ms: the round time of the slowest worker."""
    if not isinstance(h_preset, int) or isinstance(h_preset, bool) or h_preset < 1:
        raise ValueError(f"h_preset must be an int >= 1 (local iterations), got {h_preset!r}")
    timings = _check_timings(timings)
    return max(t.iter_ms * h_preset + t.comm_ms for t in timings)


def local_iterations(timings: Sequence[WorkerTiming], h_preset: int = 8) -> dict[str, int]:
    """ASHL's local iterations per commit: ``H[i] = max(1, round((T_max − comm_ms[i]) / iter_ms[i]))``.

    The slowest worker (the one defining ``T_max``) gets exactly ``h_preset``; faster workers more.
    Rounding is Python's ``round`` (halves to even, e.g. 2.5 -> 2).
    """
    tmax = t_max_ms(timings, h_preset)
    return {t.name: max(1, int(round((tmax - t.comm_ms) / t.iter_ms))) for t in timings}


def _check_h(h: Mapping[str, int], names: Iterable[str] | None = None) -> None:
    if not h:
        raise ValueError("H must map at least one worker name to its local iterations, got {}")
    for name, v in h.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"worker {name!r}: H must be an int >= 1 local iterations, got {v!r}")
    if names is not None:
        names = list(names)
        missing = [n for n in names if n not in h]
        extra = [n for n in h if n not in set(names)]
        if missing or extra:
            raise ValueError(f"H must have exactly the workers {names}; missing {missing}, "
                             f"unknown {extra}")


def data_shares(h: Mapping[str, int]) -> dict[str, float]:
    """Data share (fraction of the training set, sums to 1): ``D[i] = H[i] / ΣH``."""
    _check_h(h)
    total = sum(h.values())
    return {name: v / total for name, v in h.items()}


def compression_ratios(timings: Sequence[WorkerTiming], h: Mapping[str, int],
                       r_min: float = 0.01, t_max: float | None = None) -> dict[str, float]:
    """Top-k ratio per worker (fraction of the update's entries pushed, in [r_min, 1]).

    ``R[i] = min(1, max(r_min, (T_max − T_other[i]) / push_ms[i]))`` with
    ``T_other[i] = iter_ms[i]·H[i] + other_ms[i]``. ``t_max`` (ms) defaults to the longest round
    under ``h``, ``max_i(iter_ms[i]·H[i] + comm_ms[i])`` (equal to ``t_max_ms`` up to the rounding of
    H). A worker whose push takes 0 ms gets 1.
    """
    timings = _check_timings(timings)
    _check_h(h, [t.name for t in timings])
    if not (isinstance(r_min, (int, float)) and 0 < r_min <= 1):
        raise ValueError(f"r_min must be in (0, 1], got {r_min!r}")
    if t_max is None:
        t_max = max(t.iter_ms * h[t.name] + t.comm_ms for t in timings)
    elif not (isinstance(t_max, (int, float)) and math.isfinite(t_max) and t_max > 0):
        raise ValueError(f"t_max must be a finite number > 0 ms, got {t_max!r}")
    out = {}
    for t in timings:
        if t.push_ms == 0:
            out[t.name] = 1.0
            continue
        t_other = t.iter_ms * h[t.name] + t.other_ms
        out[t.name] = float(min(1.0, max(r_min, (t_max - t_other) / t.push_ms)))
    return out


def link_ratios(timings: Sequence[WorkerTiming], h: Mapping[str, int], r_min: float = 0.01,
                push_budget: float = 0.25) -> dict[str, float]:
    """Top-k ratio that fits each link: a worker's push may take at most ``push_budget`` of its
    round's computation, ``R[i] = min(1, max(r_min, push_budget·iter_ms[i]·H[i] / push_ms[i]))``.

    ASHL's rule above (``compression_ratios`` with the default T_max) gives 1 to every worker
    whose round, push included, fits in T_max, and T_max is defined by the slowest worker's round
    with its own push, so on a cluster where the slowest link is the bottleneck it never
    compresses. This rule compresses exactly the pushes that dominate their rounds.
    """
    timings = _check_timings(timings)
    _check_h(h, [t.name for t in timings])
    if not (isinstance(r_min, (int, float)) and 0 < r_min <= 1):
        raise ValueError(f"r_min must be in (0, 1], got {r_min!r}")
    if not (isinstance(push_budget, (int, float)) and push_budget > 0):
        raise ValueError(f"push_budget must be > 0 (a fraction of the round's compute), got {push_budget!r}")
    return {t.name: 1.0 if t.push_ms == 0 else
            float(min(1.0, max(r_min, push_budget * t.iter_ms * h[t.name] / t.push_ms))) for t in timings}


def plan_rounds(timings: Sequence[WorkerTiming], h_preset: int, r_min: float = 0.01,
                push_budget: float | None = 0.25) -> tuple[dict[str, int], dict[str, float]]:
    """ASHL's local iterations with compressed pushes: ``(H, R)``.

    R from ``link_ratios`` (all 1 if push_budget is None), then H from ``local_iterations`` with
    each push shortened to ``R·push_ms``, then R once more for the new H (one fixed-point step).
    """
    timings = _check_timings(timings)
    h = local_iterations(timings, h_preset)
    if push_budget is None:
        return h, {t.name: 1.0 for t in timings}
    r = link_ratios(timings, h, r_min, push_budget)
    shortened = [WorkerTiming(t.name, t.iter_ms, t.other_ms + r[t.name] * t.push_ms, r[t.name] * t.push_ms,
                              t.other_ms) for t in timings]
    h = local_iterations(shortened, h_preset)
    return h, link_ratios(timings, h, r_min, push_budget)


def plan_rounds_published(timings: Sequence[WorkerTiming], h_preset: int, r_preset: float = 1.0, *,
                          compress: bool = True) -> tuple[dict[str, int], dict[str, float]]:
    """ASHL's Algorithm 2 as the authors run it (``server.py``, ``get_h``): ``(H, R)`` for one phase.

    Per worker i (all times ms), the communication of a round at the preset ratio is
    ``c[i] = r_preset·push_ms[i] + other_ms[i] + compress_ms[i]`` when ``compress`` (SHL: their
    ``list6 = list2·pre_cp + list3 + list4``), else the dense ``c[i] = comm_ms[i]`` (AHL: their
    ``list5 = list2 + list3``; R is then 1 for every worker). Then:

    * ``T_max = max_i(iter_ms[i]·h_preset + c[i])``                 (``x_max = max(list7)``)
    * ``H[i] = round((T_max − c[i]) / iter_ms[i])``                 (``h_list2[j] = round(...)``)
      (Python's round, halves to even, as theirs; H[i] >= h_preset, the slowest gets h_preset)
    * ``m_T = max_i(iter_ms[i]·H[i] + c[i])``, the longest round after rounding H (``m_T``)
    * ``T_other[i] = iter_ms[i]·H[i] + other_ms[i] + compress_ms[i]`` (their second ``list6``)
    * ``R[i] = (m_T − T_other[i]) / push_ms[i]`` if that is <= 1, else 1 (``cp_list[i]``)
      (so ``R[i] >= r_preset``: every round, its push included, fits in ``m_T``; a worker whose
      push takes 0 ms gets 1)

    The authors profile the push at the preset ratio already; here ``push_ms`` is the full (dense)
    push and ``r_preset·push_ms`` the preset one. The authors' code calls it with ``h_preset`` 8
    (AHL, dense) and 2 (SHL, compressed): see ``published_plan``.
    """
    timings = _check_timings(timings)
    if not isinstance(h_preset, int) or isinstance(h_preset, bool) or h_preset < 1:
        raise ValueError(f"h_preset must be an int >= 1 (local iterations), got {h_preset!r}")
    if not (isinstance(r_preset, (int, float)) and 0 < r_preset <= 1):
        raise ValueError(f"r_preset must be in (0, 1] (the preset top-k ratio), got {r_preset!r}")
    if compress:
        comm = {t.name: r_preset * t.push_ms + t.other_ms + t.compress_ms for t in timings}
    else:
        comm = {t.name: t.comm_ms for t in timings}
    t_max = max(t.iter_ms * h_preset + comm[t.name] for t in timings)
    h = {t.name: int(round((t_max - comm[t.name]) / t.iter_ms)) for t in timings}
    if not compress:
        return h, {t.name: 1.0 for t in timings}
    m_t = max(t.iter_ms * h[t.name] + comm[t.name] for t in timings)
    ratios = {}
    for t in timings:
        r = (m_t - (t.iter_ms * h[t.name] + t.other_ms + t.compress_ms)) / t.push_ms if t.push_ms > 0 else 1.0
        ratios[t.name] = float(r) if r <= 1.0 else 1.0
    return h, ratios


@dataclass(frozen=True)
class PublishedPlan:
    """ASHL's plan for both phases, as the authors compute it once after profiling.

    ``h_ahl``: local iterations per commit in AHL (dense pushes); ``h_shl`` and ``ratios``: local
    iterations and top-k ratios in SHL; ``shares``: each worker's data share and update weight
    ``D[i] = H_SHL[i] / ΣH_SHL`` in BOTH phases (their ``part``, computed from SHL's H and used by
    ``ALocal`` and ``SLocal``; they also round it to 3 decimals, which is left out here so that the
    shares sum to 1).
    """

    h_ahl: dict[str, int]
    h_shl: dict[str, int]
    ratios: dict[str, float]
    shares: dict[str, float]


def published_plan(timings: Sequence[WorkerTiming], ahl_h_preset: int = 8, shl_h_preset: int = 2,
                   r_preset: float = 1.0) -> PublishedPlan:
    """``get_h`` of the authors' server: SHL with ``k=2`` compressed at ``r_preset``
    (``--compress_ratio``), shares from SHL's H, then AHL with ``k=8`` dense."""
    h_shl, ratios = plan_rounds_published(timings, shl_h_preset, r_preset, compress=True)
    h_ahl, _ = plan_rounds_published(timings, ahl_h_preset, compress=False)
    return PublishedPlan(h_ahl, h_shl, ratios, data_shares(h_shl))


def _min_round(rounds_of_all) -> int:
    values = list(rounds_of_all.values()) if isinstance(rounds_of_all, Mapping) else list(rounds_of_all)
    if not values:
        raise ValueError("rounds_of_all must hold the round of at least one live worker, got none")
    return min(values)


STALENESS_RULES = ("project", "published")


class StalenessGate:
    """SHL's bounded staleness, counted in rounds (commits) ahead of the slowest live worker.

    ``rule="project"`` (the default, unchanged): a worker may start its next round while it is at
    most ``bound`` rounds ahead (``round − min(rounds) <= bound``), so its commit may land
    ``bound + 1`` ahead. ``rule="published"`` (the ASHL authors' server, ``SLocal``: their commit
    number ``step`` waits ``while (step − 3) > min(client_dict)``, the minimum taken with its own
    entry already set to ``step``): the commit this worker would make next, number
    ``round + 1``, may land only if it is at most ``bound`` ahead of the slowest worker, its own
    new count included; with bound 3 a 4th commit ahead is refused.

    ``rounds_of_all`` is a sequence or a ``{name: round}`` mapping of the live workers' rounds
    (commit counts), with or without this worker's own entry (one entry equal to
    ``round_of_worker`` is taken as its own); dead workers must be left out, or everybody waits
    for them forever.
    """

    def __init__(self, bound: int = 3, rule: str = "project"):
        if not isinstance(bound, int) or isinstance(bound, bool) or bound < 0:
            raise ValueError(f"StalenessGate bound must be an int >= 0 rounds, got {bound!r}")
        if rule not in STALENESS_RULES:
            raise ValueError(f"StalenessGate rule must be one of {STALENESS_RULES}, got {rule!r}")
        self.bound = bound
        self.rule = rule

    def lag(self, round_of_worker: int, rounds_of_all) -> int:
        """Rounds this worker is ahead of the slowest live worker (``round − min(rounds)``)."""
        return round_of_worker - _min_round(rounds_of_all)

    def lead_after_commit(self, round_of_worker: int, rounds_of_all) -> int:
        """How far ahead this worker's next commit (number ``round + 1``) would land: ``round + 1``
        minus the minimum over the other workers' rounds and ``round + 1`` itself."""
        values = list(rounds_of_all.values()) if isinstance(rounds_of_all, Mapping) else list(rounds_of_all)
        if round_of_worker in values:
            values.remove(round_of_worker)
        nxt = round_of_worker + 1
        return nxt - min(values + [nxt])

    def may_commit(self, round_of_worker: int, rounds_of_all) -> bool:
        """project: ``lag <= bound``; published: ``lead_after_commit <= bound``."""
        if self.rule == "published":
            _min_round(rounds_of_all)  # same error as the project rule for an empty input
            return self.lead_after_commit(round_of_worker, rounds_of_all) <= self.bound
        return self.lag(round_of_worker, rounds_of_all) <= self.bound


MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
"""The authors' optimizer on every worker: ``optim.SGD(lr, momentum=0.9, weight_decay=5e-4)``."""


def lr_warmup_cosine(step: float, phase_len: float, base_lr: float, warmup: float = 0.0) -> float:
    """The authors' learning rate, ``step`` scheduler steps into a phase (``LambdaLR``):

    ``base_lr · step/warmup`` while ``step <= warmup`` (0 at step 0: their first steps train with
    lr 0), then ``base_lr · ½(cos(π·(step − warmup)/(phase_len − warmup)) + 1)``; ``step`` is
    clamped to ``phase_len`` (lr 0 there; their lambda would rise again after it).

    Restart it at the AHL→SHL switch (``step`` counts from 0 again). Their settings: AHL
    ``warmup=5`` (``--warmup_epoch``), ``phase_len=200`` (``--n_epochs``), one scheduler step per 6
    AHL commits of a worker (``i1 % 6 == 0``); SHL ``warmup=0`` (``cosine_lr``, no warm-up),
    ``phase_len=200``, one step per ``epochs // 200`` SHL commits. Their SHL sets
    ``--learning_rate2`` before building the new ``LambdaLR``, but PyTorch's scheduler takes its
    base from the optimizer's ``initial_lr`` that the first scheduler set, so in effect SHL
    restarts from ``--learning_rate``: pass the base you mean.
    """
    for name, v in (("step", step), ("phase_len", phase_len), ("base_lr", base_lr), ("warmup", warmup)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"lr_warmup_cosine: {name} must be a finite number >= 0, got {v!r}")
    if not warmup < phase_len:
        raise ValueError(f"lr_warmup_cosine: warmup ({warmup}) must be < phase_len ({phase_len}) steps")
    if warmup > 0 and step <= warmup:
        return base_lr * step / warmup
    progress = (min(step, phase_len) - warmup) / (phase_len - warmup)
    return base_lr * 0.5 * (math.cos(math.pi * progress) + 1.0)


def sgd_momentum_step(weights, grad, velocity, lr: float, momentum: float = MOMENTUM,
                      weight_decay: float = WEIGHT_DECAY):
    """One step of PyTorch's ``SGD`` as the authors use it; floats or numpy arrays.

    ``g = grad + weight_decay·weights``; ``velocity = momentum·velocity + g`` (the first step
    starts from velocity 0); ``weights = weights − lr·velocity``. Returns ``(weights, velocity)``.
    """
    g = grad + weight_decay * weights
    velocity = momentum * velocity + g
    return weights - lr * velocity, velocity


class PhaseController:
    """Training phases: ``profiling`` -> ``ahl`` (``start_ahl``) -> ``shl``; the other strategies
    stay in their one phase ``train`` (``initial="train"``).

    In AHL, ``observe_loss`` switches to SHL once the global training loss is <= ``loss_threshold``
    for ``patience`` consecutive evaluations (a NaN or higher loss resets the count). Losses seen
    outside AHL are ignored. Every transition is recorded as ``(phase, step, wall_time_s)``, the
    first being ``(initial, 0, start_s)``; times are the caller's clock (s), passed in.
    ``state()``/``from_state()`` round-trip through a plain dict (JSON-compatible) for checkpoints.
    """

    def __init__(self, loss_threshold: float, patience: int = 1, *, initial: str = "profiling",
                 start_s: float = 0.0):
        if not (isinstance(loss_threshold, (int, float)) and math.isfinite(loss_threshold)):
            raise ValueError(f"loss_threshold must be a finite number, got {loss_threshold!r}")
        if not isinstance(patience, int) or isinstance(patience, bool) or patience < 1:
            raise ValueError(f"patience must be an int >= 1 evaluations, got {patience!r}")
        self.loss_threshold = float(loss_threshold)
        self.patience = patience
        if initial not in PHASES:
            raise ValueError(f"initial phase must be one of {PHASES}, got {initial!r}")
        self.phase = initial
        self.streak = 0
        self.transitions: list[tuple[str, int, float]] = [(initial, 0, float(start_s))]

    def _enter(self, phase: str, step: int, wall_time: float) -> None:
        self.phase = phase
        self.streak = 0
        self.transitions.append((phase, int(step), float(wall_time)))

    def phase_at(self, wall_time: float) -> str:
        """The phase at ``wall_time`` (s, the clock of the transitions): an evaluation that started
        in profiling is profiling's even when AHL began while it ran."""
        at = [p for p, _, t in self.transitions if t <= wall_time]
        return at[-1] if at else self.transitions[0][0]

    def start_ahl(self, step: int, wall_time: float) -> None:
        """Profiling done: enter AHL at global ``step`` at ``wall_time`` (s)."""
        if self.phase != "profiling":
            raise RuntimeError(f"start_ahl needs phase 'profiling', the phase is {self.phase!r}")
        self._enter("ahl", step, wall_time)

    def observe_loss(self, loss: float, step: int, wall_time: float) -> str:
        """Feed one evaluation of the global training loss (at ``wall_time`` s); returns the phase after it."""
        if self.phase != "ahl":
            return self.phase
        if loss <= self.loss_threshold:  # False for NaN
            self.streak += 1
            if self.streak >= self.patience:
                self._enter("shl", step, wall_time)
        else:
            self.streak = 0
        return self.phase

    def state(self) -> dict:
        return {"loss_threshold": self.loss_threshold, "patience": self.patience,
                "phase": self.phase, "streak": self.streak,
                "transitions": [list(t) for t in self.transitions]}

    @classmethod
    def from_state(cls, state: Mapping) -> "PhaseController":
        pc = cls(state["loss_threshold"], state["patience"])
        if state["phase"] not in PHASES:
            raise ValueError(f"state phase must be one of {PHASES}, got {state['phase']!r}")
        pc.phase = state["phase"]
        pc.streak = int(state["streak"])
        pc.transitions = [(str(p), int(s), float(w)) for p, s, w in state["transitions"]]
        return pc
