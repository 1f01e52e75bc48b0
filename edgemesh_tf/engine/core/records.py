"""Every event a training job reports, as one typed record each; one emitter, one reader.

A record is a frozen dataclass; `to_dict()` is its JSON line (its kind under "event") and
`from_dict()` reads one back. The chief's `Emitter` writes each record to `<logdir>/chief.jsonl`,
to TensorBoard (through the job's report) and to a callback (e.g. `print_line` for the terminal);
`read(logdir, *kinds)` is the one reader (CLIs, benchmarks and tests). Times `t` are seconds of
training since the job began (resumed runs continue the count).

    kind            written by            when
    testbed         launcher              the servers are up
    planned         main job              devices profiled and the layout planned
    resume          chief                 restored from a checkpoint
    eval            chief                 an evaluation of the global model finished
    phase           chief                 ASHL's phase changed (profiling -> AHL -> SHL)
    replan          chief                 ASHL re-planned H, D, R in its phase
    adsp            chief                 ADSP's search changed the commit count
    checkpoint      chief                 the global model and the strategy state were saved
    lost            chief                 a group is no longer counted (exited or silent)
    readmitted      chief                 a lost group's new process was let back in
    rejected        chief                 the ps refused non-finite updates
    restarted, restarting, rejoin_stopped, rejoin_failed
                    launcher (rejoin.py)  what it did about a lost group
    ps_lost         chief                 the parameter server stopped answering: the job stops
    final           chief                 the job stopped: everything measured
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable, ClassVar, Iterable, Mapping

JSONL = "chief.jsonl"
KEY = "event"  # the JSON field that holds a record's kind


@dataclasses.dataclass(frozen=True)
class Record:
    KIND: ClassVar[str] = ""

    def to_dict(self) -> dict:
        return {KEY: self.KIND, **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}}

    def line(self) -> str | None:
        """The terminal's progress line (None: not worth one)."""
        return None


@dataclasses.dataclass(frozen=True)
class Testbed(Record):
    """network, compute, memory: how the testbed emulates each (e.g. netns, cgroup-v1, cgroup-v1; real)."""
    KIND: ClassVar[str] = "testbed"
    network: str
    compute: str
    memory: str = "off"

    def line(self):
        line = "testbed: network %s, compute %s, memory limits %s" % (self.network, self.compute, self.memory)
        if self.network == "userspace":
            return ("no root: emulating the network in a user-space forwarder and compute speed by a per-step "
                    "delay\n" + line)
        return line


@dataclasses.dataclass(frozen=True)
class Planned(Record):
    KIND: ClassVar[str] = "planned"
    profile_s: float
    profile: str
    plan: str
    table: str
    reused: str = ""  # the profile cache's entry the profile came from ("": measured in this run)
    reused_age_s: float = 0.0

    def line(self):
        if self.reused:
            return ("planned in %.1f s from the device profile measured %s ago (%s; --reprofile measures again) "
                    "(%s, %s):\n%s" % (self.profile_s, human_duration(self.reused_age_s), self.reused, self.profile,
                                       self.plan, self.table))
        return "profiled and planned in %.1f s (%s, %s):\n%s" % (self.profile_s, self.profile, self.plan, self.table)


def human_duration(seconds: float) -> str:
    """A duration for people: 45 s, 12 min, 3.5 h, 2.0 days."""
    if seconds < 120:
        return "%.0f s" % seconds
    if seconds < 2 * 3600:
        return "%.0f min" % (seconds / 60)
    if seconds < 2 * 86400:
        return "%.1f h" % (seconds / 3600)
    return "%.1f days" % (seconds / 86400)


@dataclasses.dataclass(frozen=True)
class Resume(Record):
    KIND: ClassVar[str] = "resume"
    checkpoint: str
    phase: str
    elapsed_s: float
    global_steps: int

    def line(self):
        return "resuming from %s: phase %s, %.1f s and %d steps done" % (
            self.checkpoint, self.phase, self.elapsed_s, self.global_steps)


