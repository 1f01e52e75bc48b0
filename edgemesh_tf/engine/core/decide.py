"""The chief's decisions as a pure state machine: a snapshot of the board in, actions out.

    machine = Decisions(cfg, dense_push_bytes)
    for action in machine.step(Snapshot(now, clock, stats, counters, exited, evals, stop_request)):
        ...  # the chief (chief.py) carries it out: board writes, ps counters, records, checkpoints

The chief reaches the machine through `step`, `state()` and `restore()` only. A job's snapshots come
in stages: "setup" (before the groups start: the controls and the phase to write), "start" (the
clock starts), a "tick" every 0.1 s while training (the groups' reports, the ps counters, the
evaluations that finished since the last tick, the groups the launcher restarted), and "final"
after the stop (the groups' last reports and the stop's evaluation). `step` returns what to do, in
order: probe the ps, write controls or the phase, reset or set commit counters, emit a record, save a
checkpoint, let the launcher bring groups back, finish, stop. The machine holds all the state the
decisions need (the phase, in one place: `phase`; the controls; each group's liveness and totals
across restarts of its process; ASHL's plan bookkeeping and drift; ADSP's search; the evaluation
history) and round-trips it through `state()` / `restore()` for checkpoints. Times are arguments
(the snapshot's). No TensorFlow here: tests drive it with plain numbers
(tests/engine/test_engine_decide.py).

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
from typing import Mapping

from edgemesh_tf.engine.core import progress, records, rules
from edgemesh_tf.engine.core.actions import (STAGES, Evaluated, Finish, ProbePs, Rejoin, ResetCounters,  # noqa: F401
                                        SaveCheckpoint, SetCounters, Snapshot, Stop, Totals, WriteControls,
                                        WriteGlobal, plan_view, steps_of)
from edgemesh_tf.engine.config import JobConfig
from edgemesh_tf.engine.core.drive_adsp import AdspDriver
from edgemesh_tf.engine.core.drive_ashl import AshlDriver
from edgemesh_tf.engine.core.liveness import Liveness
from edgemesh_tf.engine.core.rules import CUMULATIVE
from edgemesh_tf.sync import schedule

DRIVERS = {"ashl": AshlDriver, "adsp": AdspDriver}  # strategies whose decisions go beyond rules.py's controls

class Decisions:
    """See the module docstring. dense_push_bytes: bytes of one dense push (a push with fewer was
    compressed); elapsed_before: s trained before a resume."""

    def __init__(self, cfg: JobConfig, dense_push_bytes: float):
        self.cfg, self.sync, self.liveness = cfg, cfg.sync, Liveness(cfg)
        self.dense_push_bytes = dense_push_bytes
        self.batch = {g.name: g.batch_size for g in cfg.groups}
        self.phases = schedule.PhaseController(self.sync.shl_loss,
                                               initial=rules.first_phase(self.sync, len(cfg.groups)))
        self.controls = rules.initial_controls(self.sync, self.batch)
        self.offsets = {g: {} for g in cfg.group_names}  # totals of earlier processes and runs
        self._incarnation: dict[str, tuple[float, dict]] = {}  # group -> (its process's start, its last stats)
        self.elapsed_before = 0.0
        self.history: list[tuple[float, float, float]] = []  # (s, accuracy, training loss)
        self.reached: float | None = None
        self._streak: tuple[float | None, int] = (None, 0)  # evaluations in a row at target (see _at_target)
        self.rejected = 0
        self._ticks: collections.deque = collections.deque(maxlen=200)  # (s, totals, counters) of recent ticks
        self._next_ckpt = cfg.checkpoint_interval_s
        self._last_eval: tuple[float, Totals] = (0.0, {})  # for rates
        self._throughput = progress.Throughput()  # windowed rates (a resumed run starts it again)
        self.phase_totals: dict[str, Totals] = {}  # each group's totals when its rounds of a phase began (job_cost.py)
        self._phase_entry: dict[str, float] | None = None  # each group's commits when the current phase began
        driver = DRIVERS.get(self.sync.strategy) if not rules.solo(cfg.sync, len(cfg.groups)) else None
        self.driver = driver(self) if driver else None  # the strategy's own decisions (drive_*.py)

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
                "history": self.history, "global_steps": steps_of(totals), "phase_totals": self.phase_totals,
                "phase_entry": self._phase_entry,
                **(self.driver.state() if self.driver else {})}

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
        self.phase_totals = dict(state.get("phase_totals", {}))
        self._phase_entry = state.get("phase_entry")
        if self.driver:
            self.driver.restore(state)
        return records.Resume(checkpoint=path, phase=self.phase, elapsed_s=round(self.elapsed_before, 3),
                              global_steps=int(state["global_steps"]))

    def _begin(self) -> None:
        """Training starts now: a new run's times are seconds of training from 0."""
        self._last_eval = (self.elapsed_before, self._last_eval[1])
        if not self.elapsed_before:  # a new run counts from zero examples
            self._throughput.add(0.0, {g: 0.0 for g in self.cfg.group_names})
            self.phase_totals = {self.phase: {}}

    # -- the tick --

    def _totals(self, stats: Mapping[str, Mapping[str, float]]) -> dict:
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
        """The actions of one snapshot (see the module docstring)."""
        if snap.stage == "setup":
            return [WriteControls(dict(self.controls)), WriteGlobal(self.phase, heartbeat=0.0)]
        if snap.stage == "start":
            self._begin()
            return [WriteGlobal(self.phase)]
        if snap.stage == "final":
            return self._after_stop(snap)
        if snap.stage != "tick":
            raise ValueError("snapshot stage %r: expected one of %s" % (snap.stage, STAGES))
        out = self._tick(snap)
        self._mark_phase_starts(snap.now)  # a phase entered in this tick
        return out

    def _mark_phase_starts(self, now: float) -> None:
        """Keeps, per group, its totals (and the time, "t") when its first round under the current phase's
        controls began: a group reads its controls when a round starts, so the round in flight when the
        phase changes runs under the old ones and ends with the group's first commit after the change.
        That round is counted in the phase it ran under (``job_cost.measured_phases``). A run's first
        phase starts from zero for every group ({}, ``_begin``)."""
        totals = self._ticks[-1][1]
        if self.phase not in self.phase_totals:  # a phase entered in this tick
            self.phase_totals[self.phase] = {}
            self._phase_entry = {g: t.get("commits", 0.0) for g, t in totals.items()}
        if self._phase_entry is None:  # the run's first phase: every group started it from zero
            return
        starts = self.phase_totals[self.phase]
        for g, t in totals.items():
            if g not in starts and t.get("commits", 0.0) > self._phase_entry.get(g, 0.0):
                starts[g] = {**t, "t": round(now, 3)}

    def _tick(self, snap: Snapshot) -> list:
        for g, devices in snap.restarted.items():
            self.liveness.restarted(g, list(devices))
        totals = self._totals(snap.stats)
        self._ticks.append((snap.now, totals, snap.counters))
        self._mark_phase_starts(snap.now)  # before this tick's decisions may change the phase
        out, all_lost = self._liveness(snap, totals)
        if all_lost:
            return out + [Stop(all_lost, failed=True)]
        if int(snap.counters["rejected"]) > self.rejected:
            self.rejected = int(snap.counters["rejected"])
            out.append(records.Rejected(t=round(snap.now, 3), rejected=self.rejected, why=(
                "the parameter server rejected non-finite updates (NaN or Inf); they were not applied")))
        if self.phase == "profiling" and all(s["profiled"] > 0 for s in self.live(snap.stats).values()):
            out += self.driver.profiled(snap, totals)
        why = self._stop_why(snap, totals)
        for t_eval, accuracy, loss in snap.evals:
            if self.cfg.target_accuracy and self.reached is None and self._at_target(t_eval, accuracy):
                self.reached = self._streak[0]  # before the record, which reports it
                if self.cfg.stop_after_target_s <= 0:
                    why = why or "target accuracy %.3f reached" % self.cfg.target_accuracy
            out.append(self._evaluation(t_eval, accuracy, loss, *self._tick_before(t_eval)))
            if not why and self.driver:
                out += self.driver.evaluated(snap, totals, loss)
        if snap.now >= self._next_ckpt and not why:
            self._next_ckpt = snap.now + self.cfg.checkpoint_interval_s
            out.append(SaveCheckpoint(totals, self.phase))
        if why:
            return out + [Stop(why)]
        if self.cfg.rejoin_limit > 0 and self.liveness.pending():
            out.append(Rejoin(self.liveness.lost_at(), round(snap.now, 3)))
        return out

    def _after_stop(self, snap: Snapshot) -> list:
        """After the stop: the stop's evaluation with the groups' last totals, the checkpoint at the
        stop, the final record."""
        totals = self._totals(snap.stats)
        (t, accuracy, loss), = snap.evals
        return [self._evaluation(t, accuracy, loss, totals, snap.counters),
                SaveCheckpoint(totals, self.phase, at_s=snap.now),
                Finish(self._final_record(snap.stop_request or "", totals, "", snap.now))]

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

    def _evaluation(self, t: float, accuracy: float, loss: float, totals: Totals, counters: Mapping) -> Evaluated:
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

    def _final_record(self, why: str, totals: Totals, checkpoint: str, stop_t: float) -> records.Final:
        """The final record (without the report's per-device figures and the launcher's fields)."""
        return records.Final(
            t=round(stop_t, 3), strategy=self.sync.strategy, why=why, accuracy=round(self.history[-1][1], 4),
            time_to_target_s=None if self.reached is None else round(self.reached, 3), phase=self.phase,
            phase_transitions=self.phases.transitions, global_steps=steps_of(totals),
            bytes_sent=int(sum(t["bytes_sent"] for t in totals.values())),
            bytes_received=int(sum(t["bytes_received"] for t in totals.values())),
            wait_s=round(sum(t["wait_s"] for t in totals.values()), 3), groups=totals, checkpoint=checkpoint,
            lost_groups=[g for g, c in self.controls.items() if c.lost], rejected_updates=self.rejected,
            curve=[[round(t, 3), round(a, 4)] for t, a, _ in self.history], phase_totals=self.phase_totals)

    # -- liveness --

    def _liveness(self, snap: Snapshot, totals: Totals) -> tuple[list, str | None]:
        """The actions of the groups' liveness, and why the job fails when every group is lost (else None)."""
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
                return out, "chief: every group is lost (the last, %s: %s)" % (g, why.splitlines()[0])
        for g in verdict.joining:
            out += self._readmit(g, snap, totals)
        return out, None

    def _readmit(self, group: str, snap: Snapshot, totals: Totals) -> list:
        live = [g for g, c in self.controls.items() if not c.lost]
        count = max(int(snap.counters["commits/" + g]) for g in live)
        self.controls = rules.readmit(self.controls, group, rules.batch_shares(self.batch)[group])
        why = "group %s re-admitted after %.1f s lost" % (group, self.liveness.readmitted(group, snap.clock))
        # at a round's start a group has pulled as often as it committed
        out = [SetCounters(group, count), records.Readmitted(t=round(snap.now, 3), group=group,
                                                             devices=self.liveness.devices_of(group), why=why,
                                                             commits=count, live=live + [group])]
        replanned = self.driver.readmitted(group, live, totals, snap.now, why) if self.driver else None
        return out + (replanned if replanned is not None else [WriteControls(self.controls)])

