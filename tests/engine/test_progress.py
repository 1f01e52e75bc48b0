"""The progress lines' estimates (engine/core/progress.py) and their text (records.Eval, records.Phase),
driven with plain numbers: bursty commit streams, synthetic accuracy curves, the chief's decisions."""
import math
import random
import re

import pytest

from edgemesh_tf.engine.core import decide, progress, records, rules
from edgemesh_tf.engine.config import GroupSpec, JobConfig, SyncConfig
from edgemesh_tf.engine.core.rules import STAT_FIELDS
from edgemesh_tf.mesh.layout import single_device_layout
from edgemesh_tf.sync.schedule import PHASES


def _bursts(period_s, burst, until_s, dt=1.0, stop_s=None):
    """Samples [(s, cumulative examples)] every dt s of a group that commits `burst` examples every
    period_s s (none after stop_s): its count rises only at commits."""
    out, t = [], 0.0
    while t <= until_s + 1e-9:
        last = min(t, stop_s) if stop_s is not None else t
        out.append((t, burst * math.floor(last / period_s + 1e-9)))
        t = round(t + dt, 6)
    return out


def _interval_rates(samples):
    return [(x1 - x0) / (t1 - t0) for (t0, x0), (t1, x1) in zip(samples, samples[1:])]


@pytest.mark.parametrize("period_s", [1.3, 2.5, 3.0, 15.0])
def test_windowed_rate_does_not_show_zero_between_bursts(period_s):
    """640 examples per commit, sampled every second: the rate over one sample interval is mostly 0;
    the windowed rate is never 0 once MIN_BURSTS + 1 commits are in, and once the window is full it
    stays within k/(k+1) (k >= MIN_BURSTS) of the true rate, also with rounds longer than the window."""
    samples = _bursts(period_s, 640, until_s=120.0)
    true = 640 / period_s
    assert _interval_rates(samples).count(0.0) > len(samples) / 5  # the premise: bursty
    rates = [(t, progress.windowed_rate(samples[:i + 1]) / true) for i, (t, _) in enumerate(samples)
             if t >= (progress.MIN_BURSTS + 1) * period_s]
    assert rates and all(0.5 < r < 1.35 for _, r in rates), rates  # a short window: bursts seen up to 1 s late
    steady = [r for t, r in rates if t >= progress.WINDOW_S + period_s]
    low = progress.MIN_BURSTS / (progress.MIN_BURSTS + 1)
    assert steady and min(steady) >= low * 0.98 and max(steady) <= 1.1, (min(steady), max(steady))


def test_windowed_rate_of_steady_counts_is_the_rate_over_the_window():
    samples = [(float(t), 100.0 * t) for t in range(30)]
    assert progress.windowed_rate(samples) == pytest.approx(100.0)
    # the window: the latest rise at least WINDOW_S before the last sample
    uneven = [(float(t), 10.0 * t if t < 15 else 150 + 50.0 * (t - 15)) for t in range(30)]
    assert progress.windowed_rate(uneven) == pytest.approx(50.0)
    assert progress.windowed_rate(samples[:1]) is None
    assert progress.windowed_rate([(1.0, 5.0), (1.0, 9.0)]) is None
    with pytest.raises(ValueError, match="min_bursts"):
        progress.windowed_rate(samples, min_bursts=0)


def test_windowed_rate_of_a_group_that_stops_decays():
    samples = _bursts(2.0, 200, until_s=60.0, stop_s=30.0)
    rates = [progress.windowed_rate(samples[:i + 1]) for i in range(31, len(samples))]
    assert rates[0] > 0.5 * 100
    assert all(b < a for a, b in zip(rates, rates[1:])) and rates[-1] < 0.25 * 100


def test_throughput_per_group_and_a_group_that_joins_late():
    tp = progress.Throughput()
    assert tp.add(0.0, {"a": 0.0}) == {"a": None}
    for t in range(1, 21):
        x = tp.add(float(t), {"a": 32.0 * t, **({"b": 64.0 * (t - 10)} if t > 10 else {})})
    assert x["a"] == pytest.approx(32.0) and x["b"] == pytest.approx(64.0)