@dataclasses.dataclass(frozen=True)
class Eval(Record):
    """accuracy: held-out accuracy of the global model; loss: its mean training loss on a fixed
    subset; global_steps: local iterations summed over groups; examples_per_sec and
    group_examples_per_sec: examples/s since the last evaluation (0 in an interval with no commit:
    groups report once per round); examples_per_sec_avg and group_examples_per_sec_avg: examples/s
    over a trailing window of each group (progress.windowed_rate; the total is the groups' sum);
    eta_s: the budget left (s): time, or the step budget at the rate so far, whichever ends first;
    version: the ps's update count; target_accuracy: the job's target (None: none set);
    target_eta_s: estimated s until the target (progress.time_to_target; None: no estimate);
    target_reached_s: when the target was reached (None: not yet). The progress line shows the
    averaged rate, the budget left and the target's estimate."""
    KIND: ClassVar[str] = "eval"
    t: float
    phase: str
    accuracy: float
    loss: float
    global_steps: int
    examples_per_sec: float
    group_examples_per_sec: Mapping[str, float]
    bytes_sent: int
    eta_s: float
    live_groups: int
    rejected: int
    version: int
    examples_per_sec_avg: float = 0.0
    group_examples_per_sec_avg: Mapping[str, float] = dataclasses.field(default_factory=dict)
    target_accuracy: float | None = None
    target_eta_s: float | None = None
    target_reached_s: float | None = None

    def target_text(self) -> str:
        """The line's words on the target accuracy ("" when none is set)."""
        if self.target_accuracy is None:
            return ""
        name = "target %.4g" % self.target_accuracy
        if self.target_reached_s is not None:
            return "%s reached at %.1f s" % (name, self.target_reached_s)
        if self.target_eta_s is None:
            return name + ": no estimate yet"
        return "%s in ~%.0f s" % (name, self.target_eta_s)

    def line(self):
        line = ("[%7.1f s] %-9s steps %6d  acc %.4f  loss %.4f  %7.0f ex/s  sent %7.2f MB  budget left %5.0f s"
                % (self.t, self.phase, self.global_steps, self.accuracy, self.loss, self.examples_per_sec_avg,
                   self.bytes_sent / 1e6, self.eta_s))
        target = self.target_text()
        return line + "  " + target if target else line


@dataclasses.dataclass(frozen=True)
class Phase(Record):
    """controls: {group: GroupControl.to_vector()} in the new phase; does: what the new phase does
    (rules.PHASE_DOES), printed on a line of its own below the switch."""
    KIND: ClassVar[str] = "phase"
    t: float
    old: str
    new: str
    why: str
    controls: Mapping[str, list]
    does: str = ""

    def line(self):
        line = "[%7.1f s] phase %s -> %s: %s" % (self.t, self.old, self.new, self.why)
        return line + "\n%12s%s now: %s" % ("", self.new, self.does) if self.does else line


@dataclasses.dataclass(frozen=True)
class Replan(Record):
    """old / new: {group: {"H", "D", "R"}} of the live groups."""
    KIND: ClassVar[str] = "replan"
    t: float
    phase: str
    why: str
    old: Mapping[str, Mapping[str, float]]
    new: Mapping[str, Mapping[str, float]]

    def line(self):
        return "[%7.1f s] re-plan (%s): %s" % (self.t, self.phase, self.why)


@dataclasses.dataclass(frozen=True)
class Adsp(Record):
    KIND: ClassVar[str] = "adsp"
    t: float
    commits_per_period: int

    def line(self):
        return "[%7.1f s] ADSP: %d commits per period" % (self.t, self.commits_per_period)


@dataclasses.dataclass(frozen=True)
class Checkpoint(Record):
    KIND: ClassVar[str] = "checkpoint"
    t: float
    path: str
    phase: str
    global_steps: int


@dataclasses.dataclass(frozen=True)
class GroupEvent(Record):
    """Something that happened to one group; devices: its devices' cluster names."""
    t: float
    group: str
    devices: list
    why: str

    def line(self):
        return "[%7.1f s] %s group %s (devices %s): %s" % (self.t, self.KIND.upper().replace("_", " "), self.group,
                                                           ", ".join(self.devices), self.why)


@dataclasses.dataclass(frozen=True)
class Lost(GroupEvent):
    """live: the groups still counted."""
    KIND: ClassVar[str] = "lost"
    live: list = ()

    def line(self):
        return "[%7.1f s] LOST group %s (devices %s): %s; training continues with %s" % (
            self.t, self.group, ", ".join(self.devices), self.why.splitlines()[0], ", ".join(self.live))


@dataclasses.dataclass(frozen=True)
class Readmitted(GroupEvent):
    """commits: the commit (and pull) count it was given (the live groups' highest)."""
    KIND: ClassVar[str] = "readmitted"
    commits: int = 0
    live: list = ()


@dataclasses.dataclass(frozen=True)
class Restarted(GroupEvent):
    """pid: its new client process; layout: how its layout was made."""
    KIND: ClassVar[str] = "restarted"
    pid: int = 0
    layout: str = ""


