"""The measurements of `edgemesh cluster check` (cluster/check.py compares them with the file), taken
through each device's own TF server as the profiler takes them.

- Answers: cluster/ready.py's bounded check (every task at once, within `server_timeout_s`).
- Versions: a PyFunc op with `server.FACTS_TOKEN` placed on the device runs `server_facts` in the
  server's process (`edgemesh server` registers it; a server started otherwise, or by an older
  edgemesh_tf, does not know the token: the versions are reported unknown, saying so).
- Memory: MemAvailable of /proc/meminfo, read by a ReadFile op on the device (any TF server does it).
- Links: for each hub (the master and the first ps: `check.hubs`) a session whose master is the hub's
  own server times, for every other device, empty runs there (its round trip with the hub, less the
  hub's own empty run: latency is half of it, as the profiler takes it) and transfers of
  TRANSFER_BYTES from a variable on the device to an op on the hub, plus LARGE_TRANSFER_BYTES on a
  link fast enough (`profiler.large_transfers`), fitted by `profiler.fit_link`. Small transfers and
  few repeats keep the check to seconds. Sessions name only the devices that answered
  (device_filters), so a missing one is not waited for.

Every run has a timeout (RUN_TIMEOUT_S) and the whole measuring a deadline (`measure_timeout_s`); what
was not measured by then is named as such.
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Mapping, Sequence

from absl import logging

from edgemesh_tf.cluster import check, ready
from edgemesh_tf.cluster.server import FACTS_TOKEN
from edgemesh_tf.cluster.spec import ClusterFile, Device

TRANSFER_BYTES = (16 << 10, 128 << 10, 512 << 10)
"""Transfers timed on every path (bytes): the profiler's small sizes."""
LARGE_TRANSFER_BYTES = (2 << 20,)
"""Also timed when the largest above took under profiler.LARGE_TRANSFER_IF_MS (a fast link)."""
REPEATS = 3  # timed runs of each transfer size
ROUND_TRIPS = 8  # timed empty runs of each device and of the hub itself
RUN_TIMEOUT_S = 30.0
"""Longest one TF run of the check may take (s)."""


def measure_timeout_s(n_devices: int) -> float:
    """Longest the measuring of a cluster of n devices may take (s): 30 s plus 10 s a device (a path to
    each hub on a slow link takes a few seconds)."""
    return 30.0 + 10.0 * n_devices


def own_versions() -> dict[str, str]:
    """The versions of this process (the chief's), as a server reports its own (`server.server_facts`)."""
    from edgemesh_tf.cluster.server import server_facts

    return json.loads(server_facts())


def _short(e: Exception) -> str:
    text = getattr(e, "message", None) or str(e)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    useful = [ln for ln in lines if "Could not find callback" in ln]
    return (useful or lines or [type(e).__name__])[0][:240]


def _session(tf1, target: str, graph, devices: Sequence[Device]):
    ms = int(RUN_TIMEOUT_S * 1000)
    config = tf1.ConfigProto(device_filters=[d.device_string for d in devices], operation_timeout_in_ms=ms)
    return tf1.Session(target, graph=graph, config=config)


def _run(tf1, sess, fetch, deadline: float):
    """sess.run(fetch) within RUN_TIMEOUT_S and the deadline (TimeoutError past the deadline)."""
    left = min(RUN_TIMEOUT_S, deadline - time.monotonic())
    if left <= 0:
        raise TimeoutError("the check's deadline passed")
    return sess.run(fetch, options=tf1.RunOptions(timeout_in_ms=max(1, int(left * 1000))))


def _timed_ms(tf1, sess, op, n: int, deadline: float) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        _run(tf1, sess, op, deadline)
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def mem_available_mib(meminfo: str) -> float:
    """MemAvailable of a /proc/meminfo text, in MiB (ValueError if it has none)."""
    for line in meminfo.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024.0
    raise ValueError("no MemAvailable line in /proc/meminfo")


