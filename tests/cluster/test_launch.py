"""`edgemesh launch` / `launch/cluster.sh`: the real TF servers of a cluster file started on their
hosts, waited for, stopped and their logs collected (cluster/launch.py plans, cluster/launch_procs.py
runs the plans).

The pure tests check the commands planned (no process, no TensorFlow). The subprocess tests start
real servers on this machine as a user would: the end-to-end test (the issue's "Must show") runs
`edgemesh run --noemulate` on them to its target, then again with one server stopped; the remote
test reaches a device at 127.0.0.2 through an ssh stand-in that runs the planned remote command
here, so the shell the launch sends to a host is run, not only read.
"""
import json
import os
import shlex
import subprocess
import sys
import time

import pytest
import yaml

from edgemesh_tf.cluster import launch, procs, spec, tf_config
from edgemesh_tf.cluster.emulated_network import free_ports

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER_SH = os.path.join(REPO, "launch", "cluster.sh")
HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "thisbox"})
EDGE2 = (("fast", "worker"), ("slow", "worker"), ("ps0", "ps"), ("chief", "chief"))  # layouts/edge2.yaml's devices


def _cluster(devices, path="c.yaml", name="c"):
    return spec.parse_cluster({"name": name, "devices": devices}, path)


def _plan(cluster, name, options=launch.Options(), launch_dir="runs/launch/c"):
    return launch.plan_cluster(cluster, launch_dir, options, python="/venv/bin/python", hosts=HOSTS,
                               cwd="/home/me/edgemesh_tf", home="/home/me", devices=[name])[0]


REMOTE = _cluster([{"name": "pi1", "role": "worker", "host": "10.0.0.5", "port": 2300, "ssh_user": "pi",
                    "workdir": "~/em", "edgemesh": ".venv/bin/edgemesh"},
                   {"name": "jet", "role": "worker", "host": "jetson.lan", "port": 2301},
                   {"name": "ps0", "role": "ps", "host": "localhost", "port": 2310},
                   {"name": "boss", "role": "chief", "host": "thisbox", "port": 2320}])


# ---------------------------------------------------------------- the plans (pure: no process, no TF)

def test_a_device_on_this_machine_is_a_local_server_from_the_cluster_file():
    for name in ("ps0", "boss"):  # localhost, and this machine's host name
        p = _plan(REMOTE, name)
        assert p.local and not p.ssh and p.login is None
        assert p.start == ("/venv/bin/python", "-m", "edgemesh_tf.cli.main", "server", "--cluster",
                           os.path.abspath("c.yaml"), "--device", name)
        assert p.log == os.path.join("runs/launch/c", name + ".log")


def test_a_remote_device_is_started_over_ssh_as_its_user_in_its_workdir():
    p = _plan(REMOTE, "pi1")
    assert not p.local and p.login == "pi@10.0.0.5" and p.workdir == "~/em"
    assert p.start[:-2] == launch.DEFAULT_SSH == ("ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10")
    assert p.start[-2] == "pi@10.0.0.5"
    script = p.start[-1]
    config = json.dumps(tf_config.tf_config(REMOTE, "pi1"), separators=(",", ":"))
    assert script.startswith("cd em && mkdir -p runs/launch/c || exit 1; ")  # ~/em: relative to the login's home
    assert ("nohup .venv/bin/edgemesh server --tf_config %s > runs/launch/c/pi1.log 2>&1 < /dev/null & "
            % shlex.quote(config)) in script
    assert script.endswith('echo "$!"; cat /proc/$!/stat')
    words = shlex.split(script)  # the JSON reaches the host as one word, unchanged
    assert words[words.index("--tf_config") + 1] == config


