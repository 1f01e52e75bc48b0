"""The chief's decisions (engine/core/decide.py) driven with plain numbers: no TensorFlow, no processes."""
import ast
import dataclasses
import os

import pytest

from edgemesh_tf.engine.core import decide, records
from edgemesh_tf.engine.config import GroupSpec, JobConfig, SyncConfig
from edgemesh_tf.engine.core.rules import STAT_FIELDS
from edgemesh_tf.mesh.layout import single_device_layout

GROUPS = ("a", "b")


def _cfg(**kw):
    groups = tuple(GroupSpec(g, single_device_layout("/job:worker/task:%d" % i).to_dict(), 32)
                   for i, g in enumerate(GROUPS))
    return JobConfig(groups=groups, **kw)


def _machine(**kw):
    cfg = _cfg(**kw)
    return decide.Decisions(cfg, dense_push_bytes=4000.0)


def _stats(**per_group):
    """{group: a report with zeros except the given fields}; heartbeat 1 by default."""
    out = {}
    for g in GROUPS:
        s = {f: 0.0 for f in STAT_FIELDS}
        s.update(heartbeat=1.0, incarnation=1.0)
        s.update(per_group.get(g, {}))
        out[g] = s
    return out


def _counters(**kw):
    c = {"rejected": 0, "version": 0, **{"commits/" + g: 0 for g in GROUPS}, **{"pulls/" + g: 0 for g in GROUPS}}
    c.update(kw)
    return c


def _snap(now, stats=None, counters=None, clock=None, **kw):
    return decide.Snapshot(now=now, clock=now if clock is None else clock, stats=stats or _stats(),
                           counters=counters or _counters(), **kw)


def _kinds(actions):
    return [type(a).__name__ for a in actions]


def _runtime_nodes(tree):
    """The nodes of ``tree`` that run on import: all but the bodies of ``if TYPE_CHECKING:`` (the
    package root names its lazily imported API there, for type checkers only)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.If) and (getattr(node.test, "id", None) == "TYPE_CHECKING"
                                         or getattr(node.test, "attr", None) == "TYPE_CHECKING"):
            todo.extend([node.test] + node.orelse)
        else:
            todo.extend(ast.iter_child_nodes(node))


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORE = sorted("edgemesh_tf.engine.core." + f[:-3]
              for f in os.listdir(os.path.join(ROOT, "edgemesh_tf", "engine", "core")) if f.endswith(".py"))


def test_decide_imports_no_tensorflow():
    """Every file of the engine's core (edgemesh_tf/engine/core/) and everything of the package they
    import are pure Python, and none of it reaches the engine's runtime."""
    root = ROOT
    assert {"edgemesh_tf.engine.core.decide", "edgemesh_tf.engine.core.job_cost"} <= set(CORE), CORE
    todo, seen, bad = list(CORE), set(), []
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        path = os.path.join(root, *mod.split(".")) + ".py"
        if not os.path.exists(path):
            path = os.path.join(root, *mod.split("."), "__init__.py")
        for node in _runtime_nodes(ast.parse(open(path).read())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] + ["%s.%s" % (node.module, a.name) for a in node.names]
                     if isinstance(node, ast.ImportFrom) and node.module else [])
            for n in names:
                if (n.split(".")[0] in ("tensorflow", "mesh_tensorflow") or n == "edgemesh_tf.mesh.compat"
                        or n.startswith("edgemesh_tf.engine.runtime")):
                    bad.append((mod, n))
                elif n.startswith("edgemesh_tf") and (os.path.exists(os.path.join(root, *n.split(".")) + ".py")
                                                      or os.path.isdir(os.path.join(root, *n.split(".")))):
                    todo.append(n)
    assert "edgemesh_tf.engine.core.rules" in seen and "edgemesh_tf.sync.schedule" in seen
    assert not bad, "TensorFlow or the engine's runtime imported by the decision modules: %s" % bad


