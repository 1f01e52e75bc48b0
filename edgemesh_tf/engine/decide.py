"""The chief's decisions as a pure state machine: a snapshot of the board in, actions out.

    machine = Decisions(cfg, dense_push_bytes, Liveness(cfg))
    for action in machine.step(Snapshot(now, clock, stats, counters, exited, evals, stop_request)):
        ...  # the chief (chief.py) carries it out: board writes, ps counters, records, checkpoints

Every tick (0.1 s) the chief reads the groups' reports and the ps counters and hands them over with
the evaluations that finished since the last tick; `step` returns what to do, in order: probe the
ps, write controls, reset or set commit counters, emit a record, save a checkpoint, stop. The
machine holds all the state the decisions need (the phase, in one place: `phase`; the controls;
each group's totals across restarts of its process; ASHL's plan bookkeeping and drift; ADSP's
search; the evaluation history) and round-trips it through `state()` / `restore()` for
checkpoints. No TensorFlow here: tests drive it with plain numbers (tests/engine/test_engine_decide.py).

Strategy, in order within a tick:
  liveness   a group whose process exited, or silent for lost_after_s (or 3 of its rounds), is
             dropped (its data goes to the others); a lost group whose new process is joining is
             re-admitted at the live groups' commit count (liveness.py)
  profiling  ASHL: once every live group has profiled, plan H_i, D_i, R_i and enter AHL
  stop       stop request, time budget, step budget, every group done, target reached (+ linger)
  evals      record each (with the counters of the tick before its model was pulled; the windowed
             throughput and the estimated time to the target: progress.py); ASHL: switch
             to SHL at shl_loss, planned as published from the profile (with `replan`: from measured
             rounds, and re-plans on drift or every replan_interval_s); ADSP, once per period: search
             the commit count, catch-up commits and compute-only timers per group
  checkpoint every checkpoint_interval_s
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Mapping, Sequence

from edgemesh_tf.engine import progress, records, rules
from edgemesh_tf.engine.config import JobConfig
from edgemesh_tf.engine.rules import CUMULATIVE
from edgemesh_tf.engine.liveness import Liveness
from edgemesh_tf.sync import adsp, schedule

Totals = Mapping[str, Mapping[str, float]]  # {group: cumulative statistics (control.STAT_FIELDS)}


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """One tick's view. now: s of training (resumed runs continue the count); clock: monotonic s
    (liveness is timed on the chief's clock); stats: {group: its last report (control.STAT_FIELDS)};
    counters: the ps's {"commits/<g>", "pulls/<g>", "rejected", "version"}; exited: {group: what
    happened} of group processes that ended; evals: [(s at the pull, accuracy, loss)] finished
    since the last tick; stop_request: why to stop (e.g. SIGTERM), or None."""

    now: float
    clock: float
    stats: Mapping[str, Mapping[str, float]]
    counters: Mapping[str, float]
    exited: Mapping[str, str] = dataclasses.field(default_factory=dict)
    evals: Sequence[tuple[float, float, float]] = ()
    stop_request: str | None = None


@dataclasses.dataclass(frozen=True)
class ProbePs:
    """Make sure the ps answers before blaming a group (groups also leave when the ps is gone)."""


@dataclasses.dataclass(frozen=True)
class WriteControls:
    controls: Mapping[str, rules.GroupControl]


@dataclasses.dataclass(frozen=True)
class WriteGlobal:
    """Write the phase (and heartbeat) now rather than at the next tick."""


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
    totals: Totals


@dataclasses.dataclass(frozen=True)
class Stop:
    why: str


def steps_of(totals: Totals) -> int:
    """Local iterations summed over the groups."""
    return int(sum(t["steps"] for t in totals.values()))


def plan_view(controls: Mapping[str, rules.GroupControl]) -> dict:
    """{group: {"H", "D", "R"}} of the live groups: what a re-plan changes."""
    return {g: {"H": c.local_steps, "D": round(c.share, 4), "R": round(c.ratio, 4)}
            for g, c in controls.items() if not c.lost}


class Decisions:
    """See the module docstring. dense_push_bytes: bytes of one dense push (a push with fewer was
    compressed); liveness: the groups' liveness tracker; elapsed_before: s trained before a resume."""

    def __init__(self, cfg: JobConfig, dense_push_bytes: float, liveness: Liveness):
        self.cfg, self.sync, self.liveness = cfg, cfg.sync, liveness
        self.dense_push_bytes = dense_push_bytes
        self.batch = {g.name: g.batch_size for g in cfg.groups}
        self.phases = schedule.PhaseController(self.sync.shl_loss, initial=rules.first_phase(self.sync), _now=float)
        self.controls = rules.initial_controls(self.sync, self.batch)
        self.offsets = {g: {} for g in cfg.group_names}  # totals of earlier processes and runs
        self._incarnation: dict[str, tuple[float, dict]] = {}  # group -> (its process's start, its last stats)
        self.elapsed_before = 0.0
        self.history: list[tuple[float, float, float]] = []  # (s, accuracy, training loss)
        self.reached: float | None = None
        self._streak: tuple[float | None, int] = (None, 0)  # evaluations in a row at target (see _at_target)
        self.rejected = 0
        self.search: adsp.CommitRateSearch | None = None  # ADSP's, from its first measured period on
        self._adsp_next = 0.0  # ADSP: s of the next period's decision
        self._adsp_count: int | None = None  # ADSP: the commit count a checkpoint saved
        self._ticks: collections.deque = collections.deque(maxlen=200)  # (s, totals, counters) of recent ticks
        self._next_ckpt = cfg.checkpoint_interval_s
        self._last_eval: tuple[float, Totals] = (0.0, {})  # for rates
        self._throughput = progress.Throughput()  # windowed rates (a resumed run starts it again)
        # ASHL's plan bookkeeping
        self._timing_of: dict[str, schedule.WorkerTiming] = {}  # each group's timing in the last plan with it
        self._planned_ms: dict[str, float] = {}
        self._plan_totals: Totals = {}
        self._plan_t = 0.0
        self._phase_totals: Totals = {}
        self._drifting: dict[str, tuple[int, dict]] = {}
        self._drift_totals: Totals | None = None

    @property
    def phase(self) -> str:
        return self.phases.phase

    def live(self, per_group: Mapping) -> dict:
        return {g: v for g, v in per_group.items() if not self.controls[g].lost}

    # -- checkpoints --

    def state(self, totals: Totals, elapsed: float) -> dict:
        """The strategy state a checkpoint keeps (JSON)."""
        return {"phase_controller": self.phases.state(), "totals": totals, "elapsed_s": elapsed,
                "controls": {g: dataclasses.asdict(c) for g, c in self.controls.items()},
                "history": self.history, "global_steps": steps_of(totals),
                "adsp_commits": self.search.count if self.search else self._adsp_count,
                "timings": {g: dataclasses.asdict(t) for g, t in self._timing_of.items()}}

    def restore(self, state: Mapping, path: str, clock: float) -> records.Resume:
        self.phases = schedule.PhaseController.from_state(state["phase_controller"])
        self.controls = {g: rules.GroupControl(**c) for g, c in state["controls"].items()}
        for g, c in self.controls.items():
            if c.lost:
                self.liveness.declare(g, clock)  # they may come back
        self.offsets = {g: {k: v for k, v in t.items() if k in CUMULATIVE} for g, t in state["totals"].items()}
        self.elapsed_before = float(state["elapsed_s"])
        self._next_ckpt = self.elapsed_before + self.cfg.checkpoint_interval_s
        self._last_eval = (self.elapsed_before, {})
        self.history = [tuple(h) for h in state.get("history", [])]
        if state.get("adsp_commits"):
            self._adsp_count = int(state["adsp_commits"])
        # ASHL plans SHL from these (a resumed group process does not profile again)
        self._timing_of = {g: schedule.WorkerTiming(**t) for g, t in state.get("timings", {}).items()}
        return records.Resume(checkpoint=path, phase=self.phase, elapsed_s=round(self.elapsed_before, 3),
                              global_steps=int(state["global_steps"]))

    def begin(self) -> None:
        """Training starts now: a new run's times are seconds of training from 0."""
        if len(self.phases.transitions) == 1:
            self.phases.transitions = [(self.phase, 0, 0.0)]
        self._last_eval = (self.elapsed_before, self._last_eval[1])
        if not self.elapsed_before:  # a new run counts from zero examples
            self._throughput.add(0.0, {g: 0.0 for g in self.cfg.group_names})

    # -- the tick --

    def totals(self, stats: Mapping[str, Mapping[str, float]]) -> dict:
        """Cumulative totals per group: a restarted group process counts from zero, so what its
        earlier processes did is kept."""
        for g, s in stats.items():
            inc, last = self._incarnation.get(g, (s["incarnation"], None))
            if s["incarnation"] != inc and last is not None:
                self.offsets[g] = {k: self.offsets[g].get(k, 0.0) + last[k] for k in CUMULATIVE}
            self._incarnation[g] = (s["incarnation"], s)
        return {g: {k: v + (self.offsets[g].get(k, 0.0) if k in CUMULATIVE else 0.0) for k, v in s.items()}
                for g, s in stats.items()}

    def step(self, snap: Snapshot) -> list:
        """The actions of one tick (see the module docstring)."""
        totals = self.totals(snap.stats)
        self._ticks.append((snap.now, totals, snap.counters))
        out = self._liveness(snap, totals)
        if int(snap.counters["rejected"]) > self.rejected:
            self.rejected = int(snap.counters["rejected"])
            out.append(records.Rejected(t=round(snap.now, 3), rejected=self.rejected, why=(
                "the parameter server rejected non-finite updates (NaN or Inf); they were not applied")))
        if self.phase == "profiling" and all(s["profiled"] > 0 for s in self.live(snap.stats).values()):
            self.phases.start_ahl(steps_of(totals), wall_time=snap.now)
            out += self._plan("ahl", self._profiled(snap.stats), totals, snap.now, "profiled", old_phase="profiling")
        why = self._stop_why(snap, totals)
        for t_eval, accuracy, loss in snap.evals:
            if self.cfg.target_accuracy and self.reached is None and self._at_target(t_eval, accuracy):
                self.reached = self._streak[0]  # before the record, which reports it
                if self.cfg.stop_after_target_s <= 0:
                    why = why or "target accuracy %.3f reached" % self.cfg.target_accuracy
            out.append(self.evaluated(t_eval, accuracy, loss, *self._tick_before(t_eval)))
            if not why:
                out += self._drive(snap, totals, loss)
        if snap.now >= self._next_ckpt and not why:
            self._next_ckpt = snap.now + self.cfg.checkpoint_interval_s
            out.append(SaveCheckpoint(totals))
        if why:
            out.append(Stop(why))
        return out

    def _at_target(self, t_eval: float, accuracy: float) -> bool:
        """Whether this evaluation ends a run of cfg.target_evaluations in a row at or above the
        target; self._streak: (time of the run's first evaluation, its length)."""
        if accuracy < self.cfg.target_accuracy:
            self._streak = (None, 0)
            return False
        first, n = self._streak
        self._streak = (t_eval if n == 0 else first, n + 1)
        return self._streak[1] >= self.cfg.target_evaluations

    def _tick_before(self, t_eval: float) -> tuple[Totals, Mapping]:
        """The totals and counters of the last tick before `t_eval` (when the evaluated model was pulled)."""
        _, totals, counters = next((x for x in reversed(self._ticks) if x[0] <= t_eval), self._ticks[0])
        return totals, counters

    def _stop_why(self, snap: Snapshot, totals: Totals) -> str | None:
        cfg = self.cfg
        if snap.stop_request:
            return snap.stop_request
        if snap.now >= cfg.time_budget_s:
            return "time budget %.0f s" % cfg.time_budget_s
        if cfg.max_steps and steps_of(totals) >= cfg.max_steps:
            return "step budget %d" % cfg.max_steps
        if cfg.max_rounds and all(s["done"] > 0 for s in self.live(snap.stats).values()):
            return "every group made its %d rounds" % cfg.max_rounds
        if self.reached is not None and snap.now >= self.reached + cfg.stop_after_target_s:
            return "target accuracy %.3f reached at %.1f s" % (cfg.target_accuracy, self.reached)
        return None

    # -- evaluations --

    def evaluated(self, t: float, accuracy: float, loss: float, totals: Totals, counters: Mapping) -> Evaluated:
        """The evaluation at `t` (s) with the totals and counters of the tick before it, as a record."""
        self.history.append((t, accuracy, loss))
        last_t, last = self._last_eval
        dt = t - last_t
        rates = {g: (s["examples"] - last.get(g, {}).get("examples", 0.0)) / dt if dt > 0 else 0.0
                 for g, s in totals.items()}
        self._last_eval = (t, totals)
        avg = {g: r or 0.0 for g, r in self._throughput.add(t, {g: s["examples"] for g, s in totals.items()}).items()}
        steps = steps_of(totals)
        budget_left = max(0.0, self.cfg.time_budget_s - t)
        if self.cfg.max_steps and steps and t > self.elapsed_before:
            budget_left = max(0.0, min(budget_left, (self.cfg.max_steps - steps) * (t - self.elapsed_before) / steps))
        target = self.cfg.target_accuracy
        eta = None if not target or self.reached is not None else progress.time_to_target(
            [(h[0], h[1]) for h in self.history], target, horizon_s=budget_left)
        rec = records.Eval(
            t=round(t, 3), phase=self.phases.phase_at(t), accuracy=round(accuracy, 4), loss=round(loss, 5), global_steps=steps,
            examples_per_sec=round(sum(rates.values()), 1), group_examples_per_sec={g: round(r, 1)
                                                                                     for g, r in rates.items()},
            bytes_sent=int(sum(s["bytes_sent"] for s in totals.values())), eta_s=round(budget_left, 1),
            live_groups=sum(not c.lost for c in self.controls.values()), rejected=int(counters["rejected"]),
            version=int(counters["version"]), examples_per_sec_avg=round(sum(avg.values()), 1),
            group_examples_per_sec_avg={g: round(r, 1) for g, r in avg.items()}, target_accuracy=target or None,
            target_eta_s=None if eta is None else round(eta, 1),
            target_reached_s=None if self.reached is None else round(self.reached, 3))
        return Evaluated(rec, totals, dict(self.controls))

    def final(self, why: str, totals: Totals, checkpoint: str, stop_t: float) -> records.Final:
        """The final record (without the report's per-device figures and the launcher's fields)."""
        return records.Final(
            t=round(stop_t, 3), strategy=self.sync.strategy, why=why, accuracy=round(self.history[-1][1], 4),
            time_to_target_s=None if self.reached is None else round(self.reached, 3), phase=self.phase,
            phase_transitions=self.phases.transitions, global_steps=steps_of(totals),
            bytes_sent=int(sum(t["bytes_sent"] for t in totals.values())),
            bytes_received=int(sum(t["bytes_received"] for t in totals.values())),
            wait_s=round(sum(t["wait_s"] for t in totals.values()), 3), groups=totals, checkpoint=checkpoint,
            lost_groups=[g for g, c in self.controls.items() if c.lost], rejected_updates=self.rejected,
            curve=[[round(t, 3), round(a, 4)] for t, a, _ in self.history])

    # -- liveness --

    def _liveness(self, snap: Snapshot, totals: Totals) -> list:
        out = []
        verdict = self.liveness.observe(snap.stats, snap.exited, snap.clock, self.controls)
        if verdict.lost:
            out.append(ProbePs())
        for g, why in verdict.lost:
            self.controls = rules.drop_lost(self.controls, g)
            self.liveness.declare(g, snap.clock)
            live = [n for n, c in self.controls.items() if not c.lost]
            out += [WriteControls(self.controls), records.Lost(t=round(snap.now, 3), group=g,
                                                              devices=self.liveness.devices_of(g), why=why, live=live)]
            if not live:
                raise RuntimeError("chief: every group is lost (the last, %s: %s)" % (g, why.splitlines()[0]))
        for g in verdict.joining:
            out += self._readmit(g, snap, totals)
        return out

    def _readmit(self, group: str, snap: Snapshot, totals: Totals) -> list:
        live = [g for g, c in self.controls.items() if not c.lost]
        count = max(int(snap.counters["commits/" + g]) for g in live)
        self.controls = rules.readmit(self.controls, group, rules.batch_shares(self.batch)[group])
        why = "group %s re-admitted after %.1f s lost" % (group, self.liveness.readmitted(group, snap.clock))
        # at a round's start a group has pulled as often as it committed
        out = [SetCounters(group, count), records.Readmitted(t=round(snap.now, 3), group=group,
                                                             devices=self.liveness.devices_of(group), why=why,
                                                             commits=count, live=live + [group])]
        known = [self._timing_of.get(g) for g in live + [group]]
        if self.sync.strategy == "ashl" and self.phase in ("ahl", "shl") and all(known):
            return out + self._plan(self.phase, known, totals, snap.now, why + " (its timing from before the loss)")
        return out + [WriteControls(self.controls)]

    # -- ASHL and ADSP --

    def _profiled(self, stats) -> list[schedule.WorkerTiming]:
        """The live groups' profiling measurements (ms), pushes dense."""
        return [schedule.WorkerTiming(g, max(1e-3, s["profile_iter_ms"]), s["profile_pull_ms"] + s["profile_push_ms"],
                                      s["profile_push_ms"], s["profile_pull_ms"]) for g, s in self.live(stats).items()]

    def _planned(self, stats) -> list[schedule.WorkerTiming]:
        """The live groups' timings of the last plan with each (their profile), else the profile on the board."""
        live = self.live(stats)
        known = [self._timing_of[g] for g in live if g in self._timing_of]
        return known if len(known) == len(live) else self._profiled(stats)

    def _measured(self, stats, totals: Totals, since: Totals | None = None) -> list[schedule.WorkerTiming] | None:
        """The live groups' timings measured since `since` (default: the last plan's totals); None
        until every live group has committed in that window."""
        return rules.measured_timings(self.live(totals), [self._plan_totals if since is None else since],
                                      self.dense_push_bytes, {g: s["profile_push_ms"] for g, s in stats.items()})

    def _plan(self, phase: str, timings, totals: Totals, now: float, why: str, old_phase: str | None = None) -> list:
        """ASHL: new H_i, D_i, R_i for `phase` from `timings`; the actions that enter `phase` (when
        old_phase differs) or re-plan it."""
        old = self.controls
        self.controls = {**self.controls, **rules.ashl_controls(self.sync, timings, phase, self.controls)}
        self._plan_totals, self._plan_t = totals, now
        self._planned_ms = {t.name: t.iter_ms for t in timings}
        self._timing_of.update({t.name: t for t in timings})
        self._drifting = {}
        why += "; " + ", ".join("%s %.1f ms/iter, pull %.0f ms, push %.0f ms -> H %d, R %.3g" % (
            t.name, t.iter_ms, t.other_ms, t.push_ms, self.controls[t.name].local_steps, self.controls[t.name].ratio)
            for t in timings)
        if old_phase is None:
            return [WriteControls(self.controls), records.Replan(t=round(now, 3), phase=phase, why=why,
                                                                old=plan_view(old), new=plan_view(self.controls))]
        self._phase_totals = totals
        # SHL's staleness counts the commits made in SHL, not the lead from AHL
        reset = [ResetCounters()] if phase == "shl" else []
        return reset + [WriteControls(self.controls), WriteGlobal(), records.Phase(
            t=round(now, 3), old=old_phase, new=phase, why=why,
            controls={g: c.to_vector() for g, c in self.controls.items()}, does=rules.PHASE_DOES[phase])]

    def _drive(self, snap: Snapshot, totals: Totals, loss: float) -> list:
        if self.sync.strategy == "ashl" and self.phase in ("ahl", "shl"):
            return self._drive_ashl(snap, totals, loss)
        if self.sync.strategy == "adsp" and snap.now >= self._adsp_next:
            return self._drive_adsp(snap, totals)
        return []

    def _drive_adsp(self, snap: Snapshot, totals: Totals) -> list:
        """ADSP as published, once per period: search the commit count on the fitted loss curve
        (starting from AHL's commit rate on the measured timings), then give each group the commits
        that make the cumulative counts meet at the period's end (catch-up) and a timer that counts
        compute only: period / its commits - its communication time per commit."""
        period, live = self.sync.adsp_period_s, self.live(totals)
        if any(t["commits"] < 1 or t["steps"] < 1 for t in live.values()):
            return []  # nothing measured yet: the initial timer stands
        comm_s = {g: (t["pull_s"] + t["push_s"]) / t["commits"] for g, t in live.items()}
        old = self.search.count if self.search else None
        if self.search is None:
            initial = self._adsp_count or adsp.initial_commits(
                period, [t["compute_s"] / t["steps"] for t in live.values()], list(comm_s.values()),
                self.sync.ahl_h_preset)
            upper = max(initial, adsp.max_commits(period, max(comm_s.values()), cap=64))
            self.search = adsp.CommitRateSearch(self.sync.shl_loss, initial=initial, upper=upper, min_points=3,
                                                period_s=period)
        elif len(self.history) >= 3:
            t, losses = zip(*[(h[0], h[2]) for h in self.history])
            self.search.update(t, losses)
        self._adsp_next = snap.now + period
        plan = adsp.commits_per_worker({g: int(snap.counters["commits/" + g]) for g in live}, self.search.count)
        self.controls = {g: dataclasses.replace(c, timer_s=adsp.compute_interval_s(period, plan[g], comm_s[g]))
                         if g in plan else c for g, c in self.controls.items()}
        out = [WriteControls(self.controls)]
        if self.search.count != old:
            out.append(records.Adsp(t=round(snap.now, 3), commits_per_period=self.search.count))
        return out

    def _drive_ashl(self, snap: Snapshot, totals: Totals, loss: float) -> list:
        """The switch to SHL at shl_loss: as published, planned from the profile like AHL; with
        `replan`, from the rounds measured since the last plan (or all of AHL), and re-plans on drift
        and every replan_interval_s."""
        switch = self.phase == "ahl" and self.phases.observe_loss(loss, steps_of(totals), snap.now) == "shl"
        why = "training loss %.4f <= %.4f" % (loss, self.sync.shl_loss)
        if not self.sync.replan:
            return self._plan("shl", self._planned(snap.stats), totals, snap.now, why, old_phase="ahl") if switch else []
        live = self._measured(snap.stats, totals)
        drifted = self._drift(totals)
        # a drift with nothing measured since it began (e.g. a group gone silent) waits for the next evaluation
        since = min((d[3] for d in drifted), key=steps_of) if drifted else None
        measured = drifted and (self._measured(snap.stats, totals, since) or live)
        if switch:
            # a re-plan just before the switch leaves nothing measured since: use all of AHL, not the profile
            timings = live or self._measured(snap.stats, totals, self._phase_totals) or self._profiled(snap.stats)
            return self._plan("shl", timings, totals, snap.now, why, old_phase="ahl")
        if measured:
            return self._plan(self.phase, measured, totals, snap.now, "drift: " + "; ".join(
                "%s %.1f ms/iter planned, %.1f ms/iter over the last %d evaluations"
                % (g, planned, ms, self.sync.drift_evals) for g, planned, ms, _ in drifted))
        if live and snap.now - self._plan_t >= self.sync.replan_interval_s:
            return self._plan(self.phase, live, totals, snap.now, "re-plan from the last %.0f s" % (
                snap.now - self._plan_t))
        return []

    def _drift(self, totals: Totals) -> list[tuple[str, float, float, dict]]:
        prev, self._drift_totals = self._drift_totals, {g: dict(t) for g, t in totals.items()}
        if prev is None:
            return []
        out, self._drifting = rules.drift_step(prev, self.live(totals), self._planned_ms, self._drifting,
                                               self.sync.drift, self.sync.drift_evals)
        return out
