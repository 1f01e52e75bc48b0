"""bench/report.py renders REPORT.md and its plots from recorded benchmark JSON (the quick mode's
report generation on a small recorded input); bench/suite.py records failures as failed."""
import json
import os
import re
import shutil

import pytest

from bench_modules import load

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORDED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "recorded")


report = load("report")
sections = load("report_sections")
suite = load("suite")
tta_plan = load("tta_plan")
time_to_accuracy = load("time_to_accuracy")


def _rec(name):
    with open(os.path.join(RECORDED, name + ".json")) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    path = report.render(RECORDED, str(out))
    with open(path) as f:
        return out, f.read()


def test_every_plot_is_written_as_png(rendered):
    out, text = rendered
    for png in ("tta_edge2.png", "tta_seeds.png", "claims.png", "planner.png", "emulation.png"):
        with open(out / png, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", png
        assert f"({png})" in text, png


def test_ratios_equal_the_time_to_accuracy_json(rendered):
    _, text = rendered
    tta = _rec("time_to_accuracy")["result"]
    assert tta["format"] == 2  # the recorded run is in the statistics format (the first format: test_bench_time_to_accuracy)
    shown = lambda v, digits: "—" if v is None else str(round(v, digits))  # noqa: E731
    for key in ("ashl_over_bsp", "ashl_over_adsp"):
        m = re.search(r"`%s` = ([0-9]+(?:\.[0-9]+)?|—)" % key, text)
        assert m, key
        assert m.group(1) == shown(tta[key], 4), key
        row = next(ln for ln in text.splitlines() if ln.startswith("| ASHL ÷ %s |" % key.split("_")[-1].upper()))
        lo, hi = tta[key + "_ci95"]
        assert f"| {shown(tta[key], 3)} | [{shown(lo, 3)}, {shown(hi, 3)}] | {shown(tta[key + '_p'], 4)} |" in row
    # the table's ASHL row shows the same ratios (rounded to 3 places)
    row = next(ln for ln in text.splitlines() if ln.startswith("| ASHL |"))
    assert row.split("|")[-3].strip() == shown(tta["ashl_over_bsp"], 3)
    assert row.split("|")[-2].strip() == shown(tta["ashl_over_adsp"], 3)
    for name, s in tta["heterogeneous"]["strategies"].items():
        assert load("report_common").LABELS[name] in text
        assert f"| {s['reached']} | {s['final_accuracy']} |" in text
    assert "| the project's ASHL (all its rules) |" in text


def test_claims_shown_beside_the_papers(rendered):
    _, text = rendered
    claims = _rec("edgemesh_claims")["result"]
    assert "the paper: 3.2× lower delay, 43% less memory" in text
    for k, c in claims["checks"].items():
        row = next(ln for ln in text.splitlines() if ln.startswith(f"| {k} |"))
        assert f"| {c['value']} | {'≤' if c['at_most'] else '≥'} {c['threshold']} |" in row


def test_failed_benchmark_shows_as_failed(rendered):
    _, text = rendered
    faults = _rec("faults")
    assert faults["status"] == "failed"
    assert f"| faults | **failed** ({faults['error']})" in text
    assert f"## Faults\n\n**FAILED**: {faults['error']}." in text
    # its rows are still shown
    for row in faults["result"]["scenarios"]:
        assert row["what"] in text


def test_quick_banner_machine_and_command(rendered):
    _, text = rendered
    machine = _rec("machine")
    assert "Quick smoke run" in text
    assert machine["command"] in text and str(machine["cores"]) in text
    assert machine["tensorflow"] in text


def test_missing_record_is_reported_not_dropped(tmp_path):
    shutil.copytree(RECORDED, tmp_path / "rec")
    os.remove(tmp_path / "rec" / "planner.json")
    text = open(report.render(str(tmp_path / "rec"), str(tmp_path / "out"))).read()
    assert "| planner | **failed** (not run: planner.json" in text


def test_malformed_record_names_the_file(tmp_path):
    shutil.copytree(RECORDED, tmp_path / "rec")
    (tmp_path / "rec" / "planner.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"planner\.json: not valid JSON"):
        report.render(str(tmp_path / "rec"), str(tmp_path / "out"))


@pytest.mark.parametrize("body,status,error", [
    ("import json; print(json.dumps({'x': 1}))", "ok", None),
    ("import sys; print('no json'); sys.exit(0)", "failed", "printed no JSON"),
    ("import json, sys; print(json.dumps({'x': 1})); sys.exit(1)", "failed", "exit code 1"),
    ("import time; time.sleep(60)", "failed", "timed out after 2 s"),
])
@pytest.mark.subprocess
def test_suite_records_each_outcome(tmp_path, monkeypatch, body, status, error):
    (tmp_path / "outcome").mkdir()
    (tmp_path / "outcome" / "__init__.py").write_text("")
    (tmp_path / "outcome" / "b.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    rec = suite.run_bench(suite.Bench("b", "outcome.b", (), (), 2), quick=False)
    assert rec["command"] == "python -m outcome.b"
    assert rec["status"] == status
    assert rec["error"] == error
    assert rec["seconds"] < 30


def test_suite_missing_module_is_failed():
    rec = suite.run_bench(suite.Bench("nope", "does_not_exist", (), (), 5), quick=True)
    assert rec["status"] == "failed" and "module bench.does_not_exist does not exist" in rec["error"]


def test_every_benchmark_runs_as_a_module_of_the_bench_package():
    import importlib.util
    for b in suite.BENCHES:
        assert importlib.util.find_spec("bench." + b.module) is not None, b


def test_partial_rerun_is_added_to_the_machine_record_and_shown(tmp_path):
    shutil.copytree(RECORDED, tmp_path / "rec")
    path = str(tmp_path / "rec" / "machine.json")
    full = _rec("machine")
    info = {"command": "python -m bench.suite --only faults", "date": "2026-11-30 17:00:00", "git_commit": "abc123",
            "seconds": 700.0}
    merged = suite.record_machine(path, info, ["faults"])
    assert merged["command"] == full["command"] and merged["partial_runs"][-1]["only"] == ["faults"]
    text = open(report.render(str(tmp_path / "rec"), str(tmp_path / "out"))).read()
    assert "Re-run since: faults by `python -m bench.suite --only faults` on 2026-11-30 17:00:00" in text
    assert full["command"] in text


def test_make_bench_leaves_the_variant_table_to_its_own_target():
    default = [b.name for b in suite.selected([])]
    assert "time_to_accuracy" in default and "tta_variants" not in default and "planner_wifi" not in default
    assert [b.name for b in suite.selected(["tta_variants"])] == ["tta_variants"]
    tta = {b.name: b for b in suite.BENCHES}["time_to_accuracy"]
    assert tta.full[tta.full.index("--variants") + 1] == ""  # make bench runs no variant


def test_quick_run_leaves_out_the_edge4_emulation_and_the_report_says_so(tmp_path):
    benches = {b.name: b for b in suite.BENCHES}
    rec = suite.run_bench(benches["emulation"], quick=True)  # returns at once: nothing is run
    assert rec["status"] == "not run" and "not in the quick run" in rec["error"]
    assert benches["emulation_pi4"].quick is not None  # the same script still runs, on pi4
    tta = benches["time_to_accuracy"]
    assert tta.quick[tta.quick.index("--variants") + 1] == ""  # as in make bench: no variant
    shutil.copytree(RECORDED, tmp_path / "rec")
    with open(tmp_path / "rec" / "emulation.json", "w") as f:
        json.dump(rec, f)
    text = open(report.render(str(tmp_path / "rec"), str(tmp_path / "out"))).read()
    assert "| emulation | not run |" in text and "Not run (not in the quick run" in text


def test_variant_table_not_run_is_said_and_its_record_is_shown(tmp_path):
    shutil.copytree(RECORDED, tmp_path / "rec")
    text = open(report.render(str(tmp_path / "rec"), str(tmp_path / "out"))).read()
    assert "| tta_variants | not run |" in text and "**failed** (not run: tta_variants" not in text
    shutil.copy(tmp_path / "rec" / "time_to_accuracy.json", tmp_path / "rec" / "tta_variants.json")
    text = open(report.render(str(tmp_path / "rec"), str(tmp_path / "out"))).read()
    section = text.split("## Time to accuracy: the variants")[1].split("\n## ")[0]
    variants = _rec("time_to_accuracy")["result"]["variants"]["variants"]
    assert variants and all(f"`{v}`" in section for v in variants)
    assert "| ASHL" in section  # the strategy as published it is measured against


def test_bsp_gets_a_budget_over_twice_ashls_time_in_make_bench():
    """ASHL <= 0.5x BSP can only be told when BSP's unreached runs count as more than twice ASHL's time."""
    tta = {b.name: b for b in suite.BENCHES}["time_to_accuracy"]
    args = time_to_accuracy.parser().parse_args(list(tta.full))
    assert tta_plan.budget_of("bsp", args) >= 2 * 64 > tta_plan.budget_of("ashl", args)


def test_the_homogeneous_cluster_has_its_own_budget_in_make_bench():
    """homo4's devices are each slower than edge4's fastest: at edge4's budget neither strategy reached
    the target, and the homogeneous check compared two budgets. Its runs get a longer one, recorded."""
    tta = {b.name: b for b in suite.BENCHES}["time_to_accuracy"]
    args = time_to_accuracy.parser().parse_args(list(tta.full))
    homo = {n: tta_plan.budget_of(n, args, homogeneous=True) for n in ("ashl", "adsp", "bsp")}
    assert homo == {n: args.homo_budget_s for n in homo} and args.homo_budget_s >= 1.3 * args.budget_s
    assert tta_plan.budget_of("adsp", args) == args.budget_s  # the heterogeneous cluster's as before
    rows = time_to_accuracy.summary("ashl", [], homo["ashl"])
    assert rows["budget_s"] == args.homo_budget_s  # each strategy's record says which budget it had


def test_the_report_sums_make_bench_without_the_variants(rendered):
    """`make bench`'s time (issue 16: at most an hour) as the report's records give it: every benchmark's
    latest time, the variant table (its own make target) left out."""
    _, text = rendered
    records = {n: _rec(n) for n in (b.name for b in suite.BENCHES) if os.path.exists(os.path.join(RECORDED, n + ".json"))}
    expected = sum(r.get("seconds") or 0 for n, r in records.items() if n != "tta_variants")
    assert report.make_bench_seconds({**records, "tta_variants": {"seconds": 1e6}}) == pytest.approx(expected)
    assert f"`make bench` as recorded here (the sum of its benchmarks' latest times): {expected:.0f} s" in text


def test_planner_section_shows_every_layout_and_the_prediction_check(tmp_path):
    def lay(pred, meas):
        return {"predicted_step_ms": pred, "measured_median_step_ms": meas, "predicted_over_measured": pred / meas,
                "uncalibrated_over_measured": 1.0, "steps": 15}

    res = {"model": "vgg", "dataset": "cifar10", "batch": 16, "cluster": "layouts/lan4.yaml",
           "layouts": {"planned": lay(100.0, 95.0), "even": lay(110.0, 100.0), "alone:edge0": lay(60.0, 80.0)},
           "planned_over_even_throughput": 1.05, "prediction_max_error": 0.25, "uncalibrated_max_error": 0.4,
           "repeats": 1, "repeat_max_errors": [0.25],
           "planned_layout": {"devices": ["edge0", "edge1"], "sizes": {"conv1": [20, 12], "fc1": "replicated"}}}
    res["planned_layouts"] = [res["planned_layout"]]
    text, plots = report.planner_section({"status": "ok", "result": res}, str(tmp_path))
    for k in ("planned", "even", "alone:edge0"):
        assert f"| {k} |" in text
    assert "Largest prediction error: 25.0% (issue 15: within 15%): **not met**; uncalibrated 40.0%." in text
    assert "Uncalibrated ÷ measured" in text
    assert "The one-group plan: edge0, edge1, conv1 [20, 12]." in text
    assert plots == ["planner.png"]
    assert "rounds" not in text  # a record of one round
    res.update(repeats=3, repeat_max_errors=[0.25, 0.1, 0.3], planned_layouts=[res["planned_layout"]] * 3)
    text, _ = report.planner_section({"status": "ok", "result": res}, str(tmp_path))
    assert "median over 3 rounds" in text and "each round's largest error: 25.0%, 10.0%, 30.0%." in text
    # each round plans on its own profile: when the plans differ, each is named
    whole = {"devices": ["edge0"], "sizes": {"conv1": "replicated"}}
    res.update(planned_layouts=[whole, res["planned_layout"], res["planned_layout"]])
    text, _ = report.planner_section({"status": "ok", "result": res}, str(tmp_path))
    assert ("The one-group plan of each round: round 1: edge0, every layer whole; round 2: edge0, edge1, conv1 [20, 12]; "
            "round 3: edge0, edge1, conv1 [20, 12].") in text
    res.update(planned_layouts=[res["planned_layout"]] * 3)
    text, _ = report.planner_section({"status": "ok", "result": res}, str(tmp_path))
    assert "The one-group plan: edge0, edge1, conv1 [20, 12]." in text and "of each round" not in text


def test_the_planner_section_separates_the_machines_drift_from_the_models_error(tmp_path):
    def lay(by_round):
        return {"predicted_step_ms": 100.0, "measured_median_step_ms": 100.0, "predicted_over_measured": by_round[1],
                "predicted_over_measured_by_round": by_round, "steps": 15}

    res = {"model": "vgg16", "dataset": "digits32", "batch": 32, "cluster": "layouts/pi4.yaml",
           "layouts": {"planned": lay([0.92, 1.1]), "alone:a": lay([0.95, 1.2]), "alone:c": lay([1.0, 1.5])},
           "prediction_max_error": 0.2, "uncalibrated_max_error": 0.3, "repeats": 2, "repeat_max_errors": [0.1, 0.5],
           "planned_layouts": [{"devices": ["a"], "sizes": {}}],
           "calibration": {"whole_step_ms": {"a": 7000.0}}}
    got = sections.drift_by_round(res)
    # round 2: the calibrated device's own step was predicted 1.2x: the others relative to that
    assert got == {"device": "a", "drift": [0.95, 1.2], "relative_max_errors": [0.053, 0.25],
                   "worst": ["alone:c", "alone:c"]}
    text, _ = report.planner_section({"status": "ok", "result": res}, str(tmp_path))
    assert "`alone:a`'s predicted ÷ measured is the same step at profiling over" in text
    assert "0.95, 1.2 by round" in text and "each round's largest error: 5.3% (`alone:c`), 25.0% (`alone:c`)." in text
    assert "c timed no whole step while profiling" in text
    res["calibration"]["whole_step_ms"]["c"] = 9000.0
    assert "timed no whole step" not in report.planner_section({"status": "ok", "result": res}, str(tmp_path))[0]
    del res["calibration"]  # records without a calibrated device alone: nothing to relate to
    assert sections.drift_by_round(res) is None


def test_planner_layouts_are_medians_over_rounds():
    planner = load("planner")

    def lay(pred, meas, steps=15):
        return {"predicted_step_ms": pred, "measured_median_step_ms": meas, "predicted_over_measured": pred / meas,
                "uncalibrated_step_ms": pred, "uncalibrated_over_measured": pred / meas, "steps": steps,
                "examples_per_sec": 16e3 / meas, "devices": ["edge0"], "sizes": {}}

    rounds = [{"even": lay(100.0, 80.0), "alone:edge0": lay(60.0, 60.0)},
              {"even": lay(100.0, 100.0), "alone:edge0": lay(60.0, 50.0)},
              {"even": lay(90.0, 100.0), "alone:edge0": lay(60.0, 55.0)}]
    out = planner.over_repeats(rounds)
    assert out["even"]["predicted_over_measured"] == 1.0  # the median of 1.25, 1.0, 0.9
    assert out["even"]["predicted_over_measured_by_round"] == [1.25, 1.0, 0.9]
    assert out["even"]["measured_median_step_ms"] == 100.0 and out["even"]["examples_per_sec"] == 160.0
    assert out["even"]["steps"] == 45 and out["even"]["rounds"] == 3
    assert planner.max_error(out, "predicted_over_measured") == 0.091  # alone: median of 1.0, 1.2, 1.091
    assert planner.max_error(rounds[0], "predicted_over_measured") == 0.25  # one round alone would fail 15%


def test_the_final_accuracy_column_says_on_how_many_test_images(rendered):
    _, text = rendered
    assert "Final accuracy, median (all test images)" in text  # the recorded run evaluated on the whole test set
    report_tta = load("report_tta")
    assert report_tta.final_header({"final_eval_examples": 1000}) == "Final accuracy (1,000 test images)"


def test_an_undecided_final_accuracy_check_points_to_make_bench_final(tmp_path):
    report_tta = load("report_tta")
    rec = _rec("time_to_accuracy")
    rec["result"]["checks"]["ashl_final_accuracy_within_1pt_of_bsp"].update({"pass": None, "undecided": "BSP never "
                                                                             "reached the target"})
    text, _ = report_tta.tta_section(rec, str(tmp_path))
    row = next(ln for ln in text.splitlines() if ln.startswith("| ashl_final_accuracy_within_1pt_of_bsp |"))
    assert "undecided: BSP never reached the target (decided against BSP converged by `make bench-final`" in row


def test_own_model_section_shows_each_seed_against_plain_tf():
    run = {"accuracy": 0.9567, "reached": True, "time_to_target_s": 57.0, "setup_s": 70.1,
           "planned": {"kind": "grid", "splits": {}}}
    split = dict(run, reached=False, planned={"kind": "hybrid", "splits": {"group0": {"fc1": {"pi1": 3, "pi2": 5}}}})
    rec = {"name": "own_model", "status": "ok", "seconds": 656, "command": "x", "result": {
        "model": "examples/lenet_bn.py", "dataset": "digits32", "cluster": "layouts/pi4.yaml", "epochs": 30,
        "lr_schedule": "constant", "plain_tf_one_device": {"0": 0.9702, "1": 0.9785}, "plain_tf_median": 0.97435,
        "target": 0.9644, "edgemesh": {"0": run, "1": split}, "edgemesh_median": 0.9567}}
    text, _ = report.own_model_section(rec, None)
    assert "| 0 | 0.9702 | 0.9567 | yes | 57.0 s | 70.1 s | grid, no split |" in text, text
    assert "| 1 | 0.9785 | 0.9567 | **no** |" in text and "hybrid (splits fc1)" in text, text
    assert "own_model" in report.NOT_IN_MAKE_BENCH and "own_model" in {b.name for b in suite.BENCHES}


def test_setup_section_shows_each_pair_and_the_medians():
    pair = lambda first, rerun, reused: {  # noqa: E731
        "first": {"setup_s": first, "train_s": 40.0, "accuracy": 0.97, "reused": False},
        "rerun": {"setup_s": rerun, "train_s": 38.5, "accuracy": 0.9722, "reused": reused}}
    rec = {"name": "setup_time", "status": "ok", "seconds": 700, "command": "x", "result": {
        "cluster": "layouts/pi4.yaml", "pairs": [pair(58.0, 24.0, True), pair(61.2, 26.0, False)],
        "median_setup_s": {"first": 59.6, "rerun": 25.0}, "rerun_over_first": 0.419}}
    text, _ = report.setup_section(rec, None)
    assert "| 1 | 58.0 s | 24.0 s | yes | 40.0 s | 38.5 s | 0.97 | 0.9722 |" in text, text
    assert "| 2 | 61.2 s | 26.0 s | **no** |" in text, text
    assert "Medians: first run 59.6 s, rerun 25.0 s (rerun / first 0.42)" in text, text
    assert "setup_time" in report.NOT_IN_MAKE_BENCH and "setup_time" in {b.name for b in suite.BENCHES}
