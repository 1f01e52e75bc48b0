"""`edgemesh cluster up|down|status`: the emulated testbed on this machine.

    sudo edgemesh cluster up --cluster layouts/edge4.yaml   # runs until Ctrl-C / SIGTERM
    edgemesh cluster status                                 # running clusters, their ClusterSpecs
    sudo edgemesh cluster down                              # stops them, removes leftovers

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

SUMMARY = "start (up), stop (down) or list (status) the emulated testbed on this machine"
FLAGS = flags.FLAGS
flags.DEFINE_string("cluster", None, "Cluster file (YAML), for `up`.")
flags.DEFINE_string("run_id", None, "`down`: only this run (default: all).")
flags.DEFINE_enum("network", "auto", ["auto", "netns", "userspace"], "Network emulation (netns needs root).")
flags.DEFINE_enum("compute", "auto", ["auto", "cgroup-v1", "cgroup-v2", "step-delay", "off"], "Compute emulation.")
flags.DEFINE_float("timeout_s", 180.0, "Seconds to wait for every server to answer.")


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


def main(argv):
    commands = {"up": _up, "down": _down, "status": _status}
    if len(argv) != 2 or argv[1] not in commands:
        sys.exit("usage: edgemesh cluster {up|down|status} [--flags]; got %r" % (argv[1:],))
    sys.exit(commands[argv[1]]())
