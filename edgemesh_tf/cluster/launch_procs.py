"""Runs the launch plans of cluster/launch.py: start the TF servers of a cluster file on their hosts,
wait until they answer, stop them, collect their logs.

The launch directory (default runs/launch/<cluster name>) holds `launch.json`, the state: for each
server started, its device, host, pid and kernel start time (so a later process that got the same
pid is never taken for it), its log and, for a remote one, the ssh login and workdir that reach it.
`stop` signals only the processes recorded there that are still the ones started (same start time;
a local one's command line also names its device). Local servers run detached (a session of their
own: Ctrl-C in the launcher's terminal does not reach them) and log to `<launch dir>/<device>.log`;
remote ones log to the same relative path under their workdir, and `logs` copies those here.

Every wait is bounded: `start` and `logs` give each ssh call timeout_s, `wait` asks the servers for
at most timeout_s (cluster/ready.py's check), `stop` sends SIGTERM, then SIGKILL after timeout_s.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Callable, Sequence

from edgemesh_tf.cluster import launch, procs
from edgemesh_tf.cluster.spec import ClusterFile

LOG_TAIL_LINES = 5


def state_path(launch_dir: str) -> str:
    return os.path.join(launch_dir, launch.STATE_FILE)


def read_state(launch_dir: str) -> dict:
    """The launch's state ({"cluster": path, "servers": {device: entry}}); empty when nothing was started."""
    try:
        with open(state_path(launch_dir)) as f:
            return json.load(f)
    except FileNotFoundError:
        return {"servers": {}}
    except (OSError, ValueError) as e:
        raise RuntimeError("%s: cannot read the launch state: %s" % (state_path(launch_dir), e)) from e


def _write_state(launch_dir: str, state: dict) -> None:
    tmp = state_path(launch_dir) + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f, indent=1)
    os.replace(tmp, state_path(launch_dir))


def _cmdline(pid: int) -> list[str]:
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def local_running(entry: dict) -> bool:
    """Whether a recorded local server still runs as the process the launch started: the same pid and
    start time, and a command line that names its device."""
    return procs.alive(entry["pid"], entry["start_time"]) and entry["device"] in _cmdline(entry["pid"])