def test_bsp_evaluations_rates_and_target_stop():
    m = _machine(sync=SyncConfig(strategy="bsp"), target_accuracy=0.9)
    m.step(decide.Snapshot(0.0, 0.0, stage="start"))
    assert m.phase == "train"
    assert _kinds(m.step(_snap(0.1))) == []
    stats = _stats(a={"examples": 320, "steps": 10}, b={"examples": 160, "steps": 5})
    acts = m.step(_snap(2.0, stats, evals=[(1.5, 0.5, 1.0)]))
    (ev,) = [a for a in acts if isinstance(a, decide.Evaluated)]
    # the evaluation at 1.5 s carries the counters of the last tick before it (0.1 s: nothing done yet)
    assert ev.record.global_steps == 0 and ev.record.examples_per_sec == 0.0
    acts = m.step(_snap(3.0, stats, evals=[(2.5, 0.95, 0.3)]))
    ev = [a for a in acts if isinstance(a, decide.Evaluated)][0].record
    assert ev.global_steps == 15 and ev.group_examples_per_sec == {"a": 320.0, "b": 160.0}
    assert ev.accuracy == 0.95 and isinstance(acts[-1], decide.Stop) and "target accuracy" in acts[-1].why
    assert m.reached == 2.5


def test_target_needs_evaluations_in_a_row_and_a_dip_starts_the_count_again():
    m = _machine(sync=SyncConfig(strategy="bsp"), target_accuracy=0.9, target_evaluations=3)
    m.step(decide.Snapshot(0.0, 0.0, stage="start"))
    stats = _stats(a={"examples": 32, "steps": 1})
    evals = [(1.0, 0.91, 1.0), (2.0, 0.93, 1.0), (3.0, 0.88, 1.0), (4.0, 0.92, 1.0), (5.0, 0.95, 1.0)]
    for t, acc, loss in evals:  # at target, at target, a dip, then two at target: not yet three in a row
        assert not any(isinstance(a, decide.Stop) for a in m.step(_snap(t + 0.1, stats, evals=[(t, acc, loss)])))
    assert m.reached is None
    acts = m.step(_snap(6.1, stats, evals=[(6.0, 0.9, 1.0)]))
    assert isinstance(acts[-1], decide.Stop) and m.reached == 4.0  # the first of the three


def test_time_budget_checkpoint_and_stop_request():
    m = _machine(sync=SyncConfig(strategy="asp"), time_budget_s=5.0, checkpoint_interval_s=2.0)
    m.step(decide.Snapshot(0.0, 0.0, stage="start"))
    assert _kinds(m.step(_snap(1.0))) == []
    assert _kinds(m.step(_snap(2.1))) == ["SaveCheckpoint"]
    assert _kinds(m.step(_snap(3.0))) == []
    assert m.step(_snap(3.5, stop_request="SIGTERM"))[-1] == decide.Stop("SIGTERM")
    acts = m.step(_snap(5.0))
    assert _kinds(acts) == ["Stop"] and "time budget" in acts[0].why  # no checkpoint at the stop: the chief saves one


def test_ashl_profiling_ahl_then_shl():
    m = _machine(sync=SyncConfig(strategy="ashl", shl_loss=0.5))
    m.step(decide.Snapshot(0.0, 0.0, stage="start"))
    assert m.phase == "profiling" and all(c.local_steps == 8 for c in m.controls.values())
    half = _stats(a={"profiled": 1, "profile_iter_ms": 10, "profile_pull_ms": 5, "profile_push_ms": 5})
    assert _kinds(m.step(_snap(0.5, half))) == []  # b has not profiled yet
    both = _stats(a={"profiled": 1, "profile_iter_ms": 10, "profile_pull_ms": 5, "profile_push_ms": 5},
                  b={"profiled": 1, "profile_iter_ms": 40, "profile_pull_ms": 5, "profile_push_ms": 5})
    acts = m.step(_snap(1.0, both, evals=[(0.2, 0.1, 2.0)]))
    assert _kinds(acts) == ["WriteControls", "WriteGlobal", "Phase", "Evaluated"] and m.phase == "ahl"
    assert (acts[2].old, acts[2].new) == ("profiling", "ahl")
    assert acts[3].record.phase == "profiling"  # it started before AHL began, though handled after
    h = {g: c.local_steps for g, c in m.controls.items()}
    assert h["b"] == 8 and h["a"] > h["b"]  # the faster group runs more local iterations per commit
    assert m.controls["a"].share > m.controls["b"].share
    acts = m.step(_snap(2.0, both, evals=[(1.5, 0.5, 0.4)]))
    assert _kinds(acts) == ["Evaluated", "ResetCounters", "WriteControls", "WriteGlobal", "Phase"]
    assert acts[-1].new == "shl" and m.phase == "shl" and "training loss 0.4000 <= 0.5000" in acts[-1].why
    assert [p for p, _, _ in m.phases.transitions] == ["profiling", "ahl", "shl"]


