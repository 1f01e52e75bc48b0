"""Measures what an emulated cluster delivers: compute speed, bandwidth and latency per device.

Compute: the fixed conv workload (workload.py), several chained steps per session.run on the
device, minus one network round trip. Bandwidth: a tensor of ~`seconds` worth of the file's rate
sent to (download) and fetched from (upload) the device through TF's own gRPC, minus one round
trip; on the netns testbed also the bare link (`link_mbit`: a plain TCP stream to a sink in the
device's namespace, outside its CPU quota), since a device of 0.1-0.4 core cannot deserialize
1 Gbit/s of gRPC: the link is what the emulator sets, gRPC adds the device's CPU. A shared medium:
two members' links measured at once share its rate. Latency: half the median HTTP/2 PING round
trip to the device's server; on a cluster without forwarder (latency "direct") it is unmodelled
and must only stay at or below the file's figure.
"""
from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import threading
import time

from edgemesh_tf.cluster import netns, procs, probe, workload

# binds to its namespace's own address (argv[1]), not to every interface
_SINK = ("import socket,sys\ns=socket.socket();s.bind((sys.argv[1],0));s.listen(8);print(s.getsockname()[1],flush=True)\n"
         "b=bytearray(1<<20)\nwhile True:\n c,_=s.accept()\n while c.recv_into(b):pass\n c.sendall(b'k');c.close()\n")


def latency_ms(address: str, pings: int = 9) -> float:
    """One-way latency (ms) to the server at host:port: median PING round trip / 2."""
    return statistics.median(probe.ping_rtt_ms(address) for _ in range(pings)) / 2


def _session(tf, target: str):
    # A deadline: a session whose master (the device) dies, e.g. OOM-killed, would wait forever.
    config = tf.compat.v1.ConfigProto(allow_soft_placement=False, operation_timeout_in_ms=120000)
    return tf.compat.v1.Session(target, graph=tf.compat.v1.Graph(), config=config)


def step_seconds(cluster, name: str, steps: int = 4, repeats: int = 3) -> float:
    """Seconds per workload step on device `name` (fastest of `repeats` runs of `steps` steps:
    outside load only ever slows a run down)."""
    import tensorflow as tf

    rtt_s = 2 * latency_ms(cluster.devices[name].address, pings=5) / 1e3
    sess = _session(tf, cluster.target(name))
    with sess.graph.as_default():
        op = workload.build(tf, cluster.device(name), steps=steps)
    with sess:
        times = workload.time_steps(sess, op, repeats, warmup=1)
    tf.compat.v1.Session.reset(cluster.target(name))
    per_step = (min(times) - rtt_s) / steps
    return per_step + cluster.step_delay_s(name, per_step)


