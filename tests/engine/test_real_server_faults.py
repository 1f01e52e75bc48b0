"""Faults on real TF servers (no emulator): a localhost cluster shaped like layouts/edge2.yaml (fast
and slow workers, ps, chief), its servers started with `edgemesh launch` as a user would, and
`edgemesh train --noemulate` run on them as a process of its own:
- a worker's server killed mid-run: the job trains on with the other group and says which one it lost;
- SIGINT (Ctrl-C): a clean stop with a checkpoint and the final record, no group process left,
  and a rerun with the same --logdir resumes from it;
- the ps killed (in that rerun): a named error within 30 s with the resume hint, and a third run
  resumes from the last checkpoint.
A killed server is started again (`edgemesh launch start --device`) for the next test."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from edgemesh_tf.cluster import launch, procs
from edgemesh_tf.cluster.emulated_network import free_ports
from edgemesh_tf.engine.core import records
from edgemesh_tf.engine.core.records import read

pytestmark = [pytest.mark.subprocess]

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EDGE2 = (("fast", "worker"), ("slow", "worker"), ("ps0", "ps"), ("chief", "chief"))


def _edgemesh(*args):
    return [sys.executable, "-m", "edgemesh_tf.cli.main", *args]


def _launch(cluster, command, *args, timeout_s=90):
    p = subprocess.run(_edgemesh("launch", command, "--cluster", cluster.path, "--launch_dir", cluster.launch_dir,
                                 *args), cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    assert p.returncode == 0, (command, p.stdout[-2000:], p.stderr[-3000:])
    return p.stdout


class _Cluster:
    def __init__(self, path, launch_dir):
        self.path, self.launch_dir = path, launch_dir

    def server(self, name) -> tuple[int, int]:
        """(pid, start time) of device `name`'s server, from the launch's record."""
        with open(os.path.join(self.launch_dir, launch.STATE_FILE)) as f:
            e = json.load(f)["servers"][name]
        return e["pid"], e["start_time"]

    def kill(self, name) -> None:
        pid, start = self.server(name)
        assert procs.alive(pid, start), "%s's server is not running" % name
        os.kill(pid, signal.SIGKILL)

    def restart(self, name) -> None:
        _launch(self, "start", "--device", name)
        _launch(self, "wait", "--timeout_s", "60")


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """The cluster's four servers on free localhost ports for the whole module; stopped at the end
    (`edgemesh launch stop`), none left running."""
    tmp = tmp_path_factory.mktemp("real-faults")
    devices = [{"name": n, "role": r, "host": "127.0.0.1", "port": p} for (n, r), p in zip(EDGE2, free_ports(4))]
    path = str(tmp / "edge2-local.yaml")
    with open(path, "w") as f:
        yaml.safe_dump({"name": "edge2-local", "devices": devices}, f, sort_keys=False)
    cluster = _Cluster(path, str(tmp / "launch"))
    try:
        _launch(cluster, "start")
        _launch(cluster, "wait", "--timeout_s", "60")
        yield cluster
    finally:
        subprocess.run(_edgemesh("launch", "stop", "--cluster", path, "--launch_dir", cluster.launch_dir),
                       cwd=ROOT, capture_output=True, timeout=60)
        left = [n for n, _ in EDGE2 if os.path.exists(os.path.join(cluster.launch_dir, launch.STATE_FILE))
                and procs.alive(*cluster.server(n))]
        for n in left:
            procs.kill(*cluster.server(n), 2.0)
        assert not left, "servers left running: %s" % left


def _train(cluster, logdir, budget_s, sync="bsp", **flags):
    flags = {"eval_interval_s": 0.5, "checkpoint_interval_s": 2.0, "lost_after_s": 3.0, "wait_timeout_s": 30.0,
             **flags}
    argv = _edgemesh("train", "--cluster", cluster.path, "--noemulate", "--sync", sync, "--logdir", logdir,
                     "--time_budget_s", str(budget_s), *("--%s=%s" % kv for kv in flags.items()))
    log = open(logdir + ".out", "w")
    return subprocess.Popen(argv, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), stdout=log,
                            stderr=subprocess.STDOUT, text=True)


def _until(proc, logdir, what, predicate, timeout_s=180):
    """Waits until predicate(the chief's records so far) holds, while the job runs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if os.path.exists(os.path.join(logdir, "chief.jsonl")) and predicate(read(logdir)):
            return
        if proc.poll() is not None:
            raise AssertionError("the job ended before %s:\n%s" % (what, _out(logdir)))
        time.sleep(0.2)
    raise AssertionError("no %s within %d s:\n%s" % (what, timeout_s, _out(logdir)))


def _out(logdir) -> str:
    with open(logdir + ".out") as f:
        return f.read()[-4000:]


def _finish(proc, timeout_s):
    try:
        return proc.wait(timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _evals(recs):
    return records.of_kind(recs, records.Eval)


def test_sigint_stops_cleanly_the_rerun_resumes_and_the_ps_killed_in_it_is_named_within_30_s(servers, tmp_path):
    """One logdir, three runs: SIGINT stops the first cleanly with a checkpoint; the second resumes from
    it, and its ps is killed (a named error within 30 s); the third resumes from the second's last
    checkpoint with its steps and clock."""
    logdir = str(tmp_path / "run")
    proc = _train(servers, logdir, 120.0, sync="asp", checkpoint_interval_s=60.0)
    try:
        _until(proc, logdir, "3 evaluations", lambda r: len(_evals(r)) >= 3)
        groups = _group_pids(proc.pid)
        assert len(groups) == 2, groups  # one client process per group
        proc.send_signal(signal.SIGINT)
        assert _finish(proc, 60) == 0, _out(logdir)
    finally:
        if proc.poll() is None:
            proc.kill()
    recs = read(logdir)
    final = records.of_kind(recs, records.Final)
    assert final and final[0].why.startswith("SIGINT"), _out(logdir)
    ckpt = records.of_kind(recs, records.Checkpoint)
    assert ckpt and ckpt[-1].t == final[0].t and os.path.exists(ckpt[-1].path + ".npz")
    assert final[0].t < 60, "the checkpoint at SIGINT is not the periodic one"
    assert [p for p in groups if procs.alive(*p)] == []  # the group clients ended with the job

    # the rerun resumes at the SIGINT's checkpoint; its ps is killed after a checkpoint of its own
    proc = _train(servers, logdir, final[0].t + 60.0, sync="asp", ps_timeout_s=5.0)
    try:
        _until(proc, logdir, "a checkpoint after the resume", lambda r: any(
            c.global_steps > final[0].global_steps for c in records.of_kind(r, records.Checkpoint)))
        resume = read(logdir, records.Resume)
        assert len(resume) == 1 and resume[0].global_steps == final[0].global_steps
        servers.kill("ps0")
        killed = time.monotonic()
        code = _finish(proc, 60)
        stopped_after = time.monotonic() - killed
    finally:
        servers.restart("ps0")  # back at its address, its variables gone
    out = _out(logdir)
    assert code != 0 and stopped_after < 30, (code, stopped_after, out)
    assert "/job:ps/task:0 (ps0)" in out and "checkpoint" in out, out

    # and the third run resumes from the second's last checkpoint
    ckpts = read(logdir, records.Checkpoint)
    proc = _train(servers, logdir, ckpts[-1].t + 3.0, sync="asp")
    assert _finish(proc, 120) == 0, _out(logdir)
    resume = read(logdir, records.Resume)
    assert len(resume) == 2 and resume[1].global_steps == ckpts[-1].global_steps > final[0].global_steps
    assert resume[1].elapsed_s == pytest.approx(ckpts[-1].t, abs=0.01)  # the clock goes on from there
    assert read(logdir, records.Final)[-1].global_steps > ckpts[-1].global_steps


def test_a_worker_server_killed_mid_run_the_job_trains_on_and_names_it(servers, tmp_path):
    logdir = str(tmp_path / "run")
    proc = _train(servers, logdir, 10.0)
    _until(proc, logdir, "6 global steps", lambda r: _evals(r) and _evals(r)[-1].global_steps >= 6)
    servers.kill("slow")  # (the module's last test: not started again)
    assert _finish(proc, 90) == 0, _out(logdir)
    recs = read(logdir)
    lost = records.of_kind(recs, records.Lost)
    assert len(lost) == 1 and lost[0].group == "slow" and lost[0].live == ["fast"], _out(logdir)
    final = records.of_kind(recs, records.Final)[0]
    assert final.why.startswith("time budget") and final.lost_groups == ["slow"]
    before = max(e.global_steps for e in _evals(recs) if e.t <= lost[0].t)
    assert _evals(recs)[-1].global_steps > before + 5  # the fast group committed on after the loss
    assert '"lost_groups": ["slow"]' in _out(logdir)


def _group_pids(parent: int) -> list[tuple[int, int]]:
    """(pid, start time) of the processes `parent` started, from any of its threads (its group clients)."""
    kids = []
    for task in os.listdir("/proc/%d/task" % parent):
        with open("/proc/%d/task/%s/children" % (parent, task)) as f:
            kids += [int(p) for p in f.read().split()]
    return [(p, procs.start_time(p)) for p in kids]
