"""An emulated heterogeneous cluster on one machine: one TF server process per device.

    with emulated_cluster("layouts/edge4.yaml") as cluster:
        with tf.device(cluster.device("edge1")):
            y = ...
        with tf.compat.v1.Session(cluster.session_target) as sess: ...

Network (root): each device in its own namespace behind a veth with `tbf` in both directions; one
forwarder process in the root namespace adds the latency (see netns.py for the addressing). Every
process, client or server, reaches device D at the same address, so one ClusterSpec serves all.
A cluster whose links all have <= netns.DIRECT_LATENCY_MS of latency runs without the forwarder
(direct routing: it would cost the devices' CPU at 1 Gbit/s); a shared medium is one ifb + tbf.
Network (no root): servers on loopback, one forwarder route per (source, destination) pair that
applies rate and delay in user space; each server gets its own view of the ClusterSpec.
Compute: a cgroup CPU quota per device, calibrated so the measured speed ratios match the file
(or the file's absolute `cpu_cores`); without a writable cgroup, `step_delay_s` tells the training
loop how long to sleep per step.
Memory: a cgroup v1 memory limit per device with a `memory_mib` budget above its idle server
(memory.py); a device past it is OOM-killed by the kernel.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Sequence

from absl import logging

from edgemesh_tf.cluster import (calibration, cgroup, memory as memory_lib, netns, probe, procs, simd,
                                 spec as spec_lib, state as state_lib)
from edgemesh_tf.cluster import emulated_network
from edgemesh_tf.cluster.tf_config import cluster_spec_dict

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclasses.dataclass(frozen=True)
class EmulatedDevice:
    """A running device. address: host:port as seen from the client; cpu_cores: cgroup quota
    (None = unlimited); step_delay_factor: fallback slowdown (1.0 = none); memory: the enforced
    memory limit (memory_lib.MemoryLimit as a dict, MiB; None = unlimited)."""

    name: str
    role: str
    task_index: int
    device: str
    address: str
    pid: int
    log: str
    netns: str | None = None
    cpu_cores: float | None = None
    step_delay_factor: float = 1.0
    local_address: str | None = None
    memory: dict | None = None

    @property
    def local_target(self) -> str:
        """grpc:// target of the server for a client on the device itself (inside `netns` if set):
        no emulated link or delay between them."""
        return "grpc://" + (self.local_address or self.address)

    @property
    def target(self) -> str:
        return "grpc://" + self.address


class EmulatedCluster:
    """Handle on a running emulated cluster (see `up`)."""

    def __init__(self, spec: spec_lib.ClusterFile, run: state_lib.RunState, network: str):
        self.spec, self.run, self.network = spec, run, network
        self.compute = "off"
        self.memory = "off"
        self.latency = "forwarder"  # or "direct" (no forwarder: latency <= netns.DIRECT_LATENCY_MS unmodelled)
        self.media: dict[str, dict] = {}  # medium name -> {"bandwidth_mbit", "devices", "how"}
        self.calibration: calibration.CpuCalibration | None = None
        self._mem: dict[str, tuple[cgroup.MemoryGroup, memory_lib.MemoryLimit]] = {}
        self.devices: dict[str, EmulatedDevice] = {}
        self._procs: dict[str, subprocess.Popen] = {}
        self._client_addresses: dict[str, str] = {}
        self._closed = False
        self._cpu: dict[str, tuple[cgroup.CpuGroup, float, int]] = {}  # name -> (cgroup, calibrated cores, period µs)
        self._slowdown: dict[str, float] = {}  # name -> factor of `set_slowdown` in force
        self.rate_limits: list[tuple[str | None, str, float]] = []  # every tbf: (netns, interface, Mbit/s)
        self._cmds: dict[str, list[str]] = {}  # device name -> the command that started its server
        self.exit_codes: dict[str, int] = {}  # filled by close(): 0 = clean exit on SIGTERM

    @property
    def run_dir(self) -> str:
        return self.run.run_dir

    def cluster_spec(self) -> dict[str, list[str]]:
        """{job: [host:port]} as seen from a client process on this machine (root namespace)."""
        return cluster_spec_dict(self.spec, self._client_addresses)

    def target(self, name: str) -> str:
        """grpc:// target of device `name` (a session there uses it as master)."""
        return self.devices[name].target

    def device(self, name: str) -> str:
        """TF device string of `name`, e.g. /job:worker/task:2."""
        return self.devices[name].device

    @property
    def session_target(self) -> str:
        """The chief's target, else the first worker's."""
        return self.target(self.spec.master.name)

    def step_delay_s(self, name: str, step_s: float) -> float:
        """Seconds to sleep after a step of `step_s` on `name` (0 unless compute == 'step-delay')."""
        return (self.devices[name].step_delay_factor - 1.0) * step_s

    def set_slowdown(self, name: str, factor: float) -> float:
        """Makes device `name` `factor` times slower than its cluster file says (1.0 restores it) by
        scaling its cgroup CPU quota; returns the new quota in cores. Needs cgroup compute."""
        if name not in self._cpu:
            raise ValueError("device %s has no CPU quota to change (compute %s; only devices with a speed under "
                             "cgroup compute can be slowed)" % (name, self.compute))
        if not (isinstance(factor, (int, float)) and factor > 0):
            raise ValueError("slowdown factor of %s must be > 0, got %r" % (name, factor))
        group, cores, period_us = self._cpu[name]
        group.set_quota(cores / factor, period_us)
        self._slowdown[name] = factor
        logging.info("device %s slowed %.3gx: %.3f cores", name, factor, cores / factor)
        return cores / factor

    def slowed(self) -> dict[str, float]:
        """{device: factor} of the devices `set_slowdown` has slowed (factor != 1) now."""
        return {n: f for n, f in self._slowdown.items() if f != 1.0}

    def lift_quotas(self) -> None:
        """Lifts every device's CPU quota (each server's thread pool, sized to its quota, still bounds
        it) until `restore_quotas`: for a job's set-up (each device's first run of its graphs, ~17 s
        on edge3's quota), which no measurement counts."""
        for group, _, period_us in self._cpu.values():
            group.set_quota(None, period_us)

    def restore_quotas(self) -> None:
        """Every device back at its quota: calibrated, or slowed by `set_slowdown` (undoes `lift_quotas`)."""
        for name, (group, cores, period_us) in self._cpu.items():
            group.set_quota(cores / self._slowdown.get(name, 1.0), period_us)

    def lift_links(self) -> None:
        """Every link's (and shared medium's) tbf at netns.LIFTED_MBIT until `restore_links`: for a
        job's set-up (a warm-up's dense pull and push of vgg_m take ~8 s over edge3's 10 Mbit/s) and
        wind-down, which no measurement counts. Latency stays. No-op without network namespaces."""
        for ns, interface, _ in self.rate_limits:
            netns.set_rate(interface, netns.LIFTED_MBIT, ns)

    def restore_links(self) -> None:
        """Every link back at the rate its cluster file says (undoes `lift_links`)."""
        for ns, interface, rate in self.rate_limits:
            netns.set_rate(interface, rate, ns)

    def lift_limits(self) -> None:
        """`lift_quotas` and `lift_links`."""
        self.lift_quotas()
        self.lift_links()

    def restore_limits(self) -> None:
        """`restore_quotas` and `restore_links`."""
        self.restore_quotas()
        self.restore_links()

    def reset_memory_peaks(self) -> None:
        """Starts every memory-limited device's peak again from what it holds now (``memory_peaks``)."""
        for group, _ in self._mem.values():
            group.reset_peak()

    def memory_peaks(self) -> dict[str, int]:
        """{device: the most its memory group was charged since it joined or ``reset_memory_peaks``}
        (bytes above its idle server, the figure its budget limits); devices without a budget are absent."""
        out = {}
        for name, (group, _) in self._mem.items():
            try:
                out[name] = group.peak()
            except OSError:  # its group went with a device that is down
                pass
        return out

    def _spawn_server(self, name: str, mode: str) -> subprocess.Popen:
        with open(_log_path(self.run_dir, name), mode) as log:
            env = dict(_child_env(), **simd.server_env(self.spec.device(name).simd_bits))
            p = procs.spawn(self._cmds[name], env=env, stdout=log, stderr=subprocess.STDOUT)
        self._procs[name] = p
        self.run.record_process(name, p.pid)
        return p

    def restart_device(self, name: str, timeout_s: float = 120.0) -> EmulatedDevice:
        """Starts device `name`'s server again after it died, at the same address, in the same
        network namespace and CPU cgroup (a device that comes back); waits until it answers (at
        most timeout_s). Call from a long-lived thread: the server dies with the calling thread."""
        if name not in self._cmds:
            raise ValueError("unknown device %r; devices: %s" % (name, sorted(self._cmds)))
        old = self._procs[name]
        if old.poll() is None:
            raise ValueError("device %s is still running (pid %d); only a device whose server died can be restarted"
                             % (name, old.pid))
        return self._rejoin(name, self._spawn_server(name, "a"), timeout_s)

    def fresh_servers(self, names: Sequence[str], timeout_s: float = 120.0) -> None:
        """Ends the servers of devices ``names`` (this testbed's own processes, by their ids) and starts
        them again, idle, as ``restart_device`` does: all are spawned before any is waited for. What a
        server's allocator kept of the memory earlier work freed (the profile's layer timings) then does
        not count against its budget while it trains, as on a run whose profile was cached."""
        for name in names:
            procs.terminate(self._procs[name])
        spawned = {name: self._spawn_server(name, "a") for name in names}
        for name, p in spawned.items():
            self._rejoin(name, p, timeout_s)

    def _rejoin(self, name: str, p: subprocess.Popen, timeout_s: float) -> EmulatedDevice:
        """Waits until the respawned server ``p`` of ``name`` answers (at most timeout_s), then puts it in
        its CPU and memory groups, as ``up`` does."""

        def alive():
            if p.poll() is not None:
                raise RuntimeError("device %s: restarted server (pid %d) exited with code %s; log %s"
                                   % (name, p.pid, p.returncode, _log_path(self.run_dir, name)))
        probe.wait_until_answering({name: self._client_addresses[name]}, timeout_s, check_alive=alive)
        if name in self._cpu:  # after start-up, as in `up`
            self._cpu[name][0].add(p.pid)
        memory = self.devices[name].memory
        if name in self._mem:
            group, old = self._mem[name]
            lim = memory_lib.limit(group, p.pid, old.budget_mib)
            self._mem[name], memory = (group, lim), dataclasses.asdict(lim)
        self.devices[name] = dataclasses.replace(self.devices[name], pid=p.pid, memory=memory)
        logging.info("device %s restarted (pid %d)", name, p.pid)
        return self.devices[name]

    def restart_dead(self, timeout_s: float = 120.0) -> list[str]:
        """Starts again every device whose server died (``restart_device``); returns their names."""
        dead = [n for n in self.devices if not self.is_running(n)]
        for name in dead:
            self.restart_device(name, timeout_s)
        return dead

    def is_running(self, name: str) -> bool:
        """Whether device `name`'s server process is still running (not killed, not exited)."""
        return self._procs[name].poll() is None

    def check(self) -> None:
        """Raises RuntimeError naming any child process that has exited."""
        dead = ["%s (pid %d, exit code %s, log %s)%s" % (n, p.pid, p.returncode, _log_path(self.run_dir, n),
                                                         memory_lib.oom_note(*self._mem[n]) if n in self._mem else "")
                for n, p in self._procs.items() if p.poll() is not None]
        if dead:
            raise RuntimeError("emulated cluster %s: process exited: %s" % (self.run.run_id, "; ".join(dead)))

    def close(self) -> list[str]:
        """Stops every process and removes namespaces, veths, qdiscs and cgroups; returns errors."""
        if self._closed:
            return []
        self._closed = True
        for name, p in self._procs.items():
            procs.terminate(p, 5.0)
            self.exit_codes[name] = p.returncode
        errors = state_lib.teardown(self.run)
        if errors:
            logging.error("teardown of run %s incomplete: %s", self.run.run_id, "; ".join(errors))
        else:
            logging.info("emulated cluster %s down", self.run.run_id)
        return errors

    def summary(self) -> dict:
        """Plain data for logs and for other processes (written to <run_dir>/cluster.json)."""
        return {"run_id": self.run.run_id, "run_dir": self.run_dir, "network": self.network,
                "compute": self.compute, "memory": self.memory, "latency": self.latency, "media": self.media,
                "cluster_spec": self.cluster_spec(), "session_target": self.session_target,
                "devices": {n: dataclasses.asdict(d) for n, d in self.devices.items()}}


