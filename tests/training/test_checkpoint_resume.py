"""Checkpoint resume across processes: 20 steps, save, a new process trains 20 more; the losses
equal those of 40 uninterrupted steps. Also: a checkpoint restores under a different layout."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytestmark = [pytest.mark.subprocess]

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def _train(tmp, steps, layout, ckpt=None):
    cmd = [sys.executable, "-m", "edgemesh_tf.cli.main", "train", "--layout", os.path.join(ROOT, "layouts", layout),
           "--steps", str(steps), "--eval_every", "0", "--seed", "7"]
    if ckpt:
        cmd += ["--checkpoint_dir", ckpt]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def test_resume_equals_uninterrupted(tmp_path):
    ckpt = str(tmp_path / "ckpt")
    first = _train(tmp_path, 20, "digits_uneven.yaml", ckpt)
    second = _train(tmp_path, 40, "digits_uneven.yaml", ckpt)
    whole = _train(tmp_path, 40, "digits_uneven.yaml")
    resumed = [r["loss"] for r in first + second if "step" in r]
    straight = [r["loss"] for r in whole if "step" in r]
    assert [r["step"] for r in second if "step" in r] == list(range(21, 41))
    assert len(resumed) == len(straight) == 40
    np.testing.assert_allclose(resumed, straight, rtol=1e-5)
    # The checkpoint holds whole tensors: it restores under another layout (2x2) and continues.
    other = _train(tmp_path, 41, "digits_2x2.yaml", ckpt)
    assert [r["step"] for r in other if "step" in r] == [41]
    assert abs(other[0]["loss"] - straight[-1]) < 1.0