def test_the_published_shl_plan_counts_each_group_s_profiled_top_k_selection():
    """ASHL's Algorithm 2 adds a worker's compression time to its compressed round (the authors'
    time_gc): the groups report it from their profiling rounds, and SHL's H and R are planned with it."""
    from edgemesh_tf.engine.core import rules
    from edgemesh_tf.sync.schedule import WorkerTiming

    def shl_controls(compress_ms):
        m = _machine(sync=SyncConfig(strategy="ashl", shl_loss=0.5))
        m.step(decide.Snapshot(0.0, 0.0, stage="start"))
        prof = {g: {"profiled": 1, "profile_iter_ms": ms, "profile_pull_ms": 5, "profile_push_ms": 20,
                    "profile_compress_ms": compress_ms[g]} for g, ms in (("a", 10), ("b", 40))}
        m.step(_snap(1.0, _stats(**prof), evals=[(0.2, 0.1, 2.0)]))
        m.step(_snap(2.0, _stats(**prof), evals=[(1.5, 0.5, 0.4)]))
        assert m.phase == "shl"
        return {g: (c.local_steps, c.ratio) for g, c in m.controls.items()}

    sync = SyncConfig(strategy="ashl")
    timings = [WorkerTiming("a", 10, 25, 20, 5, 0.0), WorkerTiming("b", 40, 25, 20, 5, 30.0)]
    want = rules.ashl_controls(sync, timings, "shl", rules.initial_controls(sync, {"a": 32, "b": 32}))
    got = shl_controls({"a": 0.0, "b": 30.0})
    assert got == {g: (c.local_steps, c.ratio) for g, c in want.items()}
    assert got != shl_controls({"a": 0.0, "b": 0.0})  # the selection's time moved the plan


def test_a_job_of_one_group_runs_one_phase_on_solo_rounds_whatever_the_strategy():
    from edgemesh_tf.engine.core import rules

    for strategy in ("ashl", "adsp", "bsp"):
        cfg = JobConfig(groups=(GroupSpec("a", single_device_layout("/job:worker/task:0").to_dict(), 32),),
                        sync=SyncConfig(strategy=strategy, solo_commit_s=3.0))
        m = decide.Decisions(cfg, dense_push_bytes=4000.0)
        assert m.phase == "train" and m.driver is None, strategy
        c = m.controls["a"]
        assert (c.local_steps, c.timer_s, c.ratio, c.scale, c.share) == (0, 3.0, 1.0, 1.0, 1.0)
        rule = rules.round_rule(cfg.sync, "train", c, groups=1)
        assert rule.wait == "none" and rule.timer_s == 3.0
    assert rules.round_rule(SyncConfig(strategy="bsp"), "train", c, groups=2).wait == "barrier"


