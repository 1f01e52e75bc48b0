"""The chief's fault handling: groups declared lost, re-admitted when they come back, rejected updates.

A group is lost when its process exited or it sent nothing (no round statistics, no heartbeat)
for `lost_after_s`, or 3 of its rounds if longer, on the chief's clock. A restarted group process
that finds its group lost reports `joining`; the chief then re-admits it: its commit and pull
counts are set to the live groups' highest (gates do not wait for it to catch up), it gets its
batch share of the data back, and ASHL re-plans H, D, R with it. `Chief` mixes this in.
"""
from __future__ import annotations

import time

from edgemesh_tf.engine import rules


class Liveness:
    """Needs from the chief: cfg, g, controls, batch, phase, sync, report, exited_groups, rejoin,
    _probe_ps, _record, _plan, _timing_of."""

    def _init_liveness(self) -> None:
        self._heard: dict[str, tuple[float, float]] = {}  # group -> (last heartbeat value, monotonic time it changed)
        self._lost_at: dict[str, float] = {}  # group -> monotonic time it was declared lost
        self._running_on: dict[str, list[str]] = {}  # group -> devices of its last restart (maybe re-planned)
        self._rejected = 0

    def _devices_of(self, group: str) -> list[str]:
        if group in self._running_on:
            return self._running_on[group]
        spec = next(g for g in self.cfg.groups if g.name == group)
        return self.cfg.names_of(spec.layout["devices"])

    def _check_liveness(self, sess, stats, vals, totals, now: float) -> None:
        """Declares lost every live group whose process exited or whose heartbeat has not changed
        for lost_after_s, or 3 of its last rounds if longer (measured on the chief's clock, so the
        hosts' clocks need not agree); re-admits lost groups whose new process is joining; asks the
        launcher to restart lost groups (`rejoin`)."""
        exited = self.exited_groups()
        tick = time.monotonic()
        for g, s in stats.items():
            hb = s["heartbeat"]
            changed = g not in self._heard or self._heard[g][0] != hb
            if changed:
                self._heard[g] = (hb, tick)
            if self.controls[g].lost:
                if s["joining"] > 0 and changed and g not in exited:
                    self._readmit(sess, g, vals, totals, now)
                continue
            silent = tick - self._heard[g][1]
            limit = max(self.cfg.lost_after_s, 3 * s["round_s"])  # a slow group's long rounds are not silence
            if g in exited or silent > limit:
                self._probe_ps(sess)  # groups also leave when the ps is gone: that is the ps's fault, not theirs
            if g in exited:
                self._declare_lost(sess, g, exited[g], now)
            elif silent > limit:
                self._declare_lost(sess, g, "no report for %.1f s (limit %.1f s)" % (silent, limit), now)
        for rec in self.rejoin({g: self._lost_at[g] for g, c in self.controls.items() if c.lost}):
            rec = {**rec, "t": round(now, 3)}
            if rec["event"] == "restarted":
                self._running_on[rec["group"]] = rec["devices"]
            self.report.fault(rec)
            self._record(rec)

    def _declare_lost(self, sess, group: str, why: str, now: float) -> None:
        self.controls = rules.drop_lost(self.controls, group)
        self._lost_at[group] = time.monotonic()
        self.g.board.write_controls(sess, self.controls, self.cfg.ps_timeout_s)
        rec = {"event": "lost", "group": group, "devices": self._devices_of(group), "t": round(now, 3), "why": why,
               "live": [g for g, c in self.controls.items() if not c.lost]}
        self.report.fault(rec)
        self._record(rec)
        if not rec["live"]:
            raise RuntimeError("chief: every group is lost (the last, %s: %s)" % (group, why.splitlines()[0]))

    def _readmit(self, sess, group: str, vals, totals, now: float) -> None:
        live = [g for g, c in self.controls.items() if not c.lost]
        count = max(int(vals["commits/" + g]) for g in live)
        # at a round's start a group has pulled as often as it committed
        self.g.ps.set_counters(sess, group, count, count, self.cfg.ps_timeout_s)
        self.controls = rules.readmit(self.controls, group, rules.batch_shares(self.batch)[group])
        known = [self._timing_of.get(g) for g in live + [group]]
        why = "group %s re-admitted after %.1f s lost" % (group, time.monotonic() - self._lost_at.pop(group))
        rec = {"event": "readmitted", "group": group, "devices": self._devices_of(group), "t": round(now, 3),
               "why": why, "commits": count, "live": live + [group]}
        self.report.fault(rec)
        self._record(rec)
        if self.sync.strategy == "ashl" and self.phase in ("ahl", "shl") and all(known):
            self._plan(sess, self.phase, known, totals, why + " (its timing from before the loss)")
        else:
            self.g.board.write_controls(sess, self.controls, self.cfg.ps_timeout_s)

    def _check_rejected(self, rejected: int, now: float) -> None:
        if rejected > self._rejected:
            self._rejected = rejected
            rec = {"event": "rejected", "rejected": rejected, "t": round(now, 3),
                   "why": "the parameter server rejected non-finite updates (NaN or Inf); they were not applied"}
            self.report.fault(rec)
            self._record(rec)
