"""Real servers are checked before a job uses them (cluster/ready.py): a task that does not answer
stops `edgemesh run --noemulate` (and every other user of `reach_servers(emulate=False)`) within
--server_timeout_s, naming the task, its device, its address and the command that starts it.

The subprocess tests start the servers of a localhost cluster file as a user would (`edgemesh
server --cluster FILE --device NAME`), all but one, and stop them by pid at the end.
"""
import os
import socket
import subprocess
import sys
import time

import pytest
import yaml

from edgemesh_tf.cluster import procs, ready, spec, tf_config
from edgemesh_tf.cluster.emulated_network import free_ports

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAMES = ("fast", "slow", "ps0", "chief")  # layouts/edge2.yaml's devices


def _cluster_file(path, ports) -> str:
    """layouts/edge2.yaml's shape on 127.0.0.1 at `ports` (one per NAMES)."""
    roles = {"fast": "worker", "slow": "worker", "ps0": "ps", "chief": "chief"}
    data = {"name": "edge2-local", "devices": [
        {"name": n, "role": roles[n], "host": "127.0.0.1", "port": p} for n, p in zip(NAMES, ports)]}
    with open(path, "w") as f:
        yaml.safe_dump(data, f, sort_keys=False)
    return str(path)


# ---------------------------------------------------------------- the message (pure: no process, no TF)

def test_missing_message_names_each_task_its_address_why_and_its_start_command():
    c = spec.parse_cluster(yaml.safe_load(open(os.path.join(REPO, "layouts", "edge2.yaml"))), "layouts/edge2.yaml")
    missing = [ready.Missing(c.device("slow"), "127.0.0.1:2401", "nothing listens there (connection refused)"),
               ready.Missing(c.device("chief"), "127.0.0.1:2420", "nothing listens there (connection refused)")]
    text = ready.missing_message(c, missing, 30.0)
    assert text.startswith("2 of the 4 TF servers of layouts/edge2.yaml did not answer within 30 s")
    assert "- worker 1 (/job:worker/task:1), device 'slow' at 127.0.0.1:2401: nothing listens there" in text
    assert "- chief 0 (/job:chief/task:0), device 'chief' at 127.0.0.1:2420" in text
    for name in ("slow", "chief"):  # the very command `edgemesh tf-config` prints for it
        assert "    " + tf_config.server_command(c, name) + "\n" in text + "\n"
    assert "fast" not in text.replace("edgemesh tf-config", "")  # the tasks that answered are not named
    assert "connects to it as its session target" in text  # the chief's server is needed, and why
    assert "edgemesh tf-config --cluster layouts/edge2.yaml" in text
    err = ready.ServersNotAnswering(text, missing)
    assert isinstance(err, RuntimeError) and err.missing == tuple(missing)  # the CLIs name RuntimeErrors


def test_role_needs_every_role_and_the_master_of_a_cluster_without_chief():
    c = spec.parse_cluster({"name": "x", "devices": [{"name": "w0", "role": "worker", "port": 1},
                                                     {"name": "p", "role": "ps", "port": 2}]}, "x.yaml")
    assert "session target" in tf_config.role_needs(c, "w0")  # no chief: the first worker is the target
    assert tf_config.role_needs(c, "p").startswith("needed")
    assert set(tf_config.ROLE_NEEDS) == set(spec.ROLES)


def test_default_timeout_is_one_number():
    from edgemesh_tf.engine.config import JobSettings

    assert JobSettings().server_timeout_s == ready.SERVER_TIMEOUT_S == 30.0


def test_nothing_listening_is_named_at_its_address_without_a_tf_run(tmp_path):
    ports = free_ports(4)
    c = spec.load_cluster(_cluster_file(tmp_path / "c.yaml", ports))
    import tensorflow  # noqa: F401  (unanswered imports it before its clock starts)

    t0 = time.monotonic()
    missing = ready.unanswered(c, 1.0)
    assert time.monotonic() - t0 < 3.0
    assert [(m.device.name, m.address) for m in missing] == [(n, "127.0.0.1:%d" % p) for n, p in zip(NAMES, ports)]
    assert all(m.reason == "nothing listens there (connection refused)" for m in missing)


_IMPORTING_THREAD = """
import socket, sys, threading
from edgemesh_tf.cluster import ready, spec

class Watch:  # records the thread that imports tensorflow
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow":
            print("tensorflow imported in", threading.current_thread().name, flush=True)
        return None

sys.meta_path.insert(0, Watch())
silent = socket.socket()  # the first task's port: a listener that speaks no gRPC, so a TF run is tried
silent.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
silent.bind(("127.0.0.1", int(sys.argv[2])))
silent.listen(8)
ready.unanswered(spec.load_cluster(sys.argv[1]), 0.5)
print("done", flush=True)
"""


@pytest.mark.subprocess
def test_tensorflow_is_imported_in_the_callers_thread_not_in_an_asking_thread(tmp_path):
    """An asking thread that imports TensorFlow can outlive a short round (the import takes seconds on a
    loaded machine) and be left in TensorFlow's C++ code when the process exits, which aborts it
    (`edgemesh launch wait` exited -6 that way)."""
    ports = free_ports(4)
    path = _cluster_file(tmp_path / "c.yaml", ports)
    p = subprocess.run([sys.executable, "-c", _IMPORTING_THREAD, path, str(ports[0])], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=REPO))
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.splitlines() == ["tensorflow imported in MainThread", "done"], p.stdout


