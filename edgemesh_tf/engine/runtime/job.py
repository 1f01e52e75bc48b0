"""Launching a hybrid job: the testbed (or real servers), one client process per group, the chief.

    final = run_job(cfg, load_cluster("layouts/edge4.yaml"), emulate=True)

Each group's client runs `python -m edgemesh_tf.engine.runtime.group` against its first device's server;
under the emulator it runs inside that device's network namespace, as a client on the device
would. Group processes die with the launcher (PR_SET_PDEATHSIG) and are stopped by their pid when
the job ends; their output goes to `<logdir>/groups/<name>.log`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from typing import Callable

from edgemesh_tf.cluster import procs
from edgemesh_tf.cluster.reach import Servers, reach_servers  # noqa: F401  (importable from here)
from edgemesh_tf.cluster.reach import of_testbed as _of_testbed
from edgemesh_tf.cluster.spec import ClusterFile
from edgemesh_tf.engine.core import records
from edgemesh_tf.engine.runtime.chief import Chief
from edgemesh_tf.engine.config import GroupSpec, JobConfig, JobSettings
from edgemesh_tf.engine.runtime.rejoin import Rejoiner
from edgemesh_tf.mesh.layout import single_device_layout

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def default_groups(cluster: ClusterFile, batch_size: int) -> tuple[GroupSpec, ...]:
    """One single-device group per worker of the cluster (pure data parallelism)."""
    return tuple(GroupSpec(w.name, single_device_layout(w.device_string).to_dict(), batch_size)
                 for w in cluster.workers)


def groups_of_plan(cluster: ClusterFile, plan, path: str, batch_size: int) -> tuple[GroupSpec, ...]:
    """The groups of a loaded plan file, named after their devices; errors name the file and device."""
    by_device = {d.device_string: d.name for d in cluster.devices}
    out = []
    for j, g in enumerate(plan.groups):
        unknown = [d for d in g.layout.devices if d not in by_device]
        if unknown:
            raise ValueError("%s: group %d uses devices %s that cluster %s does not have; expected some of %s"
                             % (path, j, unknown, cluster.path, sorted(by_device)))
        name = "-".join(by_device[d] for d in dict.fromkeys(g.layout.devices))
        out.append(GroupSpec(name, g.layout.to_dict(), g.batch or batch_size))
    return tuple(out)


class GroupProcesses:
    """The running group clients; `exited()` names the ones whose process has ended. launch:
    {group: (network namespace or None, grpc target of its first device, step delay factor)}.
    pool: run the clients in these warm processes (`warm.WarmGroups`) instead of starting new ones."""

    def __init__(self, cfg: JobConfig, launch: dict[str, tuple[str | None, str, float]], pool=None):
        self.cfg, self.pool = cfg, pool
        os.makedirs(os.path.join(cfg.logdir, "groups"), exist_ok=True)
        self.config_path = os.path.join(cfg.logdir, "job.json")
        with open(self.config_path, "w") as f:
            json.dump(cfg.to_dict(), f, indent=1)
        env = dict(os.environ)
        env["PYTHONPATH"] = _REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.pop("TF_CONFIG", None)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        self.env = env
        self.procs: dict[str, subprocess.Popen] = {}
        self.started: dict[str, float] = {}  # group -> monotonic time its current process started
        self.restarts = {g.name: -1 for g in cfg.groups}
        self.logs = {g.name: os.path.join(cfg.logdir, "groups", g.name + ".log") for g in cfg.groups}
        for g in cfg.groups:
            self.start(g.name, launch[g.name])

    def start(self, name: str, launch: tuple[str | None, str, float], layout: dict | None = None) -> int:
        """Starts group `name`'s client (stopping its current process first, by pid); layout: a
        Layout dict replacing the group's own. Returns the new pid. Call from a long-lived thread
        (the child dies with it)."""
        if name in self.procs:
            procs.terminate(self.procs[name], 5.0)
        netns, target, delay = launch
        j = self.cfg.group_names.index(name)
        self.restarts[name] += 1
        argv = ["--config", self.config_path, "--group", str(j), "--target", target,
                "--step_delay_factor", str(delay), "--restart", str(self.restarts[name])]
        if layout is not None:
            path = os.path.join(self.cfg.logdir, "groups", name + ".layout.json")
            with open(path, "w") as f:
                json.dump(layout, f, indent=1)
            argv += ["--layout", path]
        if self.pool is not None:
            self.procs[name] = self.pool.run(netns, argv, self.logs[name], self.env)
            self.started[name] = time.monotonic()
            return self.procs[name].pid
        cmd = [sys.executable, "-m", "edgemesh_tf.engine.runtime.group"] + argv
        if netns:
            cmd = ["ip", "netns", "exec", netns] + cmd
        with open(self.logs[name], "a") as log:
            self.procs[name] = procs.spawn(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.started[name] = time.monotonic()
        return self.procs[name].pid

    def running(self, name: str) -> bool:
        return self.procs[name].poll() is None

    def stop_one(self, name: str) -> None:
        """Stops group `name`'s client (SIGTERM, then SIGKILL), by its pid."""
        procs.terminate(self.procs[name], 5.0)

    def exited(self) -> dict[str, str]:
        """{group: what happened (exit code, pid, log and its tail)} of the group processes that have ended."""
        return {name: "its process (pid %d) exited with code %s; see %s:\n%s"
                      % (p.pid, p.returncode, self.logs[name], _tail(self.logs[name], 5))
                for name, p in self.procs.items() if p.poll() is not None}

    def wait(self, timeout_s: float) -> None:
        """Waits (at most timeout_s in all) for the groups to leave after the stop flag."""
        deadline = time.monotonic() + timeout_s
        for p in self.procs.values():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass

    def stop(self, timeout_s: float) -> dict[str, int | None]:
        """`wait`, then terminates the groups still running (by pid); returns the exit codes."""
        self.wait(timeout_s)
        for p in self.procs.values():
            if p.poll() is None:
                procs.terminate(p, 5.0)
        return {n: p.returncode for n, p in self.procs.items()}


