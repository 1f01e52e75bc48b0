"""Launch plans: the commands that start, stop and read the log of each TF server of a cluster file
on its device's host. Pure: no process, no network, no TensorFlow (cluster/launch_procs.py runs them).

A device whose host is this machine (`localhost`, `127.0.0.1`, `::1`, this machine's host name) gets
a local process: this Python running `edgemesh server --cluster FILE --device NAME` in the current
directory, its log at `<launch dir>/<device>.log`. Any other host is reached over ssh, one call that
starts the server detached and prints its pid and `/proc/<pid>/stat` (its start time tells it from a
later process with the same pid):

    ssh -o BatchMode=yes -o ConnectTimeout=10 [USER@]HOST 'cd WORKDIR && mkdir -p runs/launch/C || exit 1;
      nohup EDGEMESH server --tf_config JSON > runs/launch/C/DEV.log 2>&1 < /dev/null & echo "$!"; cat /proc/$!/stat'

The remote server gets its TF_CONFIG on its command line, so the host needs no copy of the cluster
file. USER, WORKDIR and EDGEMESH are the device's cluster-file fields (`spec.Launch`: `ssh_user`,
`workdir`, `edgemesh`), else the flags (`Options`), else the defaults: ssh's own choice of user (its
config), the launcher's current directory (relative to the home directory when under it, as mpirun
does: each host holds its copy of the repository at the same place) and `.venv/bin/edgemesh`.

Wherever a server runs, TensorFlow binds its port on every interface (0.0.0.0 is hard-coded in its
server; no option binds the file's address): see `server.SECURITY_NOTE`.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shlex
import socket
from typing import Iterable, Mapping, Sequence

from edgemesh_tf.cluster.spec import ClusterFile, Device, launch_field
from edgemesh_tf.cluster.tf_config import tf_config

DEFAULT_EDGEMESH = ".venv/bin/edgemesh"
DEFAULT_SSH = ("ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10")
"""ssh never asks for a password (BatchMode: keys or an agent only) and gives up on a host that does
not answer within 10 s."""
STATE_FILE = "launch.json"
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclasses.dataclass(frozen=True)
class Options:
    """The flags of `edgemesh launch`: the defaults of the launch fields for devices whose cluster-file
    entry does not give them (ssh_user, workdir, edgemesh), and the ssh command (program and options)."""

    ssh_user: str | None = None
    workdir: str | None = None
    edgemesh: str | None = None
    ssh: tuple[str, ...] = DEFAULT_SSH

    def __post_init__(self):
        for field in ("ssh_user", "workdir", "edgemesh"):
            launch_field("edgemesh launch flags", None, field, getattr(self, field))
        if not self.ssh:
            raise ValueError("edgemesh launch flags: field 'ssh': must name the ssh program, got %r" % (self.ssh,))


@dataclasses.dataclass(frozen=True)
class ServerPlan:
    """How one device's server is started and found again.

    local: a process on this machine; start is then the server's own argv and log a path here. Else
    start is the ssh argv that starts it on `login` ([user@]host) in `workdir` and prints its pid and
    /proc stat line, and log is the log's path on the host, relative to workdir.
    """

    device: str
    task: str
    address: str
    host: str
    local: bool
    start: tuple[str, ...]
    log: str
    ssh: tuple[str, ...] = ()
    login: str | None = None
    workdir: str | None = None


def local_hosts() -> frozenset[str]:
    """The host names that mean this machine: LOCAL_NAMES and this machine's host name (short and as
    set; no DNS lookup)."""
    name = socket.gethostname()
    return frozenset(LOCAL_NAMES + (name, name.split(".")[0]))


def default_launch_dir(cluster: ClusterFile) -> str:
    """Where a launch keeps its state and logs unless --launch_dir says: runs/launch/<cluster name>
    (relative to the current directory here, and to the workdir on each remote host)."""
    return os.path.join("runs", "launch", cluster.name)


def default_workdir(cwd: str, home: str) -> str:
    """The remote working directory when neither file nor flag gives one: `cwd` relative to `home`
    when under it (the same repository copy under each login's home), else `cwd` itself."""
    rel = os.path.relpath(cwd, home)
    return cwd if rel == ".." or rel.startswith("../") else rel


def _cd_target(workdir: str) -> str:
    """A workdir as a quoted `cd` argument: `~/x` and `~` become relative to the login's home (where ssh
    starts), which a quoted `~` would not be."""
    if workdir == "~":
        return "."
    return shlex.quote(workdir[2:] if workdir.startswith("~/") else workdir)


def plan_server(cluster: ClusterFile, device: Device, launch_dir: str, options: Options, *, python: str,
                hosts: Iterable[str], cwd: str, home: str) -> ServerPlan:
    """The ServerPlan of `device` (see the module docstring): local when its host is in `hosts`."""
    common = dict(device=device.name, task=device.device_string, address=device.address, host=device.host)
    if device.host in set(hosts):
        argv = (python, "-m", "edgemesh_tf.cli.main", "server", "--cluster", os.path.abspath(cluster.path),
                "--device", device.name)
        return ServerPlan(local=True, start=argv, log=os.path.join(launch_dir, device.name + ".log"), **common)
    fields = cluster.launch_of(device.name)
    user = fields.ssh_user or options.ssh_user
    workdir = fields.workdir or options.workdir or default_workdir(cwd, home)
    edgemesh = fields.edgemesh or options.edgemesh or DEFAULT_EDGEMESH
    remote_dir = launch_dir if not os.path.isabs(launch_dir) else default_launch_dir(cluster)
    log = os.path.join(remote_dir, device.name + ".log")
    config = json.dumps(tf_config(cluster, device), separators=(",", ":"))
    script = ("cd %s && mkdir -p %s || exit 1; nohup %s server --tf_config %s > %s 2>&1 < /dev/null & "
              'echo "$!"; cat /proc/$!/stat' % (_cd_target(workdir), shlex.quote(remote_dir), edgemesh,
                                                 shlex.quote(config), shlex.quote(log)))
    login = "%s@%s" % (user, device.host) if user else device.host
    return ServerPlan(local=False, start=tuple(options.ssh) + (login, script), log=log, ssh=tuple(options.ssh),
                      login=login, workdir=workdir, **common)


def plan_cluster(cluster: ClusterFile, launch_dir: str, options: Options = Options(), *, python: str,
                 hosts: Iterable[str] | None = None, cwd: str | None = None, home: str | None = None,
                 devices: Sequence[str] | None = None) -> list[ServerPlan]:
    """The ServerPlans of `devices` (names; default all, in file order). hosts, cwd and home default to
    this machine's (local_hosts, the current directory, $HOME)."""
    names = [d.name for d in cluster.devices] if not devices else list(devices)
    for name in names:
        cluster.device(name)  # KeyError naming the file and the devices it has
    hosts = local_hosts() if hosts is None else frozenset(hosts)
    cwd = os.getcwd() if cwd is None else cwd
    home = os.path.expanduser("~") if home is None else home
    return [plan_server(cluster, cluster.device(n), launch_dir, options, python=python, hosts=hosts, cwd=cwd,
                        home=home) for n in names]


def stat_start_time(stat: str) -> int:
    """The start time (clock ticks since boot) in a /proc/<pid>/stat line; ValueError if it has none."""
    try:
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError) as e:
        raise ValueError("not a /proc/<pid>/stat line: %r" % stat[:200]) from e


