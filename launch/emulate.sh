#!/usr/bin/env bash
# Emulated heterogeneous testbed on this machine (root: namespaces + tbf + cgroups), until Ctrl-C.
#   sudo launch/emulate.sh [layouts/edge4.yaml] [--flags of `edgemesh cluster up`]
# Prints the ClusterSpec and grpc targets as JSON; `launch/emulate.sh --down` removes every run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [[ "${1:-}" == "--down" ]]; then exec "$PY" -m edgemesh_tf.cli.main cluster down; fi
CLUSTER="${1:-layouts/edge4.yaml}"
shift || true
exec "$PY" -m edgemesh_tf.cli.main cluster up --cluster "$CLUSTER" "$@"
