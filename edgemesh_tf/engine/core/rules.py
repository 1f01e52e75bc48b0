"""What each strategy does, as plain data: the chief's per-group controls and a group's round rule.

A group trains in rounds: pull the global model, run local iterations, push the update
(``W += scale * delta`` on the parameter server), then possibly wait. The chief decides each
group's `GroupControl` (written to the parameter server); each group turns the control and the
phase into a `RoundRule` at the start of every round. No TensorFlow here.

    strategy   local iterations/commit      waits                            push scale
    bsp        1                            barrier after every commit       batch share
    asp        1                            never                            batch share
    ssp        1                            while > s commits ahead          batch share
    local_sgd  H (local_steps)              barrier after every commit       batch share
    adsp       as many as fit in the timer  never (timer = period/commits)   batch share
    ashl       profiling: profile_steps,    SHL: while > s commits ahead     D_i = H_i / sum H
               AHL: H_i^AHL,
               SHL: H_i^SHL

A job of one group ("solo", whatever the strategy, unless solo_commit_s is 0) has nothing to coordinate: one phase ("train"),
rounds of solo_commit_s of training, a dense push of scale 1 and no wait. The ps then holds exactly
the group's model, so the group pulls only in its first round (and after a rejected push): after
each push its anchors move by the pushed values (``ReplicaGraph.publish``) instead of a pull.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

from edgemesh_tf.engine.config import SyncConfig
from edgemesh_tf.sync import schedule
from edgemesh_tf.sync.schedule import PHASES

WAITS = ("none", "barrier", "staleness")

# What each phase does, for the line the terminal prints at a phase switch (records.Phase); one
# entry per schedule.PHASES.
PHASE_DOES = {
    "profiling": "each group runs one timed round (--profile_steps local iterations, a dense push, a pull); "
                 "its timings set its local iterations per commit H, data share D and compression ratio R",
    "ahl": "asynchronous, infrequent commits: each group pushes after its own H local iterations and never "
           "waits for the others",
    "shl": "semi-asynchronous, frequent commits with bounded staleness: fewer local iterations per commit, "
           "top-k compressed pushes, and a group more than --staleness commits ahead of the slowest waits",
    "train": "one phase for the whole run: the strategy's own round rule (bsp, asp, ssp, local_sgd or adsp)",
}

# The control board's vectors (control.py encodes and decodes them by these names).
GLOBAL_FIELDS = ("phase", "stop", "heartbeat")
# Totals since the group process started (s, bytes), except: loss = mean loss of its last round;
# heartbeat = unix time of the report; profile_* = ASHL's profiling measurements (ms), profiled = 1
# once they are in; round_s = wall time of its last round; done = 1 once it made max_rounds rounds;
# joining = 1 while a restarted process waits for the chief to re-admit its group; incarnation =
# unix time its process started (the totals of a new incarnation start again from zero).
CUMULATIVE = ("steps", "examples", "commits", "compute_s", "pull_s", "push_s", "wait_s", "bytes_sent",
              "bytes_received")
STAT_FIELDS = CUMULATIVE + ("loss", "heartbeat", "profile_iter_ms", "profile_push_ms", "profile_pull_ms",
                            "profile_compress_ms", "profiled", "round_s", "done", "joining", "incarnation")


@dataclasses.dataclass(frozen=True)
class GroupControl:
    """The chief's instructions to one group.

    local_steps: iterations per commit (0: commit on the timer instead); ratio: top-k ratio of the
    push (1 = dense); scale: weight of the group's update on the server; timer_s: ADSP's commit
    interval (s); share: the group's fraction of the training set; lost: the chief stopped counting
    this group in barriers and staleness gates.
    """

    local_steps: int
    ratio: float
    scale: float
    timer_s: float = 0.0
    share: float = 0.0
    lost: bool = False

    FIELDS = ("local_steps", "ratio", "scale", "timer_s", "share", "lost")

    def to_vector(self) -> list[float]:
        return [float(getattr(self, f)) for f in self.FIELDS]

    @classmethod
    def from_vector(cls, v: Sequence[float]) -> "GroupControl":
        f = dict(zip(cls.FIELDS, (float(x) for x in v)))
        return cls(**{**f, "local_steps": int(round(f["local_steps"])), "lost": f["lost"] > 0.5})


@dataclasses.dataclass(frozen=True)
class RoundRule:
    """One round of a group. local_steps: iterations before the commit (0: until timer_s has passed
    since the round began); wait: "none", "barrier" (after the push, until every live group has
    pushed as often) or "staleness" (before the round, while more than `bound` commits ahead)."""

    local_steps: int
    timer_s: float
    wait: str
    bound: int
    ratio: float
    scale: float


def solo(sync: SyncConfig, groups: int) -> bool:
    """Whether a job of `groups` data-parallel groups runs as one group alone (see the module docstring;
    sync.solo_commit_s 0 turns it off)."""
    return groups == 1 and sync.solo_commit_s > 0


def first_phase(sync: SyncConfig, groups: int = 2) -> str:
    return "profiling" if sync.strategy == "ashl" and not solo(sync, groups) else "train"


def batch_shares(batch_sizes: Mapping[str, int]) -> dict[str, float]:
    total = sum(batch_sizes.values())
    return {g: b / total for g, b in batch_sizes.items()}


def initial_controls(sync: SyncConfig, batch_sizes: Mapping[str, int]) -> dict[str, GroupControl]:
    """Controls before any measurement: ASHL profiles with `profile_steps` iterations per dense commit;
    ADSP commits on a timer of period / adsp_commits until its first measured period."""
    shares = batch_shares(batch_sizes)
    if solo(sync, len(batch_sizes)):
        return {g: GroupControl(local_steps=0, ratio=1.0, scale=1.0, timer_s=sync.solo_commit_s, share=1.0)
                for g in batch_sizes}
    ratio = sync.ratio if sync.compression == "fixed" else 1.0
    steps = {"local_sgd": sync.local_steps, "adsp": 0, "ashl": sync.profile_steps}.get(sync.strategy, 1)
    timer = sync.adsp_period_s / sync.adsp_commits if sync.strategy == "adsp" else 0.0
    return {g: GroupControl(local_steps=steps, ratio=ratio, scale=shares[g], timer_s=timer, share=shares[g])
            for g in batch_sizes}


def _rounds(sync: SyncConfig, timings: Sequence[schedule.WorkerTiming], phase: str
            ) -> tuple[dict[str, int], dict[str, float]]:
    """(H, R) of one phase: ASHL's Algorithm 2 (`schedule.plan_rounds_published`) unless compression
    is "budget" (`schedule.plan_rounds`, the project's rule); pushes are compressed in SHL, and in
    AHL with compress_in_ahl."""
    preset = sync.ahl_h_preset if phase == "ahl" else sync.shl_h_preset
    compress = phase == "shl" or sync.compress_in_ahl
    if sync.compression == "budget":
        return schedule.plan_rounds(timings, preset, sync.min_ratio, sync.push_budget if compress else None)
    h, ratios = schedule.plan_rounds_published(timings, preset, sync.compress_ratio,
                                               compress=compress and uses_published_ratios(sync))
    if sync.compression == "fixed":
        ratios = {t.name: sync.ratio for t in timings}
    return h, ratios


def ashl_controls(sync: SyncConfig, timings: Sequence[schedule.WorkerTiming], phase: str,
                  previous: Mapping[str, GroupControl]) -> dict[str, GroupControl]:
    """ASHL's H_i, R_i and D_i for `phase` ("ahl" or "shl") from the groups' timings (ms). As
    published, D_i = H_i / sum H of SHL's plan in both phases (phase_shares: of this phase's plan)."""
    h, ratios = _rounds(sync, timings, phase)
    shares = schedule.data_shares(h if sync.phase_shares or phase == "shl" else _rounds(sync, timings, "shl")[0])
    return {t.name: dataclasses.replace(previous[t.name], local_steps=h[t.name], ratio=ratios[t.name],
                                        scale=shares[t.name], share=shares[t.name]) for t in timings}


def push_is_dense(sync: SyncConfig, ratio: float) -> bool:
    """Whether a push at top-k `ratio` goes dense: from ``sync.dense_from_ratio`` (<= 1) up."""
    return ratio >= sync.dense_from_ratio


def uses_published_ratios(sync: SyncConfig) -> bool:
    """Whether the rounds' top-k ratios come from ASHL's Algorithm 2 (compression "ashl"), which adds a
    selection's time to a compressed round: the profiling rounds then time one."""
    return sync.compression == "ashl"


