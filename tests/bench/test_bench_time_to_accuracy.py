"""bench/time_to_accuracy.py without a testbed: the schedule and time estimate (bench/tta_plan.py), each
run's figures, the JSON it assembles (keys, statistics, checks) and bench/report.py rendering that JSON."""
import json
import os
import re
import shutil
import types

import pytest

from bench_modules import load

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORDED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "recorded")


tta = load("time_to_accuracy")
tta_plan = load("tta_plan")
report = load("report")


def _args(*argv):
    return tta.parser("--quick" in argv).parse_args(list(argv))


# ---- schedule and estimate ----

def test_default_plan_has_the_issues_seed_counts():
    plan = tta_plan.plan_of(_args())
    het = plan["heterogeneous"]
    count = lambda runs, n: sum(1 for name, _ in runs if name == n)  # noqa: E731
    assert count(het, "ashl") >= 8 and count(het, "adsp") >= 8
    assert count(het, "bsp") == 3
    assert {n for n, _ in plan["homogeneous"]} == {"ashl", "adsp"} and len(plan["homogeneous"]) == 4
    assert sorted(s for n, s in het if n == "ashl") == list(range(count(het, "ashl")))
    for name in tta_plan.DEFAULT_VARIANTS:  # each interleaved with its strategy as published
        assert count(het, name) == _args().variant_seeds >= 2
    assert {tta_plan.base_of(n) for n in tta_plan.DEFAULT_VARIANTS} == {"ashl", "adsp"}


def test_runs_are_interleaved_by_seed_and_rotated():
    order = tta_plan.schedule([("a", 2), ("b", 2), ("c", 1)])
    assert order == [("a", 0), ("b", 0), ("c", 0), ("b", 1), ("a", 1)]
    seeds = [s for _, s in tta_plan.schedule([("ashl", 8), ("adsp", 8), ("bsp", 3)])]
    assert seeds == sorted(seeds)  # every strategy's seed k before any seed k + 1


def test_default_benchmark_is_estimated_within_80_minutes(capsys):
    e = tta_plan.estimate(_args())
    assert e["capped_s"] <= 80 * 60 and e["capped_s"] == e["full_s"]
    assert e["variant_runs"] == e["variant_runs_in_cap"] == 2 * len(tta_plan.DEFAULT_VARIANTS)
    assert tta_plan.estimate(_args("--quick"))["capped_s"] <= 6 * 60
    capped = tta_plan.estimate(_args("--max_minutes", "50"))
    assert capped["capped_s"] <= 50 * 60 and capped["variant_runs_in_cap"] < capped["variant_runs"]
    tta.main(["--estimate"])  # the command line prints the estimate
    assert json.loads(capsys.readouterr().out) == e


def test_the_cap_skips_variant_runs_never_strategy_runs(monkeypatch):
    args = _args("--max_minutes", "10", "--seeds", "2", "--other_seeds", "1", "--variant_seeds", "1",
                 "--homo_cluster", "", "--variants", "ashl_project,ashl+replan")
    plan = tta_plan.plan_of(args)
    now = [1000.0]
    monkeypatch.setattr(tta_plan.time, "monotonic", lambda: now[0])
    clock = tta_plan.Clock(args, plan)
    made = []
    for name, seed in plan["heterogeneous"]:
        if clock.allows(name, seed):
            made.append(name)
            now[0] += 150.0  # every run takes 150 s: 5 strategy runs alone are 12.5 min
            clock.done(name, 150.0)
    assert sorted(made) == ["adsp", "adsp", "ashl", "ashl", "bsp"]
    assert clock.skipped == ["ashl_project seed 0", "ashl+replan seed 0"]
    roomy = tta_plan.Clock(_args("--max_minutes", "0"), plan)
    assert all(roomy.allows(n, s) for n, s in plan["heterogeneous"])


def test_tail_lets_the_chief_see_three_evaluations():
    assert tta_plan.tail_for(8.0) == pytest.approx(20.0)
    assert tta_plan.CONSECUTIVE == 3


def test_quick_changes_only_the_defaults():
    a = _args("--quick")
    assert a.dataset == "digits" and a.seeds == 2
    assert _args("--quick", "--seeds", "3").seeds == 3
    d = _args()
    assert (d.dataset, d.model, d.target, d.seeds, d.other_seeds, d.variant_seeds) == ("digits32", "vgg_m", 0.90, 8, 3, 2)