def _log_path(run_dir: str, name: str) -> str:
    return os.path.join(run_dir, name + ".log")


def _child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = _REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("TF_CONFIG", None)
    return env


def _start_forwarder(cluster: EmulatedCluster, routes, timeout_s: float) -> None:
    path = os.path.join(cluster.run_dir, "routes.json")
    with open(path, "w") as f:
        json.dump([r.to_json() for r in routes], f, indent=1)
    ready = os.path.join(cluster.run_dir, "forwarder.ready")
    log = open(_log_path(cluster.run_dir, "forwarder"), "w")
    p = procs.spawn([sys.executable, "-m", "edgemesh_tf.cluster.forwarder", path, ready],
                    env=_child_env(), stdout=log, stderr=subprocess.STDOUT)
    log.close()
    cluster._procs["forwarder"] = p
    cluster.run.record_process("forwarder", p.pid)
    try:  # it handles every packet's delay: let it preempt busy processes
        os.setpriority(os.PRIO_PROCESS, p.pid, -10)
    except OSError:
        pass
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(ready):
        cluster.check()
        if time.monotonic() > deadline:
            raise TimeoutError("forwarder (pid %d) not ready after %.0f s; log %s" % (
                p.pid, timeout_s, _log_path(cluster.run_dir, "forwarder")))
        time.sleep(0.05)


