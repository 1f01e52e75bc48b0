"""ASHL's profiling by short pre-training: time each layer of the real model on each device through
its own TF server, fit each link's latency and bandwidth, and read each server's peak memory.

Works on any TF cluster reachable from this process (``session_target`` is a grpc:// master);
the emulated testbed adds the server pids, so peak memory can be read from /proc.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import statistics
import time
from typing import Mapping, Sequence

import numpy as np

from edgemesh_tf.cluster.procs import read_vm_kb
from edgemesh_tf.mesh.compat import tf
from edgemesh_tf.layers import ModelSpec
from edgemesh_tf.models.shapes import layer_shapes
from edgemesh_tf.profiling.layers import build_layer_op, build_noop_op, build_transfer_op
from edgemesh_tf.profiling.types import DeviceProfile, LayerTiming, Profile

MIB = 1 << 20

TRANSFER_BYTES = (16 << 10, 128 << 10, 512 << 10)
# On a fast link the largest of those is over within a few CFS periods of a throttled sender (a 0.25-core
# device runs 2.5 ms of each 10), so its time depends on where in the period it starts and varies
# about twofold from one profile to the next (docs/DESIGN.md). Transfers that took under
# LARGE_TRANSFER_IF_MS are therefore also timed at LARGE_TRANSFER_BYTES (the size of a VGG gather).
LARGE_TRANSFER_BYTES = (2 << 20, 8 << 20)
LARGE_TRANSFER_IF_MS = 40.0
# A layer whose one pass takes this many round trips of its device is timed one pass per run: the
# round trip's jitter is then a few % of the run. Shorter layers chain ``reps`` passes per run.
ONE_PASS_OVER_ROUND_TRIP = 20.0
WARMUP_STEPS = 2  # whole training steps not counted before the timed ones (the first runs the graph's set-up)
# Whole and split steps are timed until the median is known to +-STEP_MEDIAN_REL (its distribution-free
# 90% interval), at least STEP_MIN_REPEATS and at most STEP_MAX_REPEATS steps (the most a slow device's
# seconds-long steps allow within the profile's set-up).
STEP_MEDIAN_REL = 0.04
STEP_MIN_REPEATS, STEP_MAX_REPEATS = 5, 11


@dataclasses.dataclass(frozen=True)
class DeviceToProfile:
    """name; device: TF device string; memory_bytes: its budget; pid: its server (local) or None."""

    name: str
    device: str
    memory_bytes: int
    pid: int | None = None


def robust_median(samples: Sequence[float]) -> tuple[float, float]:
    """Median after dropping points outside 1.5 IQR; returns (median, IQR)."""
    q1, q3 = np.percentile(samples, [25, 75])
    iqr = q3 - q1
    kept = [s for s in samples if q1 - 1.5 * iqr <= s <= q3 + 1.5 * iqr] or list(samples)
    return float(statistics.median(kept)), float(iqr)


def passes_per_run(one_pass_run_ms: float, round_trip_ms: float, reps: int) -> int:
    """Passes of a layer to chain in each timed run (pure): 1 when a run of one pass (ms, round trip
    included) is at least ONE_PASS_OVER_ROUND_TRIP round trips long, else ``reps``. On Pi-class
    devices (VGG-16 layers of 100s of ms behind sub-ms links) this makes profiling ~3x shorter."""
    return 1 if one_pass_run_ms - round_trip_ms >= ONE_PASS_OVER_ROUND_TRIP * round_trip_ms else reps


def median_interval(samples: Sequence[float], coverage: float = 0.9) -> tuple[float, float]:
    """Distribution-free interval of the median (pure): the order statistics (x_(j), x_(n+1-j)) with the
    largest j whose binomial coverage is at least ``coverage``; (min, max) when none reaches it."""
    xs, n = sorted(samples), len(samples)
    pmf = [math.comb(n, i) / 2 ** n for i in range(n + 1)]
    j = 1
    while j + 1 <= n + 1 - (j + 1) and sum(pmf[j + 1:n - j]) >= coverage:
        j += 1
    return xs[j - 1], xs[n - j]


def median_settled(samples: Sequence[float], rel: float = STEP_MEDIAN_REL, least: int = STEP_MIN_REPEATS,
                   most: int = STEP_MAX_REPEATS) -> bool:
    """Whether timing may stop (pure): ``most`` samples, or at least ``least`` whose median's interval
    lies within +-``rel`` of the median."""
    if len(samples) >= most:
        return True
    if len(samples) < least:
        return False
    lo, hi = median_interval(samples)
    med = statistics.median(samples)
    return hi - lo <= 2 * rel * med


def _timed(sess, op, repeats: int, warmup: bool = True) -> list[float]:
    if warmup:
        sess.run(op)  # placement, graph optimisation, allocations
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sess.run(op)
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def _first_runs(sess, ops, testbed_limits) -> None:
    """Runs each of ``ops`` once with the testbed's limits lifted, then restores them: an op's first
    run registers its graph on the device and creates its kernels (seconds on a throttled device),
    which no timing counts; each op is run alone, as its timings run it (the set-up is per fetch)."""
    testbed_limits.lift_limits()
    try:
        for op in ops:
            sess.run(op)
    finally:
        testbed_limits.restore_limits()


def large_transfers(sizes_bytes: Sequence[int], times_ms: Sequence[float]) -> bool:
    """Whether to time LARGE_TRANSFER_BYTES too: the largest transfer so far took under
    LARGE_TRANSFER_IF_MS (median)."""
    largest = max(sizes_bytes)
    return statistics.median(t for n, t in zip(sizes_bytes, times_ms) if n == largest) < LARGE_TRANSFER_IF_MS


def fit_link(sizes_bytes: Sequence[int], times_ms: Sequence[float]) -> tuple[float, float]:
    """Least squares time_ms = a + bytes / rate; returns (latency_ms = a / 2, bandwidth_mbit).

    The intercept is a request/response round trip, hence half of it is the one-way latency.
    """
    slope, intercept = np.polyfit(np.asarray(sizes_bytes, float), np.asarray(times_ms, float), 1)
    slope = max(slope, 1e-12)
    return max(0.0, intercept / 2.0), 8.0 / (slope * 1e3)  # bytes/ms -> Mbit/s


def profile_devices(spec: ModelSpec, batch: int, devices: Sequence[DeviceToProfile], session_target: str,
                    master_device: str, *, repeats: int = 5, reps: int = 3, whole_step_devices: Sequence[str] = (),
                    split_step_devices: Sequence[str] = (), split_step_sizes: Mapping[str, Sequence[int]] | None = None,
                    whole_beside_split: Sequence[str] = (), whole_step_repeats: int = 5,
                    whole_step_bytes: int = 0, config: tf.ConfigProto | None = None, testbed_limits=None) -> Profile:
    """Measures every device in ``devices``; ``master_device`` is where transfers are received.
    whole_step_devices: names of devices to also time at least ``whole_step_repeats`` real training
    steps of the whole model on, each alone (their ``whole_step_ms``; each must hold the model).
    split_step_devices: names of devices to time as many steps of the model split over
    (``Profile.split_step_ms``; each must hold its part); split_step_sizes: each split dim's units
    over them ({dim: shares}; None or {}: evenly, ``even_split_layout``). whole_beside_split: those
    of ``whole_step_devices`` whose whole steps are timed interleaved with the split step, step by
    step (their servers hold both graphs at once), so that the machine's drift between minutes does
    not move the ratio of the two. whole_step_bytes: what a whole step needs (bytes, with its
    headroom); a device whose budget does not hold that beside what its server still holds after the
    layer timings (resident memory above idle, read where its pid is known: an allocator keeps what it
    freed) is not timed whole (``whole_steps_that_fit``): the step could push it past its budget.
    testbed_limits: the emulated testbed, whose limits are lifted while each layer, transfer and step
    graph sets up (its first run, ``_first_runs`` and ``layout_steps_ms``), or None."""
    shapes = layer_shapes(spec, batch)
    idle_kb = {d.name: read_vm_kb(d.pid, "VmRSS") for d in devices if d.pid}
    graph = tf.Graph()
    with graph.as_default():
        ops = {d.name: {s.name: build_layer_op(tf, s, d.device, 1) for s in shapes} for d in devices}
        base = {d.name: build_noop_op(tf, d.device) for d in devices}
        local = build_noop_op(tf, master_device)
        transfers = {d.name: [build_transfer_op(tf, n, d.device, master_device)
                              for n in TRANSFER_BYTES + LARGE_TRANSFER_BYTES] for d in devices}
        init = tf.global_variables_initializer()  # the transfers' sources
    tf.Session.reset(session_target)
    out = []
    with tf.Session(session_target, graph=graph, config=config) as sess:
        sess.run(init)
        if testbed_limits is not None:  # each op's first run (its set-up on the device), nothing timed
            _first_runs(sess, [local] + [op for d in devices for op in
                                         [base[d.name], *ops[d.name].values(), *transfers[d.name]]], testbed_limits)
        # Round trips are the largest term of a step on slow links: sample them more than layers.
        rtt_repeats = 4 * repeats
        warm = testbed_limits is None  # each timing starts with an untimed run, unless _first_runs ran it
        local_ms, _ = robust_median(_timed(sess, local, rtt_repeats))  # TF's own cost of a run, no network
        for d in devices:
            t0 = time.perf_counter()
            base_ms, _ = robust_median(_timed(sess, base[d.name], rtt_repeats))
            timings = []
            for s in shapes:
                samples = _timed(sess, ops[d.name][s.name], 1, warmup=warm)
                n = passes_per_run(samples[0], base_ms, reps)
                if n == 1:
                    samples += _timed(sess, ops[d.name][s.name], repeats - 1, warmup=False)
                else:
                    with graph.as_default():  # the session extends its graph at the next run
                        chained = build_layer_op(tf, s, d.device, n)
                    samples = _timed(sess, chained, repeats)
                med, iqr = robust_median(samples)
                timings.append(LayerTiming(s.name, round(max(0.0, med - base_ms) / n, 3), round(iqr / n, 3)))
            sizes, times = [], []
            for n, op in zip(TRANSFER_BYTES + LARGE_TRANSFER_BYTES, transfers[d.name]):
                if n in LARGE_TRANSFER_BYTES and not large_transfers(sizes, times):
                    break
                for t in _timed(sess, op, repeats, warmup=warm):
                    sizes.append(n)
                    times.append(t)
            _, bw = fit_link(sizes, times)
            # One-way latency: half the empty run's round trip beyond TF's own cost of a run. (The
            # fit's intercept is biased low: a token bucket lets small transfers burst.)
            latency_ms = max(0.0, base_ms - local_ms) / 2.0
            peak = max(0, read_vm_kb(d.pid, "VmHWM") - idle_kb.get(d.name, 0)) * 1024 if d.pid else 0
            out.append(DeviceProfile(name=d.name, device=d.device, layers=tuple(timings),
                                     memory_bytes=d.memory_bytes, bandwidth_mbit=round(bw, 2),
                                     latency_ms=round(latency_ms, 3), step_overhead_ms=round(base_ms, 3),
                                     peak_memory_bytes=peak))
            logging.info("profiled %s in %.1f s: %s", d.name, time.perf_counter() - t0,
                         ", ".join("%s %.1f ms" % (t.name, t.compute_ms) for t in timings))
    tf.Session.reset(session_target)  # frees the transfers' variables on the devices
    from edgemesh_tf.mesh.layout import even_split_layout, single_device_layout, split_layout
    by_name = {d.name: d.device for d in devices}
    held = {d.name: max(0, read_vm_kb(d.pid, "VmRSS") - idle_kb.get(d.name, 0)) * 1024 for d in devices if d.pid}
    whole_step_devices = whole_steps_that_fit(whole_step_devices, whole_step_bytes, held,
                                              {d.name: d.memory_bytes for d in devices})
    beside = [n for n in whole_step_devices if n in whole_beside_split and split_step_devices]
    timed: dict[str, float] = {}
    for name in whole_step_devices:
        if name not in beside:
            timed[name] = layout_step_ms(spec, batch, single_device_layout(by_name[name]), session_target,
                                         master_device, whole_step_repeats, testbed_limits)
    if split_step_devices:
        on = [by_name[n] for n in split_step_devices]
        layout = split_layout(split_step_sizes, on) if split_step_sizes else even_split_layout(spec.split_dims(), on)[0]
        layouts = {SPLIT: layout, **{n: single_device_layout(by_name[n]) for n in beside}}
        timed.update(layout_steps_ms(spec, batch, layouts, session_target, master_device, whole_step_repeats,
                                     testbed_limits))
    out = [dataclasses.replace(p, whole_step_ms=round(timed[p.name], 2)) if p.name in timed else p for p in out]
    split_ms = round(timed.get(SPLIT, 0.0), 2)
    return Profile(model=spec.name, batch=batch, image_shape=spec.image_shape, num_classes=spec.num_classes,
                   devices=tuple(out), split_step_ms=split_ms, split_step_devices=tuple(split_step_devices),
                   split_step_sizes={n: tuple(v) for n, v in (split_step_sizes or {}).items()})


def whole_steps_that_fit(names: Sequence[str], need: int, held: Mapping[str, int], budgets: Mapping[str, int]
                         ) -> list[str]:
    """Of ``names``, the devices whose budget (bytes) holds ``need`` more bytes beside what they still
    ``held`` (a device absent from ``held`` is kept); each one left out is logged with its figures."""
    out = []
    for n in names:
        if held.get(n, 0) + need <= budgets[n]:
            out.append(n)
        else:
            logging.info("not timing %s's whole step: it still holds %.0f MiB after the layer timings and the step "
                         "needs %.0f MiB, past its %.0f MiB budget", n, held[n] / MIB, need / MIB, budgets[n] / MIB)
    return out


SPLIT = " split"  # the split step's key among layout_steps_ms's layouts (no device is named so)


def layout_step_ms(spec: ModelSpec, batch: int, layout, session_target: str, master_device: str,
                   repeats: int, testbed_limits=None) -> float:
    """Median ms of at least ``repeats`` training steps of ``spec`` under ``layout`` (``layout_steps_ms``)."""
    return layout_steps_ms(spec, batch, {"step": layout}, session_target, master_device, repeats,
                           testbed_limits)["step"]


def layout_steps_ms(spec: ModelSpec, batch: int, layouts: Mapping[str, object], session_target: str,
                    master_device: str, repeats: int, testbed_limits=None) -> dict[str, float]:
    """{name: median ms} of training steps of ``spec`` under each of ``layouts`` ({name: Layout}), built
    at once on the same servers and timed in turn (after WARMUP_STEPS each; with several layouts, three
    steps a turn, the first not counted, then two counted), each until its median is settled
    (``median_settled``, at least ``repeats``). Built as training
    builds them (the lowering, the optimizer, the input fed from the client). Single steps on a
    throttled device vary about twofold (throttling stalls), so a fixed small number of steps is not
    enough: the median is taken until it settles. testbed_limits: an emulated testbed
    (``lift_limits``, ``restore_limits``) whose CPU quotas and link rates are lifted while the graphs
    set up (their building and first step: seconds on a throttled device, nothing timed) and restored
    before the other warm-up steps; None: nothing to lift."""
    from edgemesh_tf.profiling.step_timer import LayoutRunner, step_in_turn  # it imports this module
    containers = {name: "profile_layout_step_%d" % i for i, name in enumerate(layouts)}
    runners = {}
    restore = testbed_limits.restore_limits if testbed_limits is not None else lambda: None
    try:
        if testbed_limits is not None:
            testbed_limits.lift_limits()
        for name, layout in layouts.items():
            runners[name] = LayoutRunner(spec, layout, batch, session_target, master_device,
                                         container=containers[name])
        # with several layouts, each turn's first step runs on quota left over while the device waited
        # (vgg_wide on pi4's jetson0: 48-54 ms counted so, 58-73 ms timed on its own): not counted;
        # the two steps after it run as steady as a layout alone, and both are counted
        several = len(runners) > 1
        samples = step_in_turn(runners, lambda _, v: not median_settled(v, least=repeats), warmup=WARMUP_STEPS,
                               round_steps=1 + several, uncounted=int(several), set_up_done=restore)
        for name, v in samples.items():
            logging.info("step of %s timed %d times: median %.1f ms, interval %s", layouts[name].devices, len(v),
                         statistics.median(v), median_interval(v))
        return {name: statistics.median(v) for name, v in samples.items()}
    finally:
        restore()  # also when a step failed
        for r in runners.values():
            r.close()
        tf.Session.reset(session_target, containers=list(containers.values()))
