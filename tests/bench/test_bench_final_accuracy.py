"""bench/final_accuracy.py's pure parts: when a run has converged, and the check from the runs."""
from bench_modules import load

final = load("final_accuracy")


def _curve(accs, dt=2.0):
    return [[i * dt, a] for i, a in enumerate(accs)]


def test_converged_when_the_last_quarter_adds_at_most_the_plateau():
    assert final.converged(_curve([0.1, 0.5, 0.8, 0.9, 0.93, 0.94, 0.942, 0.943, 0.944]))
    assert not final.converged(_curve([0.1, 0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9]))  # still climbing
    assert not final.converged(_curve([0.9, 0.9, 0.9]))  # too few evaluations to tell


def test_the_check_is_decided_only_against_a_converged_bsp():
    bsp = [{"accuracy": 0.95, "converged": True}, {"accuracy": 0.96, "converged": True}]
    got = final.decide([{"accuracy": 0.948, "converged": True}, {"accuracy": 0.95, "converged": True}], bsp)
    assert got["pass"] is True and got["difference"] == -0.006 and "undecided" not in got
    low = final.decide([{"accuracy": 0.92, "converged": True}] * 2, bsp)
    assert low["pass"] is False  # 3.5 points below
    still = final.decide([{"accuracy": 0.92, "converged": False}] * 2, bsp)
    assert still["pass"] is None and "lower bound" in still["undecided"]
    moving = final.decide([{"accuracy": 0.95, "converged": True}], [{"accuracy": 0.9, "converged": False}])
    assert moving["pass"] is None and "no converged reference" in moving["undecided"]
    assert final.decide([], bsp)["pass"] is None


def test_report_section_shows_runs_and_the_check(tmp_path):
    report = load("report")
    runs = {"ashl": [{"seed": 0, "limits": "as in layouts/edge4.yaml", "budget_s": 240.0, "global_steps": 900,
                      "accuracy": 0.951, "converged": True, "curve": [[0, 0.1], [100, 0.9], [240, 0.951]]}],
            "bsp": [{"seed": 0, "limits": "lifted", "budget_s": 240.0, "global_steps": 500, "accuracy": 0.955,
                     "converged": True, "curve": [[0, 0.1], [100, 0.93], [240, 0.955]]}]}
    res = {"cluster": "layouts/edge4.yaml", "dataset": "digits32", "model": "vgg_m", "batch": 32, "seeds": 1,
           "plateau": 0.005, "runs": runs, "check": final.decide(runs["ashl"], runs["bsp"])}
    text, plots = report.SECTIONS["final_accuracy"]({"status": "ok", "result": res}, str(tmp_path))
    assert "| ashl | 0 | as in layouts/edge4.yaml | 240 s | 900 | 95.1% | yes |" in text
    assert "| ASHL final accuracy within 1 point of BSP's | -0.004 (0.951 - 0.955) |" in text and "| pass |" in text
    assert plots == ["final_accuracy.png"]
    missing = report.SECTIONS["final_accuracy"]({"status": "not run", "error": "not run"}, str(tmp_path))[0]
    assert "Not run" in missing
    assert "final_accuracy" in report.NOT_IN_MAKE_BENCH
