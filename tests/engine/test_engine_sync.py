"""Hybrid training on the emulated edge2 testbed (fast + slow worker, ps, chief): BSP's global model
is exactly SGD on the concatenated batches; SSP's gate holds every group within s commits of the
slowest."""
import json
import os

import numpy as np
import pytest

from edgemesh_tf.data import load_dataset
from edgemesh_tf.engine import records, rules
from edgemesh_tf.training import checkpoint
from edgemesh_tf.engine.config import GroupSpec, SyncConfig
from edgemesh_tf.engine.group import shard_stream
from edgemesh_tf.engine.job import job_config, run_job
from edgemesh_tf.mesh.compat import tf
from edgemesh_tf.mesh.layout import Layout
from edgemesh_tf.models import get_model
from edgemesh_tf.training.graph import build_train_graph
from edgemesh_tf.training.loop import restore_or_init

pytestmark = [pytest.mark.emulator, pytest.mark.subprocess]

BATCH = {"fast": 24, "slow": 8}


def _groups(cluster):
    return tuple(GroupSpec(w.name, Layout(mesh=(("model", 1),), devices=(w.device_string,)).to_dict(), BATCH[w.name])
                 for w in cluster.workers)


def _rounds(logdir, group):
    with open(os.path.join(logdir, "groups", group + ".jsonl")) as f:
        return [json.loads(line) for line in f]


def test_bsp_equals_single_process_sgd_on_the_concatenated_batches(edge2, tmp_path):
    cluster, em = edge2
    rounds, lr = 4, 0.05
    cfg = job_config(cluster, _groups(cluster), sync=SyncConfig(strategy="bsp"), learning_rate=lr, momentum=0.0,
                     max_rounds=rounds, time_budget_s=120, eval_interval_s=1.0, logdir=str(tmp_path),
                     final_eval_examples=11)
    final = run_job(cfg, cluster, testbed=em, fast_setup=True)
    assert final["group_exit_codes"] == {"fast": 0, "slow": 0}
    assert abs(final["accuracy"] * 11 - round(final["accuracy"] * 11)) < 1e-3  # the final evaluation on 11 images
    for g in BATCH:
        log = _rounds(str(tmp_path), g)
        assert [r["round"] for r in log] == list(range(1, rounds + 1))
        assert all(r["wait"] == "barrier" and r["steps"] == 1 and r["accepted"] for r in log)
    weights, _ = checkpoint.load(final["checkpoint"])

    data = load_dataset("digits")
    spec = get_model("vgg", data.image_shape, data.num_classes)
    shares = rules.batch_shares(BATCH)
    streams = [shard_stream(data, shares, g.name, g.batch_size, cfg.seed * 1000 + i) for i, g in enumerate(cfg.groups)]
    ref = build_train_graph(spec, Layout(mesh=(("model", 1),), devices=("/cpu:0",)), sum(BATCH.values()),
                            learning_rate=lr, momentum=0.0, seed=cfg.seed)
    with tf.Session(graph=ref.graph) as sess:
        restore_or_init(sess, ref, None)
        for _ in range(rounds):
            parts = [next(s) for s in streams]
            xb = np.concatenate([p[0] for p in parts])
            yb = np.concatenate([p[1] for p in parts])
            sess.run(ref.train_op, {ref.images: xb, ref.labels: yb})
        expected = sess.run(ref.weights)
    assert set(expected) == set(weights)
    for name, w in expected.items():
        np.testing.assert_allclose(weights[name], w, atol=1e-4, rtol=0, err_msg=name)
    # and training moved the model: the comparison is not between two initial models
    with tf.Session(graph=ref.graph) as sess:
        restore_or_init(sess, ref, None)
        initial = sess.run(ref.weights)
    assert max(np.abs(weights[n] - initial[n]).max() for n in initial) > 1e-3


def test_ssp_never_runs_more_than_s_commits_ahead_of_the_slowest(edge2, tmp_path):
    cluster, em = edge2
    bound = 1
    cfg = job_config(cluster, _groups(cluster), sync=SyncConfig(strategy="ssp", staleness=bound),
                     time_budget_s=8.0, eval_interval_s=1.0, logdir=str(tmp_path), eval_examples=7)
    final = run_job(cfg, cluster, testbed=em, fast_setup=True)
    assert final["group_exit_codes"] == {"fast": 0, "slow": 0}
    # evaluations during training on a subset of 7 held-out images, the final one on all 360
    evals = records.read(str(tmp_path), records.Eval)
    assert len(evals) >= 4 and all(abs(e.accuracy * 7 - round(e.accuracy * 7)) < 1e-3 for e in evals[:-1])
    assert evals[-1].t == final["t"] and abs(final["accuracy"] * 360 - round(final["accuracy"] * 360)) < 0.02
    fast, slow = _rounds(str(tmp_path), "fast"), _rounds(str(tmp_path), "slow")
    assert len(fast) >= 5 and len(slow) >= 3
    for log in (fast, slow):
        for r in log:
            # when a round started, the group was at most `bound` commits ahead of the slowest
            assert r["commits_before"] - min(r["commits_seen"].values()) <= bound, r
    # the slow worker is ~3x slower: without the gate the fast one would be far ahead; with it, it waits
    assert sum(r["wait_s"] for r in fast) > 0.5
    assert len(fast) <= len(slow) + bound + 1