def test_each_group_s_phase_begins_with_its_first_round_under_the_phase_s_controls():
    """What job_cost.measured_phases needs, kept through a checkpoint and in the final record: each group's
    totals when its first round of a phase began. The round in flight at a change of phase read the old
    controls, so the group's next phase begins at its first commit after the change."""
    m = _machine(sync=SyncConfig(strategy="ashl", shl_loss=0.5))
    m.step(decide.Snapshot(0.0, 0.0, stage="start"))
    profiled = {"profiled": 1, "profile_iter_ms": 10, "profile_pull_ms": 5, "profile_push_ms": 5}
    at_ahl = _stats(a={**profiled, "steps": 8, "commits": 1}, b={**profiled, "steps": 8, "commits": 1})
    m.step(_snap(1.0, at_ahl))
    assert m.phase == "ahl" and m.phase_totals == {"profiling": {}, "ahl": {}}  # a new run starts from zero
    m.step(_snap(1.5, _stats(a={**profiled, "steps": 16, "commits": 2}, b={**profiled, "steps": 8, "commits": 1})))
    assert m.phase_totals["ahl"] == {"a": {**m._ticks[-1][1]["a"], "t": 1.5}}  # b's round is still in flight
    at_shl = _stats(a={**profiled, "steps": 40, "commits": 3}, b={**profiled, "steps": 16, "commits": 2})
    m.step(_snap(2.0, at_shl, evals=[(1.5, 0.5, 0.4)]))  # b's first AHL round began as this tick switched
    assert m.phase == "shl" and m.phase_totals["shl"] == {}
    assert m.phase_totals["ahl"]["b"]["steps"] == 16 and m.phase_totals["ahl"]["b"]["t"] == 2.0
    m.step(_snap(3.0, _stats(a={**profiled, "steps": 50, "commits": 4}, b={**profiled, "steps": 20, "commits": 2})))
    assert m.phase_totals["shl"] == {"a": {**m._ticks[-1][1]["a"], "t": 3.0}}
    m.step(_snap(3.5, _stats(a={**profiled, "steps": 60, "commits": 5}, b={**profiled, "steps": 20, "commits": 2})))
    assert m.phase_totals["shl"]["a"]["steps"] == 50  # kept from its start, not overwritten
    fresh = _machine(sync=SyncConfig(strategy="ashl", shl_loss=0.5))
    fresh.restore(m.state(m._ticks[-1][1], 3.5), "ckpt", clock=0.0)
    assert fresh.phase_totals == m.phase_totals
    later = _stats(a={**profiled, "steps": 60, "commits": 5}, b={**profiled, "steps": 24, "commits": 3})
    resumed = _stats(a={**profiled, "steps": 0, "commits": 0}, b={**profiled, "steps": 4, "commits": 1})
    for machine, stats in ((m, later), (fresh, resumed)):  # the phase's entry survives the checkpoint (a resumed
        machine.step(decide.Snapshot(0.0, 0.0, stage="start"))  # group's process counts from zero)
        machine.step(_snap(4.0, stats))
        assert machine.phase_totals["shl"]["b"]["steps"] == 24
    acts = m.step(decide.Snapshot(5.0, 5.0, later, _counters(), evals=[(5.0, 0.6, 0.3)], stage="final"))
    assert acts[-1].record.phase_totals == m.phase_totals


def test_silent_group_lost_then_readmitted():
    m = _machine(sync=SyncConfig(strategy="bsp"), lost_after_s=2.0)
    m.step(decide.Snapshot(0.0, 0.0, stage="start"))
    m.step(_snap(0.1, _stats(a={"heartbeat": 1.0}, b={"heartbeat": 1.0})))
    acts = m.step(_snap(1.0, _stats(a={"heartbeat": 2.0}, b={"heartbeat": 1.0})))
    assert _kinds(acts) == []
    acts = m.step(_snap(2.5, _stats(a={"heartbeat": 3.0}, b={"heartbeat": 1.0})))
    assert _kinds(acts) == ["ProbePs", "WriteControls", "Lost", "Rejoin"]
    lost = acts[2]
    assert lost.group == "b" and lost.live == ["a"] and "no report for 2.4 s" in lost.why
    assert m.controls["b"].lost and m.controls["a"].share == 1.0
    assert acts[-1] == decide.Rejoin({"b": 2.5}, 2.5)  # the launcher may bring it back, every tick while lost
    assert _kinds(m.step(_snap(3.0, _stats(a={"heartbeat": 3.5}, b={"heartbeat": 1.0})))) == ["Rejoin"]
    # a new process of b reports that it is joining: it gets the live groups' commit count
    acts = m.step(_snap(4.0, _stats(a={"heartbeat": 4.0}, b={"heartbeat": 9.0, "joining": 1, "incarnation": 2.0}),
                        _counters(**{"commits/a": 7, "commits/b": 2})))
    assert _kinds(acts) == ["SetCounters", "Readmitted", "WriteControls"]
    assert acts[0] == decide.SetCounters("b", 7) and "after 1.5 s lost" in acts[1].why
    assert not m.controls["b"].lost and m.liveness.lost_at() == {}


