"""bench/edgemesh_claims.py's pure parts: the data-parallel batch split, the claims computed from
measured delays and peaks, and their section of the report."""
import json

import numpy as np
import pytest

from bench_modules import load

claims = load("claims_modes")
figures = load("claims_figures")
report_claims = load("report_claims")


def test_proportional_split_keeps_the_batch_and_one_each():
    assert claims.proportional(32, [2.0, 1.0, 1.0]) == (16, 8, 8)
    parts = claims.proportional(7, [10.0, 1.0, 1.0])
    assert sum(parts) == 7 and min(parts) == 1 and parts[0] == 5
    with pytest.raises(ValueError, match="cannot give 3 devices at least one of 2"):
        claims.proportional(2, [1.0, 1.0, 1.0])


def _result(hybrid_ms=10.0, hybrid_peak=100):
    mib = 2 ** 20
    return {"model": "vgg16", "dataset": "digits32", "batch": 32, "cluster": "layouts/pi4.yaml", "steps": 5,
            "errors": [], "data_parallel_shares": {"a": 20, "b": 12},
            "filter_split_plan": {"kind": "grid", "groups": [{"devices": ["a", "b"], "sizes": {"conv1": [40, 24]}}]},
            "hybrid_plan": {"kind": "grid", "groups": [{"devices": ["a", "b", "c"], "sizes": {"conv1": [30, 20, 14]}}]},
            "modes": {"alone:a": {"ms_per_example": 40.0, "median_step_ms": [1280.0], "peak_bytes": {"a": 300 * mib}},
                      "alone:b": {"ms_per_example": 60.0, "median_step_ms": [1920.0], "peak_bytes": {"b": 290 * mib}},
                      "alone:c": {"out_of_memory": "device c (pid 1) ... out of memory", "devices": ["c"]},
                      "data_parallel": {"ms_per_example": 25.0, "median_step_ms": [800.0],
                                        "peak_bytes": {"a": 280 * mib, "b": 270 * mib}},
                      "hybrid": {"ms_per_example": hybrid_ms, "median_step_ms": [320.0],
                                 "peak_bytes": {"a": hybrid_peak * mib, "b": 90 * mib, "c": 80 * mib}}}}


def test_claims_compare_the_hybrid_with_every_alternative():
    got = figures.claims(_result())
    assert got["delay_mean_alone_over_hybrid"]["value"] == 5.0  # (40 + 60) / 2 / 10: c could not train alone
    assert got["delay_fastest_alone_over_hybrid"]["value"] == 4.0
    assert got["delay_data_parallel_over_hybrid"]["value"] == 2.5
    assert got["hybrid_over_sum_of_alone_throughput"]["value"] == pytest.approx(0.1 / (1 / 40 + 1 / 60), abs=1e-3)
    assert got["hybrid_max_peak_over_alone_peak"]["value"] == pytest.approx(100 / 300, abs=1e-3)
    assert all(c["pass"] for c in got.values())
    worse = figures.claims(_result(hybrid_ms=30.0, hybrid_peak=250))
    assert not worse["delay_mean_alone_over_hybrid"]["pass"] and not worse["hybrid_max_peak_over_alone_peak"]["pass"]


def test_a_named_options_figures_stand_beside_the_hybrid_not_in_the_checks(tmp_path):
    mib, res = 2 ** 20, _result()
    res["modes"]["memory_capped"] = {"ms_per_example": 12.5, "median_step_ms": [400.0],
                                     "peak_bytes": {"a": 150 * mib, "b": 120 * mib, "c": 90 * mib}}
    got = figures.option_figures(res, "memory_capped")
    assert got == {"max_peak_over_alone_peak": 0.5, "mean_peak_over_alone_peak": 0.4,
                   "delay_fastest_alone_over_it": 3.2, "delay_over_hybrid": 1.25}
    assert "memory_capped" not in json.dumps(figures.claims(res))  # the checks are the planned hybrid's
    res["modes"]["memory_capped"] = {"out_of_memory": "device b (pid 2) ... out of memory", "devices": ["b"]}
    assert figures.option_figures(res, "memory_capped") == {"out_of_memory": "device b (pid 2) ... out of memory"}
    res["memory_capped_plan"] = {"kind": "grid", "memory_fraction": 0.5, "groups": [
        {"devices": ["a", "b", "c"], "sizes": {"conv1": [24, 22, 18]}}]}
    res["memory_capped_option"], res["checks"] = got, figures.claims(res)
    text, _ = report_claims.claims_section({"status": "ok", "result": res}, str(tmp_path))
    assert "`memory_capped` plan (grid): [a, b, c] conv1 [24, 22, 18]" in text
    assert ("`memory_fraction=0.5` (no device predicted above that fraction of the whole model's step on one device; "
            "not the default, which minimises time): max peak over the largest alone 0.5; mean peak over the largest "
            "alone 0.4; fastest alone's delay over its 3.2; its delay over the planned hybrid's 1.25.") in text
    res["memory_capped_plan"] = {"memory_fraction": 0.1, "error": "device a: needs at least 9 bytes"}
    text, _ = report_claims.claims_section({"status": "ok", "result": res}, str(tmp_path))
    assert "`memory_fraction=0.1` (" in text and "no plan: device a: needs at least 9 bytes" in text


