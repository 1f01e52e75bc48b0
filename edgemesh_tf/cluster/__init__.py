"""Cluster files, TF_CONFIG per device, TF servers, and an emulated heterogeneous testbed.

Names are imported lazily so that helper processes (`python -m edgemesh_tf.cluster.forwarder`)
start without loading the rest.
"""
from edgemesh_tf.lazy import lazy_exports

_EXPORTS = {
    "ClusterFile": "spec", "ClusterFileError": "spec", "Device": "spec", "load_cluster": "spec",
    "parse_cluster": "spec", "cluster_spec_dict": "tf_config", "server_command": "tf_config",
    "EmulatedCluster": "emulator", "EmulatedDevice": "emulator", "down": "emulator",
    "emulated_cluster": "emulator", "up": "emulator", "Servers": "reach", "reach_servers": "reach",
    "ServersNotAnswering": "ready", "check_servers": "ready", "of_testbed": "reach", "DeviceDied": "watch",
    "watched": "watch", "free_ports": "emulated_network",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