def test_unknown_names_and_variants_without_their_strategy_are_refused(capsys):
    for argv in (["--strategies", "ashl,foo"], ["--variants", "zz"],
                 ["--strategies", "ashl", "--variants", "adsp+constant_lr"]):
        with pytest.raises(SystemExit) as exited:
            tta.main(argv + ["--estimate"])
        assert exited.value.code
    err = capsys.readouterr().err
    assert "--strategies: unknown ['foo']" in err and "--variants: unknown ['zz']" in err
    assert _args("--strategies", "ashl,adsp").strategies == ["ashl", "adsp"]


def test_every_strategy_and_variant_is_a_valid_sync_config():
    pytest.importorskip("tensorflow")
    for name in tta_plan.CONFIGS:
        cfg = tta_plan.sync_config(name)
        assert cfg.strategy == tta_plan.CONFIGS[name]["strategy"]
    project = tta_plan.sync_config("ashl_project")
    assert (project.compression, project.compress_in_ahl, project.phase_shares, project.replan,
            project.error_feedback, project.staleness_rule, project.lr_schedule) == (
        "budget", True, True, True, True, "project", "constant")
    published = tta_plan.sync_config("ashl")
    assert (published.compression, published.error_feedback, published.replan) == ("ashl", False, False)
    assert tta_plan.sync_config("adsp").lr_schedule == "cosine" == published.lr_schedule  # one optimizer for both
    assert tta_plan.sync_config("adsp+constant_lr").lr_schedule == "constant"


# ---- one run's figures ----

def _final(reach, target=0.93, spacing=8.0, end=None, dip=False, budget=90.0):
    """A chief's final record whose accuracy crosses `target` at `reach` (None: never)."""
    end = end if end is not None else (budget if reach is None else reach + 2.3 * spacing)
    curve, t = [], 0.0
    while t <= end:
        acc = 0.5 if reach is None or t < reach else 0.95
        if dip and reach is not None and abs(t - reach - spacing) < 1e-6:
            acc = 0.9
        curve.append([round(t, 3), acc])
        t += spacing
    curve.append([round(end, 3), curve[-1][1]])
    first = next((p[0] for p in curve if p[1] >= target), None)
    return {"curve": curve, "time_to_target_s": first, "accuracy": curve[-1][1], "t": end, "why": "x",
            "bytes_sent": 1_000_000, "wait_s": 1.5, "phase_transitions": [["ahl", 0, 0.0], ["shl", 10, 12.0]],
            "group_exit_codes": {"edge0": 0}}


def test_run_record_uses_three_evaluations_in_a_row():
    rec = tta.run_record(_final(16.0), 0, 0.93, 70.0, "/tmp/x")
    assert rec["time_to_target_s"] == 16.0 and rec["reached"] and rec["eval_spacing_s"] == 8.0
    dipped = tta.run_record(_final(16.0, dip=True), 1, 0.93, 70.0, "/tmp/x")
    assert dipped["first_at_target_s"] == 16.0 and dipped["time_to_target_s"] is None
    assert dipped["not_reached"] == "fell below the target after reaching it"
    short = tta.run_record(_final(16.0, end=20.0), 3, 0.93, 70.0, "/tmp/x")  # evaluations at 16 and 20 only
    assert short["time_to_target_s"] is None and short["not_reached"] == "stopped before 3 evaluations at target"
    assert rec["not_reached"] is None
    never = tta.run_record(_final(None), 2, 0.93, 120.0, "/tmp/x")
    assert never["time_to_target_s"] is None and never["first_at_target_s"] is None
    assert never["not_reached"] == "never at target"


# ---- the assembled JSON ----

ASHL = [24, 32, 40, 32, 24, 32, 24, 40]
ADSP = [48, 56, 48, 64, 56, 48, 56, None]
BSP = [None, None, 80]


def _cluster(path, times_by_name):
    runs = {n: [tta.run_record(_final(t), seed, 0.93, 60.0, "/tmp/x") for seed, t in enumerate(times)]
            for n, times in times_by_name.items()}
    return types.SimpleNamespace(path=path, runs=runs, spacings=[8.0], info={"cluster": path, "compute": "cgroup-v1",
                                                                             "network": "netns"})


def _assembled():
    args = _args()
    clusters = {"heterogeneous": _cluster("layouts/edge4.yaml", {
                    "bsp": BSP, "adsp": ADSP, "ashl": ASHL, "ashl_project": [24, 16, 24],
                    "ashl+error_feedback": [32, 40, 32], "adsp+constant_lr": [64, 56, 72]}),
                "homogeneous": _cluster("layouts/homo4.yaml", {"ashl": [24, 32, 24], "adsp": [32, 24, 24]})}
    args.variants = ["ashl_project", "ashl+error_feedback", "adsp+constant_lr"]
    args.budget_s, args.bsp_budget_s = 90.0, 150.0
    return tta.assemble(args, clusters, estimate=2500.0, wall=2400.0, workdir="/tmp/tta-x", interrupted=False)


