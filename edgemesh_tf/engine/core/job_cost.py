"""The cost of the job the engine runs, per phase and group, predicted from a plan and checked against
what a run measured. Pure: no TensorFlow.

A group trains in rounds (rules.py): H local iterations, a push to the parameter server, a pull, and
possibly a wait. The planner predicts each group's step (``GroupPrediction.step_ms``) and its push +
pull of the whole model (``ps_sync_ms``, half each way). The rounds are the strategy's, decided by the
same rules the chief applies, on the predicted timings instead of measured ones:

    phase      H (local iterations per commit)        push                      wait
    profiling  profile_steps                          dense                     none: AHL starts when
               every group has profiled, and a faster group runs profiling rounds back to back until
               then, the one in flight at the switch included (it ran under profiling's controls)
    ahl, shl   ASHL's Algorithm 2 (rules.ashl_controls on the predicted timings: the slowest group
               gets the preset H, faster ones more; SHL's pushes top-k at ratio R: 8 bytes per entry,
               so 2R of the dense bytes, or dense from --dense_from_ratio up)   shl: staleness
    train      the strategy's (rules.initial_controls; ADSP: as AHL)            bsp, local_sgd: barrier;
                                                                                 ssp: staleness

    round_g  = H_g * step_g + push_g + pull_g     (a split group's push and pull each include one of
                                          its masters <-> slices copies: ``copy_ms``, half each)
    wait_g   = max_h round_h - round_g    when the phase waits (a barrier, or a staleness bound: over a
                                          long phase no group commits faster than the slowest), else 0
    push_g, pull_g: at least the whole model's bytes through the parameter server's own link
               (``GroupPrediction.ps_link_ms``), which every group's commits cross: a group's push or
               pull shares it with each other group h for busy_h of its time, the share of h's time in
               its commits ((push_h + pull_h) / (round_h + wait_h), a fixed point of SHARING_PASSES
               passes), and under a barrier with every other group's pull (they start together)
    rate_g   = batch_g * H_g * 1000 / (round_g + wait_g)               examples/s

One group alone ("solo", rules.py) runs one phase of rounds of solo_commit_s of training and a dense
push, with no pull and no wait: H = solo_commit_s / step. With ``solo_overlap`` (the default) its push runs
beside the next round's iterations (engine/runtime/solo_commit.py): none of it is on the round's path, so
rate = batch * 1000 / step. The job's rate is the phases' rates weighted by the share of
the training time each is expected to take (``PHASE_WEIGHTS``; ASHL's profiling round is one round,
weight 0) and divided by the planner's staleness charge (``planner.staleness_charge``: G groups
commit on weights about G - 1 commits old). ``objective`` is that rate as the planner's objective.

``compare`` puts the prediction beside a run's measured figures per phase and group and names the term
of the round (step, commit or wait) that missed most when the examples/s differ by more than GAP.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Sequence

from edgemesh_tf.engine.core import rules
from edgemesh_tf.engine.config import SyncConfig
from edgemesh_tf.planner.cost import GroupPrediction
from edgemesh_tf.planner.grid import STALENESS_PENALTY, staleness_charge
from edgemesh_tf.sync import schedule

PHASE_WEIGHTS = {"ashl": {"profiling": 0.0, "ahl": 0.5, "shl": 0.5}}
"""Share of the training time each phase is expected to take, per strategy (others: "train" only).
ASHL switches to SHL at a training loss (--shl_loss), which no plan can foresee: half each."""
GAP = 0.20
"""A measured rate off the predicted one by more than this fraction is flagged (``compare``)."""
TERMS = ("step", "commit", "wait")
SHARING_PASSES = 4
"""Passes of the fixed point between the groups' commit times and how much of its time each group
commits (``phase_costs``: the parameter server's link is shared)."""


@dataclasses.dataclass(frozen=True)
class PhaseCost:
    """One group's rounds in one phase (ms, examples/s): H local iterations of step_ms, a push and a
    pull, a wait; examples_per_sec at batch examples per iteration."""

    step_ms: float
    local_steps: int
    push_ms: float
    pull_ms: float
    wait_ms: float
    examples_per_sec: float

    @property
    def commit_ms(self) -> float:
        return self.push_ms + self.pull_ms

    def as_dict(self) -> dict:
        return {"step_ms": round(self.step_ms, 1), "local_steps": self.local_steps,
                "commit_ms": round(self.commit_ms, 1), "wait_ms": round(self.wait_ms, 1),
                "examples_per_sec": round(self.examples_per_sec, 1)}


def phases_of(sync: SyncConfig, groups: int = 2) -> tuple[str, ...]:
    """The phases a job of `sync`'s strategy with `groups` groups runs, in order."""
    return ("profiling", "ahl", "shl") if rules.first_phase(sync, groups) == "profiling" else ("train",)


def phase_weights(sync: SyncConfig, groups: int = 2) -> dict[str, float]:
    if rules.solo(sync, groups):
        return {"train": 1.0}
    return dict(PHASE_WEIGHTS.get(sync.strategy, {"train": 1.0}))


def predicted_timings(preds: Mapping[str, GroupPrediction]) -> list[schedule.WorkerTiming]:
    """Each group's predicted timing as ASHL's rules take a measured one (the engine times its copies
    with the pull and the push they follow or precede): the step; the pull and the push of the whole
    model (half of ps_sync_ms each), each with one of the round's masters <-> slices copies (copy_ms)."""
    return [schedule.WorkerTiming(g, max(1e-3, p.step_ms), p.commit_ms, p.commit_ms / 2, p.commit_ms / 2)
            for g, p in preds.items()]


def _controls(sync: SyncConfig, timings, phase: str, batch: Mapping[str, int]) -> dict[str, rules.GroupControl]:
    initial = rules.initial_controls(sync, batch)
    if phase in ("ahl", "shl"):
        return rules.ashl_controls(sync, timings, phase, initial)
    if sync.strategy == "adsp":  # ADSP starts from AHL's commit rate (rules.commit_interval)
        return rules.ashl_controls(sync, timings, "ahl", initial)
    return initial


def phase_costs(sync: SyncConfig, preds: Mapping[str, GroupPrediction], batch: Mapping[str, int]
                ) -> dict[str, dict[str, PhaseCost]]:
    """{phase: {group: PhaseCost}} of the job (the module docstring). preds and batch: per group."""
    timings = predicted_timings(preds)
    if rules.solo(sync, len(timings)):
        t, = timings
        h = max(1, round(sync.solo_commit_s * 1000.0 / t.iter_ms))
        push = 0.0 if sync.solo_overlap else t.push_ms  # the commit's part on the round's path
        return {"train": {t.name: PhaseCost(t.iter_ms, h, push, 0.0, 0.0,
                                            batch[t.name] * h * 1000.0 / (h * t.iter_ms + push))}}
    out = {}
    for phase in phases_of(sync, len(timings)):
        controls = _controls(sync, timings, phase, batch)
        rule = rules.round_rule(sync, phase, controls[timings[0].name], len(timings))
        fraction = {t.name: rules.push_wire_fraction(sync, controls[t.name].ratio) for t in timings}
        busy = {t.name: 0.0 for t in timings}  # the share of its time each group commits
        for _ in range(SHARING_PASSES):
            rounds = {}
            pushing = {g: busy[g] * p.ps_link_ms * fraction[g] for g, p in preds.items()}
            pulling = {g: (1.0 if rule.wait == "barrier" else busy[g]) * p.ps_link_ms for g, p in preds.items()}
            all_pushing, all_pulling = sum(pushing.values()), sum(pulling.values())  # less g's own, below
            for t in timings:
                p = preds[t.name]
                push_link = (p.ps_link_ms * fraction[t.name] + all_pushing - pushing[t.name]) / 2
                pull_link = (p.ps_link_ms + all_pulling - pulling[t.name]) / 2
                push = max(p.ps_sync_ms / 2 * fraction[t.name], push_link) + p.copy_ms / 2  # the wire part
                pull = max(p.ps_sync_ms / 2, pull_link) + p.copy_ms / 2
                rounds[t.name] = (controls[t.name].local_steps, push, pull)
            longest = max(h * t.iter_ms + push + pull for t, (h, push, pull) in zip(timings, rounds.values()))
            costs = {}
            for t in timings:
                h, push, pull = rounds[t.name]
                own = h * t.iter_ms + push + pull
                wait = longest - own if rule.wait != "none" else 0.0
                costs[t.name] = PhaseCost(t.iter_ms, h, push, pull, wait, batch[t.name] * h * 1000.0 / (own + wait))
                busy[t.name] = (push + pull) / (own + wait)
        out[phase] = costs
    return out


def job_examples_per_sec(sync: SyncConfig, preds: Mapping[str, GroupPrediction], batch: Mapping[str, int],
                         staleness_penalty: float = STALENESS_PENALTY) -> float:
    """The job's effective examples/s: the phases' summed group rates, weighted by PHASE_WEIGHTS,
    over the staleness charge."""
    weights = phase_weights(sync, len(preds))
    costs = phase_costs(sync, preds, batch)
    total = sum(w * sum(c.examples_per_sec for c in costs[p].values()) for p, w in weights.items())
    return total / sum(weights.values()) / staleness_charge(len(preds), staleness_penalty)


def objective(sync: SyncConfig, staleness_penalty: float = STALENESS_PENALTY
              ) -> Callable[[Sequence[GroupPrediction], int], float]:
    """The planner's objective (``planner.plan(objective=...)``): a candidate's groups, each at
    `batch` examples per iteration, priced as the job that `sync` runs."""
    def rate(preds: Sequence[GroupPrediction], batch: int) -> float:
        named = {"g%d" % i: p for i, p in enumerate(preds)}
        return job_examples_per_sec(sync, named, {g: batch for g in named}, staleness_penalty)
    rate.describes = ("the job %s runs: each phase's rounds (%s; one group alone: rounds of %.0f s and a push%s)"
                      % (sync.strategy, ", ".join("%s %.0f%%" % (p, 100 * w) for p, w in phase_weights(sync).items()
                                                  if w), sync.solo_commit_s,
                         " beside the next round" if sync.solo_overlap else ""))
    return rate


def plan_job(profile, spec, batch: int | None, sync: SyncConfig, **options):
    """``planner.plan`` of `spec` on `profile` for the job `sync` runs: the grid chosen on ``objective``
    (the plan file records the strategy's commit interval, ``rules.commit_interval``). options:
    ``planner.plan``'s (groups, memory_fraction, engine, ...)."""
    from edgemesh_tf.planner import plan

    return plan(profile, spec, batch=batch, commit_interval=rules.commit_interval(sync),
                objective=objective(sync), **options)


def measured_phases(transitions: Sequence[Sequence], phase_totals: Mapping[str, Mapping[str, Mapping[str, float]]],
                    end_totals: Mapping[str, Mapping[str, float]], end_s: float) -> dict[str, dict[str, dict]]:
    """{phase: {group: measured}} from a run's phase transitions ([phase, global step, t s]), each group's
    cumulative totals (rules.CUMULATIVE fields) when its rounds of each phase began (``phase_totals``; "t":
    when, s; the run's first phase begins at zero for every group) and at the end. A group's phase runs
    from its own start to its start of the next phase (else the end): a round counts in the phase whose
    controls it ran under (``decide.Decisions._mark_phase_starts``). Totals without "t" (a phase's
    start shared by all groups) take the transition's time. measured: step_ms, local_steps (iterations
    per commit), commit_ms, wait_ms (per commit), examples_per_sec and seconds. A group with no commit
    of its own in a phase has nothing measured there and no entry."""
    out = {}
    for i, (phase, _, t0) in enumerate(transitions):
        following = transitions[i + 1] if i + 1 < len(transitions) else None
        starts = phase_totals.get(phase)
        if starts is None:
            continue
        groups = {}
        for g, last in end_totals.items():
            start = starts.get(g, {} if i == 0 else None)
            if start is None:
                continue
            stop = (phase_totals.get(following[0]) or {}).get(g) if following else None
            end, t1 = (stop, stop.get("t", following[2])) if stop else (last, end_s)
            t_start = start.get("t", t0)
            d = {k: end.get(k, 0.0) - start.get(k, 0.0)
                 for k in ("steps", "commits", "examples", "compute_s", "pull_s", "push_s", "wait_s")}
            if d["commits"] < 1 or d["steps"] < 1 or t1 <= t_start:
                continue
            per_commit = lambda x: 1000.0 * x / d["commits"]  # noqa: E731
            groups[g] = {"step_ms": 1000.0 * d["compute_s"] / d["steps"], "local_steps": d["steps"] / d["commits"],
                         "commit_ms": per_commit(d["pull_s"] + d["push_s"]), "wait_ms": per_commit(d["wait_s"]),
                         "examples_per_sec": d["examples"] / (t1 - t_start), "seconds": t1 - t_start}
        out[phase] = groups
    return out


def compare(predicted: Mapping[str, Mapping[str, PhaseCost]], measured: Mapping[str, Mapping[str, dict]],
            gap: float = GAP) -> list[dict]:
    """One row per phase and group that both have: predicted and measured figures, the ratio of the
    measured examples/s to the predicted, and `missed`: None, or when the ratio is off 1 by more than
    `gap`, the term of the round (step, commit, wait) that moved the time per iteration most in the
    direction of the gap, with what it moved it by (ms per iteration). Per iteration a round costs
    step + (commit + wait) / H, so the three terms add up to the whole difference, whatever H each
    side ran (the chief plans H on measured timings, so a measured H differs when the other terms do)."""
    rows = []
    for phase, groups in measured.items():
        for g, m in groups.items():
            p = predicted.get(phase, {}).get(g)
            if p is None or not p.examples_per_sec:
                continue
            ratio = round(m["examples_per_sec"] / p.examples_per_sec, 3)
            missed = None
            if abs(ratio - 1.0) > gap:
                h, ph = max(m["local_steps"], 1e-9), max(p.local_steps, 1)
                diffs = {"step": m["step_ms"] - p.step_ms, "commit": m["commit_ms"] / h - p.commit_ms / ph,
                         "wait": m["wait_ms"] / h - p.wait_ms / ph}
                slower = 1.0 if ratio < 1.0 else -1.0  # the term that pushed the time the way the gap goes
                term = max(TERMS, key=lambda k: slower * diffs[k])
                missed = {"term": term, "ms_per_iteration": round(diffs[term], 1)}
            rows.append({"phase": phase, "group": g, "predicted": p.as_dict(),
                         "measured": {k: round(v, 1) for k, v in m.items()}, "ratio": ratio, "missed": missed})
    return rows


def format_rows(rows: Sequence[dict]) -> list[str]:
    """The console's lines of `compare`'s rows: per phase and group, predicted -> measured."""
    lines = []
    for r in rows:
        p, m = r["predicted"], r["measured"]
        fmt = lambda v, unit="": "-" if v is None else "%.0f%s" % (v, unit)
        line = ("  %-9s %-18s examples/s %s -> %s (x%.2f)  H %s -> %s of step %s -> %s ms, commit %s -> %s ms, "
                "wait %s -> %s ms" % (
                    r["phase"], r["group"], fmt(p["examples_per_sec"]), fmt(m["examples_per_sec"]), r["ratio"],
                    fmt(p["local_steps"]), fmt(m["local_steps"]), fmt(p["step_ms"]), fmt(m["step_ms"]),
                    fmt(p["commit_ms"]), fmt(m["commit_ms"]), fmt(p["wait_ms"]), fmt(m["wait_ms"])))
        if r["missed"]:
            line += "  GAP > %d%%: the %s term missed by %+.1f ms per iteration" % (
                round(GAP * 100), r["missed"]["term"], r["missed"]["ms_per_iteration"])
        lines.append(line)
    return lines


def markdown_table(rows: Sequence[dict]) -> str:
    """`compare`'s rows as one markdown table (TensorBoard's text tab)."""
    out = ["| phase | group | examples/s predicted | measured | ratio | H | step ms | commit ms | wait ms | missed |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda v: "-" if v is None else "%.0f" % v
    for r in rows:
        p, m = r["predicted"], r["measured"]
        missed = "" if not r["missed"] else "**%s**" % r["missed"]["term"]
        out.append("| %s | %s | %s | %s | %.2f | %s → %s | %s → %s | %s → %s | %s → %s | %s |" % (
            r["phase"], r["group"], fmt(p["examples_per_sec"]), fmt(m["examples_per_sec"]), r["ratio"],
            fmt(p["local_steps"]), fmt(m["local_steps"]), fmt(p["step_ms"]), fmt(m["step_ms"]),
            fmt(p["commit_ms"]), fmt(m["commit_ms"]), fmt(p["wait_ms"]), fmt(m["wait_ms"]), missed))
    return "\n".join(out)
