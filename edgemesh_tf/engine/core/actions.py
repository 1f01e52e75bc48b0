"""What the chief's decisions see and do: the snapshot a stage of the job hands to `Decisions.step`
(decide.py) and the actions it returns, which the chief (chief.py) carries out. Plain data; no
TensorFlow."""
from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

from edgemesh_tf.engine.core import records, rules

Totals = Mapping[str, Mapping[str, float]]  # {group: cumulative statistics (control.STAT_FIELDS)}


STAGES = ("setup", "start", "tick", "final")


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """One view of the job. now: s of training (resumed runs continue the count); clock: monotonic s
    (liveness is timed on the chief's clock); stats: {group: its last report (control.STAT_FIELDS)};
    counters: the ps's {"commits/<g>", "pulls/<g>", "rejected", "version"}; exited: {group: what
    happened} of group processes that ended; evals: [(s at the pull, accuracy, loss)] finished
    since the last tick (at "final": the stop's, at `now`); stop_request: why to stop (e.g. SIGTERM;
    at "final": why training stopped), or None; stage: one of STAGES (see the module docstring);
    restarted: {group: cluster names of the devices the launcher restarted it on} since the last tick."""

    now: float
    clock: float
    stats: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    counters: Mapping[str, float] = dataclasses.field(default_factory=dict)
    exited: Mapping[str, str] = dataclasses.field(default_factory=dict)
    evals: Sequence[tuple[float, float, float]] = ()
    stop_request: str | None = None
    stage: str = "tick"
    restarted: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ProbePs:
    """Make sure the ps answers before blaming a group (groups also leave when the ps is gone)."""


@dataclasses.dataclass(frozen=True)
class WriteControls:
    controls: Mapping[str, rules.GroupControl]


@dataclasses.dataclass(frozen=True)
class WriteGlobal:
    """Write the phase (and the heartbeat: None for the time now) to the board now rather than at the
    next tick; the chief's later heartbeats carry this phase."""
    phase: str
    heartbeat: float | None = None


@dataclasses.dataclass(frozen=True)
class ResetCounters:
    """Zero the ps's commit and pull counters (SHL's staleness counts SHL's commits only)."""


@dataclasses.dataclass(frozen=True)
class SetCounters:
    group: str
    commits: int


@dataclasses.dataclass(frozen=True)
class Evaluated:
    """Write the evaluation's scalars (totals and controls of its tick), then emit its record."""
    record: records.Eval
    totals: Totals
    controls: Mapping[str, rules.GroupControl]


@dataclasses.dataclass(frozen=True)
class SaveCheckpoint:
    """Save the global model with `state(totals, at_s)` (at_s: s of training; None: now) in the phase."""
    totals: Totals
    phase: str
    at_s: float | None = None


@dataclasses.dataclass(frozen=True)
class Rejoin:
    """Let the launcher bring groups back: lost_at {lost group: clock s declared lost}; t: s of
    training. Its restarts come back in the next snapshot's `restarted`."""
    lost_at: Mapping[str, float]
    t: float


@dataclasses.dataclass(frozen=True)
class Finish:
    """The final record, the last action of the "final" stage; the chief adds the checkpoint it just
    saved and its report's figures."""
    record: records.Final


@dataclasses.dataclass(frozen=True)
class Stop:
    """Stop training: why; failed: every group is lost, the job ends with an error saying why."""
    why: str
    failed: bool = False


def steps_of(totals: Totals) -> int:
    """Local iterations summed over the groups."""
    return int(sum(t["steps"] for t in totals.values()))


def plan_view(controls: Mapping[str, rules.GroupControl]) -> dict:
    """{group: {"H", "D", "R"}} of the live groups: what a re-plan changes."""
    return {g: {"H": c.local_steps, "D": round(c.share, 4), "R": round(c.ratio, 4)}
            for g, c in controls.items() if not c.lost}