def _start_servers(cluster: EmulatedCluster, views, namespaces, server_flags, cores) -> None:
    for d in cluster.spec.devices:
        config = {"cluster": cluster_spec_dict(cluster.spec, views[d.name]),
                  "task": {"type": d.role, "index": d.task_index}}
        # --nofacts: the version query is for real servers (`edgemesh cluster check`)
        cmd = [sys.executable, "-m", "edgemesh_tf.cli.main", "server", "--tf_config", json.dumps(config), "--nofacts"]
        if d.name in cores:
            # As many compute threads as the quota has cores: a thread pool wider than the quota
            # loses time to throttled threads holding up the others.
            cmd.append("--intra_op_threads=%d" % max(1, math.ceil(cores[d.name] - 0.05)))
        cmd += list(server_flags)
        if d.name in namespaces:
            cmd = ["ip", "netns", "exec", namespaces[d.name]] + cmd
        cluster._cmds[d.name] = cmd
        cluster._spawn_server(d.name, "w")


def _plan_cpu(cluster: EmulatedCluster, compute: str, period_us: int, calib) -> dict[str, float]:
    """Cores per device: the file's `cpu_cores` as they are; calibrated quotas for the devices with a
    speed, sharing what is left of cpu_budget_cores (the calibration runs before the servers start)."""
    cores = {d.name: d.cpu_cores for d in cluster.spec.devices if d.cpu_cores}
    speeds = {d.name: d.speed for d in cluster.spec.devices if d.speed}
    if speeds:
        cluster.calibration = calib or calibration.load_or_calibrate(compute.split("-")[1], period_us)
        cores.update(calibration.quotas(speeds, cluster.spec.cpu_budget_cores - sum(cores.values()),
                                        cluster.calibration))
    elif calib:
        cluster.calibration = calib
    return cores


