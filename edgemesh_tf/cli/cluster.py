"""`edgemesh cluster up|down|status`: the emulated testbed on this machine; `edgemesh cluster check`:
real, running servers against their cluster file.

    sudo edgemesh cluster up --cluster layouts/edge4.yaml   # runs until Ctrl-C / SIGTERM
    edgemesh cluster status                                 # running clusters, their ClusterSpecs
    sudo edgemesh cluster down                              # stops them, removes leftovers
    edgemesh cluster check --cluster my_cluster.yaml        # real servers: answers, versions, links, memory
    edgemesh cluster check --cluster my_cluster.yaml --json --write_cluster measured.yaml
    # check's exit code: 0 every device answers and matches the file, 1 something is flagged, 2 bad input

`check` asks every server of the file (within --server_timeout_s), reads the TensorFlow and edgemesh_tf
versions each server process runs, times each device's paths to the chief and the ps (bandwidth in
Mbit/s, one-way latency in ms) and reads its host's MemAvailable, and prints them beside the file's
bandwidth_mbit, latency_ms and memory_mib; a figure off by more than 25% either way, a device that does
not answer and versions unlike this process's are flagged (cluster/check.py). `--write_cluster OUT.yaml`
writes the file with the measured figures in their place, for `edgemesh run --cluster OUT.yaml`: the
cluster file is what the planner reads its memory budgets from (memory_mib) and what the emulator
builds links from, so a copy with the measured figures plans for the devices as they are.

`up` prints the cluster as JSON (ClusterSpec and grpc targets as seen from this machine) and writes
it to <run_dir>/cluster.json. It tears everything down on Ctrl-C, SIGTERM or when any server dies
(exit code 1); after a SIGKILL, the next `up` or `down` removes the leftovers.
"""
import json
import os
import signal
import sys
import time

from absl import flags, logging

from edgemesh_tf.cli import cluster_from_flag
from edgemesh_tf.cluster import emulator, state
from edgemesh_tf.cluster.ready import SERVER_TIMEOUT_S

SUMMARY = ("start (up), stop (down) or list (status) the emulated testbed on this machine; check real servers "
           "against their cluster file (check)")
FLAGS = flags.FLAGS
flags.DEFINE_string("cluster", None, "Cluster file (YAML), for `up` and `check`.")
flags.DEFINE_string("run_id", None, "`down`: only this run (default: all).")
flags.DEFINE_enum("network", "auto", ["auto", "netns", "userspace"], "Network emulation (netns needs root).")
flags.DEFINE_enum("compute", "auto", ["auto", "cgroup-v1", "cgroup-v2", "step-delay", "off"], "Compute emulation.")
flags.DEFINE_float("timeout_s", 180.0, "`up`: seconds to wait for every server to answer.")
flags.DEFINE_float("server_timeout_s", SERVER_TIMEOUT_S, "`check`: seconds to wait for every server to answer "
                   "(> 0).")
flags.DEFINE_boolean("json", False, "`check`: print the measured figures as JSON instead of the table.")
flags.DEFINE_string("out", None, "`check`: also write the measured figures as JSON to this file.")
flags.DEFINE_string("write_cluster", None, "`check`: write a copy of --cluster with the measured bandwidth_mbit, "
                    "latency_ms and memory_mib to this file (for edgemesh run --cluster OUT.yaml).")

HELP_GROUPS = (("check (real servers; exit code 0: all answer and match, 1: something flagged, 2: bad input)",
                ("server_timeout_s", "json", "out", "write_cluster")),)


class _Stop(Exception):
    pass


def _raise_stop(signum, frame):
    raise _Stop(signal.Signals(signum).name)


def _up() -> int:
    cluster_file = cluster_from_flag(FLAGS.cluster, "edgemesh cluster up")
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _raise_stop)
    cluster = None
    try:
        cluster = emulator.up(cluster_file, network=FLAGS.network, compute=FLAGS.compute,
                              timeout_s=FLAGS.timeout_s)
        print(json.dumps(cluster.summary(), indent=1), flush=True)
        logging.info("cluster %s up (run dir %s); Ctrl-C or SIGTERM to stop", cluster.run.run_id, cluster.run_dir)
        while True:
            cluster.check()
            time.sleep(0.5)
    except _Stop as e:
        logging.info("%s: stopping", e)
        return 0
    except RuntimeError as e:
        logging.error("%s", e)
        return 1
    finally:
        if cluster is not None:
            cluster.close()


