"""The chief: owns the global model's life cycle, the phases, evaluation, checkpoints and logs.

It initialises the parameter server (from the latest checkpoint under `<logdir>/checkpoints` if
there is one, with the phase and controls saved there), starts the groups together, then every
`eval_interval_s` pulls the global model into its own replica, measures held-out accuracy and the
training loss on a fixed 512-example subset, and drives the strategy: ASHL's profiling -> AHL
(once every group has profiled) -> SHL (training loss <= shl_loss), ADSP's commit-rate search.
It stops the job at the target accuracy, the time budget or the step budget.

Records (JSON lines to `<logdir>/chief.jsonl`, and to `emit`): {"event": "eval" | "phase" |
"checkpoint" | "resume" | "final", ...}; times in s since training began (resumed runs continue
the count).
"""
from __future__ import annotations

import collections
import dataclasses
import json
import os
import threading
import time
from typing import Callable

import numpy as np

from edgemesh_tf.data import load_dataset
from edgemesh_tf.engine import checkpoint, rules
from edgemesh_tf.engine.config import JobConfig
from edgemesh_tf.engine.evaluator import Evaluator
from edgemesh_tf.engine.control import CUMULATIVE
from edgemesh_tf.engine.graph import build_replica_graph
from edgemesh_tf.engine.liveness import Liveness
from edgemesh_tf.engine.report import JobReport
from edgemesh_tf.cluster.rpc import run_idempotent
from edgemesh_tf.mesh.compat import tf
from edgemesh_tf.mesh.layout import Layout
from edgemesh_tf.models import get_model
from edgemesh_tf.sync import adsp, schedule

TICK_S = 0.1
PROBE_S = 3.0  # a parameter server that cannot answer a counter read in this time is gone
EVAL_BATCH = 120
LOSS_SUBSET = 512


def _close_quietly(sess) -> None:
    try:
        sess.close()
    except tf.errors.OpError:  # the ps (or the master) is gone: nothing left to release there
        pass


def _steps(totals) -> int:
    """Local iterations summed over the groups of `totals` ({group: cumulative stats})."""
    return int(sum(t["steps"] for t in totals.values()))


def _plan_view(controls) -> dict:
    """{group: {"H", "D", "R"}} of the live groups: what a re-plan changes."""
    return {g: {"H": c.local_steps, "D": round(c.share, 4), "R": round(c.ratio, 4)}
            for g, c in controls.items() if not c.lost}


class PSLost(RuntimeError):
    """The parameter server stopped answering; the message names its task."""


