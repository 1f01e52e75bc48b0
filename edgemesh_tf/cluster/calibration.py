"""Calibrates CPU quota (cores) -> speed of the fixed conv workload, and picks per-device quotas.

The mapping is not proportional (TF's thread pools, cache effects), so we measure it once per
machine: a child process runs the workload in a cgroup whose quota we step through. Cached in
~/.cache/edgemesh_tf/cpu_calibration.json keyed by CPU model, core count, TF version, workload and
cgroup period.
"""
from __future__ import annotations

import bisect
import dataclasses
import json
import math
import os
import subprocess
import sys
import time

from absl import logging

from edgemesh_tf.cluster import cgroup, procs, workload

CACHE = os.path.expanduser("~/.cache/edgemesh_tf/cpu_calibration.json")
VERSION = 3  # of the procedure: part of the cache key
# Below ~0.15 cores TF's thread pools stall erratically under throttling: we do not go there.
CALIBRATION_CORES = (0.18, 0.25, 0.35, 0.5, 0.7, 0.9)


@dataclasses.dataclass(frozen=True)
class CpuCalibration:
    """Measured (cores, workload steps per second) points, cores ascending."""

    key: str
    period_us: int
    points: tuple[tuple[float, float], ...]

    def speed(self, cores: float) -> float:
        """Steps/s at `cores` (piecewise linear; proportional below/above the measured range)."""
        xs = [c for c, _ in self.points]
        i = bisect.bisect_left(xs, cores)
        if i == 0:
            return self.points[0][1] * cores / xs[0]
        if i == len(xs):
            return self.points[-1][1] * cores / xs[-1]
        (c0, s0), (c1, s1) = self.points[i - 1], self.points[i]
        return s0 + (s1 - s0) * (cores - c0) / (c1 - c0)

    def cores_for(self, steps_per_s: float) -> float:
        """Inverse of speed() by bisection (speed is made monotone by construction)."""
        lo, hi = 1e-3, 64.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self.speed(mid) < steps_per_s else (lo, mid)
        return hi


def quotas(speeds: dict[str, float], budget_cores: float, calib: CpuCalibration) -> dict[str, float]:
    """Cores per device so that measured speeds are proportional to `speeds` and sum to the budget."""
    top = max(speeds.values())
    lo, hi = 1e-6, 1e6
    for _ in range(100):  # bisection on the fastest device's steps/s
        mid = (lo * hi) ** 0.5
        total = sum(calib.cores_for(mid * s / top) for s in speeds.values())
        lo, hi = (mid, hi) if total < budget_cores else (lo, mid)
    return {name: calib.cores_for(lo * s / top) for name, s in speeds.items()}


def machine_key(version: str, period_us: int) -> str:
    import tensorflow as tf

    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    except OSError:
        pass
    return "|".join([model, str(os.cpu_count()), tf.__version__, workload.WORKLOAD_ID, version, str(period_us),
                     "v%d" % VERSION])


def calibrate(version: str, period_us: int = cgroup.DEFAULT_PERIOD_US, cores=CALIBRATION_CORES,
              steps: int = 6, timeout_s: float = 300.0) -> CpuCalibration:
    """Measures the workload at each quota in `cores` (takes ~40 s)."""
    name = "%scalib-%d" % (cgroup.PREFIX, os.getpid())
    group = cgroup.CpuGroup(name, version).create()
    child = procs.spawn([sys.executable, "-m", "edgemesh_tf.cluster.calibration", "--child"],
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + timeout_s
    try:
        group.set_priority()
        group.add(child.pid)
        _expect(child, "READY", deadline)
        best: dict[float, float] = {}
        for _ in range(2):  # two interleaved passes: a burst of outside load hits one pass only
            for c in sorted(cores):
                group.set_quota(c, period_us)
                child.stdin.write("%d %d\n" % (steps, max(1, math.ceil(c - 0.05))))
                child.stdin.flush()
                times = json.loads(_expect(child, "T ", deadline)[2:])
                # The fastest step: outside load only ever slows a step down.
                best[c] = min(best.get(c, float("inf")), min(times))
        points = [(c, 1.0 / best[c]) for c in sorted(best)]
        for c, s in points:
            logging.info("cpu calibration: %.2f cores -> %.1f ms/step", c, 1e3 / s)
    finally:
        procs.terminate(child, 5.0)
        cgroup.remove(group.path)
    # Enforce monotonicity: measurement noise must not make the inverse ambiguous.
    mono = []
    for c, s in points:
        mono.append((c, max(s, mono[-1][1] * 1.0001 if mono else s)))
    return CpuCalibration(key=machine_key(version, period_us), period_us=period_us, points=tuple(mono))


def _expect(child: subprocess.Popen, prefix: str, deadline: float) -> str:
    while time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            raise RuntimeError("calibration child exited (code %s) before printing %r" % (child.poll(), prefix))
        if line.startswith(prefix):
            return line.strip()
    raise TimeoutError("calibration child did not print %r in time" % prefix)


def load_or_calibrate(version: str, period_us: int = cgroup.DEFAULT_PERIOD_US, cache: str = CACHE) -> CpuCalibration:
    key = machine_key(version, period_us)
    try:
        with open(cache) as f:
            entry = json.load(f).get(key)
        if entry:
            return CpuCalibration(key=key, period_us=period_us, points=tuple(tuple(p) for p in entry))
    except (OSError, ValueError):
        pass
    calib = calibrate(version, period_us)
    try:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        try:
            with open(cache) as f:
                data = json.load(f)
        except (OSError, ValueError):
            data = {}
        data[key] = [list(p) for p in calib.points]
        with open(cache + ".tmp", "w") as f:
            json.dump(data, f, indent=1)
        os.replace(cache + ".tmp", cache)
    except OSError as e:
        logging.warning("cannot cache the cpu calibration in %s: %s", cache, e)
    return calib


def _child() -> None:
    """For each stdin line `steps threads`: runs the workload with `threads` intra-op threads (as
    the emulator configures its servers) and prints the step times as JSON."""
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    op = workload.build(tf)
    sessions = {}
    print("READY", flush=True)
    for line in sys.stdin:
        steps, threads = (int(x) for x in line.split())
        if threads not in sessions:
            config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads)
            sessions[threads] = tf.compat.v1.Session(graph=op.graph, config=config)
        print("T " + json.dumps(workload.time_steps(sessions[threads], op, steps, warmup=2)), flush=True)


if __name__ == "__main__" and sys.argv[1:] == ["--child"]:
    _child()
