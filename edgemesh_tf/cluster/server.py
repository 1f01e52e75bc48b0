"""A `tf.distribute.Server` for one task, kept alive until SIGTERM/SIGINT.

The server also answers what it runs: `server_facts` (the TensorFlow, edgemesh_tf and Python versions
of its own process) is registered with TensorFlow's py-function registry under FACTS_TOKEN, so a PyFunc
op with that token placed on the task runs it in the server's process (`edgemesh cluster check` reads
it; a py function registered by the client is unknown there: each process has its own registry).
"""
from __future__ import annotations

import json
import os
import platform
import signal
import threading
import time
from typing import Mapping

from absl import logging

from edgemesh_tf import tf_import


def parse_tf_config(text: str | None = None) -> dict:
    """TF_CONFIG from `text` (JSON, or a path to a JSON file) or the TF_CONFIG environment variable."""
    text = os.environ.get("TF_CONFIG", "") if text is None else text
    if not text:
        raise ValueError("no TF_CONFIG: set the TF_CONFIG environment variable or pass --tf_config")
    if not text.lstrip().startswith("{"):
        with open(text) as f:
            text = f.read()
    config = json.loads(text)
    try:
        job, index = config["task"]["type"], int(config["task"]["index"])
        tasks = config["cluster"][job]
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError("TF_CONFIG needs cluster.{job} and task.{type,index}: %r" % (config,)) from e
    if not 0 <= index < len(tasks):
        raise ValueError("TF_CONFIG task index %d out of range for job %r with %d tasks" % (index, job, len(tasks)))
    return config


SECURITY_NOTE = ("security: a TensorFlow server runs any graph that anyone who reaches its port sends it (no "
                 "authentication, no encryption), and TensorFlow binds the port on every interface (0.0.0.0); "
                 "keep the devices on a private network or a VPN between them (WireGuard), and firewall the "
                 "ports from everything else")
"""What `edgemesh server` logs at start and `edgemesh tf-config` prints: the risk of a TF server and
the set-up that contains it."""


FACTS_TOKEN = "edgemesh_server_facts"
"""The key of `server_facts` in the server process's py-function registry (the `token` of a PyFunc op)."""


def server_facts() -> bytes:
    """JSON of this process's versions: {"tensorflow", "edgemesh_tf", "python"} (run in the server's
    process by a PyFunc op with FACTS_TOKEN placed on its task)."""
    from tensorflow.python.framework import versions

    from edgemesh_tf.version import VERSION

    return json.dumps({"tensorflow": versions.__version__, "edgemesh_tf": VERSION,
                       "python": platform.python_version()}).encode()


def register_facts() -> bool:
    """Registers `server_facts` under FACTS_TOKEN in this process's py-function registry (TensorFlow's
    private `script_ops._py_funcs`, weak-valued: the module keeps the function alive); False, with a
    warning, when the registry is not where TF 2.21 keeps it (the check then reports the versions as
    unknown)."""
    try:
        from tensorflow.python.ops import script_ops

        script_ops._py_funcs._funcs[FACTS_TOKEN] = server_facts
        return True
    except (ImportError, AttributeError, TypeError) as e:
        logging.warning("cannot register the server's version query (%s): edgemesh cluster check will report "
                        "this server's versions as unknown", e)
        return False


def start_server(config: Mapping, intra_op_threads: int = 0, inter_op_threads: int = 0, facts: bool = True):
    """Starts the server of TF_CONFIG's task; returns the tf.distribute.Server. facts: its version
    query registered (`register_facts`; it imports TF's py-function machinery, ~2 s of CPU more).

    TF binds the task's port on all interfaces of the network namespace (it hard-codes 0.0.0.0), so
    the emulator runs each server in its own namespace. A server only runs the graphs its clients
    send: a process that has not imported TensorFlow yet starts it without TensorFlow's Python API
    (tf_import.server_modules).
    """
    server_lib, config_pb2 = tf_import.server_modules()
    if facts:
        register_facts()
    session_config = config_pb2.ConfigProto(
        intra_op_parallelism_threads=intra_op_threads, inter_op_parallelism_threads=inter_op_threads)
    return server_lib.Server(
        server_lib.ClusterSpec(dict(config["cluster"])), job_name=config["task"]["type"],
        task_index=int(config["task"]["index"]), config=session_config, start=True)


def serve_until_signal(config: Mapping, ready_file: str | None = None, **server_kwargs) -> int:
    """Runs the server (start_server's keyword arguments) until SIGTERM or SIGINT; returns the exit code (0)."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop.set())
    t0 = time.monotonic()
    server = start_server(config, **server_kwargs)
    task = "/job:%s/task:%d" % (config["task"]["type"], int(config["task"]["index"]))
    logging.info("server ready: %s at %s (pid %d, %.1f s)", task, server.target, os.getpid(), time.monotonic() - t0)
    logging.warning(SECURITY_NOTE)
    if ready_file:
        with open(ready_file + ".tmp", "w") as f:
            f.write(server.target)
        os.replace(ready_file + ".tmp", ready_file)
    while not stop.wait(1.0):
        pass
    logging.info("server %s stopping on signal", task)
    return 0