def test_the_cost_model_is_checked_on_planned_even_and_alone_steps(tmp_path):
    res = _result()
    res["filter_split_plan"]["groups"][0].update(predicted_over_measured=1.05)
    res["even_plan"] = {"kind": "even", "groups": [{"devices": ["a", "b"], "sizes": {"conv1": [32, 32]},
                                                     "predicted_over_measured": 0.88}]}
    res["modes"]["alone:a"]["predicted_over_measured"] = 1.1
    assert figures.prediction_ratios(res) == {"filter_split[a,b]": 1.05, "even[a,b]": 0.88, "alone:a": 1.1}
    got = figures.claims(res)["prediction_max_error"]
    assert got == {"value": 0.12, "threshold": 0.15, "at_most": True, "pass": True}
    res["modes"]["alone:b"]["predicted_over_measured"] = np.float64(1.2)  # 20% over (figures may be numpy's)
    assert not figures.claims(res)["prediction_max_error"]["pass"]
    json.dumps(figures.claims(res))  # printable as JSON
    res["checks"] = figures.claims(res)
    text, _ = report_claims.claims_section({"status": "ok", "result": res}, str(tmp_path))
    assert "| prediction_max_error | 0.2 | ≤ 0.15 | **not met** |" in text
    assert "`even` plan (even): [a, b] conv1 [32, 32]" in text


def test_the_compute_bound_says_what_no_division_can_beat(tmp_path):
    res = _result()
    res["profiled_speed"] = {"a": 1.0, "b": 0.7, "c": 0.3}
    b = figures.compute_bound(res)
    # fastest alone 40 ms per example; all three at full use: 40 / 2.0 = 20 ms
    assert b == {"speed_sum": 2.0, "fastest_over_bound": 2.0, "mean_over_bound": 2.5, "hybrid_share_of_bound": 2.0}
    res["modes"]["hybrid"]["ms_per_example"] = 25.0
    res["compute_bound"] = figures.compute_bound(res)
    assert res["compute_bound"]["hybrid_share_of_bound"] == 0.8
    res["checks"] = figures.claims(res)
    text, _ = report_claims.claims_section({"status": "ok", "result": res}, str(tmp_path))
    assert "at most 2.0× faster than the fastest device alone and 2.5× than the mean" in text
    assert "the hybrid reaches 80% of that bound" in text
    assert "over the mean is out of reach on this cluster" in text  # 2.5 < 3.2
    assert figures.compute_bound({"modes": {}}) is None


def test_the_report_says_why_data_parallelism_and_memory_are_where_they_are(tmp_path):
    res = _result(hybrid_ms=24.0, hybrid_peak=250)
    res["modes"]["data_parallel"].update(ms_per_example=28.0, devices=["a", "b"])
    res["profiled_speed"] = {"a": 1.0, "b": 0.6, "c": 0.4}
    d = figures.data_parallel_bound(res)
    # bounds: data parallelism 40 / 1.6 = 25 ms an example, the hybrid over a, b, c 40 / 2.0 = 20 ms
    assert d == {"data_parallel_speed_sum": 1.6, "hybrid_speed_sum": 2.0, "ratio_at_bounds": 1.25,
                 "data_parallel_share_of_bound": 0.893, "hybrid_share_of_bound": 0.833,
                 "hybrid_share_needed": pytest.approx(1.3 * (25 / 28) * 0.8, abs=1e-3)}
    m = figures.memory_spread(res)
    assert m == {"max_device": "a", "max_peak_over_alone_peak": 0.833, "mean_peak_over_alone_peak": 0.467,
                 "max_device_speed_share": 0.5}
    res["checks"] = figures.claims(res)
    assert not res["checks"]["delay_data_parallel_over_hybrid"]["pass"]  # 28 / 24 = 1.17
    text, _ = report_claims.claims_section({"status": "ok", "result": res}, str(tmp_path))
    assert "data parallelism over a, b (speeds summing to 1.6) would take 1.25× the hybrid's delay over a, b, c" in text
    assert "Data parallelism reached 89% of its bound" in text and "the hybrid 83% (" in text
    assert "the measured ratio is 1.17×; 1.3× would take the hybrid at 93% of its bound" in text
    assert "the max peak is a's (50% of the plan's profiled speed" in text and "0.833 of the largest alone" in text
    assert "the mean over the plan's devices is 0.467" in text
    assert "The plan itself ran" not in text and "Prediction:" not in text  # nothing predicted in this record
    # the plan ran slower than planned, and only a timed its whole step while profiling
    res["hybrid_plan"]["groups"][0]["predicted_over_measured"] = 0.8
    res["modes"]["alone:b"]["predicted_over_measured"] = 0.9
    res["profile"] = {"devices": [{"name": "a", "whole_step_ms": 1280.0}, {"name": "b", "whole_step_ms": 0.0},
                                  {"name": "c", "whole_step_ms": 0.0}]}
    res["checks"] = figures.claims(res)
    text, _ = report_claims.claims_section({"status": "ok", "result": res}, str(tmp_path))
    assert "The plan itself ran 1.25× the step it was planned for ([a, b, c]" in text
    assert "Prediction: the largest error is `hybrid[a,b,c]`, predicted at 0.8× its measured step." in text
    assert ("Only a timed a whole step while profiling" in text and "the layer times of b, c are scaled by its factor; "
            "with it, b alone was predicted at 0.9×." in text)
    del res["profiled_speed"]  # records without profiled speeds: no bound, and no sentence built on one
    assert figures.data_parallel_bound(res) is None and "max_device_speed_share" not in figures.memory_spread(res)
    text, _ = report_claims.claims_section({"status": "ok", "result": res}, str(tmp_path))
    assert "Against synchronous data parallelism" not in text and "the max peak is a's, 0.833" in text


