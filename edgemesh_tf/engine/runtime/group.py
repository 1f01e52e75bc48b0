"""One data-parallel group's client process: rounds of pull, local iterations, push, and waits.

    python -m edgemesh_tf.engine.runtime.group --config JOB.json --group 2 --target grpc://127.0.0.1:2302

The process talks to the TF server of its group's first device (`--target`, in the emulator from
inside that device's network namespace, as a client on the device itself would). It writes one
JSON line per round to `<logdir>/groups/<name>.jsonl` and its totals to the control board, and
stops when the chief raises the stop flag, or when the chief's heartbeat is older than the job's
`wait_timeout_s` (it then exits with an error naming the chief).
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

import numpy as np

from edgemesh_tf import tf_import

if __name__ == "__main__":  # a group's own process (started by job.py): TensorFlow without Keras
    tf_import.without_keras()

from edgemesh_tf.data import batches, load_dataset  # noqa: E402 (after the choice above)
from edgemesh_tf.engine.core import rules
from edgemesh_tf.engine.config import JobConfig
from edgemesh_tf.engine.core.rules import CUMULATIVE
from edgemesh_tf.engine.runtime.graph import initialise, replica_graph
from edgemesh_tf.engine.runtime.solo_commit import BackgroundCommit
from edgemesh_tf.cluster.rpc import run_idempotent
from edgemesh_tf.mesh.compat import tf
from edgemesh_tf.mesh.layout import layout_from_dict
from edgemesh_tf.models import load_model

POLL_S = 0.005
HEARTBEAT_SHARE = 0.3  # within a round, a report at least every this share of the job's lost_after_s
SOLO_STOP_CHECK_S = 1.0  # a group alone reads the stop flag this often (s) inside its long timer rounds
PROFILE_ROUNDS = 1


class ChiefLost(RuntimeError):
    pass


class DeclaredLost(RuntimeError):
    """The chief stopped counting this group (it was silent too long); it must not push again."""


def shard_stream(data, shares, name: str, batch_size: int, seed: int):
    """Endless batches ([batch_size, H, W, C], [batch_size]) of group `name`'s shard of the training
    set (rules.shard_range); a shard smaller than a batch is repeated to fill one."""
    begin, end = rules.shard_range(shares, name, len(data.train_x))
    x, y = data.train_x[begin:end], data.train_y[begin:end]
    reps = -(-batch_size // len(x))
    return batches(np.concatenate([x] * reps), np.concatenate([y] * reps), batch_size, seed)


class GroupRunner:
    """Runs group `index` of `cfg` against the server at `target` (see the module docstring).
    step_delay_factor: > 1 sleeps (factor - 1) x the step time after each local iteration (the
    emulator's fallback when it cannot limit CPU). layout: a Layout dict that replaces the group's
    own (a group re-planned over the devices it has left). restart: how many times the launcher
    restarted this group (its state lives in a container of its own: TF's Session.reset, which
    clears a container, waits for every server of the cluster, and a restart follows a lost one)."""

    def __init__(self, cfg: JobConfig, index: int, target: str, step_delay_factor: float = 1.0,
                 layout: dict | None = None, restart: int = 0):
        self.cfg, self.index, self.target = cfg, index, target
        self.spec_g = cfg.groups[index]
        self.name = self.spec_g.name
        self.delay = max(1.0, step_delay_factor)
        self.timeout_ms = int(cfg.wait_timeout_s * 1000)
        self.incarnation = time.time()
        self._joining = False
        self._setup = [("begin", time.monotonic())]  # (what ended, when): the set-up's parts, for the log
        self.data = load_dataset(cfg.dataset, cfg.data_path)
        layout = layout_from_dict(layout or self.spec_g.layout, source="group %s" % self.name)
        spec = load_model(cfg.model, self.data.image_shape, self.data.num_classes)
        self.g, built = replica_graph(
            spec, layout, self.spec_g.batch_size, cfg.group_names, ps_device=cfg.ps_device,
            learning_rate=cfg.learning_rate, momentum=cfg.momentum, seed=cfg.seed, group=self.name,
            error_feedback=cfg.sync.error_feedback, container=self._container(restart),
            weight_decay=cfg.sync.weight_decay)
        self._setup.append(("graph built" if built else "graph reused", time.monotonic()))
        self.restart = restart
        self.devices = sorted({"/job:ps"} | set(layout.devices))
        self.totals = {f: 0.0 for f in CUMULATIVE}
        self.profile, self._prof_steps, self._prof_comm = {}, [], []
        self._share, self._stream, self._round = None, None, 0
        self._phase, self._phase_commits = None, 0  # the phase of the last round, commits made in it
        self._pending = None  # the last round's report, written with the next read of the board
        self._reported = time.monotonic()  # when a report (or heartbeat) last reached the board
        self._last_loss, self._last_round_s = float("nan"), 0.0
        self._done = False  # made its max_rounds: every later report says so
        self.solo = rules.solo(cfg.sync, len(cfg.groups))
        self._synced = False  # a group alone: the ps holds its model (its last push was accepted), no pull needed
        # a group alone that commits while it trains on (solo_commit.py), else None
        self._background = BackgroundCommit(self.name) if self.solo and cfg.sync.solo_overlap else None
        os.makedirs(os.path.join(cfg.logdir, "groups"), exist_ok=True)
        self.log = open(os.path.join(cfg.logdir, "groups", self.name + ".jsonl"), "a")

    def _container(self, restart: int) -> str:
        return "group_%s" % self.name + ("_r%d" % restart if restart else "")

    def _run(self, sess, fetches, feeds=None):
        return sess.run(fetches, feeds, options=tf.RunOptions(timeout_in_ms=self.timeout_ms))

    def _run_again_if_lost(self, sess, fetches, feeds=None):
        """A start-up run (initialisation, warm-up): idempotent, so run again after a transient error."""
        return run_idempotent(sess, fetches, feeds, timeout_s=self.cfg.startup_timeout_s,
                              what="group %s starting up" % self.name)

    def _read(self, sess) -> dict:
        """The control board and the counters; the report of the last round rides along (one round
        trip to the ps instead of two)."""
        ops, feeds = self.g.board.assigns(self._pending) if self._pending else ([], None)
        vals = run_idempotent(sess, [{**self.g.board.control_fetches(), **self.g.counters}, ops], feeds,
                              timeout_s=self.cfg.ps_timeout_s,
                              what="group %s reading the control board on %s" % (self.name, self.cfg.ps_device))[0]
        if self._pending:
            self._reported = time.monotonic()
        self._pending = None
        heartbeat = self.g.board.heartbeat_of(vals)
        if heartbeat > 0 and time.time() - heartbeat > self.cfg.wait_timeout_s:
            raise ChiefLost("group %s: the chief's heartbeat on %s is %.0f s old (limit %.0f s); stopping"
                            % (self.name, self.cfg.ps_device, time.time() - heartbeat, self.cfg.wait_timeout_s))
        return vals

    def _counts(self, vals, what: str) -> dict[str, int]:
        return {g: int(vals["%s/%s" % (what, g)]) for g in self.cfg.group_names}

    def _commits(self, vals) -> dict[str, int]:
        return self._counts(vals, "commits")

    def _wait(self, sess, passed, what: str, timeout_s: float | None = None) -> tuple[float, dict]:
        """Polls the board until passed(vals) or the stop flag, at most timeout_s (default: the job's
        wait_timeout_s); returns (seconds waited, last vals)."""
        timeout_s = timeout_s or self.cfg.wait_timeout_s
        start = time.monotonic()
        while True:
            if self._pending is None:  # a heartbeat while waiting, so that the chief does not declare us lost
                self._pending = self._stats(self._last_loss, round_s=self._last_round_s)
            vals = self._read(sess)
            if self.g.board.stopped(vals) or passed(vals):
                return time.monotonic() - start, vals
            if time.monotonic() - start > timeout_s:
                raise TimeoutError("group %s: waited %.0f s for %s (commits %s)" % (
                    self.name, timeout_s, what, self._commits(vals)))
            time.sleep(POLL_S)

    def _batches(self, controls):
        share = {g: c.share for g, c in controls.items()}
        if share != self._share:
            self._share = share
            self._stream = shard_stream(self.data, share, self.name, self.spec_g.batch_size,
                                        self.cfg.seed * 1000 + self.index)
        return self._stream

    def _train_steps(self, sess, rule, stream, lr: float) -> tuple[int, list[float], list[float]]:
        """Local iterations of one round at learning rate `lr`; returns (count, losses, step seconds).
        A timer round (ADSP) ends once its iterations took timer_s: compute only, as ADSP counts it."""
        g = self.g.train
        losses, times = [], []
        checked = time.monotonic()
        while True:
            if self.solo and time.monotonic() - checked > SOLO_STOP_CHECK_S:  # the stop ends a long round early
                checked = time.monotonic()
                if times and self.g.board.stopped(self._read(sess)):
                    break
            if time.monotonic() - self._reported > HEARTBEAT_SHARE * self.cfg.lost_after_s:
                # a long round (many iterations) must not look like silence to the chief's liveness;
                # the heartbeat is not counted in the iteration's time
                self._report(sess, self._last_loss)
            xb, yb = next(stream)
            t0 = time.monotonic()
            loss, _ = self._run(sess, [g.loss, g.train_op], {g.images: xb, g.labels: yb, g.learning_rate: lr})
            dt = time.monotonic() - t0
            if self.delay > 1.0:
                time.sleep((self.delay - 1.0) * dt)
            times.append(time.monotonic() - t0)
            losses.append(float(loss))
            if rule.local_steps > 0 and len(times) >= rule.local_steps:
                break
            if rule.local_steps == 0 and sum(times) >= rule.timer_s:
                break
        return len(times), losses, times

    def run(self) -> dict:
        cfg = self.cfg
        config = tf.ConfigProto(allow_soft_placement=False, device_filters=self.devices)
        if not self.restart:  # a fresh job on servers that ran one before: free that run's state
            tf.Session.reset(self.target, [self._container(0)], config=config)
        with tf.Session(self.target, graph=self.g.train.graph, config=config) as sess:
            self._initialise(sess)
            self.g.ps.wait_until_initialized(sess, timeout_s=cfg.startup_timeout_s, token=cfg.job_token)
            self._setup.append(("initialised", time.monotonic()))
            self._warm_up(sess)
            self._report(sess, loss=float("nan"))
            self._setup.append(("warm-up", time.monotonic()))
            _, vals = self._wait(sess, self._go, "the chief's start signal", cfg.startup_timeout_s)
            self._setup.append(("start signal", time.monotonic()))
            print("group %s set up in %.1f s: %s" % (self.name, self._setup[-1][1] - self._setup[0][1], ", ".join(
                "%s %.1f s" % (what, t - before) for (_, before), (what, t) in zip(self._setup, self._setup[1:]))),
                flush=True)
            if self.g.board.controls_of(vals)[self.name].lost:  # restarted: the chief re-admits it once it hears it
                self._joining = True
                self._wait(sess, lambda v: not self.g.board.controls_of(v)[self.name].lost,
                           "re-admission by the chief", cfg.startup_timeout_s)
                self._joining = False
            try:
                while True:
                    vals = self._read(sess)
                    if self.g.board.stopped(vals):
                        break
                    if self.g.board.controls_of(vals)[self.name].lost:
                        raise DeclaredLost("group %s: the chief declared this group lost (no report for longer "
                                           "than %.0f s); leaving" % (self.name, cfg.lost_after_s))
                    if cfg.max_rounds and self._round >= cfg.max_rounds:
                        self._settle_commit()
                        self._report(sess, loss=self._last_loss, done=True)
                        self._wait(sess, lambda v: False, "the chief's stop flag after the last round")
                        break
                    self._one_round(sess, vals)
                if self._settle_commit():  # the commit after the last step: the ps holds the final model
                    self._report(sess, loss=self._last_loss)  # and the chief the totals that count it
            finally:
                if self._background is not None:  # the session must not close under a commit in flight
                    self._background.close()
        self.log.close()
        return self.totals

    def _initialise(self, sess) -> None:
        initialise(lambda fetches: self._run_again_if_lost(sess, fetches), self.g)

    def _warm_up(self, sess) -> None:
        """Runs every graph of a round once before the start, so that the servers' one-off graph set-up
        is not timed as training: a pull, one iteration, and dense and top-k pushes of scale 0 (the
        global model does not change; the chief zeroes the commit counters before the start), each
        idempotent (the iteration's change is undone by the initialisation at the end). Its duration
        is reported as the round time until a round is measured: the chief's liveness allows a multiple
        of it, so that a first round over a slow link (a dense pull and push of vgg_m take ~7 s at
        10 Mbit/s) is not taken for silence."""
        g = self.g
        t0 = time.monotonic()
        self._read(sess)  # a read with no report riding along, as the first one of the training loop
        self._run_again_if_lost(sess, g.pull)
        self._run_again_if_lost(sess, g.train.copy_weights_to_slices)
        xb, yb = next(batches(self.data.train_x, self.data.train_y, self.spec_g.batch_size, 0))
        # the fetches of `_train_steps`: TF builds an executor per fetch signature, and that build (about
        # 0.5 s on a slow device) must not land in the first timed iteration (it skews ASHL's profile)
        self._run_again_if_lost(sess, [g.train.loss, g.train.train_op], {g.train.images: xb, g.train.labels: yb,
                                                           g.train.learning_rate: self.cfg.learning_rate})
        self._run_again_if_lost(sess, g.train.copy_slices_to_weights)
        # the top-k push at a tiny ratio: the same executor (k is computed from the fed ratio) without
        # sending half the model (at 0.5 it took ~5 s of set-up on a 10 Mbit/s link)
        for push, ratio in ((g.push_dense, 1.0), (g.push_sparse, 0.001)):
            self._run_again_if_lost(sess, push, {g.ratio: ratio, g.scale: 0.0})
        if self._times_selection():
            self._run_again_if_lost(sess, g.select, {g.ratio: 0.001})
        if self.solo:  # a group alone publishes: its anchors move with the ps instead of pulling
            self._run_again_if_lost(sess, g.publish, {g.scale: 0.0})
        self._initialise(sess)  # momentum and error feedback start empty
        self._last_round_s = time.monotonic() - t0

    def _go(self, vals) -> bool:
        return self.g.board.heartbeat_of(vals) > 0

    def _one_round(self, sess, vals):
        board = self.g.board
        phase = board.phase_of(vals)
        controls = board.controls_of(vals)
        rule = rules.round_rule(self.cfg.sync, phase, controls[self.name], len(self.cfg.groups))
        if phase != self._phase:  # the learning-rate schedule restarts with each phase
            self._phase, self._phase_commits = phase, 0
        lr = rules.learning_rate(self.cfg.sync, self.cfg.learning_rate, phase, self._phase_commits)
        if self._background is not None:
            return self._solo_round(sess, vals, rule, phase, lr)
        t_start = time.time()
        own = self._commits(vals)[self.name]
        waited = 0.0
        if rule.wait == "staleness":
            waited, vals = self._wait(sess, lambda v: rules.staleness_passed(
                own, rule.bound, self._commits(v), board.controls_of(v), self.cfg.sync.staleness_rule),
                "the slowest group (staleness bound)")
            if board.stopped(vals):  # the wait ended on the stop flag, not on the bound: no new round
                return
        seen = self._commits(vals)
        pulled = not (self.solo and self._synced)
        pull_s = self._pull(sess) if pulled else 0.0
        n, losses, step_s = self._train_steps(sess, rule, self._batches(controls), lr)
        if rule.wait == "barrier":  # BSP: nobody pushes round r+1 before every live group has pulled it
            w, vals = self._wait(sess, lambda v: rules.barrier_passed(own + 1, self._counts(v, "pulls"),
                                                                      board.controls_of(v)),
                                 "every live group's pull %d (barrier)" % (own + 1))
            waited += w
            if board.stopped(vals):
                return
        t1 = time.monotonic()
        # a group alone publishes (its anchors move with the ps: the next delta starts from it, without a pull)
        dense = rules.push_is_dense(self.cfg.sync, rule.ratio)
        push = (self.g.publish if self.solo else self.g.push_dense) if dense else self.g.push_sparse
        out = self._commit(sess, push, {self.g.ratio: min(1.0, rule.ratio), self.g.scale: rule.scale})
        self._synced = self.solo and bool(out["accepted"]) and dense and rule.scale == 1.0
        push_s = time.monotonic() - t1
        own_after = own + int(bool(out["accepted"]))
        self._phase_commits += 1
        if rule.wait == "barrier":
            w, _ = self._wait(sess, lambda v: rules.barrier_passed(own_after, self._commits(v), board.controls_of(v)),
                              "every live group's commit %d (barrier)" % own_after)
            waited += w
        self._count_iterations(n, step_s, pull_s, pulled)
        t = self.totals
        t["commits"] += 1
        t["push_s"] += push_s
        t["wait_s"] += waited
        t["bytes_sent"] += int(out["bytes"])
        if phase == "profiling" and not self.profile:
            self._profile_update(step_s, pull_s, push_s, self._time_selection(sess))
        self._round += 1
        rec = {"round": self._round, "phase": phase, "t_start": t_start, "t_end": time.time(),
               "commits_before": own, "commits_seen": seen, "bound": rule.bound, "wait": rule.wait,
               "steps": n, "loss": statistics.fmean(losses), "ratio": 1.0 if dense else rule.ratio,
               "bytes": int(out["bytes"]),
               "accepted": bool(out["accepted"]), "version": int(out["version"]), "wait_s": round(waited, 4),
               "learning_rate": lr}
        self._write(rec)
        self._pending = self._stats(rec["loss"], round_s=time.time() - t_start)
        if phase == "profiling" and self.profile and self._round == PROFILE_ROUNDS:
            self._report(sess, rec["loss"])  # the chief plans AHL once every group has profiled: tell it now

    def _solo_round(self, sess, vals, rule, phase, lr: float):
        """A round of a group alone whose commits run in the background (solo_commit.py): a pull only
        while the ps does not hold its model (the first round, or after a refused commit), timer_s of
        iterations, then the previous round's commit settled (usually ended long before) and this
        round's started. Its record is written when its commit settles."""
        t_start = time.time()
        pulled = not self._synced
        pull_s = self._pull(sess) if pulled else 0.0
        self._synced = True
        n, losses, step_s = self._train_steps(sess, rule, self._batches(self.g.board.controls_of(vals)), lr)
        self._count_iterations(n, step_s, pull_s, pulled)
        self._round += 1
        seen = self._commits(vals)
        rec = {"round": self._round, "phase": phase, "t_start": t_start, "t_end": time.time(),
               "commits_before": seen[self.name], "commits_seen": seen, "bound": 0,
               "wait": "none", "steps": n, "loss": statistics.fmean(losses), "ratio": 1.0,
               "learning_rate": lr}
        t1 = time.monotonic()
        self._settle_commit()
        self.totals["push_s"] += time.monotonic() - t1  # the wait for the previous commit: all of it on the path
        if self._synced:
            self._background.start(lambda: self._commit(sess, self.g.publish, {self.g.scale: 1.0}), rec)
        else:  # the previous commit was refused (a non-finite model): this round's work is dropped, the next pulls
            self._record(rec, {"accepted": False, "version": -1, "bytes": 0}, commit_s=0.0)
        self._pending = self._stats(rec["loss"], round_s=time.time() - t_start)

    def _pull(self, sess) -> float:
        """The global model into the masters and the anchors, then the slices; its seconds."""
        t0 = time.monotonic()
        self._run(sess, self.g.pull)
        self._run(sess, self.g.train.copy_weights_to_slices)
        return time.monotonic() - t0

    def _commit(self, sess, push: dict, feeds: dict) -> dict:
        """The slices into the masters, then `push` (a push's fetches) fed `feeds`."""
        self._run(sess, self.g.train.copy_slices_to_weights)
        return self._run(sess, push, feeds)

    def _count_iterations(self, n: int, step_s, pull_s: float, pulled: bool) -> None:
        t = self.totals
        t["steps"] += n
        t["examples"] += n * self.spec_g.batch_size
        t["compute_s"] += sum(step_s)
        t["pull_s"] += pull_s
        t["bytes_received"] += self.g.ps.pull_bytes if pulled else 0

    def _write(self, rec: dict) -> None:
        self.log.write(json.dumps(rec) + "\n")
        self.log.flush()

    def _settle_commit(self) -> bool:
        """Waits for the background commit in flight, if any, and writes its round's record; whether
        there was one."""
        settled = self._background.settle() if self._background is not None else None
        if settled is None:
            return False
        rec, out, seconds = settled
        self._synced = bool(out["accepted"])
        self.totals["commits"] += 1
        self.totals["bytes_sent"] += int(out["bytes"])
        self._phase_commits += 1
        self._record(rec, out, commit_s=seconds)
        return True

    def _record(self, rec: dict, out: dict, commit_s: float) -> None:
        self._write({**rec, "bytes": int(out["bytes"]), "accepted": bool(out["accepted"]),
                     "version": int(out["version"]), "wait_s": 0.0, "commit_s": round(commit_s, 4)})

    def _times_selection(self) -> bool:
        """Whether the profiling rounds time a top-k selection: ASHL's published rule counts it."""
        return self.g.select is not None and rules.uses_published_ratios(self.cfg.sync)

    def _time_selection(self, sess) -> float:
        """One top-k selection of this round's update at ASHL's preset ratio (s; 0 when not timed): the
        authors' compression time, which Algorithm 2 adds to a compressed round's communication. The
        update is still there: the dense push does not move the anchors, the next pull does."""
        if not self._times_selection():
            return 0.0
        t0 = time.monotonic()
        self._run_again_if_lost(sess, self.g.select, {self.g.ratio: self.cfg.sync.compress_ratio})
        return time.monotonic() - t0

    def _profile_update(self, step_s, pull_s, push_s, select_s):
        """ASHL's profiling pre-training: after PROFILE_ROUNDS rounds (of profile_steps iterations), the
        median iteration and the fastest pull, push and top-k selection."""
        self._prof_steps += list(step_s)
        self._prof_comm.append((pull_s, push_s, select_s))
        if len(self._prof_comm) >= PROFILE_ROUNDS:
            pulls, pushes, selections = zip(*self._prof_comm)
            self.profile = {"profile_iter_ms": 1000 * statistics.median(self._prof_steps),
                            "profile_pull_ms": 1000 * min(pulls), "profile_push_ms": 1000 * min(pushes),
                            "profile_compress_ms": 1000 * min(selections), "profiled": 1.0}

    def _stats(self, loss: float, round_s: float = 0.0) -> dict:
        self._last_loss, self._last_round_s = loss, round_s
        return self.g.board.stats_vector(self.name, {**self.totals, **self.profile, "loss": loss,
                                                     "heartbeat": time.time(), "round_s": round_s,
                                                     "done": float(self._done), "joining": float(self._joining),
                                                     "incarnation": self.incarnation})

    def _report(self, sess, loss: float, done: bool = False):
        """Writes the report now: at start-up, as a heartbeat inside a long round and after the last
        round (a round's own report rides on the next read)."""
        self._done = self._done or done
        self.g.board.write(sess, {**(self._pending or {}), **self._stats(loss, round_s=self._last_round_s)},
                           self.cfg.ps_timeout_s)
        self._pending = None
        self._reported = time.monotonic()


def main(argv=None) -> int:
    import argparse
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 PID` prints where a stuck group is, to its log
    p = argparse.ArgumentParser(description="One group's client process of a hybrid training job.")
    p.add_argument("--config", required=True, help="JobConfig JSON file written by the chief")
    p.add_argument("--group", type=int, required=True, help="index of the group in the config")
    p.add_argument("--target", required=True, help="grpc:// address of the group's first device")
    p.add_argument("--step_delay_factor", type=float, default=1.0)
    p.add_argument("--restart", type=int, default=0, help="how many times the launcher restarted this group")
    p.add_argument("--layout", help="Layout JSON file replacing the group's own (re-planned over fewer devices)")
    a = p.parse_args(argv)
    with open(a.config) as f:
        cfg = JobConfig.from_dict(json.load(f))
    layout = None
    if a.layout:
        with open(a.layout) as f:
            layout = json.load(f)
    name = cfg.groups[a.group].name
    try:
        totals = GroupRunner(cfg, a.group, a.target, a.step_delay_factor, layout, a.restart).run()
    except (ChiefLost, DeclaredLost, TimeoutError, tf.errors.OpError) as e:
        print("group %s: %s" % (name, getattr(e, "message", None) or e), file=sys.stderr, flush=True)
        return 1
    print(json.dumps({"group": name, **totals}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
