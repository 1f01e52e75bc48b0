"""Group client processes kept warm across jobs: TensorFlow imported and the dataset loaded once.

    with WarmGroups() as pool:
        for cfg in configs:
            run_job(cfg, cluster, testbed=em, pool=pool)

A group process spends ~7 s of CPU before its first round (importing TensorFlow ~4 s, generating
digits32 ~3 s); a job's four groups and its chief do that at once on this machine's two cores, so
a job took ~40 s to start. A benchmark of many short jobs on one testbed (bench/time_to_accuracy.py)
keeps one warm process per network namespace instead: `python -m edgemesh_tf.engine.runtime.warm` reads one
job per line on its stdin (the arguments of `python -m edgemesh_tf.engine.runtime.group` and the log file),
runs `group.main` in-process with its stdout and stderr sent to that log, and answers on its own
stdout with the exit code. Everything a job builds is its own (its tf.Graph, its session, its
servers' container, reset at start), so jobs share only the imported modules and the cached dataset.

A warm process that is stopped (a job killed, a fault injected) is not reused: the next job on its
namespace starts a fresh one. Processes die with the launcher (PR_SET_PDEATHSIG), are stopped by
pid, and every wait is bounded.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import traceback

from edgemesh_tf.cluster import procs


class WarmJob:
    """One job in a warm process, with the part of `subprocess.Popen`'s interface the launcher uses
    (pid, poll, wait, terminate, kill, returncode). Stopping the job stops its process."""

    def __init__(self, proc: subprocess.Popen, done: threading.Event, answer: list):
        self.proc, self.pid = proc, proc.pid
        self._done, self._answer = done, answer
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            if self._done.is_set():
                self.returncode = self._answer[0]
            elif self.proc.poll() is not None:  # the process died in the job
                self.returncode = self.proc.returncode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired("warm group job (pid %d)" % self.pid, timeout)
            self._done.wait(0.05)
        return self.returncode

    def terminate(self) -> None:
        self.proc.terminate()

    def kill(self) -> None:
        self.proc.kill()


class _Worker:
    """A warm process and the thread that reads its answers."""

    def __init__(self, cmd: list[str], env: dict):
        self.proc = procs.spawn(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self._done: threading.Event | None = None  # the current job's; set when it has answered
        self._answer: list = [None]
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:  # one {"code": N} per job
            try:
                code = int(json.loads(line)["code"])
            except (ValueError, KeyError, TypeError):
                continue  # not an answer (something printed before the redirection)
            self._answer[0] = code
            self._done.set()

    def submit(self, argv: list[str], log: str) -> WarmJob:
        self._done, self._answer = threading.Event(), [None]
        self.proc.stdin.write(json.dumps({"argv": argv, "log": log}) + "\n")
        self.proc.stdin.flush()
        return WarmJob(self.proc, self._done, self._answer)

    def usable(self) -> bool:
        return (self._done is None or self._done.is_set()) and self.proc.poll() is None


class WarmGroups:
    """Warm group processes, one per network namespace (None: this one), started on first use and
    reused by every later job there. Call `run` from a long-lived thread (the processes die with it)."""

    def __init__(self):
        self._workers: dict[str | None, _Worker] = {}

    def run(self, netns: str | None, argv: list[str], log: str, env: dict) -> WarmJob:
        """Starts `python -m edgemesh_tf.engine.runtime.group ARGV` in the warm process of `netns` (started
        with `env` if there is none), its output appended to `log`."""
        worker = self._workers.get(netns)
        if worker is None or not worker.usable():
            if worker is not None and worker.proc.poll() is None:
                procs.terminate(worker.proc, 5.0)  # still in a job that was abandoned: not reusable
            cmd = [sys.executable, "-m", "edgemesh_tf.engine.runtime.warm"]
            worker = self._workers[netns] = _Worker(["ip", "netns", "exec", netns] + cmd if netns else cmd, env)
        return worker.submit(argv, log)

    def pids(self) -> dict[str | None, int]:
        """{network namespace: pid} of the warm processes alive now."""
        return {ns: w.proc.pid for ns, w in self._workers.items() if w.proc.poll() is None}

    def close(self, timeout_s: float = 10.0) -> None:
        """Ends every warm process: end of input, then SIGTERM/SIGKILL by pid after `timeout_s`."""
        for w in self._workers.values():
            try:
                w.proc.stdin.close()
            except OSError:
                pass
        for w in self._workers.values():
            try:
                w.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                procs.terminate(w.proc, 5.0)
        self._workers.clear()

    def __enter__(self) -> "WarmGroups":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _run_one(argv: list[str], log: str) -> int:
    """group.main(argv) with fds 1 and 2 sent to `log`; its exit code (an uncaught error: 1, its
    traceback in the log)."""
    from edgemesh_tf.engine.runtime import group
    saved = os.dup(1), os.dup(2)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush(), sys.stderr.flush()
    os.dup2(fd, 1), os.dup2(fd, 2)
    os.close(fd)
    try:
        return group.main(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    except Exception:  # noqa: BLE001 (the job's failure is reported by its code and log; the process serves on)
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(saved[0], 1), os.dup2(saved[1], 2)
        os.close(saved[0]), os.close(saved[1])


def main() -> int:
    from edgemesh_tf.engine.runtime import group  # noqa: F401  (import TensorFlow before the first job)
    for line in sys.stdin:
        job = json.loads(line)
        code = _run_one(job["argv"], job["log"])
        print(json.dumps({"code": code}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