def test_a_group_restarted_off_its_layout_asks_the_launcher_until_it_runs_on_its_layout_again():
    """The launcher's restarts arrive as the next snapshot's `restarted`: on other (fewer) devices than
    its layout's, the group is named on them and the launcher is asked every tick (its devices may
    answer again); restarted on its layout's, nothing more is asked."""
    m = _machine(sync=SyncConfig(strategy="asp"), device_names={"/job:worker/task:0": "edge0",
                                                                 "/job:worker/task:1": "edge1"})
    m.step(decide.Snapshot(0.0, 0.0, stage="start"))
    assert _kinds(m.step(_snap(0.5))) == []
    acts = m.step(_snap(1.0, restarted={"a": ["edge1"]}))
    assert acts == [decide.Rejoin({}, 1.0)] and m.liveness.devices_of("a") == ["edge1"]
    assert m.step(_snap(1.1)) == [decide.Rejoin({}, 1.1)]
    assert m.step(_snap(1.2, restarted={"a": ["edge0"]})) == [] and m.liveness.devices_of("a") == ["edge0"]
    no_rejoin = _machine(sync=SyncConfig(strategy="asp"), rejoin_limit=0)
    acts = no_rejoin.step(_snap(0.5, exited={"a": "exit code 1"}))
    assert _kinds(acts) == ["ProbePs", "WriteControls", "Lost"]  # rejoin_limit 0: the launcher never restarts


def test_setup_start_and_final_stages():
    """Before the groups start: the controls and the phase (heartbeat 0); at the start: the phase; after
    the stop: the stop's evaluation, the checkpoint at the stop and the final record."""
    m = _machine(sync=SyncConfig(strategy="ashl"), target_accuracy=0.9)
    acts = m.step(decide.Snapshot(0.0, 0.0, stage="setup"))
    assert acts == [decide.WriteControls(m.controls), decide.WriteGlobal("profiling", heartbeat=0.0)]
    assert m.step(decide.Snapshot(0.0, 0.0, stage="start")) == [decide.WriteGlobal("profiling")]
    stats = _stats(a={"examples": 64, "steps": 2, "bytes_sent": 10}, b={"examples": 32, "steps": 1})
    acts = m.step(decide.Snapshot(4.0, 9.0, stats, _counters(), evals=[(4.0, 0.5, 1.2)], stop_request="SIGINT",
                                  stage="final"))
    assert _kinds(acts) == ["Evaluated", "SaveCheckpoint", "Finish"]
    assert acts[0].record.accuracy == 0.5 and acts[0].record.global_steps == 3
    assert acts[1] == decide.SaveCheckpoint(acts[0].totals, "profiling", at_s=4.0)
    final = acts[2].record
    assert final.why == "SIGINT" and final.accuracy == 0.5 and final.global_steps == 3 and final.bytes_sent == 10
    assert m.state(acts[1].totals, 4.0)["history"] == [(4.0, 0.5, 1.2)]  # the checkpoint holds the stop's evaluation
    with pytest.raises(ValueError, match="stage 'later'"):
        m.step(decide.Snapshot(5.0, 10.0, stage="later"))