@dataclasses.dataclass(frozen=True)
class Restarting(GroupEvent):
    KIND: ClassVar[str] = "restarting"


@dataclasses.dataclass(frozen=True)
class RejoinStopped(GroupEvent):
    KIND: ClassVar[str] = "rejoin_stopped"


@dataclasses.dataclass(frozen=True)
class RejoinFailed(GroupEvent):
    KIND: ClassVar[str] = "rejoin_failed"


@dataclasses.dataclass(frozen=True)
class Rejected(Record):
    """rejected: updates the ps refused so far (not finite)."""
    KIND: ClassVar[str] = "rejected"
    t: float
    rejected: int
    why: str

    def line(self):
        return "[%7.1f s] %d update(s) rejected by the parameter server: %s" % (self.t, self.rejected, self.why)


@dataclasses.dataclass(frozen=True)
class PsLost(Record):
    KIND: ClassVar[str] = "ps_lost"
    t: float
    error: str


@dataclasses.dataclass(frozen=True)
class Final(Record):
    """The job's end. groups: each group's totals (engine.runtime.control.STAT_FIELDS); curve: [[t, accuracy]];
    phase_transitions: [(phase, global step, t)]; phase_totals: {phase: each group's totals, and "t", when its
    first round under the phase's controls began};
    devices / group_time: JobReport.end's figures;
    group_exit_codes / testbed: filled in by the launcher."""
    KIND: ClassVar[str] = "final"
    t: float
    strategy: str
    why: str
    accuracy: float
    time_to_target_s: float | None
    phase: str
    phase_transitions: list
    global_steps: int
    bytes_sent: int
    bytes_received: int
    wait_s: float
    groups: Mapping[str, Mapping[str, float]]
    checkpoint: str
    lost_groups: list
    rejected_updates: int
    curve: list
    phase_totals: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    devices: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    group_time: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    group_exit_codes: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    testbed: Mapping[str, str] = dataclasses.field(default_factory=dict)


KINDS: dict[str, type[Record]] = {c.KIND: c for c in (
    Testbed, Planned, Resume, Eval, Phase, Replan, Adsp, Checkpoint, Lost, Readmitted, Restarted, Restarting,
    RejoinStopped, RejoinFailed, Rejected, PsLost, Final)}
FAULTS = (Lost, Readmitted, Restarted, Restarting, RejoinStopped, RejoinFailed, Rejected)


def from_dict(d: Mapping) -> Record:
    """The record of one JSON line; a ValueError names an unknown kind."""
    d = dict(d)
    kind = d.pop(KEY, None)
    if kind not in KINDS:
        raise ValueError("unknown record kind %r; expected one of %s" % (kind, sorted(KINDS)))
    return KINDS[kind](**d)


def read(logdir: str, *kinds: type[Record]) -> list[Record]:
    """The records of `<logdir>/chief.jsonl` (only those of `kinds`, if given), in order; [] if the
    file is not there yet. A line still being written (the last, cut short) is skipped."""
    path = os.path.join(logdir, JSONL)
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            try:
                rec = from_dict(json.loads(line))
            except json.JSONDecodeError:
                continue
            if not kinds or isinstance(rec, kinds):
                out.append(rec)
    return out


def print_line(rec: Record) -> None:
    """The terminal's view of a record (see Record.line)."""
    line = rec.line()
    if line:
        print(line, flush=True)


class Emitter:
    """Writes every record to `<logdir>/chief.jsonl` (appending: a resumed job continues the file),
    hands it to `tensorboard(rec)` (e.g. JobReport.record) and to `callback(rec)`. Records made
    before the log is open (e.g. the launcher's) go to the callback alone."""

    def __init__(self, callback: Callable[[Record], None] = lambda rec: None):
        self.callback = callback
        self._log = None
        self._tensorboard: Callable[[Record], None] = lambda rec: None

    def open(self, logdir: str, tensorboard: Callable[[Record], None] | None = None) -> "Emitter":
        os.makedirs(logdir, exist_ok=True)
        self._log = open(os.path.join(logdir, JSONL), "a")
        self._tensorboard = tensorboard or self._tensorboard
        return self

    def __call__(self, rec: Record) -> None:
        if self._log is not None:
            self._log.write(json.dumps(rec.to_dict()) + "\n")
            self._log.flush()
        self._tensorboard(rec)
        self.callback(rec)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def of_kind(recs: Iterable[Record], kind: type[Record]) -> list:
    return [r for r in recs if isinstance(r, kind)]