def _tail(path: str, lines: int = 15) -> str:
    try:
        with open(path) as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


@contextlib.contextmanager
def _stop_on_signals(chief: Chief):
    """SIGTERM or SIGINT (Ctrl-C; in the main thread) ends training at the chief's next tick with a
    checkpoint and the final record; a second one exits at once. (The group processes run in their
    own process group, so Ctrl-C in a terminal reaches this process only.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if chief.stop_request:
            raise SystemExit(128 + signum)
        chief.request_stop("%s received: stopping with a checkpoint" % signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, h in previous.items():
            signal.signal(sig, h)


STOP_REQUESTED = "stop requested by the caller: stopping with a checkpoint"


@contextlib.contextmanager
def _stop_when_set(chief: Chief, stop: threading.Event | None, poll_s: float = 0.1):
    """`stop` set by another thread (where no signal reaches: a notebook, a test, a service) ends
    training at the chief's next tick with a checkpoint and the final record, as SIGTERM does; it is
    looked at every poll_s until the job ends."""
    if stop is None:
        yield
        return
    done = threading.Event()

    def watch():
        while not done.is_set():
            if stop.wait(poll_s):
                chief.request_stop(STOP_REQUESTED)
                return

    watcher = threading.Thread(target=watch, name="stop-when-set", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join(2 * poll_s + 1.0)


def run_job(cfg: JobConfig, cluster: ClusterFile, emulate: bool = True,
            emit: Callable[[records.Record], None] = lambda rec: None, up_kwargs: dict | None = None,
            testbed=None, pool=None, fast_setup: bool = False, stop: threading.Event | None = None) -> dict:
    """Runs the job to its stop condition; returns the chief's final record (`records.Final.to_dict()`,
    with the group exit codes and the testbed). emit: every record of the job (records.py). stop: set
    from another thread, ends training at the next tick with a checkpoint (the final record's why is
    STOP_REQUESTED).
    testbed: an already running `EmulatedCluster` of `cluster` to use (and leave running). pool: a
    `warm.WarmGroups` whose processes run the group clients (a benchmark of many jobs on one testbed).
    fast_setup: on an emulated testbed (passed in or started here), its CPU quotas and link rates are
    lifted while the groups set up (first graph runs, warm-up) and restored before the chief starts
    the clock; no measured figure changes, a job starts sooner. (They stay in force after the stop: the groups' rounds in flight at the stop are
    counted in the job's totals, so they must run at the devices' speed.)"""
    by_device = {d.device_string: d.name for d in cluster.devices}
    # this launch's own ready flag: its groups must not start on one left by an earlier job on these servers
    cfg = dataclasses.replace(cfg, job_token=secrets.randbelow(2 ** 62) + 2)
    started_here = testbed is None
    reach = (reach_servers(cluster, emulate, up_kwargs, server_timeout_s=cfg.server_timeout_s) if started_here
             else contextlib.nullcontext(_of_testbed(testbed)))
    with reach as servers:
        if started_here:  # a caller that passed its testbed has said what it is
            emit(records.Testbed(**servers.summary))
        launch = {g.name: servers.launch[by_device[g.layout["devices"][0]]] for g in cfg.groups}
        lift = restore = lambda: None  # noqa: E731
        if fast_setup and servers.testbed is not None:
            lift, restore = servers.testbed.lift_limits, servers.testbed.restore_limits
            lift()
        testbed = servers.testbed

        def before_start():  # the devices' memory peaks count from the clock's start: training, not set-up
            restore()
            if testbed is not None:
                testbed.reset_memory_peaks()
        groups = GroupProcesses(cfg, launch, pool)
        rejoiner = Rejoiner(cfg, groups, servers.launch, servers.addresses)
        try:
            chief = Chief(cfg, servers.target, emit=emit, exited_groups=groups.exited, wait_groups=groups.wait,
                          rejoin=rejoiner.tick, before_start=before_start,
                          check_servers=testbed.check if testbed is not None else lambda: None,
                          memory_peaks=testbed.memory_peaks if testbed is not None else dict)
            with _stop_on_signals(chief), _stop_when_set(chief, stop):
                final = chief.run()
        finally:  # the chief already waited for them to leave; a group still running now is stuck (or the chief failed)
            restore()  # also when the job failed before its start
            codes = groups.stop(min(5.0, cfg.wait_timeout_s))
        return dataclasses.replace(final, group_exit_codes=codes, testbed=servers.summary).to_dict()


def job_config(cluster: ClusterFile, groups, settings=None, **kwargs) -> JobConfig:
    """A JobConfig of `settings` (a `JobSettings`; or none: the fields' defaults), with the JobConfig
    fields in kwargs over them, for `groups`; its parameter server and chief are the cluster's and
    its device names the cluster file's. Errors name the cluster file."""
    ps = [d for d in cluster.devices if d.role == "ps"]
    if not ps:
        raise ValueError("cluster %s has no device with role ps; hybrid training keeps the global model on a "
                         "parameter server" % cluster.path)
    kwargs.setdefault("device_names", {d.device_string: d.name for d in cluster.devices})
    kwargs.setdefault("device_info", {d.name: {"speed": d.speed} for d in cluster.workers if d.speed})
    return (settings or JobSettings()).job_config(groups, ps_device=ps[0].device_string,
                                                  chief_device=cluster.master.device_string, **kwargs)
