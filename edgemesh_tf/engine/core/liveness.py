"""Which groups are alive: groups declared lost, and lost groups whose new process is joining.

A group is lost when its process exited or it sent nothing (no round statistics, no heartbeat)
for `lost_after_s`, or 3 of its rounds if longer, on the chief's clock (so the hosts' clocks need
not agree). A restarted group process that finds its group lost reports `joining`; the chief then
re-admits it (decide.py: its commit and pull counts set to the live groups' highest, its batch
share of the data back, ASHL re-plans with it). The launcher's side, restarting a lost group's
process when its devices answer again, is rejoin.py. Pure: no TensorFlow, no processes.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping

from edgemesh_tf.engine.config import JobConfig


@dataclasses.dataclass(frozen=True)
class Verdict:
    """lost: [(group, why)] to declare lost now; joining: lost groups whose new process is joining."""
    lost: list
    joining: list


class Liveness:
    """Tracks the groups' heartbeats (see the module docstring)."""

    def __init__(self, cfg: JobConfig):
        self.cfg = cfg
        self._heard: dict[str, tuple[float, float]] = {}  # group -> (last heartbeat value, clock s it changed)
        self._lost_at: dict[str, float] = {}  # group -> clock s it was declared lost
        self._running_on: dict[str, list[str]] = {}  # group -> devices of its last restart (maybe re-planned)

    def observe(self, stats: Mapping[str, Mapping[str, float]], exited: Mapping[str, str], clock: float,
                controls: Mapping) -> Verdict:
        """stats: the groups' reports; exited: {group: what happened} of ended processes; clock: the
        chief's monotonic s; controls: {group: GroupControl} (which are lost already)."""
        lost, joining = [], []
        for g, s in stats.items():
            hb = s["heartbeat"]
            changed = g not in self._heard or self._heard[g][0] != hb
            if changed:
                self._heard[g] = (hb, clock)
            if controls[g].lost:
                if s["joining"] > 0 and changed and g not in exited:
                    joining.append(g)
                continue
            silent = clock - self._heard[g][1]
            limit = max(self.cfg.lost_after_s, 3 * s["round_s"])  # a slow group's long rounds are not silence
            if g in exited:
                lost.append((g, exited[g]))
            elif silent > limit:
                lost.append((g, "no report for %.1f s (limit %.1f s)" % (silent, limit)))
        return Verdict(lost, joining)

    def declare(self, group: str, clock: float) -> None:
        self._lost_at[group] = clock

    def readmitted(self, group: str, clock: float) -> float:
        """Forgets that `group` was lost; returns how long it was (s)."""
        return clock - self._lost_at.pop(group, clock)

    def lost_at(self) -> dict[str, float]:
        """{lost group: clock s it was declared lost}, for the launcher's rejoin."""
        return dict(self._lost_at)

    def restarted(self, group: str, devices: list[str]) -> None:
        """The launcher restarted `group` on `devices` (cluster names)."""
        self._running_on[group] = list(devices)

    def pending(self) -> bool:
        """Whether the launcher has a group to bring back: one lost, or one restarted on fewer devices
        than its layout's (it comes back whole when they answer again)."""
        return bool(self._lost_at) or any(devices != self._layout_devices(group)
                                          for group, devices in self._running_on.items())

    def _layout_devices(self, group: str) -> list[str]:
        """The cluster names of the devices of `group`'s own layout."""
        spec = next(g for g in self.cfg.groups if g.name == group)
        return self.cfg.names_of(spec.layout["devices"])

    def devices_of(self, group: str) -> list[str]:
        """The cluster names of the devices `group` runs on (its own layout's unless restarted on fewer)."""
        return self._running_on[group] if group in self._running_on else self._layout_devices(group)