def test_assembled_json_has_the_issues_keys():
    out = json.loads(json.dumps(_assembled()))  # plain JSON
    for key in ("ashl_over_adsp", "ashl_over_adsp_ci95", "ashl_over_adsp_p", "ashl_over_bsp", "ashl_over_bsp_ci95",
                "ashl_over_bsp_p", "homogeneous_ashl_over_adsp", "homogeneous_ashl_over_adsp_ci95",
                "homogeneous_ashl_over_adsp_p", "heterogeneous", "homogeneous", "variants", "checks",
                "all_checks_pass", "unreached_rule", "estimate_s", "wall_s"):
        assert key in out, key
    s = out["heterogeneous"]["strategies"]
    assert s["ashl"]["time_to_target_s"] == 32 and s["ashl"]["reached"] == "8/8"
    assert s["adsp"]["time_to_target_s"] == 56 and s["adsp"]["reached"] == "7/8"
    assert not s["adsp"]["time_is_lower_bound"]  # one unreached run of 8 does not move the median
    assert s["bsp"]["time_to_target_s"] == 150 and s["bsp"]["reached"] == "1/3"  # unreached = BSP's own budget
    assert s["bsp"]["time_is_lower_bound"]
    assert out["ashl_over_adsp"] == pytest.approx(round(32 / 56, 4))
    lo, hi = out["ashl_over_adsp_ci95"]
    assert lo <= out["ashl_over_adsp"] <= hi < 1.0
    assert 0 < out["ashl_over_adsp_p"] < 0.05
    assert out["ashl_over_bsp"] == pytest.approx(round(32 / 150, 4))
    assert out["budget_s"] == 90 and out["bsp_budget_s"] == 150
    assert out["eval_examples"] == tta_plan.EVAL_EXAMPLES == 500 and out["final_eval_examples"] == 1000
    assert len(s["ashl"]["runs"]) == 8 and s["ashl"]["times_s"] == ASHL


def test_variants_are_compared_with_their_strategy_as_published():
    v = _assembled()["variants"]["variants"]
    assert list(v) == ["ashl", "ashl_project", "ashl+error_feedback", "adsp", "adsp+constant_lr"]
    assert v["ashl_project"]["ratio_to_baseline"] == pytest.approx(24 / 32)
    assert v["ashl+error_feedback"]["ratio_to_baseline"] == pytest.approx(32 / 32)
    assert v["adsp+constant_lr"]["baseline"] == "adsp"
    assert v["adsp+constant_lr"]["ratio_to_baseline"] == pytest.approx(64 / 56, abs=1e-4)
    assert v["ashl_project"]["sync"]["replan"] is True
    assert len(v["ashl_project"]["ratio_to_baseline_ci95"]) == 2 and 0 < v["ashl_project"]["p"] <= 1


def test_the_homogeneous_check_is_undecided_when_neither_reaches_the_target():
    out = _assembled()
    assert out["checks"]["homogeneous_ashl_over_adsp_le_1.10"]["pass"] is True  # both reached there
    args = _args()
    args.budget_s = 90.0
    clusters = {"heterogeneous": _cluster("layouts/edge4.yaml", {"adsp": ADSP, "ashl": ASHL}),
                "homogeneous": _cluster("layouts/homo4.yaml", {"ashl": [None, None], "adsp": [None, None]})}
    out = tta.assemble(args, clusters, estimate=1.0, wall=1.0, workdir="/tmp/tta-x", interrupted=False)
    check = out["checks"]["homogeneous_ashl_over_adsp_le_1.10"]
    assert out["homogeneous_ashl_over_adsp"] == 1.0 and check["pass"] is None and "two budgets" in check["undecided"]
    assert not out["all_checks_pass"]


def test_checks_carry_value_threshold_and_result():
    checks = _assembled()["checks"]
    assert checks["adsp_median_ge_30s"] == {"value": 56, "threshold": ">= 30 s", "pass": True,
                                            "value_is_lower_bound": False}
    assert checks["ashl_reached_ge_7_of_8"]["pass"] and checks["adsp_reached_ge_7_of_8"]["pass"]
    assert checks["ashl_over_adsp_le_0.70"]["pass"]  # 0.571
    assert checks["ashl_over_adsp_ci95_upper_lt_1"]["pass"]
    assert checks["ashl_over_bsp_le_0.5"]["pass"]  # 32 / 90
    assert checks["homogeneous_ashl_over_adsp_le_1.10"]["value"] == pytest.approx(1.0)
    assert set(checks) >= {"ashl_final_accuracy_within_1pt_of_bsp"}


