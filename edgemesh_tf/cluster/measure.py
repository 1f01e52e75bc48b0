"""Measures what an emulated cluster delivers: compute speed, bandwidth and latency per device.

Compute: the fixed conv workload (workload.py), several chained steps per session.run on the
device, minus one network round trip. Bandwidth: a tensor of ~`seconds` worth of the file's rate
sent to (download) and fetched from (upload) the device through TF's own gRPC, minus one round
trip. Latency: half the median HTTP/2 PING round trip to the device's server.
"""
from __future__ import annotations

import os
import statistics
import time

from edgemesh_tf.cluster import probe, workload


def latency_ms(address: str, pings: int = 9) -> float:
    """One-way latency (ms) to the server at host:port: median PING round trip / 2."""
    return statistics.median(probe.ping_rtt_ms(address) for _ in range(pings)) / 2


def _session(tf, target: str):
    config = tf.compat.v1.ConfigProto(allow_soft_placement=False)
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


def within(measured: float, expected: float, tolerance: float = 0.15) -> bool:
    return abs(measured - expected) <= tolerance * expected


def measure(cluster, tolerance: float = 0.15, rounds: int = 3) -> dict:
    """All figures of the cluster compared with its file (plain data for JSON)."""
    spec = cluster.spec
    timed = [d for d in spec.devices if d.speed]
    steps: dict[str, list[float]] = {d.name: [] for d in timed}
    for _ in range(rounds):  # interleaved rounds: a burst of outside load hits every device alike
        for d in timed:
            steps[d.name].append(step_seconds(cluster, d.name))
    step_s = {n: min(v) for n, v in steps.items()}
    top = max(timed, key=lambda d: d.speed) if timed else None
    devices = {}
    for d in timed:
        expected, got = d.speed / top.speed, step_s[top.name] / step_s[d.name]
        devices[d.name] = {"speed_file": round(expected, 4), "speed_measured": round(got, 4),
                           "step_ms": round(step_s[d.name] * 1e3, 1), "cpu_cores": cluster.devices[d.name].cpu_cores,
                           "ok": within(got, expected, tolerance)}
    links = {}
    for d in spec.devices:
        lat = latency_ms(cluster.devices[d.name].address)
        entry = {"latency_ms_file": d.latency_ms, "latency_ms": round(lat, 3)}
        ok = within(lat, d.latency_ms, tolerance) if d.latency_ms else lat < 1.0
        if d.bandwidth_mbit:
            bw = bandwidth_mbit(cluster, d.name, d.bandwidth_mbit)
            entry.update({"bandwidth_mbit_file": d.bandwidth_mbit, "download_mbit": round(bw["download"], 2),
                          "upload_mbit": round(bw["upload"], 2)})
            ok = ok and all(within(v, d.bandwidth_mbit, tolerance) for v in bw.values())
        entry["ok"] = ok
        links[d.name] = entry
    return {"cluster": spec.path, "load_average": os.getloadavg(), "run_id": cluster.run.run_id, "network": cluster.network, "compute": cluster.compute,
            "tolerance": tolerance, "devices": devices, "links": links,
            "all_within_tolerance": all(v["ok"] for v in list(devices.values()) + list(links.values()))}
