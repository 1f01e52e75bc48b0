"""bench/planning_time.py: the regimes' clusters, one run of the benchmark as `make bench` runs it (small),
its refusal of bad input and the report's section of it."""
import json
import os
import subprocess
import sys

import pytest
from bench_modules import load

from edgemesh_tf.models import get_model

planning_time = load("planning_time")
report_sections = load("report_sections")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = get_model("vgg", (32, 32, 3), 10)


def _run(*args):
    return subprocess.run([sys.executable, "-m", "bench.planning_time", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_a_regime_s_devices_share_the_link_and_span_the_speed_spread():
    profile = planning_time.cluster(SPEC, 64, 100.0, 8.0)
    total = sorted({round(sum(t.compute_ms for t in d.layers), 6) for d in profile.devices})
    assert len(total) == planning_time.LEVELS and abs(total[-1] / total[0] - 8.0) < 1e-6
    assert {d.bandwidth_mbit for d in profile.devices} == {100.0}
    assert len({d.memory_bytes for d in profile.devices}) == 3
    alike = planning_time.cluster(SPEC, 16, 10.0, 1.0)
    assert len({d.layers for d in alike.devices}) == 1


@pytest.mark.subprocess
def test_the_benchmark_plans_every_regime_and_the_report_shows_each(tmp_path):
    done = _run("--sizes", "6", "--links", "10,1000", "--spreads", "1,8")
    assert done.returncode == 0, done.stderr
    res = json.loads(done.stdout)
    assert [(r["link_mbit"], r["spread"]) for r in res["regimes"]] == [(10, 1), (10, 8), (1000, 1), (1000, 8)]
    assert all(r["devices"] == 6 and r["groups"] >= 1 and r["examples_per_sec"] > 0 for r in res["regimes"])
    assert res["same_plans_in_one_process"] and all(r["one_process_seconds"] > 0 for r in res["regimes"])
    assert res["max_seconds"] == max(r["seconds"] for r in res["regimes"])
    assert res["within_bound"] == (res["over_bound"] == 0)
    text, plots = report_sections.planning_time_section({"status": "ok", "result": res}, str(tmp_path))
    assert plots == [] and text.count("\n| 6 |") == 4
    over = dict(res, max_seconds=12.5, within_bound=False, over_bound=1)
    text = report_sections.planning_time_section({"status": "ok", "result": over}, str(tmp_path))[0]
    assert "**not met** in 1 of 4 regimes" in text and "Slowest: 12.5 s" in text
    other = dict(res, regimes=[dict(res["regimes"][0], same_plan_in_one_process=False)] + res["regimes"][1:],
                 same_plans_in_one_process=False)
    text = report_sections.planning_time_section({"status": "ok", "result": other}, str(tmp_path))[0]
    assert text.count("(**another plan**)") == 1 and ", **with another plan**." in text


@pytest.mark.subprocess
def test_bad_input_names_the_option():
    done = _run("--spreads", "0.5")
    assert done.returncode != 0 and "--spreads [0.5]" in done.stderr
    done = _run("--workers", "0")
    assert done.returncode != 0 and "--workers 0" in done.stderr