def test_a_failing_claim_fails_its_check():
    args = _args()
    args.variants = []
    clusters = {"heterogeneous": _cluster("layouts/edge4.yaml", {"adsp": [24, 32, 40], "ashl": [32, 40, 24]})}
    out = tta.assemble(args, clusters, 1.0, 1.0, "/tmp", False)
    assert out["ashl_over_adsp"] == pytest.approx(1.0)
    assert not out["checks"]["ashl_over_adsp_le_0.70"]["pass"]
    assert not out["checks"]["ashl_over_adsp_ci95_upper_lt_1"]["pass"]
    assert out["checks"]["adsp_median_ge_30s"]["pass"]  # 32 s
    assert out["all_checks_pass"] is False


# ---- the report of that JSON ----

@pytest.fixture(scope="module")
def rendered_v2(tmp_path_factory):
    root = tmp_path_factory.mktemp("v2")
    shutil.copytree(RECORDED, root / "rec")
    (root / "rec" / "time_to_accuracy.json").write_text(json.dumps(
        {"name": "time_to_accuracy", "status": "ok", "command": "python -m bench.time_to_accuracy", "seconds": 2400.0,
         "result": json.loads(json.dumps(_assembled()))}))
    path = report.render(str(root / "rec"), str(root / "out"))
    return root / "out", open(path).read(), _assembled()


def test_report_shows_the_ratios_cis_and_p_values(rendered_v2):
    _, text, out = rendered_v2
    for key in ("ashl_over_adsp", "ashl_over_bsp", "homogeneous_ashl_over_adsp"):
        m = re.search(r"`%s` = ([0-9]+(?:\.[0-9]+)?)" % key, text)
        assert m and m.group(1) == str(round(out[key], 4)), key
    row = next(ln for ln in text.splitlines() if ln.startswith("| ASHL ÷ ADSP | edge4 |"))
    lo, hi = out["ashl_over_adsp_ci95"]
    assert f"| {round(out['ashl_over_adsp'], 3)} | [{round(lo, 3)}, {round(hi, 3)}] | {round(out['ashl_over_adsp_p'], 4)} |" in row
    assert "holds in this run" in text
    ashl_row = next(ln for ln in text.splitlines() if ln.startswith("| ASHL |"))
    assert ashl_row.split("|")[-3].strip() == str(round(out["ashl_over_bsp"], 3))
    assert ashl_row.split("|")[-2].strip() == str(round(out["ashl_over_adsp"], 3))
    bsp_row = next(ln for ln in text.splitlines() if ln.startswith("| BSP |"))
    assert "≥ 150.0 s" in bsp_row and "| 1/3 |" in bsp_row
    assert "(median) on 500 test images)" in text


def test_report_shows_the_variants_and_checks(rendered_v2):
    _, text, out = rendered_v2
    row = next(ln for ln in text.splitlines() if ln.startswith("| the project's ASHL"))
    assert f"| {round(out['variants']['variants']['ashl_project']['ratio_to_baseline'], 3)} |" in row
    assert "`ashl_project` compression=budget" in row
    assert "| + error feedback |" in text
    adsp_row = next(ln for ln in text.splitlines() if ln.startswith("| ADSP, constant rate"))
    assert f"| {round(out['variants']['variants']['adsp+constant_lr']['ratio_to_baseline'], 3)} |" in adsp_row
    for name, c in out["checks"].items():
        assert f"| {name} |" in text
    assert "| adsp_median_ge_30s | 56.0 | >= 30 s | pass |" in text


def test_report_plots_per_seed_times(rendered_v2):
    out_dir, text, _ = rendered_v2
    for png in ("tta_seeds.png", "tta_edge4.png", "tta_homo4.png"):
        with open(out_dir / png, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", png
        assert f"({png})" in text


def test_final_accuracy_against_a_bsp_that_never_converged_is_undecided():
    args = _args()
    args.variants = []
    clusters = {"heterogeneous": _cluster("layouts/edge4.yaml", {"adsp": [48, 56], "ashl": [32, 40],
                                                                  "bsp": [None, None]})}
    out = tta.assemble(args, clusters, 1.0, 1.0, "/tmp", False)
    check = out["checks"]["ashl_final_accuracy_within_1pt_of_bsp"]
    assert check["pass"] is None and "no run" in check["undecided"]
    assert out["all_checks_pass"] is False