@pytest.mark.slow
def test_a_port_held_by_another_program_is_not_taken_for_a_server(tmp_path):
    """A listening socket that speaks no gRPC: the TF run on the task is bounded by the timeout."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        ports = free_ports(3)
        c = spec.load_cluster(_cluster_file(tmp_path / "c.yaml", [silent.getsockname()[1]] + ports))
        t0 = time.monotonic()
        missing = ready.unanswered(c, 2.0)
        assert time.monotonic() - t0 < 6.0
        fast = missing[0]
        assert fast.device.name == "fast"
        assert fast.reason.startswith("a process listens there but it did not answer as TF task /job:worker/task:0")
    finally:
        silent.close()


# ---------------------------------------------------------------- real servers on localhost

class _Servers:
    """The `edgemesh server` processes of a cluster file, started and stopped by name (and pid)."""

    def __init__(self, path, tmp):
        self.path, self.tmp, self.procs = path, tmp, {}

    def start(self, names):
        started = []
        for n in names:
            if n in self.procs:
                continue
            ready_file = os.path.join(self.tmp, n + ".ready")
            if os.path.exists(ready_file):
                os.remove(ready_file)
            log = open(os.path.join(self.tmp, n + ".log"), "a")
            self.procs[n] = procs.spawn([sys.executable, "-m", "edgemesh_tf.cli.main", "server", "--cluster", self.path,
                                         "--device", n, "--ready_file", ready_file, "--intra_op_threads", "1",
                                         "--inter_op_threads", "1"], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                        env=dict(os.environ, PYTHONPATH=REPO))
            log.close()
            started.append((n, ready_file))
        deadline = time.monotonic() + 60
        for n, ready_file in started:
            while not os.path.exists(ready_file):
                assert self.procs[n].poll() is None, open(os.path.join(self.tmp, n + ".log")).read()[-2000:]
                assert time.monotonic() < deadline, "server %s did not start" % n
                time.sleep(0.1)

    def only_missing(self, name):
        """Every server running but `name`'s."""
        if name in self.procs:
            procs.terminate(self.procs.pop(name), 5.0)
        self.start([n for n in NAMES if n != name])

    def stop(self):
        for p in self.procs.values():
            procs.terminate(p, 5.0)
        self.procs.clear()


@pytest.fixture(scope="module")
def local_cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ready")
    path = _cluster_file(tmp / "edge2-local.yaml", free_ports(4))
    servers = _Servers(path, str(tmp))
    try:
        yield spec.load_cluster(path), servers
    finally:  # also when a test failed
        servers.stop()


def _message_of(err_text, c, name):
    d = c.device(name)
    assert "- %s %d (%s), device %r at %s: " % (d.role, d.task_index, d.device_string, d.name, d.address) in err_text
    assert tf_config.server_command(c, d) in err_text
    assert tf_config.role_needs(c, d) in err_text
    for other in NAMES:
        if other != name:
            assert "device %r" % other not in err_text


@pytest.mark.subprocess
@pytest.mark.parametrize("command", [["run"], ["train", "--sync", "bsp"]])
def test_run_and_train_noemulate_with_a_worker_missing_stop_naming_it(local_cluster, command):
    """`edgemesh run --noemulate` (the main job) and `edgemesh train --sync --noemulate` as a user runs them."""
    c, servers = local_cluster
    servers.only_missing("slow")
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "edgemesh_tf.cli.main", *command, "--cluster", c.path, "--noemulate",
                        "--model", "vgg", "--server_timeout_s", "4", "--logdir", os.path.join(servers.tmp, "run")],
                       cwd=REPO, capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=REPO))
    took = time.monotonic() - t0
    assert p.returncode != 0, p.stdout[-2000:]
    assert took < 30, took
    assert "edgemesh %s: 1 of the 4 TF servers of %s did not answer within 4 s" % (command[0], c.path) in p.stderr, \
        p.stderr[-3000:]
    _message_of(p.stderr, c, "slow")
    assert "nothing listens there (connection refused)" in p.stderr
    assert "parameter server" not in p.stderr  # not the wrong party


@pytest.mark.subprocess
@pytest.mark.parametrize("name", ["chief", "ps0"])
def test_check_with_the_chief_or_the_ps_missing_raises_naming_it(local_cluster, name):
    """What `reach_servers(emulate=False)` runs first (the test above reaches it through run_job)."""
    c, servers = local_cluster
    servers.only_missing(name)
    t0 = time.monotonic()
    with pytest.raises(ready.ServersNotAnswering) as e:
        ready.check_servers(c, 3.0)
    assert time.monotonic() - t0 < 8
    assert [m.device.name for m in e.value.missing] == [name]
    _message_of(str(e.value), c, name)


@pytest.mark.subprocess
def test_every_server_running_answers_at_once(local_cluster):
    c, servers = local_cluster
    servers.start(NAMES)
    t0 = time.monotonic()
    assert ready.unanswered(c, 20.0) == []
    assert time.monotonic() - t0 < 10
