"""What a launcher created, in a state file, so that `down` or a later `up` can remove it.

Layout: <root>/<run_id>/state.json (+ logs), root = /tmp/edgemesh-cluster. The root is one per
machine (override with $EDGEMESH_RUN_ROOT only for a machine of your own): `em-` resources of run
ids not live under it are removed as orphans. A resource is recorded *before* it is created, and removal tolerates
resources that never came to be. A run whose owner (the launcher, as pid + start time) is gone is
stale: its leftovers are removed by the next `up` or by `down`.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil

from absl import logging

from edgemesh_tf.cluster import cgroup, netns, procs

DEFAULT_ROOT = "/tmp/edgemesh-cluster"


def run_root() -> str:
    return os.environ.get("EDGEMESH_RUN_ROOT", DEFAULT_ROOT)


@contextlib.contextmanager
def locked(root: str):
    """Serialises launchers of this machine while they allocate run ids and slots or clean up."""
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, ".lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class RunState:
    """The state file of one run; every mutation is written through atomically."""

    def __init__(self, path: str, data: dict):
        self.path, self.data = path, data

    @property
    def run_dir(self) -> str:
        return os.path.dirname(self.path)

    @property
    def run_id(self) -> str:
        return self.data["run_id"]

    def save(self) -> None:
        with open(self.path + ".tmp", "w") as f:
            json.dump(self.data, f, indent=1)
        os.replace(self.path + ".tmp", self.path)

    def record(self, kind: str, item) -> None:
        self.data.setdefault(kind, []).append(item)
        self.save()

    def record_process(self, name: str, pid: int) -> None:
        self.record("processes", {"name": name, "pid": pid, "start": procs.start_time(pid)})

    def owner_alive(self) -> bool:
        return procs.alive(self.data["owner_pid"], self.data.get("owner_start"))

    @staticmethod
    def load(path: str) -> "RunState":
        with open(path) as f:
            return RunState(path, json.load(f))


def new_run(root: str, cluster_path: str, want_slot: bool) -> RunState:
    """Allocates a run id (4 hex digits, it is part of interface names) and an address slot.
    Call with the lock held, after clean_stale()."""
    live = [s for s in all_runs(root)]
    taken_ids = {s.run_id for s in live} | {n.split("-")[1] for n in netns.list_namespaces() if n.count("-") >= 2}
    run_id = next(r for r in (secrets.token_hex(2) for _ in range(1000)) if r not in taken_ids)
    slot = None
    if want_slot:
        taken = netns.used_slots() | {s.data.get("slot") for s in live}
        free = [s for s in range(256) if s not in taken]
        if not free:
            raise RuntimeError("no free address slot in %s (256 clusters running?)" % netns.SUPERNET)
        slot = free[0]
    run_dir = os.path.join(root, run_id)
    os.makedirs(run_dir)
    state = RunState(os.path.join(run_dir, "state.json"), {
        "run_id": run_id, "owner_pid": os.getpid(), "owner_start": procs.start_time(os.getpid()),
        "cluster": cluster_path, "slot": slot, "processes": [], "links": [], "cgroups": []})
    state.save()
    return state


def all_runs(root: str) -> list[RunState]:
    runs = []
    if os.path.isdir(root):
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name, "state.json")
            if os.path.exists(path):
                try:
                    runs.append(RunState.load(path))
                except (OSError, ValueError) as e:
                    logging.warning("unreadable state file %s: %s", path, e)
    return runs


def teardown(state: RunState, keep_dir: bool = False) -> list[str]:
    """Removes everything the run recorded, in reverse dependency order; returns error messages."""
    errors = []
    for p in reversed(state.data.get("processes", [])):
        if not procs.kill(p["pid"], p.get("start")):
            errors.append("process %s (pid %d) did not exit" % (p["name"], p["pid"]))
    for link in state.data.get("links", []):
        # Anything still running inside our namespace was started by us: stop it by pid.
        for pid in netns.namespace_pids(link["netns"]) if link["netns"] else ():
            procs.kill(pid, None, timeout_s=2.0)
        errors += netns.destroy(link["netns"], link["host_if"])  # a medium: netns "", host_if its ifb
    for path in state.data.get("cgroups", []):
        for pid in cgroup.pids_of(path):
            procs.kill(pid, None, timeout_s=2.0)
        err = cgroup.remove(path)
        if err:
            errors.append(err)
    if not errors and not keep_dir:
        shutil.rmtree(state.run_dir, ignore_errors=True)
    elif not errors:
        os.remove(state.path)
    return errors


def clean_stale(root: str) -> list[str]:
    """Tears down runs whose launcher is gone, then `em-` resources that no live run owns.
    Call with the lock held. Returns what was removed (for the log)."""
    removed = []
    live_ids = set()
    for s in all_runs(root):
        if s.owner_alive():
            live_ids.add(s.run_id)
            continue
        errors = teardown(s)
        removed.append("run %s (launcher pid %d gone)%s" % (s.run_id, s.data["owner_pid"],
                                                            ": " + "; ".join(errors) if errors else ""))
    # Orphans whose state file was lost: their names carry the run id.
    for ns in netns.list_namespaces():
        if ns.split("-")[1] not in live_ids:
            for pid in netns.namespace_pids(ns):
                procs.kill(pid, None, timeout_s=2.0)
            netns.destroy(ns, "")
            removed.append("namespace " + ns)
    for link in netns.list_links():
        if link[len(netns.PREFIX):len(netns.PREFIX) + 4] not in live_ids and link.endswith("h"):
            netns.destroy("", link)
            removed.append("link " + link)
    for medium in netns.list_media():
        if medium[len(netns.PREFIX):len(netns.PREFIX) + 4] not in live_ids:
            netns.destroy("", medium)
            removed.append("medium " + medium)
    for path in cgroup.list_groups():
        parts = os.path.basename(path).split("-")
        if parts[1] not in live_ids and not (parts[1] == "calib" and procs.alive(int(parts[2]), None)):
            err = cgroup.remove(path, timeout_s=2.0)
            removed.append("cgroup %s%s" % (path, " (" + err + ")" if err else ""))
    return removed
