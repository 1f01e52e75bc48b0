"""`edgemesh launch start|wait|stop|logs`: the real TF servers of a cluster file, on their hosts.

    edgemesh launch start --cluster my_cluster.yaml     # one `edgemesh server` per device (ssh unless local)
    edgemesh launch wait --cluster my_cluster.yaml      # until every server answers (at most --timeout_s)
    edgemesh launch stop --cluster my_cluster.yaml [--device pi1]
    edgemesh launch logs --cluster my_cluster.yaml [--out_dir DIR]

A device on this machine (localhost, 127.0.0.1, its host name) runs as a local process; any other
host over ssh as [--ssh_user@]host, in --workdir, with --edgemesh (a device's `ssh_user`, `workdir`
and `edgemesh` fields in the cluster file win over the flags). State and logs:
--launch_dir (runs/launch/<cluster name>). TensorFlow binds every server's port on all interfaces.
"""
import shlex
import sys

from absl import flags

from edgemesh_tf.cli import cluster_from_flag
from edgemesh_tf.cluster import launch, launch_procs, server, spec

SUMMARY = "start, wait for, stop or collect the logs of the real TF servers of a cluster file on their hosts"
FLAGS = flags.FLAGS
flags.DEFINE_string("cluster", None, "Cluster file (YAML).")
flags.DEFINE_string("launch_dir", None, "The launch's state (launch.json) and local logs (default "
                    "runs/launch/<cluster name>; on a remote host, the same relative path under its workdir).")
flags.DEFINE_float("timeout_s", None, "The longest wait (s): wait, for every server to answer (default 60); stop, "
                   "from SIGTERM to SIGKILL (default 10); start and logs, for each ssh call (default 30).",
                   lower_bound=0.0)
flags.DEFINE_list("device", None, "Only these devices (comma-separated names; default all): start, stop, logs.")
flags.DEFINE_string("ssh_user", None, "Login on remote hosts (a device's ssh_user field wins; default: ssh's "
                    "own, from ~/.ssh/config or your user name).")
flags.DEFINE_string("workdir", None, "Directory the servers run in on remote hosts, absolute or relative to the "
                    "login's home (a device's workdir field wins; default: this directory, relative to $HOME when "
                    "under it).")
flags.DEFINE_string("edgemesh", None, "Command that runs edgemesh on remote hosts, relative to the workdir (a "
                    "device's edgemesh field wins; default %s)." % launch.DEFAULT_EDGEMESH)
flags.DEFINE_string("ssh", " ".join(launch.DEFAULT_SSH), "The ssh command and its options.")
flags.DEFINE_string("out_dir", None, "logs: the directory to collect the logs in (default the launch directory).")

TIMEOUTS_S = {"start": 30.0, "wait": 60.0, "stop": 10.0, "logs": 30.0}


def _fail(command: str, errors) -> int:
    for e in errors:
        print("edgemesh launch %s: %s" % (command, e), file=sys.stderr)
    return 1 if errors else 0


def main(argv):
    command = argv[1] if len(argv) == 2 else None
    if command not in TIMEOUTS_S:
        sys.exit("usage: edgemesh launch {start|wait|stop|logs} --cluster FILE [--flags]; got %r" % (argv[1:],))
    cluster = cluster_from_flag(FLAGS.cluster, "edgemesh launch " + command)
    launch_dir = FLAGS.launch_dir or launch.default_launch_dir(cluster)
    timeout_s = TIMEOUTS_S[command] if FLAGS.timeout_s is None else FLAGS.timeout_s
    try:
        if command == "start":
            options = launch.Options(ssh_user=FLAGS.ssh_user, workdir=FLAGS.workdir, edgemesh=FLAGS.edgemesh,
                                     ssh=tuple(shlex.split(FLAGS.ssh)))
            print("# " + server.SECURITY_NOTE, flush=True)
            code = _fail(command, launch_procs.start(cluster, launch_dir, options, FLAGS.device, timeout_s))
            print("# next: edgemesh launch wait --cluster %s%s" % (
                cluster.path, " --launch_dir " + FLAGS.launch_dir if FLAGS.launch_dir else ""), flush=True)
        elif command == "wait":
            message = launch_procs.wait(cluster, launch_dir, timeout_s)
            code = _fail(command, [message] if message else [])
            if not message:
                print("all %d TF servers of %s answer" % (len(cluster.devices), cluster.path), flush=True)
        elif command == "stop":
            code = _fail(command, launch_procs.stop(launch_dir, FLAGS.device, timeout_s))
        else:
            code = _fail(command, launch_procs.logs(launch_dir, FLAGS.out_dir, FLAGS.device, timeout_s))
    except (spec.ClusterFileError, KeyError, ValueError, RuntimeError) as e:
        sys.exit("edgemesh launch %s: %s" % (command, e.args[0] if isinstance(e, KeyError) else e))
    sys.exit(code)
