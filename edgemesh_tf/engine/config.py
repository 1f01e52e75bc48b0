"""Plain-data configuration of a hybrid training job: the strategy and the job around it.

Both are frozen dataclasses that round-trip through JSON (`to_dict` / `from_dict`), because the
chief hands them to every group process on its command line. Times are in seconds (s) unless a
name says ms; ratios are fractions of a tensor's entries in (0, 1].
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

STRATEGIES = ("bsp", "asp", "ssp", "local_sgd", "adsp", "ashl")
COMPRESSIONS = ("none", "fixed", "ashl")


def _check_int(name: str, v, lower: int) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v < lower:
        raise ValueError("%s must be an int >= %d, got %r" % (name, lower, v))


@dataclasses.dataclass(frozen=True)
class SyncConfig:
    """How groups synchronise with the parameter server. Defaults are the papers' (DESIGN.md).

    strategy: one of STRATEGIES.
    staleness: SSP's and SHL's bound s, in commits a group may run ahead of the slowest live one (3).
    local_steps: Local SGD's H, local iterations between synchronous averagings (8).
    ahl_h_preset / shl_h_preset: ASHL's local iterations of the slowest group per commit in AHL (8)
      and SHL (2); faster groups get more (schedule.local_iterations).
    shl_loss: ASHL switches AHL -> SHL once the global training loss is <= this.
    profile_steps: ASHL's profiling pre-training: local iterations of the timed round (8: their median
      is the profile, and 8 keep a few iterations slowed by the start-up's contention out of it).
    adsp_period_s / adsp_commits: ADSP's scheduling period and initial commits per period; the
      commit count is then searched online from the fitted loss curve.
    compression: "none" (dense pushes), "fixed" (top-k at `ratio`) or "ashl" (per-group ratio that
      fits the link: the push takes at most `push_budget` of the round's compute, ratio at least
      `min_ratio`; schedule.link_ratios). Default: "ashl" for ashl, else "none".
    error_feedback: keep what top-k dropped and add it to the next update.
    replan_interval_s: ASHL re-plans H_i, D_i and R_i from the rounds measured since the last plan
      this often (and at the switch to SHL).
    drift / drift_evals: ASHL also re-plans at once when a group's iteration time over each of the
      last `drift_evals` evaluation intervals differs from the plan's by more than the fraction
      `drift` (e.g. 0.5: 1.5x slower or faster), and says which group drifted.
    """

    strategy: str = "ashl"
    staleness: int = 3
    local_steps: int = 8
    ahl_h_preset: int = 8
    shl_h_preset: int = 2
    shl_loss: float = 0.15
    profile_steps: int = 8
    adsp_period_s: float = 6.0
    adsp_commits: int = 6
    compression: str | None = None
    ratio: float = 0.01
    min_ratio: float = 0.01
    push_budget: float = 0.25
    replan_interval_s: float = 10.0
    error_feedback: bool = True
    drift: float = 0.5
    drift_evals: int = 3

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ValueError("sync strategy must be one of %s, got %r" % (", ".join(STRATEGIES), self.strategy))
        if self.compression is None:
            object.__setattr__(self, "compression", "ashl" if self.strategy == "ashl" else "none")
        if self.compression not in COMPRESSIONS:
            raise ValueError("compression must be one of %s, got %r" % (", ".join(COMPRESSIONS), self.compression))
        for name in ("staleness",):
            _check_int(name, getattr(self, name), 0)
        for name in ("local_steps", "ahl_h_preset", "shl_h_preset", "profile_steps", "adsp_commits", "drift_evals"):
            _check_int(name, getattr(self, name), 1)
        for name in ("ratio", "min_ratio"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 < v <= 1):
                raise ValueError("%s must be a fraction of entries in (0, 1], got %r" % (name, v))
        for name in ("adsp_period_s", "push_budget", "replan_interval_s", "drift"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v > 0):
                raise ValueError("%s must be > 0, got %r" % (name, v))


@dataclasses.dataclass(frozen=True)
class GroupSpec:
    """One data-parallel group: its name (for logs and counters), its layout as a dict (the
    `Layout.to_dict` form) and its batch size per local iteration."""

    name: str
    layout: Mapping[str, Any]
    batch_size: int


@dataclasses.dataclass(frozen=True)
class JobConfig:
    """Everything a chief or a group process needs to build its graphs.

    groups: the data-parallel groups; ps_device: TF device of the parameter server;
    learning_rate / momentum: each group's local SGD; eval_interval_s: the chief's evaluation
    period; checkpoint_interval_s: its checkpoint period; time_budget_s: training wall time;
    target_accuracy: stop once the held-out accuracy reaches it (None: run the budget);
    max_steps: stop after this many local iterations summed over groups (None: no limit);
    max_rounds: each group stops by itself after this many rounds (commits), the job when all have;
    stop_after_target_s: keep training this long after reaching target_accuracy (0: stop at once);
    device_names: TF device string -> the device's name in the cluster file (for reports);
    device_info: {device name: {"speed", "predicted_memory_mib", "measured_memory_mib",
      "predicted_step_ms"}}, whatever is known, for the layout picture;
    wait_timeout_s: the longest any wait for another process may take during training;
    startup_timeout_s: the longest wait for the group processes to start (import TF, build their
      graphs, connect) and for the chief to initialise the global model;
    lost_after_s: a group whose process exited, or that has sent no report (a round's statistics
      or a heartbeat while it waits) for this long, is declared lost: gates stop counting it and
      the others take over its data;
    ps_timeout_s: the job stops, naming the ps task, when the parameter server has not answered
      for this long;
    rejoin_limit: a lost group is restarted when its devices answer again (on fewer of them,
      re-planned, if only some do) at most this many times (0: never);
    profile_path: the device profile (JSON) the planner re-divides a group's filters from.
    """

    groups: tuple[GroupSpec, ...]
    model: str = "vgg"
    dataset: str = "digits"
    data_path: str | None = None
    ps_device: str = "/job:ps/task:0"
    chief_device: str = "/job:chief/task:0"
    learning_rate: float = 0.02
    momentum: float = 0.9
    seed: int = 0
    eval_interval_s: float = 2.0
    checkpoint_interval_s: float = 10.0
    time_budget_s: float = 300.0
    target_accuracy: float | None = None
    max_steps: int | None = None
    max_rounds: int | None = None
    stop_after_target_s: float = 0.0
    wait_timeout_s: float = 60.0
    startup_timeout_s: float = 180.0
    lost_after_s: float = 10.0
    ps_timeout_s: float = 10.0
    rejoin_limit: int = 3
    profile_path: str | None = None
    logdir: str = "runs/job"
    device_names: Mapping[str, str] = dataclasses.field(default_factory=dict)
    device_info: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    sync: SyncConfig = dataclasses.field(default_factory=SyncConfig)

    def __post_init__(self):
        if not self.groups:
            raise ValueError("a job needs at least one data-parallel group")
        names = [g.name for g in self.groups]
        if len(set(names)) != len(names):
            raise ValueError("group names must be distinct, got %r" % names)
        for g in self.groups:
            _check_int("batch_size of group %s" % g.name, g.batch_size, 1)
        for name in ("eval_interval_s", "checkpoint_interval_s", "time_budget_s", "wait_timeout_s",
                     "startup_timeout_s", "lost_after_s", "ps_timeout_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v > 0):
                raise ValueError("%s must be > 0 s, got %r" % (name, v))
        _check_int("rejoin_limit", self.rejoin_limit, 0)
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise ValueError("target_accuracy must be in (0, 1], got %r" % (self.target_accuracy,))

    @property
    def group_names(self) -> list[str]:
        return [g.name for g in self.groups]

    def names_of(self, devices) -> list[str]:
        """The cluster names of TF device strings (each once, in order; unknown ones as they are)."""
        return [self.device_names.get(d, d) for d in dict.fromkeys(devices)]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, d: Mapping) -> "JobConfig":
        d = dict(d)
        d["groups"] = tuple(GroupSpec(**g) for g in d["groups"])
        d["sync"] = SyncConfig(**d.get("sync", {}))
        return cls(**d)