def test_time_to_target_close_for_a_curve_that_reaches_it():
    curve = lambda t: 1 - 0.9 * math.exp(-t / 20.0)  # reaches 0.97 at 20 ln 30 = 68.0 s
    reach = 20.0 * math.log(30.0)
    history = [(float(t), curve(t)) for t in range(1, 41)]
    assert progress.time_to_target(history, 0.97) == pytest.approx(reach - 40.0, rel=0.02)
    rng = random.Random(0)
    noisy = [(t, a + rng.gauss(0.0, 0.003)) for t, a in history]
    assert progress.time_to_target(noisy, 0.97, horizon_s=200.0) == pytest.approx(reach - 40.0, rel=0.25)
    # a curve levelling off below 1: later than estimated, by less as it comes closer
    slowing = lambda t: 0.985 - 0.885 * math.exp(-t / 15.0)
    reach = 15.0 * math.log(0.885 / 0.015)
    late = [progress.time_to_target([(float(t), slowing(t)) for t in range(1, n + 1)], 0.97) + n for n in (20, 50)]
    assert late[0] < late[1] < reach * 1.02 and late[1] > reach * 0.9


def test_time_to_target_none_when_it_cannot_tell():
    flat = [(float(t), 0.5) for t in range(30)]
    assert progress.time_to_target(flat, 0.97) is None
    rng = random.Random(1)
    assert progress.time_to_target([(t, 0.9 + rng.gauss(0.0, 0.01)) for t, _ in flat], 0.97, horizon_s=200) is None
    # noise alone (half the fits fall by chance): an estimate only when the fall is beyond the noise
    guesses = [progress.time_to_target([(t, 0.9 + rng.gauss(0.0, 0.01)) for t, _ in flat], 0.97) for _ in range(100)]
    assert sum(g is not None for g in guesses) <= 10
    rising = [(float(t), 1 - 0.9 * math.exp(-t / 20.0)) for t in range(1, 41)]
    assert progress.time_to_target(rising[:progress.MIN_POINTS - 1], 0.97) is None  # too few points
    assert progress.time_to_target([(t, 1 - a) for t, a in rising], 0.97) is None  # falling
    assert progress.time_to_target(rising, 0.97, horizon_s=10.0) is None  # beyond the budget left
    assert progress.time_to_target([], 0.97) is None
    with pytest.raises(ValueError, match="min_points"):
        progress.time_to_target(rising, 0.97, min_points=2)


def test_time_to_target_zero_once_at_target():
    assert progress.time_to_target([(1.0, 0.5), (2.0, 0.98)], 0.97) == 0.0


def _eval(**kw):
    base = dict(t=27.0, phase="shl", accuracy=0.9694, loss=0.042, global_steps=189, examples_per_sec=0.0,
                group_examples_per_sec={"a": 0.0}, bytes_sent=590_110_000, eta_s=213.0, live_groups=1, rejected=0,
                version=9, examples_per_sec_avg=5120.0, group_examples_per_sec_avg={"a": 5120.0})
    return records.Eval(**{**base, **kw})


def test_eval_line_shows_the_averaged_rate_the_budget_left_and_the_target():
    line = _eval(target_accuracy=0.97, target_eta_s=35.2).line()
    assert line == ("[   27.0 s] shl       steps    189  acc 0.9694  loss 0.0420     5120 ex/s  sent  590.11 MB  "
                    "budget left   213 s  target 0.97 in ~35 s")
    assert _eval(target_accuracy=0.97).line().endswith("budget left   213 s  target 0.97: no estimate yet")
    reached = _eval(target_accuracy=0.97, target_eta_s=None, target_reached_s=37.0, accuracy=0.9712).line()
    assert reached.endswith("target 0.97 reached at 37.0 s") and "~" not in reached
    assert _eval().line().endswith("budget left   213 s")  # no target set: nothing said of one
    assert "ETA" not in line and not re.search(r"\b0 ex/s", line)


