"""Measure a layout for real: median training-step time and each server's peak memory.

This is how the cost model is checked against measurement (bench/planner.py).
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Callable, Mapping, Sequence

import numpy as np

from edgemesh_tf.mesh.compat import tf
from edgemesh_tf.mesh.layout import Layout
from edgemesh_tf.layers import ModelSpec
from edgemesh_tf.cluster.procs import read_vm_kb
from edgemesh_tf.training.graph import build_train_graph
from edgemesh_tf.training.loop import restore_or_init


@dataclasses.dataclass(frozen=True)
class StepMeasurement:
    """step_ms: every timed step (ms); peak_bytes: {device name: VmHWM above its RSS before the run}."""

    step_ms: tuple[float, ...]
    peak_bytes: Mapping[str, int]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.step_ms)


def reset_peak(pid: int) -> None:
    """Resets a process's VmHWM to its current RSS (Linux: "5" > /proc/PID/clear_refs)."""
    try:
        with open("/proc/%d/clear_refs" % pid, "w") as f:
            f.write("5")
    except OSError:
        pass


def random_feed(graph, spec: ModelSpec, batch: int, seed: int = 0) -> dict:
    """A fixed batch of random images and labels for ``graph``'s (a TrainGraph's) placeholders: a
    step's time does not depend on the values."""
    rng = np.random.RandomState(seed)
    return {graph.images: rng.rand(batch, *spec.image_shape).astype(np.float32),
            graph.labels: rng.randint(0, spec.num_classes, batch).astype(np.int32)}


class LayoutRunner:
    """A built training step of ``layout`` on a cluster, ready to time; close() frees the session."""

    def __init__(self, spec: ModelSpec, layout: Layout, batch: int, session_target: str, master_device: str,
                 seed: int = 0, container: str = ""):
        self.graph = build_train_graph(spec, layout, batch, learning_rate=0.01, seed=seed,
                                       master_device=master_device, container=container)
        self.sess = tf.Session(session_target, graph=self.graph.graph)
        restore_or_init(self.sess, self.graph, checkpoint_dir=None)
        self.feed = random_feed(self.graph, spec, batch, seed)

    def step_ms(self) -> float:
        t0 = time.perf_counter()
        self.sess.run(self.graph.train_op, self.feed)
        return (time.perf_counter() - t0) * 1e3

    def close(self) -> None:
        self.sess.close()


class PeakWatch:
    """Each process's peak resident memory from now on, above its RSS now (bytes): peaks() after
    the work. pids: {name: pid}."""

    def __init__(self, pids: Mapping[str, int]):
        self.pids, self.before = dict(pids), {}
        for name, pid in self.pids.items():
            reset_peak(pid)
            self.before[name] = read_vm_kb(pid, "VmRSS")

    def peaks(self) -> dict[str, int]:
        return {n: max(0, read_vm_kb(pid, "VmHWM") - self.before[n]) * 1024 for n, pid in self.pids.items()}


def measure_side_by_side(runners: Mapping[str, LayoutRunner], steps: int | Mapping[str, int], round_steps: int = 3,
                         warmup: int = 3) -> dict[str, list[float]]:
    """Interleaves rounds of ``round_steps`` steps per runner until each has ``steps`` timings (or
    ``steps[name]``, a count per runner), so that a shared machine's noise hits every configuration
    alike. A runner is anything with step_ms()."""
    need = steps if isinstance(steps, Mapping) else {k: steps for k in runners}
    return step_in_turn(runners, lambda name, times: len(times) < need[name], round_steps, warmup)


def step_in_turn(runners: Mapping[str, LayoutRunner], more: Callable[[str, list[float]], bool], round_steps: int = 1,
                 warmup: int = 0, uncounted: int = 0,
                 set_up_done: Callable[[], None] = lambda: None) -> dict[str, list[float]]:
    """Each runner's step times (ms): ``warmup`` steps of each first, then turns in which every runner
    that ``more(name, its times so far)`` runs ``uncounted`` steps, then ``round_steps`` timed ones,
    until none wants more. (A device idle during another runner's steps keeps CFS quota it did not
    use, and its next step runs partly on it: ``uncounted`` drops that step.) ``set_up_done()`` is
    called once every runner has run its first warm-up step (the graph's one-off set-up on the
    device), before the other warm-up steps and any timed one."""
    for r in runners.values():
        if warmup:
            r.step_ms()
    set_up_done()
    for r in runners.values():
        for _ in range(warmup - 1):
            r.step_ms()
    times: dict[str, list[float]] = {k: [] for k in runners}
    while any(more(k, times[k]) for k in runners):
        for name, r in runners.items():
            if more(name, times[name]):
                for _ in range(uncounted):
                    r.step_ms()
                times[name] += [r.step_ms() for _ in range(round_steps)]
    return times


def measure_memory(spec: ModelSpec, layout: Layout, batch: int, session_target: str, master_device: str,
                   pids: Mapping[str, int], devices: Sequence[str], steps: int = 5) -> StepMeasurement:
    """Peak memory of each server in ``devices`` (names into ``pids``) while training ``layout``."""
    tf.Session.reset(session_target)
    watch = PeakWatch({n: pids[n] for n in devices})
    runner = LayoutRunner(spec, layout, batch, session_target, master_device)
    try:
        times = [runner.step_ms() for _ in range(steps)]
    finally:
        runner.close()
    peak = watch.peaks()
    tf.Session.reset(session_target)
    return StepMeasurement(tuple(times), peak)
