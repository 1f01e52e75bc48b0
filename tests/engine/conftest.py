"""The engine's testbed: emulated edge2 (fast + slow worker, ps, chief), one per test module."""
import os

import pytest

from edgemesh_tf.cluster import emulated_cluster
from edgemesh_tf.cluster.spec import load_cluster

EDGE2 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "layouts", "edge2.yaml")


@pytest.fixture(scope="module")
def edge2():
    """(cluster file, running EmulatedCluster) of layouts/edge2.yaml, shared by a module's tests."""
    cluster = load_cluster(EDGE2)
    with emulated_cluster(cluster) as em:
        yield cluster, em
