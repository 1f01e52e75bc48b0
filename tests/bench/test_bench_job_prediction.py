"""bench/job_prediction.py: each main job's rows of predicted beside measured figures, their largest
errors, and the report's section of them (from a recorded run: ASHL on pi4 with one and two groups)."""
import json
import os
import types

import pytest
from bench_modules import load

import edgemesh_tf as em
from edgemesh_tf.engine import records

job_prediction = load("job_prediction")
report_sections = load("report_sections")
RECORDED = os.path.join(os.path.dirname(__file__), "recorded", "job_prediction.json")


def _recorded() -> dict:
    with open(RECORDED) as f:
        return json.load(f)["result"]


def test_the_largest_error_is_taken_per_key_over_every_row():
    runs = [{"strategy": "ashl", "rows": [{"phase": "ahl", "error": 0.1}, {"phase": "shl", "error": 0.3}]},
            {"strategy": "bsp", "rows": [{"phase": "train", "error": 0.05}]},
            {"strategy": "ashl", "rows": [{"phase": "ahl", "error": 0.2}]}]
    assert job_prediction.largest(runs, lambda run, row: run["strategy"]) == {"ashl": 0.3, "bsp": 0.05}
    assert job_prediction.largest(runs, lambda run, row: row["phase"]) == {"ahl": 0.2, "shl": 0.3, "train": 0.05}


def test_a_job_s_rows_carry_their_error_and_the_plan(monkeypatch, tmp_path):
    """job_rows runs the main job through the public API with the number of groups asked for, and
    turns each row's measured / predicted ratio into an error; a row without a ratio is left out."""
    asked = {}

    def run(cluster, model, emit, **kw):
        asked.update(kw, cluster=cluster, model=model)
        emit(records.Checkpoint(t=10.0, path="ckpt-1", phase="ahl", global_steps=6))
        emit(records.Lost(t=25.5, group="g", devices=["a"], why="no report"))  # one group lost on the way
        return {"predicted_vs_measured": {"rows": [{"phase": "ahl", "group": "g", "ratio": 0.8},
                                                   {"phase": "shl", "group": "g", "ratio": None}]},
                "planned": {"kind": "grid"}, "examples_per_sec": 100.0, "phase_transitions": [["ahl", 0, 0.0]]}
    monkeypatch.setattr(em, "run", run)
    args = types.SimpleNamespace(model="vgg_wide", dataset="digits", budget_s=5.0)
    got = job_prediction.job_rows("layouts/pi4.yaml", 2, "ashl", args, str(tmp_path))
    assert asked["groups"] == 2 and asked["strategy"] == "ashl" and asked["target_accuracy"] is None
    assert [r["error"] for r in got["rows"]] == [0.2] and got["phases"] == ["ahl"]
    assert got["lost"] == [{"group": "g", "t": 25.5, "why": "no report"}]


def test_the_section_shows_every_row_and_says_whether_the_bound_holds(tmp_path):
    res = _recorded()
    text, plots = report_sections.job_prediction_section({"status": "ok", "result": res}, str(tmp_path))
    rows = [r for run in res["runs"] for r in run["rows"]]
    assert len(rows) >= 2 and plots == []
    for r in rows:
        assert f"| {r['phase']} | {r['group']} |" in text
    assert f"{res['max_error'] * 100:.1f}%" in text and ("**not met**" in text) == (not res["within_bound"])
    assert "lost during a run" not in text
    lost = dict(res, runs=[dict(res["runs"][0], lost=[{"group": "pi1", "t": 25.5, "why": "no report for 10 s"}])])
    assert "lost during a run" in report_sections.job_prediction_section({"status": "ok", "result": lost},
                                                                         str(tmp_path))[0]
    within = dict(res, within_bound=True, max_error=0.1)
    assert ": pass;" in report_sections.job_prediction_section({"status": "ok", "result": within}, str(tmp_path))[0]


def test_the_api_plans_the_number_of_groups_it_is_given():
    """em.run takes the main job's own options; a bad one is refused before any server starts."""
    with pytest.raises(ValueError, match="groups"):
        em.run("layouts/pi4.yaml", "vgg_wide", groups=0)