def _limit_cpu(cluster: EmulatedCluster, compute: str, period_us: int, cores: dict[str, float]) -> None:
    """Moves each server into its cgroup. Done once the servers answer, so that importing TF at a
    quarter of a core does not stretch the start-up."""
    version = compute.split("-")[1]
    for name, c in cores.items():
        group = cgroup.CpuGroup("%s%s-%s" % (cgroup.PREFIX, cluster.run.run_id, name), version)
        cluster.run.record("cgroups", group.path)
        group.create()
        group.set_quota(c, period_us)
        group.set_priority()
        group.add(cluster._procs[name].pid)
        cluster._cpu[name] = (group, c, period_us)
        d = cluster.spec.device(name)
        logging.info("device %s: %s -> %.3f cores (%s, period %d us)", name, "speed %.3g" % d.speed if d.speed
                     else "cpu_cores", c, compute, period_us)


def _limit_memory(cluster: EmulatedCluster) -> None:
    """A memory cgroup per device with a memory_mib budget, joined once its server is idle."""
    for d in cluster.spec.devices:
        if d.memory_mib:
            group = cgroup.MemoryGroup(memory_lib.group_name(cluster.run.run_id, d.name))
            cluster.run.record("cgroups", group.path)
            group.create()
            cluster._mem[d.name] = (group, memory_lib.limit(group, cluster._procs[d.name].pid, d.memory_mib))