def _facts(tf, d: Device, address: str, deadline: float, found: dict) -> None:
    """Versions and MemAvailable of one device, read in its server's process (found[d.name] updated)."""
    from tensorflow.python.ops import gen_script_ops

    tf1 = tf.compat.v1
    g = tf.Graph()
    with g.as_default(), g.device(d.device_string + "/device:CPU:0"):
        meminfo = tf.io.read_file("/proc/meminfo")
        facts = gen_script_ops.py_func(input=[], token=FACTS_TOKEN, Tout=[tf.string])[0]
    mine = found[d.name]
    with _session(tf1, "grpc://" + address, g, [d]) as sess:
        try:
            mine["mem_available_mib"] = round(mem_available_mib(_run(tf1, sess, meminfo, deadline).decode()), 1)
        except (tf.errors.OpError, ValueError, UnicodeDecodeError, TimeoutError) as e:
            mine["memory_note"] = "reading /proc/meminfo on the device failed: %s" % _short(e)
        try:
            value = _run(tf1, sess, facts, deadline)
            mine["versions"] = json.loads(value.item() if hasattr(value, "item") else value)
        except (tf.errors.OpError, ValueError, TimeoutError) as e:
            mine["versions_note"] = ("its server does not answer edgemesh's version query (%s): a server not "
                                     "started by `edgemesh server` of this edgemesh_tf, or an older one?" % _short(e))


def _links_to(tf, hub: Device, others: Sequence[Device], answered: Sequence[Device], addresses: Mapping[str, str],
              deadline: float, found: dict) -> None:
    """The paths of `others` to `hub`, timed through a session on the hub's own server (found[name]["links"])."""
    from edgemesh_tf.profiling.layers import build_noop_op, build_transfer_op
    from edgemesh_tf.profiling.profiler import fit_link, large_transfers, robust_median

    tf1 = tf.compat.v1
    sizes = TRANSFER_BYTES + LARGE_TRANSFER_BYTES
    at = hub.device_string + "/device:CPU:0"
    g = tf.Graph()
    with g.as_default(), tf1.variable_scope("edgemesh_check_%d_%s" % (os.getpid(), hub.name)):
        local = build_noop_op(tf1, at)
        empty = {d.name: build_noop_op(tf1, d.device_string + "/device:CPU:0") for d in others}
        moves = {d.name: [build_transfer_op(tf1, n, d.device_string + "/device:CPU:0", at) for n in sizes]
                 for d in others}
        variables = tf1.global_variables()
        init = tf1.variables_initializer(variables)
        free = []
        for v in variables:
            with g.device(v.device):
                free.append(tf.raw_ops.DestroyResourceOp(resource=v.handle, ignore_lookup_error=True))
    with _session(tf1, "grpc://" + addresses[hub.name], g, answered) as sess:
        try:
            _run(tf1, sess, init, deadline)
            _run(tf1, sess, local, deadline)
            local_ms, _ = robust_median(_timed_ms(tf1, sess, local, ROUND_TRIPS, deadline))
            for d in others:
                try:
                    _run(tf1, sess, empty[d.name], deadline)  # the first run sets the device's part up
                    base_ms, _ = robust_median(_timed_ms(tf1, sess, empty[d.name], ROUND_TRIPS, deadline))
                    xs, ts = [], []
                    for n, op in zip(sizes, moves[d.name]):
                        if n in LARGE_TRANSFER_BYTES and not large_transfers(xs, ts):
                            break
                        _run(tf1, sess, op, deadline)
                        for t in _timed_ms(tf1, sess, op, REPEATS, deadline):
                            xs.append(n)
                            ts.append(t)
                    _, bw = fit_link(xs, ts)
                    found[d.name]["links"][hub.name] = check.Link(round(float(bw), 2),
                                                                 round(max(0.0, float(base_ms - local_ms)) / 2.0, 3))
                except (tf.errors.OpError, TimeoutError) as e:
                    found[d.name]["link_notes"][hub.name] = "timing the path failed: %s" % _short(e)
        except (tf.errors.OpError, TimeoutError) as e:
            for d in others:
                found[d.name]["link_notes"].setdefault(hub.name, "the session on %s failed: %s" % (hub.name, _short(e)))
        finally:
            try:
                _run(tf1, sess, free, time.monotonic() + 10.0)  # the transfers' variables, on every device
            except (tf.errors.OpError, TimeoutError) as e:
                logging.warning("could not free the check's variables (%s)", _short(e))


