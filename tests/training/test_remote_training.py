"""The reference CNN with filters split 3:1 over two emulated devices of speeds 1 and 1/3, each its
own TF server process reached over gRPC, trains exactly like the in-process run."""
import os

import numpy as np
import pytest

from edgemesh_tf.cluster import emulated_cluster
from edgemesh_tf.mesh.layout import Layout, local_devices
from edgemesh_tf.training.loop import train

pytestmark = [pytest.mark.emulator]

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
STEPS = 15


def _layout(spec, devices):
    dims = spec.split_dims()
    return Layout(mesh=(("model", 2),), devices=tuple(devices), rules=tuple((n, "model") for n in dims),
                  sizes=tuple((n, (s - s // 4, s // 4)) for n, s in dims.items()))


def test_split_over_emulated_servers_equals_in_process(vgg_digits, digits):
    kw = dict(steps=STEPS, batch_size=32, seed=4, emit=lambda rec: None)
    local = train(vgg_digits, digits, _layout(vgg_digits, local_devices(2)), **kw)
    with emulated_cluster(os.path.join(ROOT, "layouts", "edge2.yaml")) as cluster:
        remote_layout = _layout(vgg_digits, [cluster.device("fast"), cluster.device("slow")])
        remote = train(vgg_digits, digits, remote_layout, session_target=cluster.session_target,
                       master_device=cluster.device("chief"), **kw)
    assert len(remote["losses"]) == STEPS
    np.testing.assert_allclose(remote["losses"], local["losses"], rtol=1e-4)
    assert abs(remote["accuracy"] - local["accuracy"]) < 1e-6