def test_flags_fill_in_what_the_file_does_not_say_and_the_file_wins():
    options = launch.Options(ssh_user="admin", workdir="/opt/em", edgemesh="python3 -m edgemesh_tf.cli.main",
                             ssh=("ssh", "-p", "2222"))
    jet = _plan(REMOTE, "jet", options)
    assert jet.start[:4] == ("ssh", "-p", "2222", "admin@jetson.lan")
    assert jet.start[-1].startswith("cd /opt/em && ")
    assert "nohup python3 -m edgemesh_tf.cli.main server --tf_config " in jet.start[-1]
    pi1 = _plan(REMOTE, "pi1", options)
    assert pi1.login == "pi@10.0.0.5" and pi1.start[-1].startswith("cd em && ")  # the device's own fields
    plain = _plan(REMOTE, "jet")  # no field, no flag: ssh's own user, this directory under $HOME, the venv
    assert plain.login == "jetson.lan" and plain.workdir == "edgemesh_tf"
    assert "nohup .venv/bin/edgemesh server " in plain.start[-1]
    assert launch.default_workdir("/srv/em", "/home/me") == "/srv/em"
    absolute = _plan(REMOTE, "jet", launch_dir="/tmp/x/launch")  # a local absolute path: the default there
    assert absolute.log == "runs/launch/c/jet.log"


@pytest.mark.parametrize("field, value", [
    ("ssh_user", "a b"), ("ssh_user", "-oProxyCommand=x"), ("ssh_user", 3), ("ssh_user", "pi@host"),
    ("workdir", ""), ("workdir", "a\nb"), ("workdir", ["em"]),
    ("edgemesh", ""), ("edgemesh", '"unclosed'), ("edgemesh", 1),
])
def test_a_bad_launch_field_is_named_with_its_file_device_and_what_was_expected(field, value):
    devices = [{"name": "pi1", "role": "worker", "host": "10.0.0.5", "port": 1, field: value},
               {"name": "ps0", "role": "ps", "port": 2}]
    with pytest.raises(spec.ClusterFileError) as e:
        _cluster(devices, "hosts.yaml")
    text = str(e.value)
    assert text.startswith("hosts.yaml: device 'pi1': field %r: must be " % field), text
    assert repr(value) in text
    with pytest.raises(ValueError, match=r"^edgemesh launch flags: field %r: must be " % field):
        launch.Options(**{field: value})


def test_launch_fields_stay_out_of_the_devices_profile_key():
    plain = _cluster([{"name": "pi1", "role": "worker", "port": 1}, {"name": "ps0", "role": "ps", "port": 2}])
    assert REMOTE.device("pi1") == spec.Device("pi1", "worker", "10.0.0.5", 2300, 0)
    assert REMOTE.launch_of("pi1") == spec.Launch("pi", "~/em", ".venv/bin/edgemesh")
    assert REMOTE.launch_of("jet") == spec.Launch() and plain.launch == ()


def test_unknown_device_and_process_records_are_named():
    with pytest.raises(KeyError, match="c.yaml: no device named 'nope'"):
        launch.plan_cluster(REMOTE, "d", python="p", hosts=HOSTS, cwd="/", home="/", devices=["nope"])
    stat = "4242 (python3 (x)) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 100 10"
    assert launch.parse_started("4242\n%s\n" % stat, "pi1 on pi@h") == (4242, 987654)
    with pytest.raises(ValueError, match="pi1 on pi@h: the start command printed no pid"):
        launch.parse_started("4242\ncat: /proc/4242/stat: No such file\n", "pi1 on pi@h")
    script = launch.remote_stop_script(4242, 987654, 10.0)
    assert script.startswith("p=4242; s=987654; ") and "n -lt 50 ]" in script and "kill -KILL $p" in script
    entry = {"ssh": ["ssh"], "login": "pi@h", "workdir": "~/em", "log": "runs/launch/c/pi1.log"}
    assert launch.remote_argv(entry, launch.log_script(entry)) == [
        "ssh", "pi@h", "cd em && { cat runs/launch/c/pi1.log; }"]


def test_the_wait_message_names_each_missing_task_its_address_and_its_process():
    from edgemesh_tf.cluster.ready import Missing

    c = _cluster([{"name": n, "role": r, "port": 2400 + i} for i, (n, r) in enumerate(EDGE2)], "e.yaml")
    text = launch.wait_message(c, [Missing(c.device("slow"), "127.0.0.1:2401", "nothing listens there")], 3.2, 60,
                               {"slow": "its process (pid 7) has exited; its log x.log ends: boom"})
    assert text.splitlines() == [
        "1 of the 4 TF servers of e.yaml did not answer after 3 s (at most 60 s, --timeout_s; stopped early: "
        "their processes have exited):",
        "- worker 1 (/job:worker/task:1), device 'slow' at 127.0.0.1:2401: nothing listens there",
        "  its process (pid 7) has exited; its log x.log ends: boom"]