def test_a_long_first_round_is_not_silence():
    """Before its first round a group reports its warm-up (a pull, an iteration, the pushes) as its
    round time: silence is allowed for 3 of them, so a slow link's first round is not a loss."""
    m = _machine(sync=SyncConfig(strategy="ashl"), lost_after_s=10.0, rejoin_limit=0)
    m.step(decide.Snapshot(0.0, 0.0, stage="start"))
    m.step(_snap(0.1, _stats(a={"heartbeat": 1.0, "round_s": 0.5}, b={"heartbeat": 1.0, "round_s": 7.0})))
    assert "Lost" not in _kinds(m.step(_snap(12.0, _stats(a={"heartbeat": 2.0, "round_s": 0.5},
                                                         b={"heartbeat": 1.0, "round_s": 7.0}))))
    acts = m.step(_snap(21.5, _stats(a={"heartbeat": 3.0, "round_s": 0.5}, b={"heartbeat": 1.0, "round_s": 7.0})))
    assert _kinds(acts)[-1] == "Lost" and acts[-1].group == "b" and "limit 21.0 s" in acts[-1].why


def test_exited_group_lost_and_every_group_lost_fails_the_job():
    m = _machine(sync=SyncConfig(strategy="asp"))
    m.step(decide.Snapshot(0.0, 0.0, stage="start"))
    acts = m.step(_snap(0.5, exited={"a": "exit code 1"}))
    assert _kinds(acts) == ["ProbePs", "WriteControls", "Lost", "Rejoin"] and acts[2].why == "exit code 1"
    acts = m.step(_snap(0.6, exited={"a": "exit code 1", "b": "exit code 1"}))
    assert _kinds(acts) == ["ProbePs", "WriteControls", "Lost", "Stop"]
    assert acts[-1].failed and acts[-1].why == "chief: every group is lost (the last, b: exit code 1)"


def test_totals_carry_over_a_restarted_process():
    m = _machine(sync=SyncConfig(strategy="asp"))
    m._totals(_stats(a={"steps": 10, "incarnation": 1.0}))
    t = m._totals(_stats(a={"steps": 3, "incarnation": 2.0}))
    assert t["a"]["steps"] == 13 and t["b"]["steps"] == 0


def test_rejected_updates_recorded_once():
    m = _machine(sync=SyncConfig(strategy="asp"))
    m.step(decide.Snapshot(0.0, 0.0, stage="start"))
    assert _kinds(m.step(_snap(0.5, counters=_counters(rejected=2)))) == ["Rejected"]
    assert _kinds(m.step(_snap(0.6, counters=_counters(rejected=2)))) == []


def test_state_round_trip_resumes_phase_controls_and_counts():
    m = _machine(sync=SyncConfig(strategy="ashl", shl_loss=0.5))
    m.step(decide.Snapshot(0.0, 0.0, stage="start"))
    both = _stats(a={"profiled": 1, "profile_iter_ms": 10, "profile_pull_ms": 5, "profile_push_ms": 5, "steps": 8},
                  b={"profiled": 1, "profile_iter_ms": 40, "profile_pull_ms": 5, "profile_push_ms": 5, "steps": 8})
    m.step(_snap(1.0, both, evals=[(0.9, 0.3, 2.0)]))
    state = m.state(m._totals(both), 1.2)
    fresh = _machine(sync=SyncConfig(strategy="ashl", shl_loss=0.5))
    rec = fresh.restore(state, "ckpt-1", clock=0.0)
    assert isinstance(rec, records.Resume) and rec.phase == "ahl" and rec.global_steps == 16
    assert fresh.controls == m.controls and fresh.elapsed_before == 1.2 and fresh.history == [(0.9, 0.3, 2.0)]
    assert fresh.driver._timing_of == m.driver._timing_of and set(fresh.driver._timing_of) == {"a", "b"}  # SHL is planned from them
    # published ASHL switches to SHL on the profile's timings, also after a resume whose processes did not profile
    acts = fresh.step(_snap(2.0, _stats(), evals=[(1.9, 0.5, 0.1)]))
    assert isinstance(acts[-1], records.Phase) and acts[-1].new == "shl"
    assert fresh.controls["b"].local_steps == 2 and fresh.controls["a"].local_steps > 2
    # a resumed process starts its totals from zero: the checkpoint's totals are kept as offsets
    assert fresh._totals(_stats(a={"steps": 1, "incarnation": 5.0}))["a"]["steps"] == 9


