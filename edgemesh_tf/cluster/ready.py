"""Do the real servers of a cluster file answer? Asked before anything else uses them.

A TF session on a cluster with a task that is down waits for that task for good ("CreateSession
still waiting for response from worker"), and a job started on it says nothing for minutes, or
names the wrong party when some later wait times out. `check_servers` asks every task of the file
at once, for at most `timeout_s` in all, and raises `ServersNotAnswering` naming each task that did
not answer: its job and index, its device name in the file, its address, what was found there, why
it is needed and the command that starts it (`tf_config.server_command`, what `edgemesh tf-config`
prints).

One task's check: a TCP connection to its address (refused: nothing listens there; retried until
the deadline, in case the server is still starting), then a tiny op placed on the task, run in a
session whose master is the task's own server, with device_filters naming only that task (so no
other task is contacted) and TF's operation and run timeouts. A port held by another program, or by
a server started with another task's TF_CONFIG, fails that run or holds it past any TF timeout, so
each check runs in a daemon thread and the caller waits for them until the deadline only.

`missing_message` (the text of the error) is pure: no TensorFlow, no network.
"""
from __future__ import annotations

import dataclasses
import errno
import socket
import threading
import time
from typing import Mapping, Sequence

from absl import logging

from edgemesh_tf.cluster.spec import ClusterFile, Device
from edgemesh_tf.cluster.tf_config import role_needs, server_command

SERVER_TIMEOUT_S = 30.0
"""Default of the longest wait (s) for every server of a cluster file to answer (--server_timeout_s)."""
WARN_AFTER_S = 2.0
"""A task that has not answered after this long is named on stderr while the wait goes on."""


@dataclasses.dataclass(frozen=True)
class Missing:
    """A task that did not answer: its device in the cluster file, the address it was asked at (host:port)
    and what was found there."""

    device: Device
    address: str
    reason: str


class ServersNotAnswering(RuntimeError):
    """Servers of a cluster file did not answer; the message names each (`missing_message`)."""

    def __init__(self, message: str, missing: Sequence[Missing]):
        super().__init__(message)
        self.missing = tuple(missing)


def missing_message(cluster: ClusterFile, missing: Sequence[Missing], timeout_s: float) -> str:
    """What a person reads when servers of `cluster` did not answer within `timeout_s`: one paragraph
    per missing task (job and index, device name, address, what was found there, why it is needed and
    the command that starts it, on its host)."""
    n = len(cluster.devices)
    lines = ["%d of the %d TF servers of %s did not answer within %.0f s (--server_timeout_s); every task of the "
             "cluster file must run its server (`edgemesh server`) before the job starts:"
             % (len(missing), n, cluster.path, timeout_s)]
    for m in missing:
        d = m.device
        lines += ["- %s %d (%s), device %r at %s: %s" % (d.role, d.task_index, d.device_string, d.name, m.address,
                                                          m.reason),
                  "  %s" % role_needs(cluster, d),
                  "  start it on %s with:" % d.host,
                  "    %s" % server_command(cluster, d)]
    lines.append("(`edgemesh tf-config --cluster %s` prints the start command of every device; "
                 "`edgemesh server --cluster %s --device NAME` is the same from the cluster file.)"
                 % (cluster.path, cluster.path))
    return "\n".join(lines)


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _tcp(address: str, timeout_s: float) -> str | None:
    """None if a TCP connection to `address` opens within timeout_s, else what happened."""
    host, port = _split(address)
    try:
        with socket.create_connection((host, port), timeout=max(0.05, timeout_s)):
            return None
    except socket.timeout:
        return "no TCP connection within %.1f s (a host that is down, or a firewall?)" % timeout_s
    except ConnectionRefusedError:
        return "nothing listens there (connection refused)"
    except socket.gaierror as e:
        return "its host name does not resolve (%s)" % e
    except OSError as e:
        if e.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            return "its host cannot be reached (%s)" % (e.strerror or e)
        return "TCP connection failed (%s)" % e


def _not_tf(device: Device, timeout_s: float, detail: str = "") -> str:
    return ("a process listens there but it did not answer as TF task %s within %.0f s%s (another program on "
            "that port, or a server started with another task's TF_CONFIG?)"
            % (device.device_string, timeout_s, ": " + detail if detail else ""))


