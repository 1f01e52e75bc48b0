"""The strategies as plain data: controls, round rules, gates and shards."""
import dataclasses

import pytest

from edgemesh_tf.engine.core import rules
from edgemesh_tf.engine.config import GroupSpec, JobConfig, SyncConfig
from edgemesh_tf.sync.schedule import WorkerTiming

BATCH = {"a": 32, "b": 32, "c": 64}


@pytest.mark.parametrize("strategy,steps,wait", [("bsp", 1, "barrier"), ("asp", 1, "none"), ("ssp", 1, "staleness"),
                                                 ("local_sgd", 8, "barrier"), ("adsp", 0, "none"),
                                                 ("ashl", 8, "none")])
def test_each_strategy_round_rule(strategy, steps, wait):
    sync = SyncConfig(strategy=strategy)
    controls = rules.initial_controls(sync, BATCH)
    rule = rules.round_rule(sync, rules.first_phase(sync), controls["c"])
    assert (rule.local_steps, rule.wait) == (steps, wait)
    assert rule.scale == pytest.approx(0.5)  # batch share of c
    assert rule.bound == (3 if wait == "staleness" else 0)
    assert rule.timer_s == (pytest.approx(1.0) if strategy == "adsp" else 0.0)


def test_ashl_published_plan_dense_ahl_topk_shl_shares_from_shl():
    """ASHL's Algorithm 2 as published (issue 16's worked example): dense AHL with H_preset 8 gives
    H = [39, 18, 11, 8]; SHL compresses with ratios >= r_preset; both phases share D_i from SHL's H."""
    sync = SyncConfig(strategy="ashl", compress_ratio=0.1)
    timings = [WorkerTiming(n, it, 2 * c, c, c) for n, it, c in (("a", 100, 50), ("b", 200, 200), ("c", 300, 300),
                                                                  ("d", 400, 400))]
    prev = rules.initial_controls(sync, {n: 32 for n in "abcd"})
    ahl = rules.ashl_controls(sync, timings, "ahl", prev)
    shl = rules.ashl_controls(sync, timings, "shl", ahl)
    assert [ahl[n].local_steps for n in "abcd"] == [39, 18, 11, 8]
    assert all(ahl[n].ratio == 1.0 for n in "abcd")  # dense in AHL
    assert shl["d"].local_steps == 2 and all(0.1 <= shl[n].ratio <= 1.0 for n in "abcd")
    assert min(shl[n].ratio for n in "abcd") < 1.0
    h_shl = {n: shl[n].local_steps for n in "abcd"}
    for n in "abcd":  # the same shares in both phases, from SHL's H
        assert ahl[n].share == shl[n].share == pytest.approx(h_shl[n] / sum(h_shl.values()))
    # the project's options: compressed AHL, per-phase shares
    own = rules.ashl_controls(dataclasses.replace(sync, compress_in_ahl=True, phase_shares=True), timings, "ahl", prev)
    assert own["a"].share == pytest.approx(own["a"].local_steps / sum(own[n].local_steps for n in "abcd"))
    assert min(own[n].ratio for n in "abcd") < 1.0


def test_learning_rate_schedule_warms_up_in_ahl_and_restarts_in_shl():
    cos = SyncConfig(strategy="ashl", lr_warmup=5, lr_cosine_commits=200)
    assert cos.lr_schedule == "cosine" and cos.weight_decay == 5e-4
    assert rules.learning_rate(cos, 0.1, "profiling", 3) == 0.1
    assert rules.learning_rate(cos, 0.1, "ahl", 0) == 0.0  # the authors' warm-up starts at 0
    assert rules.learning_rate(cos, 0.1, "ahl", 5) == pytest.approx(0.1)
    assert rules.learning_rate(cos, 0.1, "ahl", 100) < 0.1
    assert rules.learning_rate(cos, 0.1, "shl", 0) == pytest.approx(0.1)  # restart, no warm-up
    assert SyncConfig(strategy="adsp").lr_schedule == "cosine"  # the same optimizer as ASHL: like for like
    flat = SyncConfig(strategy="bsp")
    assert flat.lr_schedule == "constant" and flat.weight_decay == 0.0
    assert rules.learning_rate(flat, 0.1, "train", 1000) == 0.1
    with pytest.raises(ValueError, match="lr_warmup .* must be < lr_cosine_commits"):
        SyncConfig(lr_warmup=10, lr_cosine_commits=10)


