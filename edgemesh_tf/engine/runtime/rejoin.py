"""Bringing lost groups back: the launcher's side of re-admission and of re-planning a group.

Every tick the chief passes the lost groups; for each (at most once per `PROBE_S`) the `Rejoiner`
asks its devices' servers whether they answer (a gRPC handshake, `cluster.probe.answers`):
  - all of them: the group's client is started again on its own layout;
  - some of them: the group is re-planned over those (`replan_layout`: the planner's filter
    division from the job's profile) and started on them;
  - none: nothing yet.
A group running on fewer devices than its own is restarted on all of them once the missing ones
answer again (its reduced client is stopped; the chief sees it leave, and it comes back whole).
The restarted client finds its group lost and waits; the chief re-admits it (see liveness.py).
Each group is restarted at most `rejoin_limit` times, so a group that cannot run does not loop.
"""
from __future__ import annotations

import time
from typing import Mapping

from edgemesh_tf.cluster import probe
from edgemesh_tf.engine.core import records
from edgemesh_tf.engine.config import GroupSpec, JobConfig
from edgemesh_tf.mesh.layout import single_device_layout

PROBE_S = 1.0
ANSWER_TIMEOUT_S = 0.5


def replan_layout(cfg: JobConfig, group: GroupSpec, names: list[str]) -> tuple[dict, str]:
    """(Layout dict, how it was made) of `group` on its devices `names` (cluster names, in the
    group's ring order): the planner's filter division from the job's profile (`cfg.profile_path`,
    calibrated as `planner.plan` calibrates it); without one, the fastest of them (the cluster
    file's speed) holds the whole model. Raises ValueError (the planner's PlanError) if no division
    fits the devices' memory."""
    by_name = {n: d for d, n in cfg.device_names.items()}
    if not cfg.profile_path:
        speed = lambda n: cfg.device_info.get(n, {}).get("speed", 1.0)
        best = max(names, key=lambda n: (speed(n), -names.index(n)))
        how = "whole model on %s" % best + ("" if len(names) == 1 else " (the fastest left; no profile to divide by)")
        return single_device_layout(by_name.get(best, best)).to_dict(), how
    from edgemesh_tf.data import load_dataset
    from edgemesh_tf.models import load_model
    from edgemesh_tf.planner.division import divide
    from edgemesh_tf.planner.model_stats import model_stats
    from edgemesh_tf.profiling.types import load_profile

    from edgemesh_tf.planner import cost
    from edgemesh_tf.planner.calibrate import calibrated
    from edgemesh_tf.planner.grid import within_margin

    data = load_dataset(cfg.dataset, cfg.data_path)
    spec = load_model(cfg.model, data.image_shape, data.num_classes)
    # as every plan: calibrated by the steps timed while profiling, the memory model's headroom kept
    profile = within_margin(calibrated(load_profile(cfg.profile_path), spec), cost.MEMORY.headroom_for(spec.name))
    # subsets: the planner may leave a device out when the group is faster without it
    division = divide([profile.device(n) for n in names], model_stats(spec, group.batch_size),
                      profile_batch=profile.batch, ps_bandwidth_mbit=profile.ps_bandwidth_mbit, subsets=True)
    layout = division.layout().validate(spec.dims(group.batch_size))
    return layout.to_dict(), "filters divided over %s by the planner (predicted %.1f ms/step) from %s" % (
        ", ".join(division.names), division.prediction.step_ms, cfg.profile_path)


class Rejoiner:
    """See the module docstring. groups: the job's `GroupProcesses`; launch: {device name: (netns,
    local grpc target, step delay factor)}; addresses: {device name: host:port reachable from here}."""

    def __init__(self, cfg: JobConfig, groups, launch: Mapping[str, tuple], addresses: Mapping[str, str]):
        self.cfg, self.groups, self.launch, self.addresses = cfg, groups, launch, addresses
        self.specs = {g.name: g for g in cfg.groups}
        self.missing: dict[str, list[str]] = {}  # group -> its devices left out of the layout it runs on
        self._next_probe = {g: 0.0 for g in self.specs}
        self._said: set[tuple[str, str]] = set()  # (group, message) already reported

    def _names(self, group: str) -> list[str]:
        return self.cfg.names_of(self.specs[group].layout["devices"])

    def _answering(self, names) -> list[str]:
        return [n for n in names if n in self.addresses and probe.answers(self.addresses[n], ANSWER_TIMEOUT_S)]

    def _once(self, group: str, rec: records.GroupEvent) -> list[records.GroupEvent]:
        key = (group, rec.why)
        if key in self._said:
            return []
        self._said.add(key)
        return [rec]

    def tick(self, lost: Mapping[str, float], t: float) -> list[records.GroupEvent]:
        """lost: {group: monotonic time it was declared lost}; t: s of training now. Returns records
        of what was done."""
        if self.cfg.rejoin_limit <= 0:
            return []
        now, out = time.monotonic(), []
        for g in self.specs:
            if now < self._next_probe[g]:
                continue
            self._next_probe[g] = now + PROBE_S
            if g in lost:
                out += self._rejoin(g, lost[g], t)
            elif self.missing.get(g) and self.groups.running(g) and self._answering(self.missing[g]) == self.missing[g]:
                self.groups.stop_one(g)  # the chief sees it leave; it comes back on all of its devices
                out.append(records.Restarting(t=t, group=g, devices=self._names(g), why=(
                    "device(s) %s answer again: restarting group %s on all of its devices"
                    % (", ".join(self.missing.pop(g)), g))))
        return out

    def _rejoin(self, g: str, lost_at: float, t: float) -> list[records.GroupEvent]:
        if self.groups.running(g) and self.groups.started[g] > lost_at:
            return []  # restarted since the loss: it is joining
        names = self._names(g)
        if self.groups.restarts[g] >= self.cfg.rejoin_limit:
            return self._once(g, records.RejoinStopped(t=t, group=g, devices=names, why=(
                "group %s was restarted %d times (rejoin_limit); it stays lost" % (g, self.groups.restarts[g]))))
        answering = self._answering(names)
        if not answering:
            return []
        layout, how = None, "its own layout"
        if answering != names:
            try:
                layout, how = replan_layout(self.cfg, self.specs[g], answering)
            except ValueError as e:
                return self._once(g, records.RejoinFailed(t=t, group=g, devices=answering, why=(
                    "group %s cannot be re-planned over %s: %s" % (g, answering, e))))
        used = self.cfg.names_of((layout or self.specs[g].layout)["devices"])
        pid = self.groups.start(g, self.launch[used[0]], layout)
        self.missing[g] = [n for n in names if n not in answering]  # not the ones the planner left idle
        return [records.Restarted(t=t, group=g, devices=used, pid=pid, layout=how,
                                  why="device(s) %s answer: group %s restarted (%s)" % (", ".join(answering), g, how))]
