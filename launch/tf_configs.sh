#!/usr/bin/env bash
# Real deployment: one TF_CONFIG JSON and start script per device of a cluster file.
#   launch/tf_configs.sh layouts/my_hosts.yaml runs/tf_config
# then copy runs/tf_config/<device>.sh to that device's host and run it there.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" -m edgemesh_tf.cli.main tf-config --cluster "${1:?cluster file}" --out_dir "${2:-runs/tf_config}"
