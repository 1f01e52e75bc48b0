"""`edgemesh run`, the main job, on the default cluster (emulated pi4; the run is tests/conftest.py's
`main_job`, with the README's own model file): its summary matches its TensorBoard event files, a rerun
reuses the device profile, and TensorBoard shows the layout table, the layout picture and the throughput charts in headless
Chromium (screenshots saved in the run directory)."""
import json
import os
import subprocess
import sys

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from browser import DEEP_ELEMENTS, DEEP_TEXT, Chromium, free_port, wait_http  # noqa: E402

pytestmark = [pytest.mark.emulator, pytest.mark.subprocess]

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEVICES = ("jetson0", "pi1", "pi2", "pi3")  # layouts/pi4.yaml: 0.35, 0.25, 0.25 and 0.15 cores


@pytest.fixture(scope="module")
def main_run(main_job):
    logdir, out = main_job
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    with open(os.path.join(logdir, "summary.json")) as f:
        summary = json.load(f)
    return logdir, out.stdout, summary


def test_a_rerun_reuses_the_device_profile_and_sets_up_sooner(main_run, tmp_path):
    logdir, _, first = main_run
    out = subprocess.run([sys.executable, "-m", "edgemesh_tf.cli.main", "run", "--logdir", str(tmp_path / "rerun"),
                          "--model", "examples/my_cnn.py", "--time_budget_s", "6",
                          "--eval_interval_s", "0.5"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    with open(tmp_path / "rerun" / "summary.json") as f:
        rerun = json.load(f)
    cache = rerun["profile_cache"]
    assert cache["reused"] and cache["entry"] == first["profile_cache"]["entry"], cache  # the first run's profile
    # the first run recorded its groups' iteration times in the entry; this run kept the entry when it iterated
    # within 1.5x of them, else it dropped it and said which group was off (this machine's speed can move so)
    assert cache["profiled_iteration_ms"], cache
    if cache["off"]:
        assert cache["dropped"] == cache["entry"] and not os.path.exists(cache["entry"]), cache
        assert all(not 1 / 1.5 <= m / r <= 1.5 for r, m in cache["off"].values()), cache
    else:
        assert not cache["dropped"] and os.path.exists(cache["entry"]), cache
    assert "set-up reused the device profile measured" in out.stdout and "planned in" in out.stdout
    assert "profiled and planned in" not in out.stdout
    with open(os.path.join(logdir, "profile.json")) as a, open(tmp_path / "rerun" / "profile.json") as b:
        assert json.load(a) == json.load(b)
    if not first["profile_cache"]["reused"]:  # (an earlier job of the session may have profiled these devices)
        assert rerun["setup_s"] < first["setup_s"], (rerun["setup_s"], first["setup_s"])


def _events(logdir, run):
    ea = EventAccumulator(os.path.join(logdir, "tb", run), size_guidance={"scalars": 0, "tensors": 0, "images": 0})
    ea.Reload()
    return ea


def test_summary_is_printed_and_matches_the_event_files(main_run):
    logdir, stdout, summary = main_run
    assert "where the time went" in stdout and "tensorboard --logdir %s/tb" % logdir in stdout
    for f in ("plan.yaml", "profile.json", "summary.json"):
        assert os.path.exists(os.path.join(logdir, f))
    total = _events(logdir, "total")
    tags = total.Tags()
    for tag in ("accuracy", "loss", "phase", "examples_per_sec", "bytes_sent", "waiting_s", "hparams/final_accuracy"):
        assert tag in tags["scalars"], tag
    for tag in ("layout_table", "predicted_vs_measured", "custom_scalars__config__", "_hparams_/session_start_info"):
        assert tag in tags["tensors"], tag
    assert "layout_picture" in tags["images"]
    table = total.Tensors("layout_table")[-1].tensor_proto
    assert "| conv1 |" in table.string_val[0].decode() and not table.tensor_shape.dim  # one markdown document
    # the summary's figures are the event files' figures
    assert summary["accuracy"] == pytest.approx(total.Scalars("accuracy")[-1].value, abs=1e-4)
    assert summary["bytes_sent"] == pytest.approx(total.Scalars("bytes_sent")[-1].value, rel=1e-6)
    assert summary["train_s"] == pytest.approx(total.Scalars("hparams/train_s")[-1].value, abs=1e-3)
    # one group (the honest plan of this model here, tests/conftest.py) trains alone: one phase, no switches
    assert summary["predicted_vs_measured"]["groups"] == 1
    assert {s.value for s in total.Scalars("phase")} == {3.0}  # "train"
    assert [p for p, _, _ in summary["phase_transitions"]] == ["train"] and "phase_switches" not in tags["tensors"]
    assert "one group: nothing between groups to coordinate" in stdout
    # the plan's devices train; the planner may leave a device idle when the job is faster without it
    used = list(summary["devices"])
    assert sorted(used + summary["idle_devices"]) == sorted(DEVICES) and "jetson0" in used
    if summary["idle_devices"]:
        assert "idle" in stdout and all(d in stdout for d in summary["idle_devices"])
    rates = {}
    for group in {summary["devices"][d]["group"] for d in used}:  # a run per group (named by its devices)
        ea = _events(logdir, group)
        for tag in ("group/examples_per_sec", "group/waiting_s", "group/bytes_sent", "group/compression_ratio"):
            assert tag in ea.Tags()["scalars"], (group, tag)
    for d in used:  # and a run per device
        ea = _events(logdir, d)
        for tag in ("device/compute_gflops", "device/utilisation", "device/waiting_s", "device/bytes_sent"):
            assert tag in ea.Tags()["scalars"], (d, tag)
        values = [s.value for s in ea.Scalars("device/compute_gflops")]
        rates[d] = sum(values) / len(values)
        assert summary["devices"][d]["compute_gflops"] > 0
        # the plan's memory beside the device's peak while training (its memory group's charge on the testbed)
        assert summary["devices"][d]["predicted_memory_mib"] > 0 and summary["devices"][d]["peak_memory_mib"] > 0
    assert "memory MiB: predicted -> peak while training" in stdout
    # the emulated speeds hold: jetson0 (0.35 cores) is faster than a pi (0.25 cores) both on the model's layers
    # (each timed alone, a robust median of a few runs) and on the whole step (timed on the devices that hold the
    # model; pi3's 192 MiB does not). Only the order is checked: 1.4x is expected, but one profile's figures move
    # by up to 1.8x between runs on this machine (jetson0's fc2 469 and 852 ms), and 1.10-1.58x were measured
    with open(os.path.join(logdir, "profile.json")) as f:
        profiled = {d["name"]: d for d in json.load(f)["devices"]}
    layers_ms = {d: sum(t["compute_ms"] for t in p["layers"]) for d, p in profiled.items()}
    assert min(layers_ms[d] for d in ("pi1", "pi2", "pi3")) > layers_ms["jetson0"] > 0, layers_ms
    # (a pi whose budget does not hold its whole step beside what the layer timings left it holding is
    # not timed whole: profiling/profiler.py's whole_steps_that_fit)
    whole = {d: p["whole_step_ms"] for d, p in profiled.items() if p.get("whole_step_ms")}
    assert "jetson0" in whole and len(whole) >= 2, whole
    assert min(ms for d, ms in whole.items() if d != "jetson0") > whole["jetson0"] > 0, whole
    # and while training, jetson0 computes at least 1.2x as fast as the slowest device used (a split gives it
    # the larger share); the planner may train on jetson0 alone, and then there is no second rate to compare
    slowest = min(used, key=lambda d: rates[d])
    if slowest != "jetson0":
        assert rates["jetson0"] >= 1.2 * rates[slowest], rates
        assert summary["devices"]["jetson0"]["compute_gflops"] >= 1.2 * summary["devices"][slowest]["compute_gflops"]


def test_the_plans_cost_of_each_phase_stands_beside_what_the_run_measured(main_run):
    """Per phase and group: the predicted and measured rates and terms of a round (engine/core/job_cost.py), in
    summary.json, on the console and in TensorBoard; a gap over 20% names the term that missed."""
    logdir, stdout, summary = main_run
    pvm = summary["predicted_vs_measured"]
    groups = {d["group"] for d in summary["devices"].values()}
    assert pvm["groups"] == len(groups)
    # a row per phase and group that committed in it (a group's rounds count when they commit)
    pairs = {(r["phase"], r["group"]) for r in pvm["rows"]}
    assert pairs == {("train", g) for g in groups}, pairs
    for r in pvm["rows"]:
        p, m = r["predicted"], r["measured"]
        assert p["examples_per_sec"] > 0 and m["examples_per_sec"] > 0 and m["step_ms"] > 0
        assert r["ratio"] == pytest.approx(m["examples_per_sec"] / p["examples_per_sec"], rel=0.02)
        assert (r["missed"] is not None) == (abs(r["ratio"] - 1) > 0.2)
        if r["missed"]:
            assert r["missed"]["term"] in ("step", "commit", "wait")
    assert pvm["flagged"] == sum(r["missed"] is not None for r in pvm["rows"])
    assert "predicted -> measured per phase and group" in stdout
    assert stdout.count("GAP > 20%") == pvm["flagged"]
    table = _events(logdir, "total").Tensors("predicted_vs_measured")[-1].tensor_proto.string_val[0].decode()
    assert table.count("\n") == len(pvm["rows"]) + 1 and "| train |" in table


def test_a_group_alone_trains_within_15_percent_of_its_own_step_rate(main_run):
    """Issue 45's one-group job, measured in one run: no parameter-server round trip on its path (one
    pull; a push every --solo_commit_s), so its examples/s over the training time is within 15% of its
    own step rate (examples per second of compute)."""
    logdir, _, summary = main_run
    (group, time_of), = summary["group_time"].items()
    with open(os.path.join(logdir, "groups", group + ".jsonl")) as f:
        rounds = [json.loads(line) for line in f]
    examples = sum(r["steps"] for r in rounds) * 32
    assert len(rounds) >= 2 and all(r["wait"] == "none" and r["ratio"] == 1.0 for r in rounds)
    assert time_of["examples_per_sec"] >= 0.85 * examples / time_of["compute_s"], time_of


@pytest.mark.browser
def test_tensorboard_shows_layout_and_throughput_in_headless_chromium(main_run):
    logdir, _, _ = main_run
    port = free_port()
    tb = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", os.path.join(logdir, "tb"),
                           "--host", "127.0.0.1", "--port", str(port), "--load_fast", "false"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shots = os.path.join(logdir, "screenshots")
    os.makedirs(shots, exist_ok=True)
    try:
        url = "http://127.0.0.1:%d/" % port
        wait_http(url + "data/logdir", 120, "tensorboard")
        browser = Chromium()
        try:
            browser.goto(url + "#text")
            browser.wait_for(lambda t: t and "conv1" in t and "GFLOP per step" in t, DEEP_TEXT, 90,
                             "the layout table (text plugin)")
            browser.screenshot(os.path.join(shots, "layout_table.png"))
            browser.goto(url + "#images")
            browser.wait_for(lambda els: any("individualImage" in e["src"] and e["width"] > 100 for e in els or []),
                             DEEP_ELEMENTS % '["img"]', 90, "the layout picture (images plugin)")
            browser.screenshot(os.path.join(shots, "layout_picture.png"))
            browser.goto(url + "#custom_scalars")
            browser.wait_for(lambda t: t and "compute rate (GFLOP/s)" in t and "utilisation" in t, DEEP_TEXT, 90,
                             "the throughput charts (custom scalars)")
            browser.wait_for(lambda els: len([e for e in els or [] if e["width"] > 100]) >= 2,
                             DEEP_ELEMENTS % '["canvas", "svg"]', 90, "drawn throughput charts")
            browser.screenshot(os.path.join(shots, "throughput.png"))
        finally:
            browser.close()
    finally:
        tb.terminate()
        tb.wait(30)
    for name in ("layout_table.png", "layout_picture.png", "throughput.png"):
        with open(os.path.join(shots, name), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
