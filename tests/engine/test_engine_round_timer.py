"""engine/runtime/round_timer.py: two groups' rounds on a real testbed share one global model on the ps;
each round commits once, moves the global model, and is timed per local iteration."""
import os

import numpy as np
import pytest

from edgemesh_tf.mesh.layout import single_device_layout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_local_steps_must_be_positive(vgg_digits):
    from edgemesh_tf.engine.runtime.round_timer import RoundRunner

    with pytest.raises(ValueError, match="local_steps must be an int >= 1"):
        RoundRunner(vgg_digits, single_device_layout("/cpu:0"), 8, "", ps_device="/cpu:0", group="a",
                    groups=["a"], local_steps=0, initialize_ps=True)


@pytest.mark.emulator
def test_two_groups_commit_to_one_global_model(vgg_digits):
    from edgemesh_tf.cluster import emulated_cluster, load_cluster
    from edgemesh_tf.engine.runtime.round_timer import RoundRunner

    cluster = load_cluster(os.path.join(ROOT, "layouts", "edge2.yaml"))
    with emulated_cluster(cluster) as em:
        ps = em.device("ps0")
        runners = [RoundRunner(vgg_digits, single_device_layout(em.device(n)), 16, em.session_target, ps_device=ps,
                               group=n, groups=["fast", "slow"], local_steps=2, initialize_ps=(i == 0),
                               seed=i, container="round_" + n)
                   for i, n in enumerate(("fast", "slow"))]
        try:
            g = runners[1].g
            read = lambda: runners[1].sess.run({n: v.read_value() for n, v in g.ps.vars.items()})
            before = read()
            times = [r.step_ms() for r in runners]
            after = read()
            counts = runners[1].sess.run(g.counters)
        finally:
            for r in runners:
                r.close()
    assert min(times) > 0
    # one commit per round, both accepted on the same global model
    assert counts["version"] == 2 and counts["commits/fast"] == counts["commits/slow"] == 1, counts
    assert max(float(np.max(np.abs(after[n] - before[n]))) for n in before) > 1e-5  # they trained
