"""ADSP's driver in the chief's decisions, as published: once per period, search the commit count on
the fitted loss curve (starting from AHL's commit rate on the measured timings), then give each group
the commits that make the cumulative counts meet at the period's end (catch-up) and a timer that
counts compute only: period / its commits - its communication time per commit. It writes the
machine's (decide.Decisions) controls; its own state is the search, kept in checkpoints as
"adsp_commits". Pure: no TensorFlow."""
from __future__ import annotations

import dataclasses
from typing import Mapping

from edgemesh_tf.engine.core import records
from edgemesh_tf.engine.core.actions import Snapshot, Totals, WriteControls
from edgemesh_tf.sync import adsp


class AdspDriver:
    """See the module docstring; m: the machine (decide.Decisions) it drives."""

    def __init__(self, m):
        self.m = m
        self.search: adsp.CommitRateSearch | None = None  # from its first measured period on
        self._next_s = 0.0  # s of the next period's decision
        self._saved_count: int | None = None  # the commit count a checkpoint saved

    def state(self) -> dict:
        return {"adsp_commits": self.search.count if self.search else self._saved_count}

    def restore(self, state: Mapping) -> None:
        if state.get("adsp_commits"):
            self._saved_count = int(state["adsp_commits"])

    def readmitted(self, group: str, live: list[str], totals: Totals, now: float, why: str) -> None:
        """A lost group re-admitted: the next period's catch-up counts it (None: the controls stand)."""
        return None

    def evaluated(self, snap: Snapshot, totals: Totals, loss: float) -> list:
        """The period's decision, once the period is over (see the module docstring)."""
        m = self.m
        if snap.now < self._next_s:
            return []
        period, live = m.sync.adsp_period_s, m.live(totals)
        if any(t["commits"] < 1 or t["steps"] < 1 for t in live.values()):
            return []  # nothing measured yet: the initial timer stands
        comm_s = {g: (t["pull_s"] + t["push_s"]) / t["commits"] for g, t in live.items()}
        old = self.search.count if self.search else None
        if self.search is None:
            initial = self._saved_count or adsp.initial_commits(
                period, [t["compute_s"] / t["steps"] for t in live.values()], list(comm_s.values()),
                m.sync.ahl_h_preset)
            upper = max(initial, adsp.max_commits(period, max(comm_s.values()), cap=64))
            self.search = adsp.CommitRateSearch(m.sync.shl_loss, initial=initial, upper=upper, min_points=3,
                                                period_s=period)
        elif len(m.history) >= 3:
            t, losses = zip(*[(h[0], h[2]) for h in m.history])
            self.search.update(t, losses)
        self._next_s = snap.now + period
        plan = adsp.commits_per_worker({g: int(snap.counters["commits/" + g]) for g in live}, self.search.count)
        m.controls = {g: dataclasses.replace(c, timer_s=adsp.compute_interval_s(period, plan[g], comm_s[g]))
                      if g in plan else c for g, c in m.controls.items()}
        out = [WriteControls(m.controls)]
        if self.search.count != old:
            out.append(records.Adsp(t=round(snap.now, 3), commits_per_period=self.search.count))
        return out