def _measure_all(cluster: ClusterFile, answered: Sequence[Device], addresses: Mapping[str, str], deadline: float,
                 found: dict, done: dict) -> None:
    import tensorflow as tf

    for d in answered:
        try:
            _facts(tf, d, addresses[d.name], deadline, found)
            done["facts"].add(d.name)
        except (tf.errors.OpError, TimeoutError) as e:
            found[d.name]["memory_note"] = found[d.name]["versions_note"] = "its session failed: %s" % _short(e)
    names = {d.name for d in answered}
    for hub in check.hubs(cluster):
        if hub.name not in names:
            for d in answered:
                if d.name != hub.name:
                    found[d.name]["link_notes"][hub.name] = "%s did not answer" % hub.name
            continue
        _links_to(tf, hub, [d for d in answered if d.name != hub.name], answered, addresses, deadline, found)
        done["hubs"].add(hub.name)


def measure(cluster: ClusterFile, answered: Sequence[Device], addresses: Mapping[str, str] | None = None,
            timeout_s: float | None = None) -> list[check.Measured]:
    """What was measured of each device in `answered` (devices whose servers answered; addresses:
    {device name: host:port}, default the file's), within timeout_s (default `measure_timeout_s`): the
    measuring runs in a daemon thread and what it had not measured by then is named so."""
    addresses = {d.name: (addresses or {}).get(d.name, d.address) for d in cluster.devices}
    timeout_s = measure_timeout_s(len(cluster.devices)) if timeout_s is None else timeout_s
    deadline = time.monotonic() + timeout_s
    found = {d.name: {"versions": {}, "links": {}, "link_notes": {}} for d in answered}
    done: dict = {"facts": set(), "hubs": set()}
    failed: list[BaseException] = []

    def work():
        try:
            _measure_all(cluster, answered, addresses, deadline, found, done)
        except BaseException as e:  # noqa: BLE001 - reported below, in the caller's thread
            failed.append(e)

    t = threading.Thread(target=work, daemon=True, name="cluster-check")
    t.start()
    t.join(timeout_s + 2.0)
    if failed:
        raise failed[0]
    late = "not measured within %.0f s (the check's deadline for %d devices)" % (timeout_s, len(cluster.devices))
    if t.is_alive():
        logging.warning("cluster check: measuring %s took longer than %.0f s; reporting what was measured",
                        cluster.path, timeout_s)
    out = []
    for d in answered:
        f = found[d.name]
        versions = dict(f["versions"])
        notes = dict(f["link_notes"])
        for hub in check.hubs(cluster):
            if hub.name != d.name and hub.name not in f["links"]:
                notes.setdefault(hub.name, late)
        out.append(check.Measured(
            d.name, versions={k: str(v) for k, v in versions.items()},
            versions_note=f.get("versions_note", "" if versions else late), links=dict(f["links"]), link_notes=notes,
            mem_available_mib=f.get("mem_available_mib"),
            memory_note=f.get("memory_note", "" if "mem_available_mib" in f else late)))
    return out


def check_cluster(cluster: ClusterFile, server_timeout_s: float = ready.SERVER_TIMEOUT_S,
                  addresses: Mapping[str, str] | None = None) -> tuple[list[check.Measured], list[ready.Missing]]:
    """(one Measured per device of the file, in file order; the tasks that did not answer): every task
    is asked first (ready.unanswered, within server_timeout_s), then the ones that answered are measured."""
    t0 = time.monotonic()
    missing = ready.unanswered(cluster, server_timeout_s, addresses)
    gone = {m.device.name: m for m in missing}
    answered = [d for d in cluster.devices if d.name not in gone]
    measured = {m.name: m for m in measure(cluster, answered, addresses)} if answered else {}
    logging.info("cluster check of %s: %d of %d devices answered, measured in %.1f s", cluster.path, len(answered),
                 len(cluster.devices), time.monotonic() - t0)
    out = [measured.get(d.name) or check.Measured(d.name, reason=gone[d.name].reason) for d in cluster.devices]
    return out, missing