def test_phase_line_says_what_the_new_phase_does():
    assert set(rules.PHASE_DOES) == set(PHASES) and all(rules.PHASE_DOES.values())
    rec = records.Phase(t=1.7, old="profiling", new="ahl", why="profiled", controls={}, does=rules.PHASE_DOES["ahl"])
    first, second = rec.line().split("\n")
    assert first == "[    1.7 s] phase profiling -> ahl: profiled"
    assert second == " " * 12 + "ahl now: " + rules.PHASE_DOES["ahl"]
    assert records.Phase(t=1.7, old="ahl", new="shl", why="x", controls={}).line().count("\n") == 0


# the chief's decisions


def _machine(**kw):
    groups = tuple(GroupSpec(g, single_device_layout("/job:worker/task:%d" % i).to_dict(), 32)
                   for i, g in enumerate("ab"))
    cfg = JobConfig(groups=groups, **kw)
    return decide.Decisions(cfg, dense_push_bytes=4000.0)


def _stats(t, **per_group):
    out = {}
    for g in "ab":
        s = {f: 0.0 for f in STAT_FIELDS}
        s.update(heartbeat=t, incarnation=1.0, **per_group.get(g, {}))
        out[g] = s
    return out


def _snap(now, stats, evals=()):
    counters = {"rejected": 0, "version": 0, **{k + g: 0 for g in "ab" for k in ("commits/", "pulls/")}}
    return decide.Snapshot(now=now, clock=now, stats=stats, counters=counters, evals=list(evals))


def test_decisions_records_averaged_rates_estimate_and_reached():
    """Group a commits 320 examples every 3 s, b 160 every 2 s; evaluations every second follow
    1 - 0.9 exp(-t / 20) and reach 0.97 at 68.0 s."""
    m = _machine(sync=SyncConfig(strategy="asp"), target_accuracy=0.97, time_budget_s=240.0)
    m.step(decide.Snapshot(0.0, 0.0, stage="start"))
    recs = []
    for i in range(1, 80):
        t = float(i)
        stats = _stats(t, a={"examples": 320 * (i // 3)}, b={"examples": 160 * (i // 2)})
        m.step(_snap(t - 0.05, stats))  # the tick the evaluated model was pulled at
        acts = m.step(_snap(t + 0.05, stats, evals=[(t, 1 - 0.9 * math.exp(-t / 20.0), 1.0)]))
        recs += [a.record for a in acts if isinstance(a, decide.Evaluated)]
        if any(isinstance(a, decide.Stop) for a in acts):
            break
    steady = [r for r in recs if r.t >= 12]
    assert any(r.group_examples_per_sec["a"] == 0 for r in steady)  # the interval rate: bursty
    assert all(0.6 * 106.7 <= r.group_examples_per_sec_avg["a"] <= 1.05 * 106.7 for r in steady)
    assert all(r.examples_per_sec_avg == pytest.approx(sum(r.group_examples_per_sec_avg.values()), abs=0.2)
               for r in steady)
    at40 = next(r for r in recs if r.t == 40.0)
    assert at40.target_accuracy == 0.97 and at40.target_eta_s == pytest.approx(28.0, rel=0.05)
    assert at40.eta_s == 200.0 and "target 0.97 in ~28 s" in at40.line()
    assert recs[0].target_eta_s is None and "no estimate yet" in recs[0].line()  # one point
    last = recs[-1]
    assert last.t == 69.0 and last.target_reached_s == 69.0 and last.target_eta_s is None
    assert "target 0.97 reached at 69.0 s" in last.line()


def test_ashl_phase_switch_record_carries_the_description():
    m = _machine(sync=SyncConfig(strategy="ashl", shl_loss=0.5))
    m.step(decide.Snapshot(0.0, 0.0, stage="start"))
    prof = {"profiled": 1, "profile_pull_ms": 5, "profile_push_ms": 5}
    acts = m.step(_snap(1.0, _stats(1.0, a={**prof, "profile_iter_ms": 10}, b={**prof, "profile_iter_ms": 40})))
    (phase,) = [a for a in acts if isinstance(a, records.Phase)]
    assert phase.does == rules.PHASE_DOES["ahl"] and "ahl now: asynchronous" in phase.line()