def push_wire_fraction(sync: SyncConfig, ratio: float) -> float:
    """Bytes a push at top-k `ratio` sends, over the dense push's: 1 when it goes dense, else 2 * ratio
    (a top-k entry is a float32 value and an int32 index, a dense one the value alone)."""
    return 1.0 if push_is_dense(sync, ratio) else 2.0 * ratio


def learning_rate(sync: SyncConfig, base_lr: float, phase: str, commits_in_phase: int) -> float:
    """A group's learning rate for its next round: `base_lr`, or with lr_schedule "cosine" the ASHL
    authors' warm-up (lr_warmup commits; not in SHL, which restarts the decay) then cosine decay over
    lr_cosine_commits commits of the phase (`schedule.lr_warmup_cosine`). ASHL's profiling round
    trains at base_lr."""
    if sync.lr_schedule == "constant" or phase == "profiling":
        return base_lr
    warmup = 0 if phase == "shl" else sync.lr_warmup
    return schedule.lr_warmup_cosine(commits_in_phase, sync.lr_cosine_commits, base_lr, warmup)


def commit_interval(sync: SyncConfig) -> int:
    """Local iterations per commit the planner amortises a group's ps push and pull over: ASHL's
    AHL preset (the slowest group's H; faster ones commit less often), ADSP's too (it starts from
    AHL's commit rate), Local SGD's H, else 1 (a commit every iteration)."""
    return {"ashl": sync.ahl_h_preset, "adsp": sync.ahl_h_preset, "local_sgd": sync.local_steps}.get(sync.strategy, 1)