def up(spec: spec_lib.ClusterFile | str, *, network: str = "auto", compute: str = "auto",
       timeout_s: float = 180.0, period_us: int = cgroup.DEFAULT_PERIOD_US,
       calib: calibration.CpuCalibration | None = None, server_flags=(), memory: str = "auto") -> EmulatedCluster:
    """Starts every device of `spec` as its own server process and applies its limits.

    network: 'netns' (needs root), 'userspace' or 'auto'. compute: 'cgroup-v1', 'cgroup-v2',
    'step-delay', 'off' or 'auto'. memory: 'cgroup-v1' (each device's memory_mib enforced above its
    idle server, see memory.py), 'off' or 'auto' (cgroup-v1 where the memory controller is writable
    and some device has a memory_mib). timeout_s bounds the wait for all servers to answer. Leftovers of
    launchers that died are removed first. On any error, everything started so far is removed.
    """
    spec = spec_lib.load_cluster(spec) if isinstance(spec, str) else spec
    root = state_lib.run_root()
    if network == "auto":
        network = "netns" if netns.available() else "userspace"
    if compute == "auto":
        version = cgroup.detect()
        compute = "cgroup-" + version if version else "step-delay"
    if memory == "auto":
        memory = "cgroup-v1" if cgroup.memory_available() and any(d.memory_mib for d in spec.devices) else "off"
    elif memory == "cgroup-v1" and not cgroup.memory_available():
        raise RuntimeError("memory='cgroup-v1' needs a writable %s (root, cgroup v1 memory controller)"
                           % cgroup.MEMORY_ROOT)
    elif memory not in ("cgroup-v1", "off"):
        raise ValueError("memory must be 'auto', 'cgroup-v1' or 'off', got %r" % (memory,))
    with state_lib.locked(root):
        for line in state_lib.clean_stale(root):
            logging.warning("removed leftover of an earlier launcher: %s", line)
        run = state_lib.new_run(root, spec.path, want_slot=network == "netns")
    cluster = EmulatedCluster(spec, run, network)
    try:
        if network == "netns":
            client, views, routes, namespaces = emulated_network.plan_netns(cluster, run)
        else:
            logging.warning("no root: emulating bandwidth and latency in a user-space forwarder; servers run in the "
                            "root network namespace, where TF binds their ports on all interfaces")
            client, views, routes, namespaces = emulated_network.plan_userspace(cluster)
        cluster._client_addresses = client
        cores = _plan_cpu(cluster, compute, period_us, calib) if compute.startswith("cgroup-") else {}
        if routes:
            _start_forwarder(cluster, routes, timeout_s=30.0)
        _start_servers(cluster, views, namespaces, server_flags, cores)
        waited = probe.wait_until_answering(client, timeout_s, check_alive=cluster.check)
        logging.info("all %d servers answer after %.1f s", len(client), waited)
        factors: dict[str, float] = {}
        if memory == "cgroup-v1":
            _limit_memory(cluster)
        cluster.memory = memory
        if cores:
            _limit_cpu(cluster, compute, period_us, cores)
        elif compute == "step-delay":
            logging.warning("no writable cgroup cpu controller: emulating compute speed by a per-step delay "
                            "(EmulatedCluster.step_delay_s); servers themselves run at full speed")
            # Relative speed: `speed`, or `cpu_cores` taken as proportional to speed.
            rel = {d.name: d.speed or d.cpu_cores for d in spec.devices if d.speed or d.cpu_cores}
            factors = {n: max(rel.values()) / r for n, r in rel.items()}
        cluster.compute = compute
        for d in spec.devices:
            cluster.devices[d.name] = EmulatedDevice(
                name=d.name, role=d.role, task_index=d.task_index, device=d.device_string, address=client[d.name],
                pid=cluster._procs[d.name].pid, log=_log_path(run.run_dir, d.name), netns=namespaces.get(d.name),
                cpu_cores=cores.get(d.name), step_delay_factor=factors.get(d.name, 1.0),
                memory=dataclasses.asdict(cluster._mem[d.name][1]) if d.name in cluster._mem else None,
                local_address=("127.0.0.1:%d" % d.port) if d.name in namespaces else views[d.name][d.name])
        with open(os.path.join(run.run_dir, "cluster.json"), "w") as f:
            json.dump(cluster.summary(), f, indent=1)
        return cluster
    except BaseException:
        cluster.close()
        raise


def down(run_id: str | None = None) -> list[str]:
    """Stops the runs of this machine (all, or `run_id`): SIGTERM to a live launcher, then removes
    what is left. Returns error messages."""
    root = state_lib.run_root()
    errors = []
    for run in state_lib.all_runs(root):
        if run_id and run.run_id != run_id:
            continue
        if run.owner_alive() and run.data["owner_pid"] != os.getpid():
            procs.kill(run.data["owner_pid"], run.data.get("owner_start"), timeout_s=30.0)
        with state_lib.locked(root):
            if os.path.exists(run.path):
                errors += state_lib.teardown(run)
    with state_lib.locked(root):
        state_lib.clean_stale(root)
    return errors


@contextlib.contextmanager
def emulated_cluster(spec: spec_lib.ClusterFile | str, **kwargs):
    """`with emulated_cluster(spec) as cluster:` up() ... close(), also on exceptions and SIGTERM."""
    restore = None
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        def _on_term(signum, frame):
            raise SystemExit(128 + signum)

        restore = signal.signal(signal.SIGTERM, _on_term)
    try:
        cluster = up(spec, **kwargs)
        try:
            yield cluster
        finally:
            cluster.close()
    finally:
        if restore is not None:
            signal.signal(signal.SIGTERM, restore)