# ---------------------------------------------------------------- real servers on this machine

def _write_cluster(path, name, devices) -> str:
    with open(path, "w") as f:
        yaml.safe_dump({"name": name, "devices": devices}, f, sort_keys=False)
    return str(path)


def _recorded(launch_dir) -> dict:
    with open(os.path.join(launch_dir, launch.STATE_FILE)) as f:
        return json.load(f)["servers"]


def _left_running(launch_dir) -> list[str]:
    """The recorded processes that still run (each killed, so a failed test leaves none behind)."""
    left = []
    for name, e in _recorded(launch_dir).items():
        if procs.alive(e["pid"], e["start_time"]):
            left.append("%s (pid %d)" % (name, e["pid"]))
            procs.kill(e["pid"], e["start_time"], 2.0)
    return left


def _run(argv, cwd, timeout_s):
    """(exit code, stdout, stderr, seconds) of a command run as a user would, from `cwd`."""
    t0 = time.monotonic()
    p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout_s,
                       env=dict(os.environ, PYTHONPATH=REPO))
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t0


def _edgemesh(*args):
    return [sys.executable, "-m", "edgemesh_tf.cli.main", *args]


@pytest.fixture
def local_launch(tmp_path):
    """A localhost cluster file shaped like layouts/edge2.yaml on free ports, and its launch directory;
    at the end every server of the launch is stopped (`launch/cluster.sh stop`) and none is left."""
    devices = [{"name": n, "role": r, "host": "127.0.0.1", "port": p} for (n, r), p in zip(EDGE2, free_ports(4))]
    path = _write_cluster(tmp_path / "edge2-local.yaml", "edge2-local", devices)
    launch_dir = str(tmp_path / "runs" / "launch" / "edge2-local")
    try:
        yield path, launch_dir
    finally:
        if os.path.exists(os.path.join(launch_dir, launch.STATE_FILE)):
            code, out, err, _ = _run([CLUSTER_SH, "stop", path], tmp_path, 60)
            assert _left_running(launch_dir) == [], (out, err)
            assert code == 0, err


@pytest.mark.subprocess
def test_launched_servers_train_to_target_and_a_stopped_one_is_named_within_30_s(local_launch, tmp_path):
    """The issue's "Must show": the servers of a localhost cluster file started with launch/cluster.sh,
    `edgemesh run --noemulate` to its target on them, then again with one worker's server stopped."""
    path, launch_dir = local_launch
    code, out, err, _ = _run([CLUSTER_SH, "start", path], tmp_path, 60)
    assert code == 0, err
    assert sorted(_recorded(launch_dir)) == sorted(n for n, _ in EDGE2)
    code, out, err, took = _run([CLUSTER_SH, "wait", path, "--timeout_s", "60"], tmp_path, 90)
    assert code == 0 and "all 4 TF servers of %s answer" % path in out, (out, err[-3000:])

    run = ["run", "--cluster", path, "--noemulate", "--model", "vgg", "--target_accuracy", "0.9",
           "--time_budget_s", "60", "--profile_cache", str(tmp_path / "cache")]
    code, out, err, took = _run(_edgemesh(*run, "--logdir", str(tmp_path / "run1")), tmp_path, 180)
    assert code == 0, (out[-2000:], err[-3000:])
    with open(tmp_path / "run1" / "summary.json") as f:
        summary = json.load(f)
    assert summary["accuracy"] >= 0.9, summary

    code, out, err, _ = _run([CLUSTER_SH, "logs", path, "--out_dir", "logs"], tmp_path, 30)
    assert code == 0, err
    for name, _ in EDGE2:
        assert "server ready: " in (tmp_path / "logs" / (name + ".log")).read_text(), name
    code, out, err, _ = _run([CLUSTER_SH, "stop", path, "--device", "slow"], tmp_path, 30)
    assert code == 0 and "slow: stopped" in out, (out, err)
    slow = _recorded(launch_dir)["slow"]
    assert not procs.alive(slow["pid"], slow["start_time"]) and not slow["running"]
    assert all(e["running"] for n, e in _recorded(launch_dir).items() if n != "slow")

    code, out, err, took = _run(_edgemesh(*run, "--logdir", str(tmp_path / "run2"), "--server_timeout_s", "10"),
                                tmp_path, 60)
    assert code != 0 and took < 30, (code, took, err[-3000:])
    address = spec.load_cluster(path).device("slow").address
    assert "device 'slow' at %s: nothing listens there" % address in err, err[-3000:]
    assert "1 of the 4 TF servers of %s did not answer within 10 s" % path in err, err[-3000:]


