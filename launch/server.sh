#!/usr/bin/env bash
# Start this host's TF server from a TF_CONFIG file written by launch/tf_configs.sh; stops on SIGTERM.
#   launch/server.sh runs/tf_config/edge0.json
set -euo pipefail
cd "$(dirname "$0")/.."
TF_CONFIG="$(cat "${1:?TF_CONFIG json file}")" exec "${PYTHON:-python3}" -m edgemesh_tf.cli.main server