def test_ashl_shl_waits_with_its_staleness_bound_and_plans_from_timings():
    sync = SyncConfig(strategy="ashl", staleness=2, push_budget=0.25, compression="budget", compress_in_ahl=True,
                      phase_shares=True)
    timings = [WorkerTiming("a", 10.0, 100.0, 60.0, 40.0), WorkerTiming("b", 40.0, 400.0, 300.0, 100.0)]
    prev = rules.initial_controls(sync, {"a": 32, "b": 32})
    ahl = rules.ashl_controls(sync, timings, "ahl", prev)
    assert ahl["b"].local_steps == 8 and ahl["a"].local_steps > 8  # slowest gets the preset
    assert ahl["a"].scale == pytest.approx(ahl["a"].local_steps / (ahl["a"].local_steps + 8))
    assert ahl["a"].share == ahl["a"].scale
    assert ahl["b"].ratio < 1.0 <= ahl["a"].ratio  # the slow link is compressed
    shl = rules.ashl_controls(sync, timings, "shl", ahl)
    assert shl["b"].local_steps == 2
    assert rules.round_rule(sync, "ahl", ahl["a"]).wait == "none"
    rule = rules.round_rule(sync, "shl", shl["a"])
    assert (rule.wait, rule.bound) == ("staleness", 2)


def test_the_planner_amortises_ps_traffic_over_each_strategy_s_local_iterations():
    assert rules.commit_interval(SyncConfig(strategy="ashl", ahl_h_preset=8)) == 8
    assert rules.commit_interval(SyncConfig(strategy="local_sgd", local_steps=5)) == 5
    assert rules.commit_interval(SyncConfig(strategy="bsp")) == 1


def test_a_push_goes_dense_from_dense_from_ratio_and_top_k_costs_two_bytes_fractions_an_entry():
    published, capped = SyncConfig(strategy="ashl"), SyncConfig(strategy="ashl", dense_from_ratio=0.5)
    assert not rules.push_is_dense(published, 0.65) and rules.push_is_dense(published, 1.0)
    assert rules.push_wire_fraction(published, 0.65) == pytest.approx(1.3)  # more bytes than the dense push
    assert rules.push_is_dense(capped, 0.5) and not rules.push_is_dense(capped, 0.49)
    assert rules.push_wire_fraction(capped, 0.65) == 1.0 and rules.push_wire_fraction(capped, 0.1) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="dense_from_ratio"):
        SyncConfig(strategy="ashl", dense_from_ratio=0.0)


def test_fixed_compression_applies_from_the_start():
    sync = SyncConfig(strategy="asp", compression="fixed", ratio=0.01)
    assert rules.initial_controls(sync, {"a": 8, "b": 8})["a"].ratio == 0.01
    assert SyncConfig(strategy="ashl").compression == "ashl"
    assert SyncConfig(strategy="bsp").compression == "none"


def test_gates_skip_lost_groups():
    live = rules.GroupControl(1, 1.0, 0.5)
    lost = rules.GroupControl(1, 1.0, 0.5, lost=True)
    commits = {"a": 5, "b": 1}
    assert not rules.barrier_passed(5, commits, {"a": live, "b": live})
    assert rules.barrier_passed(5, commits, {"a": live, "b": lost})
    # published (the default): the commit a round ends with may land at most 3 ahead of the slowest
    assert not rules.staleness_passed(4, 3, commits, {"a": live, "b": live})
    assert rules.staleness_passed(3, 3, commits, {"a": live, "b": live})
    # project: a round may start while at most 3 ahead (its commit lands 4 ahead)
    assert rules.staleness_passed(4, 3, commits, {"a": live, "b": live}, "project")
    assert not rules.staleness_passed(5, 3, commits, {"a": live, "b": live}, "project")
    assert rules.staleness_passed(5, 3, commits, {"a": live, "b": lost})