@pytest.mark.subprocess
def test_a_remote_device_is_started_waited_for_logged_and_stopped_over_ssh(tmp_path):
    """The ssh path, run: an ssh stand-in runs the planned remote command here (its host, 127.0.0.2, is
    this machine's loopback but not a local name), in the device's workdir, with its edgemesh command."""
    fake_ssh = tmp_path / "ssh"
    fake_ssh.write_text('#!/bin/sh\n# the last two arguments: the login and the command\n'
                        'while [ $# -gt 2 ]; do shift; done\nexec sh -c "$2"\n')
    fake_ssh.chmod(0o755)
    workdir = tmp_path / "remote_home" / "em"
    workdir.mkdir(parents=True)
    w0, p0 = free_ports(2)
    path = _write_cluster(tmp_path / "hosts.yaml", "hosts", [
        {"name": "w0", "role": "worker", "host": "127.0.0.2", "port": w0, "ssh_user": "pi", "workdir": str(workdir),
         "edgemesh": "%s -m edgemesh_tf.cli.main" % sys.executable},
        {"name": "ps0", "role": "ps", "host": "127.0.0.1", "port": p0}])
    launch_dir = str(tmp_path / "runs" / "launch" / "hosts")
    try:
        code, out, err, _ = _run(_edgemesh("launch", "start", "--cluster", path, "--ssh", str(fake_ssh)), tmp_path, 60)
        assert code == 0, err
        assert "w0: started /job:worker/task:0 at 127.0.0.2:%d, pid " % w0 in out and " on pi@127.0.0.2, " in out
        entry = _recorded(launch_dir)["w0"]
        assert not entry["local"] and entry["login"] == "pi@127.0.0.2" and entry["ssh"] == [str(fake_ssh)]
        assert procs.alive(entry["pid"], entry["start_time"])
        code, out, err, _ = _run(_edgemesh("launch", "wait", "--cluster", path, "--timeout_s", "60"), tmp_path, 90)
        assert code == 0, err[-3000:]
        code, out, err, _ = _run(_edgemesh("launch", "logs", "--cluster", path, "--out_dir", "collected"),
                                 tmp_path, 60)
        assert code == 0, err
        remote_log = (workdir / "runs" / "launch" / "hosts" / "w0.log").read_text()
        assert "server ready: /job:worker/task:0" in remote_log
        assert (tmp_path / "collected" / "w0.log").read_text() == remote_log
        assert "server ready: /job:ps/task:0" in (tmp_path / "collected" / "ps0.log").read_text()
        code, out, err, _ = _run(_edgemesh("launch", "stop", "--cluster", path), tmp_path, 60)
        assert code == 0, err
        assert "w0: stopped (pid %d on pi@127.0.0.2)" % entry["pid"] in out and "ps0: stopped" in out, out
        assert not procs.alive(entry["pid"], entry["start_time"])
    finally:
        if os.path.exists(os.path.join(launch_dir, launch.STATE_FILE)):
            assert _left_running(launch_dir) == []


@pytest.mark.subprocess
def test_stop_leaves_a_process_with_a_recorded_pid_but_another_start_time(tmp_path):
    """A recorded pid now used by another process (pid reuse) is not signalled: only the start time
    recorded at launch identifies a server."""
    other = subprocess.Popen(["sleep", "30"])
    try:
        launch_dir = tmp_path / "l"
        launch_dir.mkdir()
        entry = {"device": "w0", "local": True, "pid": other.pid, "start_time": procs.start_time(other.pid) - 1,
                 "log": str(launch_dir / "w0.log"), "running": True}
        (launch_dir / launch.STATE_FILE).write_text(json.dumps({"servers": {"w0": entry}}))
        from edgemesh_tf.cluster import launch_procs

        assert launch_procs.stop(str(launch_dir), timeout_s=1.0, say=lambda s: None) == []
        assert other.poll() is None  # not ours: left running
    finally:
        procs.terminate(other, 2.0)