def test_report_shows_modes_out_of_memory_and_claims(tmp_path):
    res = _result()
    res["checks"] = figures.claims(res)
    text, plots = report_claims.claims_section({"status": "ok", "result": res}, str(tmp_path))
    assert "| `alone:c` | — | — | **out of memory** |" in text
    assert "`alone:c` ran out of memory: device c" in text
    assert "| delay_mean_alone_over_hybrid | 5.0 | ≥ 3.2 | pass |" in text
    assert "[a, b, c] conv1 [30, 20, 14]" in text and "a 20, b 12" in text
    assert plots == ["claims.png"] and (tmp_path / "claims.png").exists()
    assert "engine's grid" not in text
    # the engine's one-group grid (replicas' memory counted) differs from the plain layout measured: shown, untimed
    res["engine_grid_plan"] = {"kind": "grid", "groups": [{"devices": ["a", "b"], "sizes": {"conv1": [40, 24]},
                                                           "predicted_step_ms": 410.4}]}
    text, _ = report_claims.claims_section({"status": "ok", "result": res}, str(tmp_path))
    assert "The engine's grid (what `edgemesh run` would train" in text and "[a, b] predicted 410 ms a step" in text


def test_quotas_are_restored_after_each_first_run_and_before_any_counted_step():
    events = []

    class Fake:
        def __init__(self, name):
            self.name, self.own = name, [[]]

        def step_ms(self):
            events.append(self.name)
            self.own[0].append(1.0)
            return 1.0

    runners = {"a": Fake("a"), "b": Fake("b")}
    times = claims.interleaved(runners, {"a": 3, "b": 2}, warmup=2, restore_quotas=lambda: events.append("restore"))
    assert events[:3] == ["a", "b", "restore"]  # each device's first run with the quotas lifted, then restored
    assert events[3:5] == ["a", "b"]  # the second warm-up step under the quotas, not counted
    assert events[5:] == ["a", "b", "a", "b", "a"]  # taking turns, each mode until it has its count
    assert times == {"a": [1.0] * 3, "b": [1.0] * 2}
    assert runners["a"].own == [[1.0] * 3]  # the replicas' own times hold the counted steps only


def test_a_multi_group_hybrid_pays_its_commits_and_is_reported_with_its_staleness(tmp_path):
    from types import SimpleNamespace as NS

    pred = NS(step_ms=1000.0, ps_sync_ms=800.0)
    assert claims.per_iteration_ms(pred, 8) == 1100.0  # a push and pull every 8 local iterations
    assert claims.per_iteration_ms(pred, None) == 1000.0  # one group: no commits
    plans = {"hybrid": NS(groups=("g0", "g1"))}
    assert claims.commits("hybrid", plans) and not claims.commits("even", plans)
    assert not claims.commits("hybrid", {"hybrid": NS(groups=("g0",))})
    res = _result()
    res["hybrid_plan"].update(commit_interval=8, idle=["d"], groups=[{"devices": ["a"], "sizes": {}},
                                                         {"devices": ["b", "c"], "sizes": {"conv1": [40, 24]}}])
    res["modes"]["hybrid"].update(rounds=3, effective_ms_per_example=11.0)
    res["checks"] = figures.claims(res)
    text, _ = report_claims.claims_section({"status": "ok", "result": res}, str(tmp_path))
    assert "`hybrid`: 2 groups committing asynchronously to the parameter server every 8 local iterations" in text
    assert "timed over 3 rounds" in text and "11.0 ms per example" in text
    assert "The plan leaves d idle" in text


def test_the_calibration_names_the_split_step_it_was_fitted_to():
    res = {"split_overhead_ms_per_peer": {"a": 1.25, "b": 0.0},
           "profile": {"split_step_devices": ["a", "b", "c"], "split_step_sizes": {"conv1": [22, 22, 20]}}}
    text = report_claims._split_overhead(res)
    assert "a 1.2 ms" in text and "an uneven split step timed over a, b, c" in text
    res["profile"]["split_step_sizes"] = {}
    assert "an even split step timed over a, b, c" in report_claims._split_overhead(res)
    assert report_claims._split_overhead({}) == ""
