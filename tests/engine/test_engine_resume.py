"""Killing the chief (SIGKILL, mid-run) and restarting it: the job resumes from the latest checkpoint
with the same phase, and loses at most one checkpoint interval."""
import os
import signal
import subprocess
import sys
import time

import pytest

from edgemesh_tf.engine.core import records
from edgemesh_tf.engine.core.records import read

pytestmark = [pytest.mark.emulator, pytest.mark.subprocess]

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CKPT_S, EVAL_S = 1.5, 0.5


def _cmd(logdir, budget_s):
    return [sys.executable, "-m", "edgemesh_tf.cli.main", "train", "--cluster", os.path.join(ROOT, "layouts/edge2.yaml"),
            "--sync", "ashl", "--shl_loss", "0.4", "--logdir", logdir, "--time_budget_s", str(budget_s),
            "--checkpoint_interval_s", str(CKPT_S), "--eval_interval_s", str(EVAL_S), "--wait_timeout_s", "30"]


def test_chief_killed_mid_run_resumes_from_latest_checkpoint_with_its_phase(tmp_path):
    logdir = str(tmp_path / "run")
    env = dict(os.environ, PYTHONPATH=ROOT)
    os.makedirs(logdir)
    log = open(os.path.join(logdir, "first.log"), "w")
    first = subprocess.Popen(_cmd(logdir, 120), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            ckpts = read(logdir, records.Checkpoint)
            if len(ckpts) >= 3 and ckpts[-1].phase == "shl":
                break
            if first.poll() is not None:
                with open(os.path.join(logdir, "first.log")) as f:
                    raise AssertionError("the first run ended early: %s" % f.read()[-3000:])
            time.sleep(0.2)
        else:
            raise AssertionError("no checkpoint in SHL within 240 s: %s" % read(logdir)[-3:])
        time.sleep(1.0)  # mid-way to the next checkpoint
    finally:
        first.send_signal(signal.SIGKILL)  # the process we started, by its pid
        first.wait(30)
        log.close()
    before = read(logdir)
    last_ckpt = records.of_kind(before, records.Checkpoint)[-1]
    last_t = max(r.t for r in before if hasattr(r, "t"))
    assert last_t - last_ckpt.t <= CKPT_S + EVAL_S + 1.0  # at most one interval (plus one tick of slack) lost

    second = subprocess.run(_cmd(logdir, last_ckpt.t + 4.0), cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=240)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    after = read(logdir)[len(before):]
    resume = after[0]
    assert isinstance(resume, records.Resume)
    assert resume.checkpoint == last_ckpt.path
    assert resume.phase == last_ckpt.phase == "shl"
    assert abs(resume.elapsed_s - last_ckpt.t) < 0.01
    assert resume.global_steps == last_ckpt.global_steps
    # no re-profiling, no new AHL: the run continues in SHL and its clock continues from the checkpoint
    assert not records.of_kind(after, records.Phase)
    evals = records.of_kind(after, records.Eval)
    assert evals and all(r.phase == "shl" and r.t >= last_ckpt.t for r in evals)
    final = after[-1]
    assert isinstance(final, records.Final) and [p for p, _, _ in final.phase_transitions] == ["profiling", "ahl", "shl"]
    assert final.global_steps > last_ckpt.global_steps
    assert "resuming from" in second.stdout
    # TensorBoard's text tab holds the phase switches of the first run (profiling -> AHL -> SHL)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    total = EventAccumulator(os.path.join(logdir, "tb", "total"), size_guidance={"tensors": 0})
    total.Reload()
    switches = [t.tensor_proto.string_val[0].decode() for t in total.Tensors("phase_switches")]
    assert any("profiling → ahl" in t for t in switches) and any("ahl → shl" in t for t in switches), switches