def round_rule(sync: SyncConfig, phase: str, control: GroupControl, groups: int = 2) -> RoundRule:
    """The rule a group of a job of `groups` groups follows for its next round."""
    if phase not in PHASES:
        raise ValueError("unknown phase %r; expected one of %s" % (phase, PHASES))
    wait, bound = "none", 0
    if solo(sync, groups):
        pass
    elif sync.strategy in ("bsp", "local_sgd"):
        wait = "barrier"
    elif sync.strategy == "ssp" or (sync.strategy == "ashl" and phase == "shl"):
        wait, bound = "staleness", sync.staleness
    return RoundRule(local_steps=control.local_steps, timer_s=control.timer_s, wait=wait, bound=bound,
                     ratio=control.ratio, scale=control.scale)


def drop_lost(controls: Mapping[str, GroupControl], lost: str) -> dict[str, GroupControl]:
    """Controls after group `lost` left: it is marked lost with no data and no weight, and the live
    groups' data shares and update scales are renormalised so that they cover the whole training set
    and the same total step as before."""
    if lost not in controls:
        raise KeyError("unknown group %r; groups: %s" % (lost, list(controls)))
    out = {g: (dataclasses.replace(c, lost=True, share=0.0, scale=0.0) if g == lost else c)
           for g, c in controls.items()}
    live = [g for g, c in out.items() if not c.lost]
    share_sum = sum(out[g].share for g in live)
    scale_sum = sum(out[g].scale for g in live)
    total_scale = sum(c.scale for g, c in controls.items() if not c.lost)
    for g in live:
        c = out[g]
        out[g] = dataclasses.replace(
            c, share=c.share / share_sum if share_sum > 0 else 1.0 / len(live),
            scale=c.scale * total_scale / scale_sum if scale_sum > 0 else total_scale / len(live))
    return out


def readmit(controls: Mapping[str, GroupControl], group: str, share: float) -> dict[str, GroupControl]:
    """Controls after lost group `group` came back (the inverse of `drop_lost`): it takes `share`
    (0 < share < 1, e.g. its batch share) of the data and of the total update scale, and the live
    groups' shares and scales shrink by (1 - share). Its local steps and ratio are what it had."""
    if group not in controls:
        raise KeyError("unknown group %r; groups: %s" % (group, list(controls)))
    if not controls[group].lost:
        raise ValueError("group %s is not lost; only a lost group can be re-admitted" % group)
    if not 0 < share < 1:
        raise ValueError("share of re-admitted group %s must be in (0, 1), got %r" % (group, share))
    live = {g: c for g, c in controls.items() if not c.lost}
    total_scale = sum(c.scale for c in live.values()) or 1.0
    out = dict(controls)
    for g, c in live.items():
        out[g] = dataclasses.replace(c, share=c.share * (1 - share), scale=c.scale * (1 - share))
    out[group] = dataclasses.replace(controls[group], lost=False, share=share, scale=share * total_scale)
    return out


