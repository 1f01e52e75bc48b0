"""The cluster-level parameter server on emulated edge2: two group processes push concurrently
over gRPC (dense and sparse, one NaN update) and the global model is the exact sum."""
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from edgemesh_tf.cluster import emulated_cluster
from edgemesh_tf.mesh.compat import tf
from edgemesh_tf.sync.ps import ParameterServer, dense_bytes, sparse_bytes

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TENSORS = [("w", (3, 4)), ("b", (4,))]
GROUPS = ["fast", "slow"]
N = 6
SCALE = {"fast": 0.5, "slow": 0.25}
SPARSE_IDX = [0, 5, 11, 5]  # flat indices into w; 5 twice: duplicates add up
SPARSE_SCALE = 0.5
CLIENT_TIMEOUT_S = 90.0

# Dyadic values (exact in float32), so the sum is exact in any order of the concurrent pushes.
def delta(group, i):
    k = 1.0 if group == "fast" else -2.0
    return {"w": np.full((3, 4), k * (i + 1), np.float32), "b": np.arange(4, dtype=np.float32) * k + i}


def sparse_values(i):
    return np.array([1.0, 2.0, 3.0, 0.5], np.float32) * (i + 1)


# One group's process: its own graph and session, the deltas fed on its worker device.
CLIENT = r"""
import json, sys
import numpy as np
args = json.loads(sys.argv[1])
from edgemesh_tf.mesh.compat import tf
from edgemesh_tf.sync.ps import ParameterServer
ps = ParameterServer([(n, tuple(s)) for n, s in args["tensors"]], args["groups"], ps_device=args["ps"])
g = args["group"]
with tf.device(args["device"]):
    feeds = {n: tf.placeholder(tf.float32, tuple(s), name="d_" + n) for n, s in args["tensors"]}
    deltas = {n: tf.identity(p) for n, p in feeds.items()}  # computed on this group's worker
    dense = ps.push_dense(deltas, args["scale"], g)
    idx = tf.placeholder(tf.int64, [len(args["sparse_idx"])])
    val = tf.placeholder(tf.float32, [len(args["sparse_idx"])])
    sparse = ps.push_sparse("w", tf.identity(idx), tf.identity(val), args["sparse_scale"], g)
out = {"dense": [], "sparse": [], "nan": None}
with tf.Session(args["target"]) as sess:
    out["waited_s"] = ps.wait_until_initialized(sess, timeout_s=args["timeout_s"])
    opts = tf.RunOptions(timeout_in_ms=int(args["timeout_s"] * 1000))
    for i, d in enumerate(args["deltas"]):
        fd = {feeds[n]: np.asarray(v, np.float32) for n, v in d.items()}
        out["dense"].append([int(x) for x in sess.run([dense.version, dense.accepted], fd, options=opts)])
        if args["sparse"]:
            fd = {idx: args["sparse_idx"], val: args["sparse_values"][i]}
            out["sparse"].append([int(x) for x in sess.run([sparse.version, sparse.accepted], fd, options=opts)])
    if args["nan"]:
        fd = {feeds[n]: np.full(s, np.nan if n == "w" else 1.0, np.float32) for n, s in args["tensors"]}
        out["nan"] = [int(x) for x in sess.run([dense.version, dense.accepted], fd, options=opts)]
        fd = {idx: args["sparse_idx"], val: [np.inf] + [1.0] * (len(args["sparse_idx"]) - 1)}
        out["inf_sparse"] = [int(x) for x in sess.run([sparse.version, sparse.accepted], fd, options=opts)]
print("RESULT " + json.dumps(out))
"""


