"""ASHL's driver in the chief's decisions: the plan of each group's local iterations H_i, data share
D_i and compression ratio R_i, from the profiling round into AHL, at the switch to SHL, and (with
`replan`) on drift and every replan_interval_s. It reads and writes the machine's (decide.Decisions)
controls and phases; its own state is the plan's bookkeeping, kept in checkpoints as "timings".
Pure: no TensorFlow."""
from __future__ import annotations

import dataclasses
from typing import Mapping

from edgemesh_tf.engine.core import records, rules
from edgemesh_tf.engine.core.actions import (ResetCounters, Snapshot, Totals, WriteControls, WriteGlobal, plan_view,
                                        steps_of)
from edgemesh_tf.sync import schedule


class AshlDriver:
    """See the module docstring; m: the machine (decide.Decisions) it drives."""

    def __init__(self, m):
        self.m = m
        self._timing_of: dict[str, schedule.WorkerTiming] = {}  # each group's timing in the last plan with it
        self._planned_ms: dict[str, float] = {}
        self._plan_totals: Totals = {}
        self._plan_t = 0.0
        self._phase_totals: Totals = {}
        self._drifting: dict[str, tuple[int, dict]] = {}
        self._drift_totals: Totals | None = None

    def state(self) -> dict:
        return {"timings": {g: dataclasses.asdict(t) for g, t in self._timing_of.items()}}

    def restore(self, state: Mapping) -> None:
        # ASHL plans SHL from these (a resumed group process does not profile again)
        self._timing_of = {g: schedule.WorkerTiming(**t) for g, t in state.get("timings", {}).items()}

    def profiled(self, snap: Snapshot, totals: Totals) -> list:
        """Every live group has profiled: enter AHL planned from their profiles."""
        self.m.phases.start_ahl(steps_of(totals), wall_time=snap.now)
        return self._plan("ahl", self._profiled(snap.stats), totals, snap.now, "profiled", old_phase="profiling")

    def readmitted(self, group: str, live: list[str], totals: Totals, now: float, why: str) -> list | None:
        """A lost group re-admitted in AHL or SHL: re-plan with its timing from before the loss (None
        when a group's timing is unknown: the controls stand)."""
        known = [self._timing_of.get(g) for g in live + [group]]
        if self.m.phase in ("ahl", "shl") and all(known):
            return self._plan(self.m.phase, known, totals, now, why + " (its timing from before the loss)")
        return None

    def evaluated(self, snap: Snapshot, totals: Totals, loss: float) -> list:
        """The switch to SHL at shl_loss: as published, planned from the profile like AHL; with
        `replan`, from the rounds measured since the last plan (or all of AHL), and re-plans on drift
        and every replan_interval_s."""
        m, sync = self.m, self.m.sync
        if m.phase not in ("ahl", "shl"):
            return []
        switch = m.phase == "ahl" and m.phases.observe_loss(loss, steps_of(totals), snap.now) == "shl"
        why = "training loss %.4f <= %.4f" % (loss, sync.shl_loss)
        if not sync.replan:
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
            return self._plan(m.phase, measured, totals, snap.now, "drift: " + "; ".join(
                "%s %.1f ms/iter planned, %.1f ms/iter over the last %d evaluations"
                % (g, planned, ms, sync.drift_evals) for g, planned, ms, _ in drifted))
        if live and snap.now - self._plan_t >= sync.replan_interval_s:
            return self._plan(m.phase, live, totals, snap.now, "re-plan from the last %.0f s" % (
                snap.now - self._plan_t))
        return []

    def _profiled(self, stats) -> list[schedule.WorkerTiming]:
        """The live groups' profiling measurements (ms): pushes dense, and the top-k selection the
        published rule adds to a compressed round."""
        return [schedule.WorkerTiming(g, max(1e-3, s["profile_iter_ms"]), s["profile_pull_ms"] + s["profile_push_ms"],
                                      s["profile_push_ms"], s["profile_pull_ms"], s["profile_compress_ms"])
                for g, s in self.m.live(stats).items()]

    def _planned(self, stats) -> list[schedule.WorkerTiming]:
        """The live groups' timings of the last plan with each (their profile), else the profile on the board."""
        live = self.m.live(stats)
        known = [self._timing_of[g] for g in live if g in self._timing_of]
        return known if len(known) == len(live) else self._profiled(stats)

    def _measured(self, stats, totals: Totals, since: Totals | None = None) -> list[schedule.WorkerTiming] | None:
        """The live groups' timings measured since `since` (default: the last plan's totals); None
        until every live group has committed in that window."""
        return rules.measured_timings(self.m.live(totals), [self._plan_totals if since is None else since],
                                      self.m.dense_push_bytes, {g: s["profile_push_ms"] for g, s in stats.items()})

    def _plan(self, phase: str, timings, totals: Totals, now: float, why: str, old_phase: str | None = None) -> list:
        """New H_i, D_i, R_i for `phase` from `timings`; the actions that enter `phase` (when old_phase
        differs) or re-plan it."""
        m = self.m
        old = m.controls
        m.controls = {**m.controls, **rules.ashl_controls(m.sync, timings, phase, m.controls)}
        self._plan_totals, self._plan_t = totals, now
        self._planned_ms = {t.name: t.iter_ms for t in timings}
        self._timing_of.update({t.name: t for t in timings})
        self._drifting = {}
        why += "; " + ", ".join("%s %.1f ms/iter, pull %.0f ms, push %.0f ms -> H %d, R %.3g" % (
            t.name, t.iter_ms, t.other_ms, t.push_ms, m.controls[t.name].local_steps, m.controls[t.name].ratio)
            for t in timings)
        if old_phase is None:
            return [WriteControls(m.controls), records.Replan(t=round(now, 3), phase=phase, why=why,
                                                             old=plan_view(old), new=plan_view(m.controls))]
        self._phase_totals = totals
        # SHL's staleness counts the commits made in SHL, not the lead from AHL
        reset = [ResetCounters()] if phase == "shl" else []
        return reset + [WriteControls(m.controls), WriteGlobal(m.phase), records.Phase(
            t=round(now, 3), old=old_phase, new=phase, why=why,
            controls={g: c.to_vector() for g, c in m.controls.items()}, does=rules.PHASE_DOES[phase])]

    def _drift(self, totals: Totals) -> list[tuple[str, float, float, dict]]:
        prev, self._drift_totals = self._drift_totals, {g: dict(t) for g, t in totals.items()}
        if prev is None:
            return []
        out, self._drifting = rules.drift_step(prev, self.m.live(totals), self._planned_ms, self._drifting,
                                               self.m.sync.drift, self.m.sync.drift_evals)
        return out