def bandwidth_mbit(cluster, name: str, expected_mbit: float | None, seconds: float = 1.5) -> dict[str, float]:
    """{'download': Mbit/s client->device, 'upload': Mbit/s device->client} through TF gRPC."""
    import numpy as np
    import tensorflow as tf

    nbytes = int((expected_mbit or 400.0) * 1e6 / 8 * seconds)
    budget = cluster.spec.device(name).memory_mib
    if budget:  # the tensor and its serialized copy stay well inside an enforced memory budget
        nbytes = min(nbytes, budget * (1 << 20) // 6)
    n = nbytes // 4
    rtt_s = 2 * latency_ms(cluster.devices[name].address, pings=5) / 1e3
    sess = _session(tf, cluster.target(name))
    with sess.graph.as_default(), tf.compat.v1.device(cluster.device(name)):
        feed = tf.compat.v1.placeholder(tf.float32, [None])
        consumed = tf.reduce_sum(feed)
        # fill() of a random scalar: cheap on a throttled device and never constant-folded.
        produced = tf.fill([n], tf.random.uniform([]))
    data = np.ones(n, np.float32)
    out = {}
    with sess:
        sess.run(consumed, {feed: data[:1024]})  # connect and register graphs first
        sess.run(produced)
        for direction, fetch, feeds in (("download", consumed, {feed: data}), ("upload", produced, None)):
            best = float("inf")
            for _ in range(2):
                t = time.perf_counter()
                sess.run(fetch, feeds)
                best = min(best, time.perf_counter() - t)
            out[direction] = n * 4 * 8 / 1e6 / max(best - rtt_s, 1e-6)
    tf.compat.v1.Session.reset(cluster.target(name))
    return out


class LinkSinks:
    """A TCP sink in each device's namespace (root's python, no cgroup): `mbit(names)` sends to
    them at once and returns each one's Mbit/s (the bare links, shared media included), the median
    of `repeats` sends of `seconds` each."""

    def __init__(self, cluster, names):
        self.cluster, self.procs, self.ports = cluster, {}, {}
        index = {d.name: i for i, d in enumerate(cluster.spec.devices)}
        # the namespace end of each device's link: no forwarder in the way
        self.hosts = {n: netns.addresses(cluster.run.data["slot"], index[n])[1] for n in names}
        try:
            for n in names:
                p = procs.spawn(["ip", "netns", "exec", cluster.devices[n].netns, sys.executable, "-c", _SINK,
                                 self.hosts[n]],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                self.procs[n] = p
                self.ports[n] = int(p.stdout.readline())
        except BaseException:
            self.close()
            raise

    def mbit(self, names, seconds: float = 1.0, repeats: int = 3) -> dict[str, float]:
        """Each of `names`' Mbit/s over its own transfer, all sent at once (median of `repeats`)."""
        return self.together(names, seconds, repeats)[0]

    def together(self, names, seconds: float = 1.0, repeats: int = 3) -> tuple[dict[str, float], float]:
        """`names` sent to at once, `repeats` times: (each one's Mbit/s over its own transfer, all bytes
        over the span from the first start to the last end), medians. The second is a shared medium's
        rate; the sum of the first over-counts it (a sender that finishes first leaves the medium to
        the others)."""
        runs = [self._send_at_once(names, seconds) for _ in range(repeats)]
        each = {n: statistics.median(r[n][0] * 8 / 1e6 / (r[n][2] - r[n][1]) for r in runs) for n in names}
        joint = statistics.median(sum(v[0] for v in r.values()) * 8 / 1e6
                                  / (max(v[2] for v in r.values()) - min(v[1] for v in r.values())) for r in runs)
        return each, joint

    def _send_at_once(self, names, seconds: float) -> dict[str, tuple[int, float, float]]:
        """Sends `seconds` of each device's link rate to each sink at once: {name: (bytes, start s, end s)}."""
        out, threads = {}, []

        def send(n):
            rate = self.cluster.spec.device(n).bandwidth_mbit or 1000.0
            nbytes, buf = int(rate * 1e6 / 8 * seconds), b"x" * (1 << 16)
            s = socket.create_connection((self.hosts[n], self.ports[n]), timeout=10)
            t, sent = time.perf_counter(), 0
            while sent < nbytes:
                s.sendall(buf)
                sent += len(buf)
            s.shutdown(socket.SHUT_WR)
            s.recv(1)
            out[n] = (sent, t, time.perf_counter())
            s.close()

        for n in names:
            threads.append(threading.Thread(target=send, args=(n,)))
            threads[-1].start()
        for t in threads:
            t.join()
        return out

    def close(self):
        for p in self.procs.values():
            procs.terminate(p, 2.0)


def within(measured: float, expected: float, tolerance: float = 0.15) -> bool:
    return abs(measured - expected) <= tolerance * expected


def measure(cluster, tolerance: float = 0.15, rounds: int = 3) -> dict:
    """All figures of the cluster compared with its file (plain data for JSON)."""
    spec = cluster.spec
    timed = [d for d in spec.devices if d.speed or (d.cpu_cores and cluster.devices[d.name].cpu_cores)]
    steps: dict[str, list[float]] = {d.name: [] for d in timed}
    for _ in range(rounds):  # interleaved rounds: a burst of outside load hits every device alike
        for d in timed:
            steps[d.name].append(step_seconds(cluster, d.name))
    step_s = {n: min(v) for n, v in steps.items()}
    expect = _expected_speeds(cluster, timed)
    top = max(timed, key=lambda d: expect[d.name]) if timed else None
    devices = {}
    for d in timed:
        expected, got = expect[d.name] / expect[top.name], step_s[top.name] / step_s[d.name]
        devices[d.name] = {"speed_file": round(expected, 4), "speed_measured": round(got, 4),
                           "step_ms": round(step_s[d.name] * 1e3, 1), "cpu_cores": cluster.devices[d.name].cpu_cores,
                           "gflops": round(workload.FLOP_PER_STEP / step_s[d.name] / 1e9, 2),
                           "ok": within(got, expected, tolerance)}
    links, direct = {}, getattr(cluster, "latency", "forwarder") == "direct"
    shaped = [d.name for d in spec.devices if d.bandwidth_mbit]
    sinks = LinkSinks(cluster, shaped) if cluster.network == "netns" else None
    try:
        for d in spec.devices:
            lat = latency_ms(cluster.devices[d.name].address)
            entry = {"latency_ms_file": d.latency_ms, "latency_ms": round(lat, 3)}
            if direct:  # unmodelled: at most the file's figure (plus scheduling noise)
                ok = lat <= d.latency_ms + 0.25
                entry["latency"] = "unmodelled (<= %.2g ms)" % d.latency_ms
            else:
                ok = within(lat, d.latency_ms, tolerance) if d.latency_ms else lat < 1.0
            if d.bandwidth_mbit:
                bw = bandwidth_mbit(cluster, d.name, d.bandwidth_mbit)
                entry.update({"bandwidth_mbit_file": d.bandwidth_mbit, "download_mbit": round(bw["download"], 2),
                              "upload_mbit": round(bw["upload"], 2)})
                if sinks:
                    entry["link_mbit"] = round(sinks.mbit([d.name])[d.name], 1)
                    ok = ok and within(entry["link_mbit"], _link_rate(spec, d), tolerance)
                else:
                    ok = ok and all(within(v, d.bandwidth_mbit, tolerance) for v in bw.values())
            entry["ok"] = ok
            links[d.name] = entry
        media = {}
        for medium, rate in spec.media:
            members = [d.name for d in spec.devices if d.medium == medium and d.name in shaped][:2]
            if sinks and len(members) == 2:
                got, total = sinks.together(members)
                media[medium] = {"bandwidth_mbit_file": rate, "together": {n: round(v, 1) for n, v in got.items()},
                                 "aggregate_mbit": round(total, 1), "ok": within(total, rate, tolerance)}
    finally:
        if sinks:
            sinks.close()
    return {"cluster": spec.path, "load_average": os.getloadavg(), "run_id": cluster.run.run_id, "network": cluster.network, "compute": cluster.compute,
            "tolerance": tolerance, "devices": devices, "links": links, "media": media,
            "all_within_tolerance": all(v["ok"] for v in list(devices.values()) + list(links.values())
                                        + list(media.values()))}


def _expected_speeds(cluster, timed) -> dict[str, float]:
    """Relative speed each device should show: its `speed`, or for a `cpu_cores` device the speed the
    cpu calibration predicts at its quota (speeds of the calibrated devices follow the same curve)."""
    if all(d.speed for d in timed):
        return {d.name: d.speed for d in timed}
    from edgemesh_tf.cluster import calibration

    calib = cluster.calibration or calibration.load_or_calibrate(cluster.compute.split("-")[-1])
    return {d.name: calib.speed(cluster.devices[d.name].cpu_cores) for d in timed}


def _link_rate(spec, d) -> float:
    """What one transfer alone gets on device d's link: its own rate, or its medium's if lower."""
    return min(r for r in (d.bandwidth_mbit, dict(spec.media).get(d.medium)) if r)