def _tf_answers(device: Device, address: str, timeout_s: float) -> tuple[str | None, bool]:
    """(None, _) if the server at `address` runs an op on `device`'s task within timeout_s; else (what
    happened, whether trying again may help)."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    ms = max(1, int(timeout_s * 1000))
    g = tf.Graph()
    with g.as_default(), g.device(device.device_string + "/device:CPU:0"):
        one = tf1.identity(tf1.constant(1, tf.int32))
    config = tf1.ConfigProto(device_filters=[device.device_string], operation_timeout_in_ms=ms)
    try:
        sess = tf1.Session("grpc://" + address, graph=g, config=config)
        try:
            sess.run(one, options=tf1.RunOptions(timeout_in_ms=ms))
        finally:
            sess.close()
        return None, False
    except tf.errors.DeadlineExceededError:
        return _not_tf(device, timeout_s), False
    except (tf.errors.UnavailableError, tf.errors.AbortedError) as e:  # e.g. a server still starting
        return _not_tf(device, timeout_s, (e.message or "").splitlines()[0][:200]), True
    except tf.errors.OpError as e:  # e.g. a server of another cluster or task: no such device
        return _not_tf(device, timeout_s, (e.message or "").splitlines()[0][:200]), False


def _ask(device: Device, address: str, deadline: float, timeout_s: float, status: dict) -> None:
    """Asks one task until it answers or the deadline passes; status[device.name]: None once it answered,
    else the last thing found."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        found = _tcp(address, min(left, 2.0))
        if found is None:
            status[device.name] = _not_tf(device, timeout_s)  # what stays if the TF run outlives the deadline
            found, again = _tf_answers(device, address, deadline - time.monotonic())
            if found is None:
                status[device.name] = None
                return
            if not again:
                status[device.name] = found
                return
        status[device.name] = found
        time.sleep(max(0.0, min(0.5, deadline - time.monotonic())))


def unanswered(cluster: ClusterFile, timeout_s: float = SERVER_TIMEOUT_S,
               addresses: Mapping[str, str] | None = None) -> list[Missing]:
    """The tasks of `cluster` whose server did not answer within timeout_s (all asked at once, in
    file order); addresses: {device name: host:port} (default: the file's).

    TensorFlow is imported here, in the caller's thread, before the clock starts: imported inside the
    asking threads it takes a whole short round on a loaded machine (seconds), and a thread left in
    TensorFlow's C++ code when the process exits aborts the process ("terminate called ...")."""
    import tensorflow  # noqa: F401  (see the docstring)

    started = time.monotonic()
    deadline = started + timeout_s
    status: dict[str, str | None] = {d.name: "no answer" for d in cluster.devices}
    where = {d.name: (addresses or {}).get(d.name, d.address) for d in cluster.devices}
    threads = [threading.Thread(target=_ask, args=(d, where[d.name], deadline, timeout_s, status), daemon=True,
                                name="ask-%s" % d.name) for d in cluster.devices]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, min(deadline, started + WARN_AFTER_S) - time.monotonic()))
    waiting = [d for d, t in zip(cluster.devices, threads) if t.is_alive()]
    if waiting and time.monotonic() < deadline - 0.5:  # say what is awaited rather than stay silent until the deadline
        logging.warning("waiting up to %.0f s (--server_timeout_s) for the TF servers of %s: %s", timeout_s,
                        cluster.path, "; ".join("%s (%s at %s): %s" % (d.name, d.device_string, where[d.name],
                                                                       status[d.name]) for d in waiting))
    for t in threads:  # a thread still held in a TF call at the deadline is left behind (a daemon)
        t.join(max(0.0, deadline - time.monotonic()) + 0.5)
    return [Missing(d, where[d.name], status[d.name]) for d in cluster.devices if status[d.name] is not None]


def check_servers(cluster: ClusterFile, timeout_s: float = SERVER_TIMEOUT_S,
                  addresses: Mapping[str, str] | None = None) -> None:
    """Returns once every task of `cluster` answers; raises ServersNotAnswering naming each that did
    not within timeout_s (see the module docstring)."""
    missing = unanswered(cluster, timeout_s, addresses)
    if missing:
        raise ServersNotAnswering(missing_message(cluster, missing, timeout_s), missing)
