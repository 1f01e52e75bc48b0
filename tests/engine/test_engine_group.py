"""A group's warm-up, before the chief starts the clock, runs every graph signature of a training
round. TF builds an executor the first time it sees a set of fetches and feeds; on a slow device
that build took about 0.5 s, and when it landed in the first timed iteration it was counted as
training and inflated ASHL's profile of that device (300 ms/iter measured against 27 ms)."""
import math
import os
import time

import numpy as np

from edgemesh_tf.cluster.spec import load_cluster
from edgemesh_tf.engine.config import SyncConfig
from edgemesh_tf.engine.runtime.group import GroupRunner
from edgemesh_tf.engine.runtime.job import default_groups, job_config
from edgemesh_tf.engine.core.rules import GroupControl
from edgemesh_tf.mesh.compat import tf

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class RecordingSession:
    """Stands in for the session to the servers: records each run's signature (the fetched tensors
    and operations, and the fed placeholders) and answers zeros of the fetched shapes."""

    def __init__(self):
        self.signatures = []

    def run(self, fetches, feeds=None, options=None):
        time.sleep(0.01)  # a run takes time, as over a link
        names = tuple(sorted(f.name for f in tf.nest.flatten(fetches) if f is not None))
        self.signatures.append((names, tuple(sorted(k.name for k in (feeds or {})))))
        return tf.nest.map_structure(
            lambda f: np.zeros(f.shape.as_list(), f.dtype.as_numpy_dtype) if isinstance(f, tf.Tensor) else None,
            fetches)


def test_warm_up_runs_every_signature_of_a_round(tmp_path):
    cluster = load_cluster(os.path.join(ROOT, "layouts", "edge2.yaml"))
    cfg = job_config(cluster, default_groups(cluster, 8), sync=SyncConfig(strategy="ashl"), logdir=str(tmp_path))
    runner = GroupRunner(cfg, 0, "grpc://127.0.0.1:1")  # the session is never opened
    sess = RecordingSession()
    runner._warm_up(sess)
    warm_up_s = runner._last_round_s
    assert warm_up_s >= 0.01 * len(sess.signatures)  # reported as the round time until a round is measured
    runner._report(sess, loss=float("nan"))
    assert runner._last_round_s == warm_up_s
    runner._wait(sess, lambda v: True, "the start signal (test)")
    before_start = set(sess.signatures)

    sess.signatures.clear()
    for ratio in (1.0, 0.5):  # a dense and a compressed push
        vals = runner._read(sess)
        vals["control/" + runner.name] = np.asarray(GroupControl(local_steps=3, ratio=ratio, scale=0.5,
                                                                 share=1.0).to_vector())
        runner._one_round(sess, vals)
    in_rounds = set(sess.signatures)
    assert runner._round == 2 and runner.totals["steps"] == 6 and math.isnan(runner._last_loss) is False
    assert len(in_rounds) >= 6  # read, pull, copy in, iteration, copy out, dense and top-k push
    assert in_rounds <= before_start, "signatures first run in a timed round: %s" % sorted(in_rounds - before_start)


def test_a_long_round_sends_heartbeats_between_iterations(tmp_path):
    """A round longer than a share of lost_after_s reports between its iterations, so that the
    chief does not take a long round (ASHL's AHL: 69 iterations, 12 s on edge0) for silence."""
    cluster = load_cluster(os.path.join(ROOT, "layouts", "edge2.yaml"))
    reports = {}
    for lost_after_s in (0.05, 100.0):
        cfg = job_config(cluster, default_groups(cluster, 8), sync=SyncConfig(strategy="ashl"), logdir=str(tmp_path),
                         lost_after_s=lost_after_s)
        runner = GroupRunner(cfg, 0, "grpc://127.0.0.1:1")
        sess = RecordingSession()
        runner._warm_up(sess)
        runner._report(sess, loss=float("nan"))
        calls = []
        report = runner._report
        runner._report = lambda s, loss, done=False: (calls.append(loss), report(s, loss, done))
        vals = runner._read(sess)
        vals["control/" + runner.name] = np.asarray(GroupControl(local_steps=8, ratio=1.0, scale=0.5,
                                                                 share=1.0).to_vector())
        runner._one_round(sess, vals)
        reports[lost_after_s] = len(calls)
    assert reports[0.05] >= reports[100.0] + 3, reports  # (the profiling round reports once at its end anyway)


def test_a_warm_process_reuses_a_graph_across_seeds_only(tmp_path):
    """A warm process keeps the graphs it built: a job that differs only in its seed (which draws
    initial values no step reads) reuses one; another group, option or restart container builds its own."""
    cluster = load_cluster(os.path.join(ROOT, "layouts", "edge2.yaml"))

    def runner(index=0, restart=0, seed=0, **sync):
        cfg = job_config(cluster, default_groups(cluster, 8), sync=SyncConfig(strategy="ashl", **sync),
                         logdir=str(tmp_path), seed=seed)
        return GroupRunner(cfg, index, "grpc://127.0.0.1:1", restart=restart)

    first = runner(seed=3)
    assert runner(seed=4).g is first.g and runner(seed=4)._setup[1][0] == "graph reused"
    others = [runner(index=1).g, runner(restart=1).g, runner(error_feedback=not first.cfg.sync.error_feedback).g]
    assert all(g is not first.g for g in others) and len({id(g) for g in others}) == 3