def test_control_vector_round_trip():
    c = rules.GroupControl(local_steps=12, ratio=0.05, scale=0.25, timer_s=1.5, share=0.3, lost=True)
    assert rules.GroupControl.from_vector(c.to_vector()) == c


def test_shards_cover_the_data_in_order():
    shares = {"a": 0.5, "b": 0.3, "c": 0.2}
    ranges = [rules.shard_range(shares, g, 1000) for g in shares]
    assert ranges == [(0, 500), (500, 800), (800, 1000)]
    assert rules.shard_range({"a": 0.999, "b": 0.001}, "b", 10) == (9, 10)  # never empty


def test_config_round_trips_and_names_bad_fields():
    cfg = JobConfig(groups=(GroupSpec("g0", {"mesh": {"model": 1}, "devices": ["/cpu:0"]}, 16),),
                    sync=SyncConfig(strategy="ssp", staleness=1), target_accuracy=0.9)
    assert JobConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="sync strategy must be one of .*got 'sgd'"):
        SyncConfig(strategy="sgd")
    with pytest.raises(ValueError, match="ratio must be a fraction of entries in \\(0, 1\\], got 0"):
        SyncConfig(ratio=0)
    with pytest.raises(ValueError, match="group names must be distinct"):
        JobConfig(groups=(cfg.groups[0], cfg.groups[0]))
    with pytest.raises(ValueError, match="batch_size of group g0 must be an int >= 1"):
        JobConfig(groups=(GroupSpec("g0", {}, 0),))
    with pytest.raises(ValueError, match="time_budget_s must be > 0 s"):
        JobConfig(groups=cfg.groups, time_budget_s=0)


def test_drop_lost_hands_the_lost_groups_data_and_weight_to_the_live_ones():
    controls = rules.initial_controls(SyncConfig(strategy="bsp"), {"a": 24, "b": 8, "c": 16})
    out = rules.drop_lost(controls, "b")
    assert out["b"].lost and out["b"].share == 0 and out["b"].scale == 0
    assert not out["a"].lost and not out["c"].lost
    assert out["a"].share + out["c"].share == pytest.approx(1.0)
    assert out["a"].share / out["c"].share == pytest.approx(24 / 16)
    assert out["a"].scale + out["c"].scale == pytest.approx(sum(c.scale for c in controls.values()))
    # a second loss leaves one group with everything; the gates no longer wait for the lost ones
    out2 = rules.drop_lost(out, "a")
    assert out2["c"].share == pytest.approx(1.0) and out2["c"].scale == pytest.approx(1.0)
    assert rules.barrier_passed(5, {"a": 0, "b": 1, "c": 5}, out2)
    with pytest.raises(KeyError, match="unknown group 'x'"):
        rules.drop_lost(out, "x")
    # its shard is empty of weight: the live groups' shards cover every example
    shares = {g: c.share for g, c in out.items()}
    ranges = [rules.shard_range(shares, g, 1000) for g in ("a", "c")]
    assert ranges[0][0] == 0 and sum(e - b for b, e in ranges) >= 999


def test_readmit_undoes_drop_lost():
    controls = rules.initial_controls(SyncConfig(strategy="local_sgd", local_steps=4), {"a": 24, "b": 8, "c": 16})
    controls = {**controls, "b": dataclasses.replace(controls["b"], ratio=0.3)}
    back = rules.readmit(rules.drop_lost(controls, "b"), "b", rules.batch_shares({"a": 24, "b": 8, "c": 16})["b"])
    for g in controls:
        for f in ("share", "scale", "local_steps", "ratio", "lost"):
            assert getattr(back[g], f) == pytest.approx(getattr(controls[g], f)), (g, f)
    # with two lost, one comes back: the live ones and it cover the data and the weight
    two = rules.drop_lost(rules.drop_lost(controls, "b"), "c")
    one = rules.readmit(two, "c", 0.4)
    assert one["b"].lost and not one["c"].lost
    assert one["a"].share + one["c"].share == pytest.approx(1.0) and one["c"].share == pytest.approx(0.4)
    assert one["a"].scale + one["c"].scale == pytest.approx(1.0)
    with pytest.raises(ValueError, match="group a is not lost"):
        rules.readmit(one, "a", 0.5)
    with pytest.raises(ValueError, match=r"share of re-admitted group b must be in \(0, 1\), got 1"):
        rules.readmit(one, "b", 1)
    with pytest.raises(KeyError, match="unknown group 'x'"):
        rules.readmit(one, "x", 0.5)