def test_adsp_as_published_catch_up_and_compute_only_timers():
    m = _machine(sync=SyncConfig(strategy="adsp", shl_loss=0.2, adsp_period_s=6.0, adsp_commits=6), lost_after_s=100.0)
    m.step(decide.Snapshot(0.0, 0.0, stage="start"))
    assert all(abs(c.timer_s - 1.0) < 1e-9 for c in m.controls.values())  # before anything is measured
    # a: 10 ms/iter, 0.5 s of communication per commit, 4 commits; b: 40 ms/iter, 1 s per commit, 2 commits
    stats = _stats(a={"steps": 100, "commits": 4, "compute_s": 1.0, "pull_s": 1.0, "push_s": 1.0},
                   b={"steps": 25, "commits": 2, "compute_s": 1.0, "pull_s": 1.0, "push_s": 1.0})
    acts = m.step(_snap(1.0, stats, _counters(**{"commits/a": 4, "commits/b": 2}), evals=[(0.9, 0.3, 1.0)]))
    # AHL's commit rate on the slowest: 6 s // (8 x 40 ms + 1 s) = 4 commits per period
    assert m.driver.search.count == 4 and m.driver.search.period_s == 6.0
    assert _kinds(acts) == ["Evaluated", "WriteControls", "Adsp"]
    # catch-up: the counts meet at 4 + 4 = 8; a makes 4 commits (6/4 - 0.5 s), b 6 (6/6 - 1 s)
    assert m.controls["a"].timer_s == pytest.approx(1.0) and m.controls["b"].timer_s == pytest.approx(0.0)
    # once per period: nothing before 7 s
    assert _kinds(m.step(_snap(3.0, stats, evals=[(2.9, 0.3, 0.9)]))) == ["Evaluated"]
    out = []
    for i in range(12):
        t = 4.0 + i
        out += m.step(_snap(t + 0.05, stats, evals=[(t, 0.5, 1.0 / (0.5 * t + 1) + 0.1)]))
    assert len([a for a in out if isinstance(a, decide.WriteControls)]) == 2  # at 7.05 and 13.05 s
    assert len(m.driver.search.trials) >= 1  # a whole period of evaluations decided the count once


def test_records_round_trip_through_json(tmp_path):
    emitted = []
    em = records.Emitter(emitted.append).open(str(tmp_path))
    recs = [records.Lost(t=1.0, group="a", devices=["edge0"], why="gone", live=["b"]),
            records.Eval(t=2.0, phase="train", accuracy=0.5, loss=1.0, global_steps=3, examples_per_sec=4.0,
                         group_examples_per_sec={"a": 4.0}, bytes_sent=5, eta_s=6.0, live_groups=1, rejected=0,
                         version=7)]
    for r in recs:
        em(r)
    em.close()
    assert emitted == recs
    assert records.read(str(tmp_path)) == recs
    assert records.read(str(tmp_path), records.Lost) == recs[:1]
    assert "LOST group a" in recs[0].line()
    with pytest.raises(ValueError, match="unknown record kind"):
        records.from_dict({records.KEY: "nope"})
    assert dataclasses.asdict(recs[1])["version"] == 7


def test_the_chief_reaches_the_core_only_through_step_state_and_restore():
    """engine/runtime/chief.py uses nothing of its machine (decide.Decisions) but step, state and restore."""
    tree = ast.parse(open(os.path.join(ROOT, "edgemesh_tf", "engine", "runtime", "chief.py")).read())
    used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute) and node.value.attr == "machine"}
    assert used == {"step", "state", "restore"}, used
    passed = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
              and any(isinstance(a, ast.Attribute) and a.attr == "machine" for a in node.args)]
    assert not passed, "the chief hands its machine to %s" % [ast.unparse(n.func) for n in passed]
