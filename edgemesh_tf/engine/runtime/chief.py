"""The chief: the shell around the decisions (decide.py) that talks to the parameter server.

It initialises the parameter server (from the latest checkpoint under `<logdir>/checkpoints` if
there is one, with the strategy state saved there), waits for the groups, then every `TICK_S`
writes its heartbeat, reads the groups' reports and the ps counters, hands them with the finished
evaluations (evaluator.py, a thread) to `Decisions.step` and carries out the actions it returns:
board writes, ps counters, records (records.py: `<logdir>/chief.jsonl`, TensorBoard, the caller's
`emit`), checkpoints, the launcher's rejoin of lost groups (its restarts go into the next snapshot).
At the stop it raises the stop flag at once (an evaluation in flight is cancelled, not waited for),
pulls the global model at the stop, evaluates it on the whole test set, waits for the groups' last
pushes and hands their reports to the "final" stage, whose actions checkpoint and finish the final
record. Of its machine it uses `step`, `state` and `restore` only.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from typing import Callable, Mapping

import numpy as np

from edgemesh_tf.cluster.rpc import run_idempotent
from edgemesh_tf.data import load_dataset
from edgemesh_tf.engine.core import decide, records
from edgemesh_tf.training import checkpoint
from edgemesh_tf.engine.config import JobConfig
from edgemesh_tf.engine.runtime.evaluator import Evaluator, ReplicaLocks, evaluate, held_out_indices
from edgemesh_tf.engine.runtime.graph import build_replica_graph
from edgemesh_tf.engine.runtime.report import JobReport
from edgemesh_tf.mesh.compat import tf
from edgemesh_tf.mesh.layout import single_device_layout
from edgemesh_tf.models import initial_weights, load_model

TICK_S = 0.1
PROBE_S = 3.0  # a parameter server that cannot answer a counter read in this time is gone
EVAL_BATCH = 120
LOSS_SUBSET = 512


def _close_quietly(sess) -> None:
    with contextlib.suppress(tf.errors.OpError):  # the ps (or the master) is gone: nothing left to release
        sess.close()


class PSLost(RuntimeError):
    """The parameter server stopped answering; the message names its task."""


class Chief:
    """See the module docstring. emit(record): every record (e.g. records.print_line);
    exited_groups(): {group: what happened} of group processes that ended; wait_groups(timeout_s):
    returns once the group processes have left after the stop flag; rejoin({lost group: clock s
    declared lost}, t) -> [records]: the launcher restarts what it can. request_stop(why) (e.g. from
    a SIGTERM handler) ends training at the next tick, with a checkpoint."""

    def __init__(self, cfg: JobConfig, target: str, emit: Callable[[records.Record], None] = lambda rec: None,
                 exited_groups: Callable[[], dict] = dict, wait_groups: Callable[[float], None] = lambda t: None,
                 rejoin: Callable[[dict, float], list] = lambda lost, t: [],
                 before_start: Callable[[], None] = lambda: None,
                 check_servers: Callable[[], None] = lambda: None,
                 memory_peaks: Callable[[], Mapping[str, int]] = dict):
        self.cfg, self.target = cfg, target
        self.exited_groups, self.wait_groups, self.rejoin = exited_groups, wait_groups, rejoin
        self.before_start = before_start  # called once every group is ready, before the clock starts
        self.check_servers = check_servers  # raises RuntimeError naming a device whose server exited (the testbed's)
        self.memory_peaks = memory_peaks  # {device: peak bytes since the clock started} where the testbed knows them
        self.stop_request = self.t0 = None  # why to stop (str); monotonic s training began
        self.elapsed_before = 0.0  # s trained before a resume (the Resume record's)
        self.phase = ""  # the phase on the board (the last WriteGlobal's): each tick's heartbeat carries it
        self._restarted: dict[str, list[str]] = {}  # the launcher's restarts, for the next snapshot
        self._checkpoint = ""  # the latest checkpoint saved
        self._replica = ReplicaLocks()  # evaluations (a thread) and checkpoints
        self.data = load_dataset(cfg.dataset, cfg.data_path)
        self.spec = spec = load_model(cfg.model, self.data.image_shape, self.data.num_classes)
        self.g = build_replica_graph(spec, single_device_layout(cfg.chief_device), EVAL_BATCH, cfg.group_names,
                                     ps_device=cfg.ps_device, learning_rate=cfg.learning_rate, momentum=cfg.momentum,
                                     seed=cfg.seed, group=None, container="chief")
        idx = np.random.RandomState(cfg.seed).permutation(len(self.data.train_x))[:LOSS_SUBSET]
        self.loss_x, self.loss_y = self.data.train_x[idx], self.data.train_y[idx]
        sub, final = held_out_indices(len(self.data.test_x), cfg.seed, cfg.eval_examples, cfg.final_eval_examples)
        self.eval_x, self.eval_y = self.data.test_x[sub], self.data.test_y[sub]  # the evaluations' subset
        self.final_x, self.final_y = self.data.test_x[final], self.data.test_y[final]
        self.ckpt_dir = os.path.join(cfg.logdir, "checkpoints")
        self.report = JobReport(cfg, spec)
        self.emit = records.Emitter(emit).open(cfg.logdir, self.report.record)
        self.machine = decide.Decisions(cfg, self.g.ps.dense_push_bytes)
        self._actions = {decide.ProbePs: lambda s, a, t: self._probe_ps(s),
                         decide.WriteControls: lambda s, a, t: self.g.board.write_controls(s, a.controls, t),
                         decide.WriteGlobal: self._write_phase,
                         decide.ResetCounters: lambda s, a, t: self.g.ps.reset_counters(s, t),
                         # at a round's start a group has pulled as often as it committed
                         decide.SetCounters: lambda s, a, t: self.g.ps.set_counters(s, a.group, a.commits, a.commits, t),
                         decide.Evaluated: lambda s, a, t: self._evaluated(a),
                         decide.SaveCheckpoint: lambda s, a, t: self._save(s, a),
                         decide.Rejoin: lambda s, a, t: self._rejoin(a)}

    def request_stop(self, why: str) -> None:
        self.stop_request = why

    def elapsed(self) -> float:
        return self.elapsed_before + (time.monotonic() - self.t0)

    def _act(self, sess, action, timeout_s: float | None = None) -> None:
        """Carries out one of the machine's actions (a record is emitted); timeout_s: of its board and
        counter writes (default the ps timeout)."""
        if isinstance(action, records.Record):
            self.emit(action)
        else:
            self._actions[type(action)](sess, action, self.cfg.ps_timeout_s if timeout_s is None else timeout_s)

    def _rejoin(self, action: decide.Rejoin) -> None:
        for rec in self.rejoin(action.lost_at, action.t):
            if isinstance(rec, records.Restarted):
                self._restarted[rec.group] = list(rec.devices)
            self.emit(rec)

    # -- the parameter server --

    def _run(self, sess, fetches, feeds=None):
        """Everything the chief runs is a read or a whole-value assign, so it may be retried; when it
        fails, a probe of the ps tells whether the parameter server is gone (PSLost names it)."""
        what = "chief, on the ps %s / chief %s" % (self.cfg.ps_device, self.cfg.chief_device)
        try:
            return run_idempotent(sess, fetches, feeds, timeout_s=self.cfg.ps_timeout_s, what=what)
        except (TimeoutError, tf.errors.OpError) as e:
            self._probe_ps(sess, getattr(e, "message", None) or str(e))
            raise

    def _probe_ps(self, sess, error: str = "") -> None:
        """Raises PSLost unless the parameter server answers a read within a few seconds."""
        try:
            run_idempotent(sess, self.g.counters["version"], timeout_s=PROBE_S, what="probe of the ps")
        except (TimeoutError, tf.errors.OpError) as e:
            last = error or getattr(e, "message", None) or str(e)
            name = self.cfg.device_names.get(self.cfg.ps_device)
            raise PSLost("the parameter server %s did not answer for %.0f s; stopping the job (restart it to "
                         "resume from the latest checkpoint in %s). Last error: %s"
                         % (self.cfg.ps_device + (" (%s)" % name if name else ""), self.cfg.ps_timeout_s, self.ckpt_dir,
                            last.splitlines()[0])) from None

    def _write_global(self, sess, stop=False, heartbeat=None, timeout_s=None):
        self.g.board.write_global(sess, self.phase, stop, time.time() if heartbeat is None else heartbeat,
                                  self.cfg.ps_timeout_s if timeout_s is None else timeout_s)

    def _write_phase(self, sess, action: decide.WriteGlobal, timeout_s: float) -> None:
        self.phase = action.phase
        self._write_global(sess, heartbeat=action.heartbeat, timeout_s=timeout_s)

    def _read(self, sess) -> tuple[dict, dict]:
        """(the groups' reports, the ps counters)."""
        vals = self._run(sess, {**self.g.board.stats_fetches(), **self.g.counters})
        return self.g.board.stats_of(vals), {k: vals[k] for k in self.g.counters}

    # -- the global model --

    def _weights(self, sess) -> dict[str, np.ndarray]:
        with self._replica.masters:
            self._run(sess, self.g.pull)
            return self._run(sess, {n: v.read_value() for n, v in self.g.masters.items()})

    def _evaluate(self, sess, full: bool = False,
                  cancelled: Callable[[], bool] = lambda: False) -> tuple[float, float] | None:
        """The global model's (accuracy on the evaluation subset or the final one (full), training-subset
        loss); None if cancelled() turned true."""
        def copy():
            self._run(sess, self.g.pull)
            self._run(sess, self.g.train.copy_weights_to_slices)
        x, y = (self.final_x, self.final_y) if full else (self.eval_x, self.eval_y)
        return self._replica.evaluation(copy, lambda: evaluate(
            lambda f, feeds: self._run(sess, f, feeds), self.g.train, x, y, self.loss_x, self.loss_y, EVAL_BATCH,
            cancelled))

    def _evaluated(self, action: decide.Evaluated) -> None:
        self.report.eval(action.record, action.totals, action.controls)
        self.emit(action.record)

    def _restore(self, sess) -> dict[str, np.ndarray]:
        prefix = checkpoint.latest(self.ckpt_dir)
        if prefix is None:
            self._run(sess, self.g.train.init_op)
            return {**self._run(sess, {n: v.read_value() for n, v in self.g.masters.items()}),
                    **initial_weights(self.spec)}
        weights, state = checkpoint.load(prefix)
        why = checkpoint.mismatch(prefix, weights, state, self.cfg.group_names,
                                  {n: v.shape.as_list() for n, v in self.g.masters.items()})
        if why:
            raise ValueError(why)
        resume = self.machine.restore(state, prefix, time.monotonic())
        self.elapsed_before, self.phase = resume.elapsed_s, resume.phase
        self.emit(resume)
        return weights

    def _save(self, sess, action: decide.SaveCheckpoint) -> None:
        elapsed = self.elapsed() if action.at_s is None else action.at_s
        state = self.machine.state(action.totals, elapsed)
        self._checkpoint = checkpoint.save(self.ckpt_dir, self._weights(sess), state)
        self.emit(records.Checkpoint(t=round(elapsed, 3), path=self._checkpoint, phase=action.phase,
                                     global_steps=state["global_steps"]))

    # -- the job --

    def run(self) -> records.Final:
        """Trains to a stop condition; returns the final record. Raises PSLost (recorded first)
        when the parameter server is gone."""
        sess = tf.Session(self.target, graph=self.g.train.graph, config=tf.ConfigProto(
            allow_soft_placement=False, device_filters=["/job:ps", "/job:chief"]))
        close = sess.close
        try:
            try:
                return self._run_session(sess)
            except (TimeoutError, tf.errors.OpError) as e:
                self._probe_ps(sess, getattr(e, "message", None) or str(e))
                raise
        except PSLost as e:
            self.emit(records.PsLost(t=round(self.elapsed(), 3) if self.t0 else 0.0, error=str(e)))
            # closing a session whose ps is gone blocks for 30 s (and may raise): leave that to a thread
            close = threading.Thread(target=_close_quietly, args=(sess,), daemon=True).start
            raise
        finally:
            close()
            self.emit.close()

    def _run_session(self, sess) -> records.Final:
        cfg = self.cfg
        self._run(sess, self.g.local_init)
        weights = self._restore(sess)
        self.g.board.initialize(sess, cfg.wait_timeout_s)
        for action in self.machine.step(decide.Snapshot(self.elapsed_before, time.monotonic(), stage="setup")):
            self._act(sess, action, cfg.wait_timeout_s)  # the controls and the phase
        self.g.ps.initialize(sess, weights, timeout_s=cfg.wait_timeout_s, token=cfg.job_token)
        self._wait_for_groups(sess)
        self.before_start()
        self.g.ps.reset_counters(sess, cfg.wait_timeout_s)
        self.report.start(self.elapsed_before)  # renders the layout picture (~0.5 s): set-up, not training
        self.t0 = time.monotonic()
        for action in self.machine.step(decide.Snapshot(self.elapsed_before, self.t0, stage="start")):
            self._act(sess, action)
        why, stop_t = self._loop(sess)  # the stop flag is up
        # The final accuracy is the global model's at the stop, pulled now: a round still in flight would
        # push work done after it (past the budget, or after the target was reached). The groups finish
        # that round (up to a dense push over the slowest link) while the chief evaluates.
        at_stop = self._evaluate(sess, full=True)
        with self._replica.masters:  # the model that evaluation measured: what an export writes
            checkpoint.save(os.path.join(cfg.logdir, checkpoint.FINAL_MODEL),
                            self._run(sess, {n: v.read_value() for n, v in self.g.masters.items()}),
                            {"accuracy": at_stop[0] if at_stop else None}, keep=1)
        # their last pushes go into the checkpoint; one silent for lost_after_s would be declared lost anyway
        self.wait_groups(min(cfg.wait_timeout_s, cfg.lost_after_s))
        stats, counters = self._read(sess)
        final = None
        for action in self.machine.step(decide.Snapshot(stop_t, time.monotonic(), stats, counters,
                                                        evals=[(stop_t, *at_stop)], stop_request=why, stage="final")):
            if isinstance(action, decide.Finish):
                final = dataclasses.replace(action.record, checkpoint=self._checkpoint)
            else:
                self._act(sess, action)
        final = dataclasses.replace(final, **self.report.end(final, final.groups, stop_t, self.memory_peaks()))
        self.emit(final)
        return final

    def _wait_for_groups(self, sess) -> None:
        deadline = time.monotonic() + self.cfg.startup_timeout_s
        while True:
            try:  # a server killed while its group sets up (past its memory budget) would leave this wait idle
                self.check_servers()
            except RuntimeError as e:
                raise RuntimeError("chief: a device's server died while the groups started: %s" % e) from None
            exited = self.exited_groups()
            if exited:
                raise RuntimeError("chief: group(s) failed to start: " + "; ".join(
                    "group %s: %s" % kv for kv in exited.items()))
            missing = [g for g, s in self._read(sess)[0].items() if s["heartbeat"] <= 0]
            if not missing:
                return
            if time.monotonic() > deadline:
                raise TimeoutError("chief: groups %s did not connect to the parameter server %s within %.0f s"
                                   % (missing, self.cfg.ps_device, self.cfg.startup_timeout_s))
            time.sleep(TICK_S)

    def _loop(self, sess) -> tuple[str, float]:
        """Ticks until the machine says stop; raises the stop flag and returns (why, clock s of the stop).
        An evaluation in flight is cancelled, not waited for."""
        evaluator = Evaluator(lambda cancelled: self._evaluate(sess, cancelled=cancelled), self.elapsed,
                              self.cfg.eval_interval_s).start()
        try:
            while True:
                time.sleep(TICK_S)
                self._write_global(sess)
                stats, counters = self._read(sess)
                restarted, self._restarted = self._restarted, {}
                snap = decide.Snapshot(self.elapsed(), time.monotonic(), stats, counters, self.exited_groups(),
                                       evaluator.results(), self.stop_request, restarted=restarted)
                for action in self.machine.step(snap):
                    if isinstance(action, decide.Stop):
                        if action.failed:
                            raise RuntimeError(action.why)
                        stop_t = self.elapsed()
                        self._write_global(sess, stop=True)
                        return action.why, stop_t
                    self._act(sess, action)
        finally:
            evaluator.stop(self.cfg.ps_timeout_s)
