#!/usr/bin/env bash
# Real deployment: the TF servers of a cluster file on their hosts (ssh unless on this machine).
#   launch/cluster.sh start my_cluster.yaml   # one `edgemesh server` per device; state and logs in runs/launch/<name>
#   launch/cluster.sh wait  my_cluster.yaml   # until every server answers (at most --timeout_s, 60 s)
#   launch/cluster.sh stop  my_cluster.yaml   # SIGTERM (then SIGKILL) to the servers this launch started
#   launch/cluster.sh logs  my_cluster.yaml   # every server's log in runs/launch/<name>
# Further flags go to `edgemesh launch` (--ssh_user, --workdir, --launch_dir, --device, --timeout_s).
# Paths are relative to the current directory; Python is this repository's .venv when it has one.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
if [[ -z "${PYTHON:-}" && -x "$REPO/.venv/bin/python" ]]; then PY="$REPO/.venv/bin/python"; fi
COMMAND="${1:?usage: launch/cluster.sh start|wait|stop|logs CLUSTER_FILE [flags]}"
CLUSTER="${2:?usage: launch/cluster.sh start|wait|stop|logs CLUSTER_FILE [flags]}"
shift 2
PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" -m edgemesh_tf.cli.main launch "$COMMAND" --cluster "$CLUSTER" "$@"
