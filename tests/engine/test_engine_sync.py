"""Hybrid training on the emulated edge2 testbed (fast + slow worker, ps, chief): BSP's global model
is exactly SGD on the concatenated batches; SSP's gate holds every group within s commits of the
slowest."""
import json
import os

import numpy as np
import pytest

from edgemesh_tf.data import load_dataset
from edgemesh_tf.engine.core import records, rules
from edgemesh_tf.training import checkpoint
from edgemesh_tf.engine.config import GroupSpec, SyncConfig
from edgemesh_tf.engine.runtime.group import shard_stream
from edgemesh_tf.engine.runtime.job import job_config, run_job
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


def _alone(cluster, em, logdir, **kw):
    """A job of the fast worker alone (ASHL's, constant learning rate): its final record and round log."""
    fast = cluster.device("fast")
    groups = (GroupSpec("fast", Layout(mesh=(("model", 1),), devices=(fast.device_string,)).to_dict(), BATCH["fast"]),)
    sync = SyncConfig(strategy="ashl", lr_schedule="constant", solo_commit_s=kw.pop("solo_commit_s"),
                      solo_overlap=kw.pop("solo_overlap", True))
    cfg = job_config(cluster, groups, sync=sync, eval_interval_s=1.0, logdir=logdir, eval_examples=7, **kw)
    final = run_job(cfg, cluster, testbed=em, fast_setup=True)
    assert final["group_exit_codes"] == {"fast": 0}
    assert [p for p, _, _ in final["phase_transitions"]] == ["train"]  # no ASHL phases for one group
    log = _rounds(logdir, "fast")
    assert all(r["phase"] == "train" and r["wait"] == "none" and r["ratio"] == 1.0 and r["accepted"] for r in log)
    return cfg, final, log


@pytest.mark.parametrize("overlap", [True, False])
def test_a_group_alone_pulls_once_and_its_pushes_hold_exactly_its_model(edge2, tmp_path, overlap):
    """A job of one group (rules.py, "solo"): rounds of solo_commit_s of training, each a dense push, and no
    pull after the first: the ps's model is exactly single-process SGD on the group's batches. With
    overlap (the default) each push runs while the next round trains (engine/runtime/solo_commit.py),
    every few ms here: a push that read the model at one time and moved the anchors by a later reading
    (a push and then a rebase) loses the steps between them, and this test fails."""
    cluster, em = edge2
    lr = 0.05
    cfg, final, log = _alone(cluster, em, str(tmp_path), solo_commit_s=0.02, learning_rate=lr, momentum=0.0,
                             max_steps=40, time_budget_s=60, solo_overlap=overlap)
    totals = final["groups"]["fast"]
    assert len(log) >= 3 and totals["commits"] == len(log)
    assert totals["bytes_received"] == totals["bytes_sent"] / len(log)  # one pull, of a dense push's bytes
    steps = sum(r["steps"] for r in log)
    weights, _ = checkpoint.load(final["checkpoint"])
    data = load_dataset("digits")
    spec = get_model("vgg", data.image_shape, data.num_classes)
    stream = shard_stream(data, {"fast": 1.0}, "fast", BATCH["fast"], cfg.seed * 1000)
    ref = build_train_graph(spec, Layout(mesh=(("model", 1),), devices=("/cpu:0",)), BATCH["fast"],
                            learning_rate=lr, momentum=0.0, seed=cfg.seed)
    with tf.Session(graph=ref.graph) as sess:
        restore_or_init(sess, ref, None)
        for _ in range(steps):
            xb, yb = next(stream)
            sess.run(ref.train_op, {ref.images: xb, ref.labels: yb})
        expected = sess.run(ref.weights)
    for name, w in expected.items():
        np.testing.assert_allclose(weights[name], w, atol=1e-4, rtol=0, err_msg=name)


def test_a_group_alone_trains_within_15_percent_of_its_own_step_rate(edge2, tmp_path):
    """Issue 45's "one-group job": its examples/s over the training time against its own step rate
    (examples per second of compute), in one run: no parameter-server round trip on its path (a push
    every solo_commit_s, beside the next round's iterations)."""
    cluster, em = edge2
    _, final, log = _alone(cluster, em, str(tmp_path), solo_commit_s=1.0, time_budget_s=4.0)
    totals, time_of = final["groups"]["fast"], final["group_time"]["fast"]
    assert len(log) >= 2 and totals["bytes_received"] == totals["bytes_sent"] / len(log)
    assert time_of["examples_per_sec"] >= 0.85 * totals["examples"] / time_of["compute_s"], time_of