def parse_started(output: str, where: str) -> tuple[int, int]:
    """(pid, start time) from what the remote start command printed (`echo $!; cat /proc/$!/stat`);
    ValueError naming `where` (device and host) and the output otherwise."""
    lines = output.strip().splitlines()
    try:
        return int(lines[0]), stat_start_time(lines[1])
    except (IndexError, ValueError) as e:
        raise ValueError("%s: the start command printed no pid and /proc stat line (the server exited at "
                         "once?): %r" % (where, output[-500:])) from e


def remote_stop_script(pid: int, start_time: int, kill_after_s: float) -> str:
    """A shell script for the host: SIGTERM to `pid` if it is still the process started at `start_time`,
    SIGKILL after kill_after_s; prints `gone`, `stopped` or `alive` (then exits 1)."""
    return ("p=%d; s=%d; alive() { [ \"$(sed 's/^.*) //' /proc/$p/stat 2>/dev/null | cut -d' ' -f20)\" = \"$s\" ]; }; "
            "alive || { echo gone; exit 0; }; kill -TERM $p; n=0; "
            "while alive && [ $n -lt %d ]; do sleep 0.2; n=$((n+1)); done; "
            "if alive; then kill -KILL $p; sleep 0.5; fi; if alive; then echo alive; exit 1; fi; echo stopped"
            % (pid, start_time, max(1, int(round(kill_after_s / 0.2)))))


def remote_argv(entry: Mapping, script: str) -> list[str]:
    """The ssh argv that runs `script` on the host of a recorded server (its ssh, login and workdir)."""
    return list(entry["ssh"]) + [entry["login"], "cd %s && { %s; }" % (_cd_target(entry["workdir"]), script)]


def log_script(entry: Mapping) -> str:
    """A shell script that prints a recorded remote server's log (relative to its workdir)."""
    return "cat %s" % shlex.quote(entry["log"])


def wait_message(cluster: ClusterFile, missing: Sequence, waited_s: float, timeout_s: float,
                 launched: Mapping[str, str]) -> str:
    """What `edgemesh launch wait` prints when servers did not answer after waited_s (of at most
    timeout_s): one paragraph per missing task (ready.Missing: job and index, device, address, what was
    found there) with what the launch knows of its process (launched: {device name: e.g. "its process
    (pid 123) has exited; its log ends: ..."})."""
    lines = ["%d of the %d TF servers of %s did not answer after %.0f s (at most %.0f s, --timeout_s%s):"
             % (len(missing), len(cluster.devices), cluster.path, waited_s, timeout_s,
                "; stopped early: their processes have exited" if waited_s < timeout_s - 0.5 else "")]
    for m in missing:
        d = m.device
        lines.append("- %s %d (%s), device %r at %s: %s" % (d.role, d.task_index, d.device_string, d.name,
                                                             m.address, m.reason))
        lines.append("  %s" % launched.get(d.name, "not started by this launch (edgemesh launch start --cluster %s)"
                                           % cluster.path))
    return "\n".join(lines)