class Chief(Liveness):
    """See the module docstring. exited_groups(): {group: what happened} of group processes that
    have ended (called every tick); wait_groups(timeout_s): returns once the group processes have
    left after the stop flag; rejoin({lost group: monotonic time declared lost}): the launcher
    restarts what it can, returns records of what it did (called every tick). emit: receives every record (e.g. the terminal progress printer).
    request_stop(why) (e.g. from a SIGTERM handler) ends training at the next tick, with a checkpoint."""

    def __init__(self, cfg: JobConfig, target: str, emit: Callable[[dict], None] = lambda rec: None,
                 exited_groups: Callable[[], dict] = dict, wait_groups: Callable[[float], None] = lambda t: None,
                 rejoin: Callable[[dict], list] = lambda lost: []):
        self.cfg, self.target, self.emit = cfg, target, emit
        self.exited_groups, self.wait_groups = exited_groups, wait_groups
        self.stop_request: str | None = None
        self.rejoin = rejoin
        self._replica = threading.Lock()  # the chief's own replica: evaluations (a thread) and checkpoints
        self._init_liveness()
        self._timing_of: dict[str, schedule.WorkerTiming] = {}  # ASHL: each group's timing in the last plan with it
        self._incarnation: dict[str, tuple[float, dict]] = {}  # group -> (its process's start time, its last stats)
        self.t0 = None
        self._planned_ms: dict[str, float] = {}  # ASHL: each group's iteration time (ms) at the last plan
        self._drifting: dict[str, tuple[int, dict]] = {}  # group -> (evaluations off the plan in a row, totals then)
        self._eval_totals = None  # totals at the last evaluation
        self.sync = cfg.sync
        self.data = load_dataset(cfg.dataset, cfg.data_path)
        spec = get_model(cfg.model, self.data.image_shape, self.data.num_classes)
        layout = Layout(mesh=(("model", 1),), devices=(cfg.chief_device,))
        self.g = build_replica_graph(spec, layout, EVAL_BATCH, cfg.group_names, ps_device=cfg.ps_device,
                                     learning_rate=cfg.learning_rate, momentum=cfg.momentum, seed=cfg.seed,
                                     group=None, container="chief")
        rng = np.random.RandomState(cfg.seed)
        idx = rng.permutation(len(self.data.train_x))[:LOSS_SUBSET]
        self.loss_x, self.loss_y = self.data.train_x[idx], self.data.train_y[idx]
        self.ckpt_dir = os.path.join(cfg.logdir, "checkpoints")
        os.makedirs(cfg.logdir, exist_ok=True)
        self.log = open(os.path.join(cfg.logdir, "chief.jsonl"), "a")
        self.report = JobReport(cfg, spec)
        self.batch = {g.name: g.batch_size for g in cfg.groups}
        self.phase = rules.first_phase(self.sync)
        self.phases = schedule.PhaseController(self.sync.shl_loss)
        self.controls = rules.initial_controls(self.sync, self.batch)
        self.offsets = {g: {} for g in cfg.group_names}  # totals of earlier runs (resume)
        self.elapsed_before = 0.0
        self._plan_totals, self._plan_t = {}, 0.0
        self._phase_totals: dict = {}  # the totals when the current phase began
        self.history: list[tuple[float, float, float]] = []  # (elapsed s, accuracy, train loss)
        self.search = (adsp.CommitRateSearch(self.sync.shl_loss, initial=self.sync.adsp_commits, min_points=3)
                       if self.sync.strategy == "adsp" else None)

    # -- plumbing --

    def request_stop(self, why: str) -> None:
        self.stop_request = why

    def _ps_name(self) -> str:
        name = self.cfg.device_names.get(self.cfg.ps_device)
        return "%s (%s)" % (self.cfg.ps_device, name) if name else self.cfg.ps_device

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
            raise PSLost("the parameter server %s did not answer for %.0f s; stopping the job (restart it to "
                         "resume from the latest checkpoint in %s). Last error: %s"
                         % (self._ps_name(), self.cfg.ps_timeout_s, self.ckpt_dir, last.splitlines()[0])) from None

    def _record(self, rec: dict) -> None:
        self.log.write(json.dumps(rec) + "\n")
        self.log.flush()
        self.emit(rec)

    def elapsed(self) -> float:
        return self.elapsed_before + (time.monotonic() - self.t0)

    def _global(self, sess, stop=False, heartbeat=None):
        self.g.board.write_global(sess, self.phase, stop, time.time() if heartbeat is None else heartbeat,
                                  self.cfg.ps_timeout_s)

    def _stats(self, sess) -> tuple[dict, dict]:
        vals = self._run(sess, {**self.g.board.stats_fetches(), **self.g.counters})
        return self.g.board.stats_of(vals), vals

    def _totals(self, stats) -> dict[str, dict[str, float]]:
        for g, s in stats.items():  # a restarted group process counts from zero: keep what the last one did
            inc, last = self._incarnation.get(g, (s["incarnation"], None))
            if s["incarnation"] != inc and last is not None:
                self.offsets[g] = {k: self.offsets[g].get(k, 0.0) + last[k] for k in CUMULATIVE}
            self._incarnation[g] = (s["incarnation"], s)
        return {g: {k: v + (self.offsets[g].get(k, 0.0) if k in CUMULATIVE else 0.0) for k, v in s.items()}
                for g, s in stats.items()}

    # -- global model --

    def _weights(self, sess) -> dict[str, np.ndarray]:
        with self._replica:
            self._run(sess, self.g.pull)
            return self._run(sess, {n: v.read_value() for n, v in self.g.masters.items()})

    def _evaluate(self, sess) -> tuple[float, float]:
        """(held-out accuracy, mean training loss on the fixed subset) of the global model."""
        with self._replica:
            return self._evaluate_replica(sess)

    def _evaluate_replica(self, sess) -> tuple[float, float]:
        self._run(sess, self.g.pull)
        self._run(sess, self.g.train.copy_masters_to_slices)
        t = self.g.train
        correct, losses = 0, []
        for x, y, count in ((self.data.test_x, self.data.test_y, True), (self.loss_x, self.loss_y, False)):
            for start in range(0, len(x), EVAL_BATCH):
                xb, yb = x[start:start + EVAL_BATCH], y[start:start + EVAL_BATCH]
                n = len(xb)
                if n < EVAL_BATCH:
                    xb = np.concatenate([xb, xb[:1].repeat(EVAL_BATCH - n, 0)])
                    yb = np.concatenate([yb, yb[:1].repeat(EVAL_BATCH - n, 0)])
                logits, loss = self._run(sess, [t.logits, t.loss], {t.images: xb, t.labels: yb})
                if count:
                    correct += int(np.sum(np.argmax(logits[:n], 1) == yb[:n]))
                elif n == EVAL_BATCH:
                    losses.append(float(loss))
        return correct / len(self.data.test_x), float(np.mean(losses))

    def _restore(self, sess) -> dict[str, np.ndarray]:
        prefix = checkpoint.latest(self.ckpt_dir)
        if prefix is None:
            self._run(sess, self.g.train.init_op)
            return self._run(sess, {n: v.read_value() for n, v in self.g.masters.items()})
        weights, state = checkpoint.load(prefix)
        self.phase = state["phase"]
        self.phases = schedule.PhaseController.from_state(state["phase_controller"])
        self.controls = {g: rules.GroupControl(**c) for g, c in state["controls"].items()}
        self._lost_at = {g: time.monotonic() for g, c in self.controls.items() if c.lost}  # they may come back
        self.offsets = {g: {k: v for k, v in t.items() if k in CUMULATIVE} for g, t in state["totals"].items()}
        self.elapsed_before = state["elapsed_s"]
        self.history = [tuple(h) for h in state.get("history", [])]
        if self.search is not None and state.get("adsp_commits"):
            self.search.count = int(state["adsp_commits"])
        self._record({"event": "resume", "checkpoint": prefix, "phase": self.phase,
                      "elapsed_s": round(self.elapsed_before, 3), "global_steps": state["global_steps"]})
        return weights

    def _save(self, sess, totals, elapsed: float | None = None) -> str:
        state = {"phase": self.phase, "phase_controller": self.phases.state(),
                 "controls": {g: {f: getattr(c, f) for f in rules.GroupControl.FIELDS} for g, c in self.controls.items()},
                 "totals": totals, "elapsed_s": self.elapsed() if elapsed is None else elapsed, "history": self.history,
                 "global_steps": _steps(totals),
                 "adsp_commits": self.search.count if self.search else None}
        prefix = checkpoint.save(self.ckpt_dir, self._weights(sess), state)
        self._record({"event": "checkpoint", "path": prefix, "t": round(state["elapsed_s"], 3),
                      "phase": self.phase, "global_steps": state["global_steps"]})
        return prefix

    # -- strategy --

    def _enter(self, sess, phase: str, why: str) -> None:
        old, self.phase = self.phase, phase
        self.g.board.write_controls(sess, self.controls, self.cfg.ps_timeout_s)
        self._global(sess)
        rec = {"event": "phase", "from": old, "to": phase, "t": round(self.elapsed(), 3), "why": why,
               "controls": {g: c.to_vector() for g, c in self.controls.items()}}
        self.report.phase(rec)
        self._record(rec)

    def _live(self, per_group: dict) -> dict:
        """The entries of the groups not declared lost."""
        return {g: v for g, v in per_group.items() if not self.controls[g].lost}

    def _timings(self, stats) -> list[schedule.WorkerTiming]:
        """The live groups' profiling measurements (ms), pushes dense."""
        return [schedule.WorkerTiming(g, max(1e-3, s["profile_iter_ms"]), s["profile_pull_ms"] + s["profile_push_ms"],
                                      s["profile_push_ms"], s["profile_pull_ms"]) for g, s in self._live(stats).items()]

    def _live_timings(self, stats, totals, since=None) -> list[schedule.WorkerTiming] | None:
        """The live groups' timings measured since the totals `since` (default: the last plan's);
        None until every live group has committed in that window."""
        return rules.measured_timings(self._live(totals), [self._plan_totals if since is None else since],
                                      self.g.ps.dense_push_bytes, {g: s["profile_push_ms"] for g, s in stats.items()})

    def _plan(self, sess, phase: str, timings, totals, why: str) -> None:
        """ASHL: new H_i, D_i, R_i for `phase` from `timings`; enters `phase` (or re-plans it)."""
        old = self.controls
        self.controls = {**self.controls, **rules.ashl_controls(self.sync, timings, phase, self.controls)}
        self._plan_totals, self._plan_t = totals, self.elapsed()
        self._planned_ms = {t.name: t.iter_ms for t in timings}
        self._timing_of.update({t.name: t for t in timings})
        self._drifting = {}
        why += "; " + ", ".join("%s %.1f ms/iter, pull %.0f ms, push %.0f ms -> H %d, R %.3g" % (
            t.name, t.iter_ms, t.other_ms, t.push_ms, self.controls[t.name].local_steps, self.controls[t.name].ratio)
            for t in timings)
        if phase != self.phase:
            self._phase_totals = totals
            if phase == "shl":  # SHL's staleness counts the commits made in SHL, not the lead from AHL
                self.g.ps.reset_counters(sess, self.cfg.ps_timeout_s)
            self._enter(sess, phase, why)
        else:
            self.g.board.write_controls(sess, self.controls, self.cfg.ps_timeout_s)
            rec = {"event": "replan", "phase": phase, "t": round(self.elapsed(), 3), "why": why,
                   "old": _plan_view(old), "new": _plan_view(self.controls)}
            self.report.replan(rec)
            self._record(rec)

    def _drive(self, sess, stats, totals, accuracy, loss) -> None:
        if self.sync.strategy == "ashl" and self.phase in ("ahl", "shl"):
            steps = _steps(totals)
            live = self._live_timings(stats, totals)
            drifted = self._drift(totals)
            # a drift with nothing measured since it began (e.g. a group gone silent) waits for the next evaluation
            measured = drifted and (self._live_timings(stats, totals, self._drift_since(drifted)) or live)
            if self.phase == "ahl" and self.phases.observe_loss(loss, steps, self.elapsed()) == "shl":
                # a re-plan just before the switch leaves nothing measured since: use all of AHL, not the profile
                self._plan(sess, "shl", live or self._live_timings(stats, totals, self._phase_totals)
                           or self._timings(stats), totals,
                           "training loss %.4f <= %.4f" % (loss, self.sync.shl_loss))
            elif measured:
                self._plan(sess, self.phase, measured, totals, "drift: " + "; ".join(
                    "%s %.1f ms/iter planned, %.1f ms/iter over the last %d evaluations"
                    % (g, planned, ms, self.sync.drift_evals) for g, planned, ms, _ in drifted))
            elif live and self.elapsed() - self._plan_t >= self.sync.replan_interval_s:
                self._plan(sess, self.phase, live, totals, "re-plan from the last %.0f s"
                           % (self.elapsed() - self._plan_t))
        if self.search is not None and len(self.history) >= 3:
            t, l = zip(*[(h[0], h[2]) for h in self.history])
            count = self.search.update(t, l)
            timer = self.sync.adsp_period_s / count
            if abs(timer - next(iter(self.controls.values())).timer_s) > 1e-9:
                self.controls = {g: dataclasses.replace(c, timer_s=timer) for g, c in self.controls.items()}
                self.g.board.write_controls(sess, self.controls, self.cfg.ps_timeout_s)
                self._record({"event": "adsp", "t": round(self.elapsed(), 3), "commits_per_period": count})

    @staticmethod
    def _drift_since(drifted) -> dict:
        """The totals when the earliest of the drifts began."""
        return min((d[3] for d in drifted), key=_steps)

    def _drift(self, totals) -> list[tuple[str, float, float, dict]]:
        prev, self._eval_totals = self._eval_totals, {g: dict(t) for g, t in totals.items()}
        if prev is None:
            return []
        out, self._drifting = rules.drift_step(prev, self._live(totals), self._planned_ms, self._drifting,
                                               self.sync.drift, self.sync.drift_evals)
        return out

    # -- main loop --

    def run(self) -> dict:
        """Trains to a stop condition; returns the final record. Raises PSLost (recorded as a
        "ps_lost" event first) when the parameter server is gone."""
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
            self._record({"event": "ps_lost", "t": round(self.elapsed(), 3) if self.t0 else 0.0, "error": str(e)})
            # closing a session whose ps is gone blocks for 30 s: let that finish in the background
            close = threading.Thread(target=_close_quietly, args=(sess,), daemon=True).start
            raise
        finally:
            close()

    def _run_session(self, sess) -> dict:
        cfg = self.cfg
        self._run(sess, self.g.local_init)
        weights = self._restore(sess)
        self.g.board.initialize(sess, cfg.wait_timeout_s)
        self.g.board.write_controls(sess, self.controls, cfg.wait_timeout_s)
        self._global(sess, heartbeat=0.0)
        self.g.ps.initialize(sess, weights, timeout_s=cfg.wait_timeout_s)
        self._wait_for_groups(sess)
        self.g.ps.reset_counters(sess, cfg.wait_timeout_s)
        self.report.start(self.elapsed_before)  # renders the layout picture (~0.5 s): set-up, not training
        self.t0 = time.monotonic()
        if len(self.phases.transitions) == 1:  # a new run: times are seconds of training
            self.phases.transitions = [(self.phase, 0, 0.0)]
        self._global(sess)
        why, reached = self._loop(sess)
        stop_t = self.elapsed()
        self._global(sess, stop=True)
        # their last pushes belong to the final model; one silent for lost_after_s would be declared lost anyway
        self.wait_groups(min(cfg.wait_timeout_s, cfg.lost_after_s))
        stats, vals = self._stats(sess)
        totals = self._totals(stats)
        accuracy, loss = self._evaluate(sess)
        self.history.append((stop_t, accuracy, loss))
        self._log_eval(stop_t, accuracy, loss, totals, vals, _steps(totals))
        prefix = self._save(sess, totals, elapsed=stop_t)
        final = self._final(why, reached, totals, prefix, stop_t)
        final.update(self.report.end(final, totals, stop_t))
        self._record(final)
        return final

    def _wait_for_groups(self, sess) -> None:
        deadline = time.monotonic() + self.cfg.startup_timeout_s
        while True:
            exited = self.exited_groups()
            if exited:
                raise RuntimeError("chief: group(s) failed to start: " + "; ".join(
                    "group %s: %s" % kv for kv in exited.items()))
            stats, _ = self._stats(sess)
            missing = [g for g, s in stats.items() if s["heartbeat"] <= 0]
            if not missing:
                return
            if time.monotonic() > deadline:
                raise TimeoutError("chief: groups %s did not connect to the parameter server %s within %.0f s"
                                   % (missing, self.cfg.ps_device, self.cfg.startup_timeout_s))
            time.sleep(TICK_S)

    def _loop(self, sess) -> dict:
        cfg = self.cfg
        next_ckpt = self.elapsed() + cfg.checkpoint_interval_s
        reached = None
        ticks: collections.deque = collections.deque(maxlen=200)  # (elapsed s, totals, counters) of recent ticks
        evaluator = Evaluator(lambda: self._evaluate(sess), self.elapsed, cfg.eval_interval_s).start()
        try:
            while True:
                time.sleep(TICK_S)
                self._global(sess)
                stats, vals = self._stats(sess)
                totals = self._totals(stats)
                now = self.elapsed()
                ticks.append((now, totals, vals))
                self._check_liveness(sess, stats, vals, totals, now)
                self._check_rejected(int(vals["rejected"]), now)
                if self.phase == "profiling" and all(s["profiled"] > 0 for s in self._live(stats).values()):
                    self.phases.start_ahl(_steps(totals), wall_time=now)
                    self._plan(sess, "ahl", self._timings(stats), totals, "profiled")
                steps = _steps(totals)
                stop_why = None
                if self.stop_request:
                    stop_why = self.stop_request
                elif now >= cfg.time_budget_s:
                    stop_why = "time budget %.0f s" % cfg.time_budget_s
                elif cfg.max_steps and steps >= cfg.max_steps:
                    stop_why = "step budget %d" % cfg.max_steps
                elif cfg.max_rounds and all(s["done"] > 0 for g, s in stats.items() if not self.controls[g].lost):
                    stop_why = "every group made its %d rounds" % cfg.max_rounds
                elif reached is not None and now >= reached + cfg.stop_after_target_s:
                    stop_why = "target accuracy %.3f reached at %.1f s" % (cfg.target_accuracy, reached)
                for t_eval, accuracy, loss in evaluator.results():
                    # the counters as they were when the evaluated model was pulled (the last tick before)
                    _, then, then_vals = next((x for x in reversed(ticks) if x[0] <= t_eval), ticks[0])
                    self.history.append((t_eval, accuracy, loss))
                    self._log_eval(t_eval, accuracy, loss, then, then_vals,
                                   _steps(then))
                    if cfg.target_accuracy and accuracy >= cfg.target_accuracy and reached is None:
                        reached = t_eval
                        if cfg.stop_after_target_s <= 0:
                            stop_why = stop_why or "target accuracy %.3f reached" % cfg.target_accuracy
                    if not stop_why:
                        self._drive(sess, stats, totals, accuracy, loss)
                if now >= next_ckpt and not stop_why:
                    next_ckpt = now + cfg.checkpoint_interval_s
                    self._save(sess, totals)
                if stop_why:
                    return stop_why, reached
        finally:
            evaluator.stop(cfg.ps_timeout_s)

    # -- faults --

    def _log_eval(self, now, accuracy, loss, totals, vals, steps) -> None:
        rates = self.report.eval(now, accuracy, loss, self.phase, totals, self.controls, int(vals["rejected"]))
        total_rate, group_rates = rates["total"], rates["groups"]
        sent = sum(t["bytes_sent"] for t in totals.values())
        budget_left = self.cfg.time_budget_s - now
        if self.cfg.max_steps and steps and now > self.elapsed_before:
            budget_left = min(budget_left, (self.cfg.max_steps - steps) * (now - self.elapsed_before) / steps)
        self._record({"event": "eval", "t": round(now, 3), "phase": self.phase, "accuracy": round(accuracy, 4),
                      "loss": round(loss, 5), "global_steps": steps, "examples_per_sec": round(total_rate, 1),
                      "group_examples_per_sec": {g: round(r, 1) for g, r in group_rates.items()},
                      "bytes_sent": int(sent), "eta_s": round(max(0.0, budget_left), 1),
                      "live_groups": sum(not c.lost for c in self.controls.values()), "rejected": int(vals["rejected"]),
                      "version": int(vals["version"])})

    def _final(self, why, reached, totals, prefix, stop_t) -> dict:
        acc = self.history[-1][1]
        return {"event": "final", "strategy": self.sync.strategy, "why": why, "t": round(stop_t, 3),
                "accuracy": round(acc, 4), "time_to_target_s": None if reached is None else round(reached, 3),
                "phase": self.phase, "phase_transitions": self.phases.transitions,
                "global_steps": _steps(totals),
                "bytes_sent": int(sum(t["bytes_sent"] for t in totals.values())),
                "bytes_received": int(sum(t["bytes_received"] for t in totals.values())),
                "wait_s": round(sum(t["wait_s"] for t in totals.values()), 3),
                "groups": totals, "checkpoint": prefix,
                "lost_groups": [g for g, c in self.controls.items() if c.lost], "rejected_updates": self._rejected,
                "curve": [[round(t, 3), round(a, 4)] for t, a, _ in self.history]}