def log_tail(path: str, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a log file ('' if it cannot be read)."""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
    except OSError:
        return ""


def start(cluster: ClusterFile, launch_dir: str, options: launch.Options = launch.Options(),
          devices: Sequence[str] | None = None, timeout_s: float = 30.0,
          say: Callable[[str], None] = print) -> list[str]:
    """Starts the server of each device (default all) that the launch does not run already; records
    each in the state file as soon as it is started. Returns the errors (one line per device that
    could not be started), empty if every server was started; it does not wait for them to answer."""
    launch_dir = os.path.abspath(launch_dir)
    os.makedirs(launch_dir, exist_ok=True)
    state = read_state(launch_dir)
    state["cluster"] = os.path.abspath(cluster.path)
    servers = state.setdefault("servers", {})
    errors = []
    for plan in launch.plan_cluster(cluster, launch_dir, options, python=sys.executable, devices=devices):
        old = servers.get(plan.device)
        if old and old.get("running") and (not old["local"] or local_running(old)):
            say("%s: already started (pid %d on %s); `edgemesh launch stop` first to restart it"
                % (plan.device, old["pid"], old["host"]))
            continue
        try:
            entry = _start_local(plan) if plan.local else _start_remote(plan, timeout_s)
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            errors.append("%s (%s at %s): not started: %s" % (plan.device, plan.task, plan.address, e))
            continue
        servers[plan.device] = entry
        _write_state(launch_dir, state)
        say("%s: started %s at %s, pid %d%s, log %s" % (plan.device, plan.task, plan.address, entry["pid"],
                                                       "" if plan.local else " on " + plan.login,
                                                       entry["log"] if plan.local else plan.host + ":" +
                                                       os.path.join(plan.workdir, plan.log)))
    _write_state(launch_dir, state)
    return errors


def _entry(plan: launch.ServerPlan, pid: int, start_time: int) -> dict:
    return {"device": plan.device, "task": plan.task, "address": plan.address, "host": plan.host,
            "local": plan.local, "pid": pid, "start_time": start_time, "log": plan.log, "ssh": list(plan.ssh),
            "login": plan.login, "workdir": plan.workdir, "argv": list(plan.start), "started_at": time.time(),
            "running": True}


def _start_local(plan: launch.ServerPlan) -> dict:
    """Spawns a local server detached (its own session, stdin closed, output to its log)."""
    with open(plan.log, "w") as log:
        p = subprocess.Popen(list(plan.start), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    start_time = procs.start_time(p.pid)
    if start_time is None:
        raise OSError("the server exited at once; its log %s ends:\n%s" % (plan.log, log_tail(plan.log)))
    return _entry(plan, p.pid, start_time)


def _start_remote(plan: launch.ServerPlan, timeout_s: float) -> dict:
    """Starts a remote server with one ssh call (bounded by timeout_s) and reads its pid and start time."""
    where = "%s on %s" % (plan.device, plan.login)
    try:
        p = subprocess.run(list(plan.start), capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        raise OSError("%s: ssh did not return within %.0f s" % (where, timeout_s)) from e
    if p.returncode != 0:
        raise OSError("%s: ssh exited %d: %s" % (where, p.returncode, (p.stderr or p.stdout).strip()[-500:]))
    pid, start_time = launch.parse_started(p.stdout, where)
    return _entry(plan, pid, start_time)


def _selected(state: dict, devices: Sequence[str] | None) -> dict:
    servers = state.get("servers", {})
    unknown = sorted(set(devices or ()) - set(servers))
    if unknown:
        raise KeyError("no server of device(s) %s was started by this launch (started: %s)"
                       % (", ".join(unknown), ", ".join(servers) or "none"))
    return {n: e for n, e in servers.items() if not devices or n in devices}


def wait(cluster: ClusterFile, launch_dir: str, timeout_s: float = 60.0,
         say: Callable[[str], None] = print) -> str | None:
    """Waits at most timeout_s until every server of `cluster` answers (ready.unanswered, asked in
    rounds of at most 5 s); stops early when every missing server's local process has exited. Returns
    None when all answer, else the message naming each missing task and what became of its process."""
    from edgemesh_tf.cluster import ready

    from absl import logging

    state = read_state(os.path.abspath(launch_dir))
    servers = state.get("servers", {})
    started = time.monotonic()
    deadline = started + timeout_s
    verbosity = logging.get_verbosity()
    logging.set_verbosity(logging.ERROR)  # ready's own progress line names --server_timeout_s: say() says ours
    try:
        while True:
            missing = ready.unanswered(cluster, max(0.5, min(5.0, deadline - time.monotonic())))
            if not missing:
                return None
            gone = [m for m in missing if servers.get(m.device.name, {}).get("local")
                    and not local_running(servers[m.device.name])]
            if time.monotonic() >= deadline or len(gone) == len(missing):
                break
            say("waiting for %d of the %d TF servers of %s (%.0f s of at most %.0f s, --timeout_s): %s"
                % (len(missing), len(cluster.devices), cluster.path, time.monotonic() - started, timeout_s,
                   ", ".join("%s at %s" % (m.device.name, m.address) for m in missing)))
    finally:
        logging.set_verbosity(verbosity)
    return launch.wait_message(cluster, missing, time.monotonic() - started, timeout_s, _process_notes(servers))


def _process_notes(servers: dict) -> dict:
    """{device: what the launch knows of its server process}, for wait's message."""
    notes = {}
    for name, e in servers.items():
        if not e.get("running"):
            notes[name] = "stopped by edgemesh launch stop"
        elif not e["local"]:
            notes[name] = "started on %s as pid %d; its log: %s:%s" % (e["login"], e["pid"], e["host"],
                                                                       os.path.join(e["workdir"], e["log"]))
        elif local_running(e):
            notes[name] = "its process (pid %d) runs; its log: %s" % (e["pid"], e["log"])
        else:
            tail = log_tail(e["log"])
            notes[name] = "its process (pid %d) has exited; its log %s ends:\n    %s" % (
                e["pid"], e["log"], tail.replace("\n", "\n    ") or "(empty)")
    return notes


def stop(launch_dir: str, devices: Sequence[str] | None = None, timeout_s: float = 10.0,
         say: Callable[[str], None] = print) -> list[str]:
    """Stops the recorded servers (default all): SIGTERM, SIGKILL after timeout_s, each only if it is
    still the process the launch started. Returns the errors (servers still running), empty if none."""
    launch_dir = os.path.abspath(launch_dir)
    state = read_state(launch_dir)
    chosen = {n: e for n, e in _selected(state, devices).items() if e.get("running")}
    if not chosen:
        say("nothing to stop: %s records no running server%s" % (
            state_path(launch_dir), " of " + ", ".join(devices) if devices else ""))
    local = {n: e for n, e in chosen.items() if e["local"] and local_running(e)}
    for e in local.values():
        _signal(e["pid"], signal.SIGTERM)
    errors = []
    for name, e in chosen.items():
        if not e["local"]:
            errors += _stop_remote(e, timeout_s, say)
    deadline = time.monotonic() + timeout_s
    for sig, until in ((None, deadline), (signal.SIGKILL, deadline + 5.0)):
        left = [e for e in local.values() if _reap(e)]
        for e in left if sig else ():
            say("%s: pid %d did not exit within %.0f s of SIGTERM: SIGKILL" % (e["device"], e["pid"], timeout_s))
            _signal(e["pid"], sig)
        while left and time.monotonic() < until:
            time.sleep(0.05)
            left = [e for e in left if _reap(e)]
    for name, e in chosen.items():
        if e["local"] and _reap(e):
            errors.append("%s: pid %d still runs after SIGKILL" % (name, e["pid"]))
        elif e["local"]:
            say("%s: %s (pid %d)" % (name, "stopped" if name in local else "had exited already", e["pid"]))
        if not any(x.startswith(name + ":") for x in errors):
            e["running"] = False
    _write_state(launch_dir, state)
    return errors


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _reap(entry: dict) -> bool:
    """Whether a local server still runs (reaped first if it is this process's child)."""
    try:
        os.waitpid(entry["pid"], os.WNOHANG)
    except ChildProcessError:
        pass
    return local_running(entry)


def _stop_remote(e: dict, timeout_s: float, say) -> list[str]:
    script = launch.remote_stop_script(e["pid"], e["start_time"], timeout_s)
    try:
        p = subprocess.run(launch.remote_argv(e, script), capture_output=True, text=True, timeout=timeout_s + 20)
    except subprocess.TimeoutExpired:
        return ["%s: ssh to %s did not return within %.0f s" % (e["device"], e["login"], timeout_s + 20)]
    if p.returncode != 0:
        return ["%s: stopping pid %d on %s failed (ssh exited %d): %s" % (
            e["device"], e["pid"], e["login"], p.returncode, (p.stderr or p.stdout).strip()[-500:])]
    say("%s: %s (pid %d on %s)" % (e["device"], p.stdout.strip() or "stopped", e["pid"], e["login"]))
    return []


def logs(launch_dir: str, out_dir: str | None = None, devices: Sequence[str] | None = None,
         timeout_s: float = 30.0, say: Callable[[str], None] = print) -> list[str]:
    """Collects each recorded server's log (default all) into out_dir (default the launch directory):
    local ones copied, remote ones read over ssh (each call bounded by timeout_s). Returns the errors."""
    launch_dir = os.path.abspath(launch_dir)
    out_dir = os.path.abspath(out_dir or launch_dir)
    os.makedirs(out_dir, exist_ok=True)
    errors = []
    for name, e in _selected(read_state(launch_dir), devices).items():
        target = os.path.join(out_dir, name + ".log")
        try:
            if e["local"]:
                if os.path.abspath(e["log"]) != target:
                    shutil.copyfile(e["log"], target)
            else:
                p = subprocess.run(launch.remote_argv(e, launch.log_script(e)), capture_output=True,
                                   timeout=timeout_s)
                if p.returncode != 0:
                    raise OSError("ssh to %s exited %d: %s" % (e["login"], p.returncode,
                                                               p.stderr.decode(errors="replace").strip()[-300:]))
                with open(target, "wb") as f:
                    f.write(p.stdout)
        except (OSError, subprocess.SubprocessError) as err:
            errors.append("%s: its log not collected: %s" % (name, err))
            continue
        say("%s: %s" % (name, target))
    return errors