def _down() -> int:
    errors = emulator.down(run_id=FLAGS.run_id)
    for e in errors:
        logging.error("%s", e)
    return 1 if errors else 0


def _status() -> int:
    runs = []
    for run in state.all_runs(state.run_root()):
        info = {"run_id": run.run_id, "run_dir": run.run_dir, "launcher_pid": run.data["owner_pid"],
                "launcher_alive": run.owner_alive(), "cluster_file": run.data.get("cluster")}
        summary = os.path.join(run.run_dir, "cluster.json")
        if os.path.exists(summary):
            with open(summary) as f:
                info["cluster"] = json.load(f)
        runs.append(info)
    print(json.dumps(runs, indent=1))
    return 0


def _bad_input(message: str) -> int:
    print("edgemesh cluster check: %s" % message, file=sys.stderr)
    return 2


def _writable(path: str | None) -> str | None:
    """None if `path` (a flag's file) can be written, else why not."""
    if path is None:
        return None
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return "its folder %s does not exist" % folder
    if os.path.isdir(path) or not os.access(folder, os.W_OK):
        return "it is a folder, or its folder is not writable"
    return None


def _check() -> int:
    """Real servers against their cluster file; 0 all answer and match, 1 something flagged, 2 bad input."""
    import yaml

    from edgemesh_tf.cluster import check, ready, spec

    if not FLAGS.cluster:
        return _bad_input("--cluster FILE is required")
    try:
        cluster = spec.load_cluster(FLAGS.cluster)
    except spec.ClusterFileError as e:
        return _bad_input(str(e))
    if not FLAGS.server_timeout_s > 0:
        return _bad_input("--server_timeout_s must be > 0 (seconds to wait for every server), got %r"
                          % FLAGS.server_timeout_s)
    for flag in ("out", "write_cluster"):
        why = _writable(getattr(FLAGS, flag))
        if why:
            return _bad_input("--%s %s: %s" % (flag, getattr(FLAGS, flag), why))
    from edgemesh_tf.profiling import device_check

    measured, missing = device_check.check_cluster(cluster, FLAGS.server_timeout_s)
    if missing:
        print(ready.missing_message(cluster, missing, FLAGS.server_timeout_s), file=sys.stderr)
    own = device_check.own_versions()
    rows = check.compare(cluster, measured, own)
    report = check.to_json(cluster, rows, own)
    print(json.dumps(report, indent=1) if FLAGS.json else check.format_table(cluster, rows, own), flush=True)
    if FLAGS.out:
        with open(FLAGS.out, "w") as f:
            json.dump(report, f, indent=1)
    if FLAGS.write_cluster:
        with open(FLAGS.cluster) as f:
            data = yaml.safe_load(f)
        copy = check.measured_copy(cluster, data, measured)
        with open(FLAGS.write_cluster, "w") as f:
            f.write("# %s with the figures `edgemesh cluster check` measured at %s (bandwidth_mbit, latency_ms, "
                    "memory_mib)\n" % (FLAGS.cluster, time.strftime("%Y-%m-%d %H:%M:%S")))
            yaml.safe_dump(copy, f, sort_keys=False)
        print("edgemesh cluster check: wrote %s (use it as edgemesh run --cluster %s)"
              % (FLAGS.write_cluster, FLAGS.write_cluster), file=sys.stderr)
    return check.exit_code(rows)


def main(argv):
    commands = {"up": _up, "down": _down, "status": _status, "check": _check}
    if len(argv) != 2 or argv[1] not in commands:
        print("usage: edgemesh cluster {up|down|status|check} [--flags]; got %r" % (argv[1:],), file=sys.stderr)
        sys.exit(2)
    sys.exit(commands[argv[1]]())
