"""Keras out: the trained global model of a run as ``<export_dir>/model.keras`` and a SavedModel,
with its test accuracy computed by plain Keras.

``export_run`` starts ``python -m edgemesh_tf.engine.runtime.export`` (Keras runs eagerly and the job's
processes run TensorFlow in graph mode, so the export gets a fresh interpreter), waits for it at most
``timeout_s`` and returns what it printed: {"keras", "saved_model", "keras_accuracy", "checkpoint"}.
The weights are the model the run's final evaluation measured (``<logdir>/final_model``), else the
newest checkpoint under ``<logdir>/checkpoints``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from edgemesh_tf.training import checkpoint


def export_run(model: str, dataset: str | None, data_path: str | None, logdir: str, export_dir: str,
               timeout_s: float = 300.0) -> dict:
    """Exports the run at ``logdir`` of ``model`` (the job's model reference) to ``export_dir`` and
    evaluates it on ``dataset``'s test set (None: no evaluation; a ``.keras`` model only). Raises
    RuntimeError naming the checkpoint and the export's last error line when it fails, or
    TimeoutError after ``timeout_s``."""
    prefix = checkpoint.latest(os.path.join(logdir, checkpoint.FINAL_MODEL)) or checkpoint.latest(
        os.path.join(logdir, "checkpoints"))
    if prefix is None:
        raise RuntimeError("export: no model under %s (final_model/ or checkpoints/) to export" % logdir)
    cmd = [sys.executable, "-m", "edgemesh_tf.engine.runtime.export", "--model", model, "--checkpoint", prefix,
           "--export_dir", export_dir] + (["--dataset", dataset] if dataset else []) + (
        ["--data_path", data_path] if data_path else [])
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise TimeoutError("export: writing %s from %s took over %.0f s" % (export_dir, prefix, timeout_s)) from None
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError("export of %s to %s failed: %s" % (prefix, export_dir, last))
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--dataset")
    ap.add_argument("--data_path")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--export_dir", required=True)
    a = ap.parse_args(argv)
    from edgemesh_tf.data import load_dataset
    from edgemesh_tf.models import load_model
    from edgemesh_tf.models.keras_in import read_spec
    from edgemesh_tf.models.keras_out import export_keras, keras_accuracy

    data = load_dataset(a.dataset, a.data_path) if a.dataset else None
    spec = load_model(a.model, data.image_shape, data.num_classes) if data else read_spec(a.model)
    weights, _ = checkpoint.load(a.checkpoint)
    out = dict(export_keras(spec, weights, a.export_dir), checkpoint=a.checkpoint)
    if data:
        out["keras_accuracy"] = round(keras_accuracy(out["keras"], data.test_x, data.test_y), 4)
    print(json.dumps(out))


if __name__ == "__main__":
    try:
        main()
    except ValueError as e:
        sys.exit("export: %s" % e)