def _spawn(cluster, group, sparse, nan):
    args = {"tensors": TENSORS, "groups": GROUPS, "ps": cluster.device("ps0"), "group": group,
            "device": cluster.device(group), "target": cluster.session_target, "scale": SCALE[group],
            "deltas": [{n: v.tolist() for n, v in delta(group, i).items()} for i in range(N)],
            "sparse": sparse, "sparse_idx": SPARSE_IDX, "sparse_scale": SPARSE_SCALE,
            "sparse_values": [sparse_values(i).tolist() for i in range(N)], "nan": nan,
            "timeout_s": CLIENT_TIMEOUT_S}
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.Popen([sys.executable, "-c", CLIENT, json.dumps(args)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(p, name):
    try:
        out, err = p.communicate(timeout=CLIENT_TIMEOUT_S + 30)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate(timeout=10)
        pytest.fail("client %s (pid %d) did not finish; stderr:\n%s" % (name, p.pid, err[-3000:]))
    assert p.returncode == 0, "client %s exit %s; stderr:\n%s" % (name, p.returncode, err[-3000:])
    lines = [l for l in out.splitlines() if l.startswith("RESULT ")]
    assert lines, "client %s printed no result; stdout %r stderr %s" % (name, out, err[-3000:])
    return json.loads(lines[-1][len("RESULT "):])


def test_byte_counts():
    assert dense_bytes([(3, 4), (4,)]) == 4 * 16
    assert sparse_bytes(10) == 120 and sparse_bytes(10, 4) == 80  # int64 or int32 indices


@pytest.mark.emulator
@pytest.mark.subprocess
def test_two_groups_push_concurrently_to_the_ps():
    w0 = np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5
    b0 = np.ones(4, np.float32)
    with emulated_cluster(os.path.join(ROOT, "layouts", "edge2.yaml")) as cluster:
        tf.Session.reset(cluster.session_target)
        clients = []
        try:
            # Start the groups first: they wait on the ps until the chief has initialized it.
            clients = [("fast", _spawn(cluster, "fast", sparse=False, nan=True)),
                       ("slow", _spawn(cluster, "slow", sparse=True, nan=False))]
            graph = tf.Graph()
            with graph.as_default():
                ps = ParameterServer(TENSORS, GROUPS, ps_device=cluster.device("ps0"))
                pulled = ps.pull(cluster.device("chief"))
                counters = ps.counters()
                assert ps.pull_bytes == ps.dense_push_bytes == 4 * 16
                with tf.Session(cluster.session_target, graph=graph) as sess:
                    # A non-chief waiting on the uninitialized ps gives up within its bound.
                    t = time.monotonic()
                    with pytest.raises(TimeoutError, match="/job:ps/task:0"):
                        ps.wait_until_initialized(sess, timeout_s=1.0)
                    assert time.monotonic() - t < 5.0
                    ps.initialize(sess, {"w": w0, "b": b0})
                    assert ps.wait_until_initialized(sess, timeout_s=5.0) < 5.0
                    with pytest.raises(TimeoutError, match="ready = 2"):  # another job's flag is not this one's
                        ps.wait_until_initialized(sess, timeout_s=0.5, token=2)
                    results = {name: _result(p, name) for name, p in clients}
                    got, cnt = sess.run([pulled, counters])
        finally:
            for _, p in clients:
                if p.poll() is None:
                    p.kill()
                    p.wait(timeout=10)

    fast, slow = results["fast"], results["slow"]
    assert all(acc == 1 for _, acc in fast["dense"] + slow["dense"] + slow["sparse"])
    assert fast["nan"][1] == 0 and fast["inf_sparse"][1] == 0
    want_w, want_b = w0.copy(), b0.copy()
    for g in GROUPS:
        for i in range(N):
            d = delta(g, i)
            want_w += SCALE[g] * d["w"]
            want_b += SCALE[g] * d["b"]
    for i in range(N):
        np.add.at(want_w.reshape(-1), SPARSE_IDX, SPARSE_SCALE * sparse_values(i))
    np.testing.assert_array_equal(got["w"], want_w)
    np.testing.assert_array_equal(got["b"], want_b)
    assert cnt["commits/fast"] == N
    assert cnt["commits/slow"] == 2 * N  # dense and sparse pushes both commit
    assert cnt["version"] == 3 * N
    assert cnt["rejected"] == 2
    assert max(v for v, _ in fast["dense"] + slow["dense"] + slow["sparse"]) <= 3 * N


def test_a_sparse_commit_with_a_tensor_that_sends_nothing_is_applied_in_process():
    """A top-k selection can be empty (an update and residual all zero send no entry); the commit
    still lands: the other tensors' entries are added at their nd positions, the empty one is unchanged."""
    graph = tf.Graph()
    with graph.as_default():
        ps = ParameterServer([("w", (2, 3, 4)), ("b", (4,))], ["g"], ps_device="/device:CPU:0")
        fed = {n: (tf.placeholder(tf.int32, [None]), tf.placeholder(tf.float32, [None])) for n in ("w", "b")}
        push = ps.push_sparse_many(fed, 1.0, "g")
        with tf.Session(graph=graph) as sess:
            sess.run(tf.global_variables_initializer())
            zeros = {"w": np.zeros((2, 3, 4), np.float32), "b": np.ones(4, np.float32)}
            ps.initialize(sess, zeros)
            feed = {fed["w"][0]: [1, 13, 23], fed["w"][1]: [1.0, 2.0, 3.0], fed["b"][0]: [], fed["b"][1]: []}
            assert sess.run([push.version, push.accepted], feed)[1]
            got = sess.run({n: v.read_value() for n, v in ps.vars.items()})
    want = np.zeros(24, np.float32)
    want[[1, 13, 23]] = [1.0, 2.0, 3.0]
    np.testing.assert_array_equal(got["w"], want.reshape(2, 3, 4))
    np.testing.assert_array_equal(got["b"], np.ones(4, np.float32))