def drift_step(prev: Mapping[str, Mapping[str, float]], totals: Mapping[str, Mapping[str, float]],
               planned_ms: Mapping[str, float], drifting: Mapping[str, tuple[int, dict]], fraction: float,
               evals: int) -> tuple[list[tuple[str, float, float, dict]], dict[str, tuple[int, dict]]]:
    """One evaluation of ASHL's drift check. prev / totals: each group's cumulative statistics at the
    last evaluation and now; planned_ms: its iteration time (ms) in the current plan; drifting:
    {group: (evaluations off the plan in a row, totals when that began)} from the last call.
    A group is off the plan when its iteration time over the interval differs from the plan's by
    more than `fraction` (either way); after `evals` intervals in a row it has drifted.
    Returns ([(group, planned ms, measured ms, totals when the drift began)], new drifting)."""
    out, now = [], dict(drifting)
    for g, t in totals.items():
        planned, steps = planned_ms.get(g), t["steps"] - prev[g]["steps"]
        if not planned or steps < 1:
            continue  # nothing new measured: the count stands
        ms = 1000 * (t["compute_s"] - prev[g]["compute_s"]) / steps
        if max(ms / planned, planned / ms) > 1 + fraction:
            n, since = now.get(g, (0, dict(prev)))
            now[g] = (n + 1, since)
            if n + 1 >= evals:
                out.append((g, planned, ms, since))
        else:
            now.pop(g, None)
    return out, now


def measured_timings(totals: Mapping[str, Mapping[str, float]], bases: Sequence[Mapping[str, Mapping[str, float]]],
                     dense_push_bytes: float, profile_push_ms: Mapping[str, float]
                     ) -> list[schedule.WorkerTiming] | None:
    """The groups' timings (ms) measured from their cumulative totals since the first of `bases`
    (earlier totals: e.g. at the last plan, then at the start of the phase) over which every group
    made a step and a commit; None if no base has that. A compressed push (fewer bytes per commit
    than `dense_push_bytes`) counts with its full-size time, the profiled `profile_push_ms[group]`."""
    for base in bases:
        out = []
        for g, t in totals.items():
            d = {k: t[k] - base.get(g, {}).get(k, 0.0) for k in ("steps", "commits", "compute_s", "pull_s",
                                                                  "push_s", "bytes_sent")}
            if d["steps"] < 1 or d["commits"] < 1:
                break
            pull_ms, push_ms = 1000 * d["pull_s"] / d["commits"], 1000 * d["push_s"] / d["commits"]
            if d["bytes_sent"] / d["commits"] < dense_push_bytes:
                push_ms = profile_push_ms[g]
            out.append(schedule.WorkerTiming(g, 1000 * d["compute_s"] / d["steps"], pull_ms + push_ms, push_ms,
                                             pull_ms))
        else:
            return out
    return None


def live_counts(commits: Mapping[str, int], controls: Mapping[str, GroupControl]) -> dict[str, int]:
    """Commit counts of the groups the chief has not declared lost (the ones gates wait for)."""
    return {g: c for g, c in commits.items() if not controls[g].lost}


def barrier_passed(own_commits: int, commits: Mapping[str, int], controls: Mapping[str, GroupControl]) -> bool:
    """BSP / Local SGD: every live group has committed at least as often as this one."""
    live = live_counts(commits, controls)
    return not live or min(live.values()) >= own_commits


def staleness_passed(own_commits: int, bound: int, commits: Mapping[str, int],
                     controls: Mapping[str, GroupControl], rule: str = "published") -> bool:
    """SSP / SHL: may this group start a round? published: its commit would land at most `bound`
    commits ahead of the slowest live group; project: it is at most `bound` ahead now
    (`schedule.StalenessGate`)."""
    live = live_counts(commits, controls)
    return not live or schedule.StalenessGate(bound, rule).may_commit(own_commits, live)


def shard_range(shares: Mapping[str, float], group: str, n: int) -> tuple[int, int]:
    """[begin, end) of `group`'s contiguous shard of n training examples (groups in the mapping's
    order, boundaries rounded; every group gets at least one example)."""
    names = list(shares)
    total = sum(shares.values())
    bounds = [0]
    acc = 0.0
    for g in names:
        acc += shares[g] / total
        bounds.append(int(round(acc * n)))
    i = names.index(group)
    begin, end = bounds[i], max(bounds[i + 1], bounds[i] + 1)
    return min(begin, n - 1), min(end, n)