def test_drift_needs_several_intervals_off_the_plan_and_remembers_when_it_began():
    def tot(steps, compute_s):
        return {"a": {"steps": steps, "compute_s": compute_s}, "b": {"steps": steps, "compute_s": compute_s / 2}}

    planned = {"a": 10.0, "b": 5.0}  # ms per iteration
    history = [tot(0, 0.0), tot(100, 1.0), tot(200, 4.0), tot(300, 7.0), tot(400, 10.0)]  # a: 10 ms, then 30 ms
    drifting, found = {}, []
    for prev, now in zip(history, history[1:]):
        found, drifting = rules.drift_step(prev, now, planned, drifting, fraction=0.5, evals=3)
        if found:
            break
    assert now is history[4]  # three intervals at 30 ms: found at the third
    assert [(g, p, round(ms, 3)) for g, p, ms, _ in found] == [("a", 10.0, 30.0), ("b", 5.0, 15.0)]
    assert found[0][3] == history[1]  # the re-plan measures from where the drift began
    # back on the plan: the count starts again; an interval without steps changes nothing
    _, d = rules.drift_step(history[4], tot(500, 11.0), planned, {"a": (2, history[1])}, 0.5, 3)
    assert "a" not in d
    _, d = rules.drift_step(history[4], history[4], planned, {"a": (2, history[1])}, 0.5, 3)
    assert d["a"] == (2, history[1])
    # faster by more than the fraction counts too
    found, _ = rules.drift_step(tot(0, 0.0), tot(100, 0.5), planned, {"a": (2, {}), "b": (2, {})}, 0.5, 3)
    assert [g for g, *_ in found] == ["a", "b"]


def test_measured_timings_fall_back_to_an_earlier_base_when_a_group_has_not_committed_since_the_last():
    def tot(steps, commits, compute_s, pull_s, push_s, sent):
        return {"steps": steps, "commits": commits, "compute_s": compute_s, "pull_s": pull_s, "push_s": push_s,
                "bytes_sent": sent}

    phase_start = {"fast": tot(10, 2, 0.1, 0.02, 0.04, 2000), "slow": tot(5, 1, 0.2, 0.2, 0.3, 1000)}
    last_plan = {"fast": tot(50, 6, 0.5, 0.06, 0.12, 6000), "slow": tot(13, 2, 0.4, 0.4, 0.6, 2000)}
    now = {"fast": tot(90, 10, 0.9, 0.10, 0.20, 10000), "slow": tot(13, 2, 0.4, 0.4, 0.6, 2000)}
    profile_push = {"fast": 40.0, "slow": 300.0}
    # "slow" made no commit since the last plan: nothing to measure from there
    assert rules.measured_timings(now, [last_plan], 1000, profile_push) is None
    fast, slow = rules.measured_timings(now, [last_plan, phase_start], 1000, profile_push)
    assert (fast.name, round(fast.iter_ms, 6), round(fast.other_ms, 6), round(fast.push_ms, 6)) == ("fast", 10.0, 10.0, 20.0)
    assert (slow.name, round(slow.iter_ms, 6), round(slow.other_ms, 6), round(slow.push_ms, 6)) == ("slow", 25.0, 200.0, 300.0)
    assert round(slow.comm_ms, 6) == 500.0
    # pushes smaller than a dense one were compressed: their full-size time is the profiled one
    fast, _ = rules.measured_timings(now, [phase_start], 4000, profile_push)
    assert fast.push_ms == 40.0
    assert rules.measured_timings(now, [], 1000, profile_push) is None
