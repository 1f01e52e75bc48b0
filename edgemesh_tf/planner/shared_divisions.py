"""Divisions shared between groups whose devices are measured alike.

A group's division (``division.divide``) depends on its devices' measured figures and their ring
order, never on their names: two groups whose i-th devices have the same layer times, memory, link
and medium get the same shares and the same prediction. A large cluster of a few device kinds deals
many such groups, so the planner divides each kind of group once and relabels the result for the
others. Errors are not shared: a PlanError
names the device that does not fit.

``SharedDivisions.many`` divides many groups at once; with a ``DivisionPool`` the groups of kinds not
divided before are divided in worker processes (a division is a pure function of its group, so the
answers are the ones made in turn). The pool forks its processes, which start at once with the
planner's state and do not run the caller's main module again; a process with other threads (or
TensorFlow, whose threads Python does not see) is not forked: ``fork_safe`` says so, and the
planner then divides in turn.
"""
from __future__ import annotations

import concurrent.futures
import concurrent.futures.process
import dataclasses
import logging
import multiprocessing
import sys
import threading
from typing import Callable, Sequence

from edgemesh_tf.planner.division import Division, PlanError
from edgemesh_tf.profiling.types import DeviceProfile


def measured_alike(device: DeviceProfile) -> DeviceProfile:
    """``device`` without its name and TF device string: what its division depends on."""
    return dataclasses.replace(device, name="", device="")


def relabelled(division: Division, source: Sequence[DeviceProfile], target: Sequence[DeviceProfile]) -> Division:
    """``division`` of the devices ``source`` (ring order) as the division of ``target``, the devices
    measured alike in the same order: every name and TF device string mapped by position."""
    names = {s.name: t.name for s, t in zip(source, target)}
    devices = {s.device: t.device for s, t in zip(source, target)}
    prediction = dataclasses.replace(division.prediction, devices=tuple(names[n] for n in division.prediction.devices))
    return dataclasses.replace(division, names=tuple(names[n] for n in division.names),
                               devices=tuple(devices[d] for d in division.devices),
                               idle=tuple(names[n] for n in division.idle), prediction=prediction)


_WORKER_DIVIDE: Callable[..., Division] | None = None  # a pool worker's divide, set once when it starts
DIVIDE_TIMEOUT_S = 600.0  # a batch of groups divided in the pool; past it the planner divides them in turn
CLOSE_WAIT_S = 5.0  # a worker's time to stop when the pool closes, before it is terminated


def _start_worker(divide: Callable[..., Division]) -> None:
    global _WORKER_DIVIDE
    _WORKER_DIVIDE = divide


def _divide_in_worker(group: Sequence[DeviceProfile], options: dict) -> Division | PlanError:
    try:
        return _WORKER_DIVIDE(group, **options)
    except PlanError as e:
        return e


def fork_safe() -> bool:
    """Whether this process may fork workers: it runs one thread and has not imported TensorFlow."""
    return threading.active_count() == 1 and "tensorflow" not in sys.modules


class PoolFailed(RuntimeError):
    """The pool's processes did not divide a batch of groups: one died, or the batch outlasted its bound."""


class DivisionPool:
    """``workers`` processes that divide groups with ``divide`` (picklable: a module-level function or a
    functools.partial of one). A context manager: leaving it ends the processes. ``timeout_s`` bounds
    each ``map``."""

    def __init__(self, divide: Callable[..., Division], workers: int, timeout_s: float = DIVIDE_TIMEOUT_S):
        self._executor = concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("fork"), initializer=_start_worker,
            initargs=(divide,))
        self.workers, self.timeout_s = workers, timeout_s

    def map(self, groups: Sequence[Sequence[DeviceProfile]], options: dict) -> list[Division | PlanError]:
        """Each group's division, or its PlanError, in order; PoolFailed (the processes ended) when a
        process died or the batch took over ``timeout_s``."""
        chunk = max(1, len(groups) // (4 * self.workers))
        try:
            return list(self._executor.map(_divide_in_worker, groups, [options] * len(groups), chunksize=chunk,
                                           timeout=self.timeout_s))
        except (concurrent.futures.process.BrokenProcessPool, concurrent.futures.TimeoutError) as e:
            self.close()
            raise PoolFailed("dividing %d groups in %d worker processes: %s" % (
                len(groups), self.workers, "over %.0f s" % self.timeout_s
                if isinstance(e, concurrent.futures.TimeoutError) else "a worker process died (%s)" % e)) from e

    def close(self) -> None:
        """Ends the processes: each is asked to stop and given CLOSE_WAIT_S; one still working after
        that (a batch past its bound) is terminated, by its process id."""
        processes = list((getattr(self._executor, "_processes", None) or {}).values())
        self._executor.shutdown(wait=False, cancel_futures=True)
        for p in processes:
            p.join(timeout=CLOSE_WAIT_S)
            if p.is_alive():
                p.terminate()
                p.join(timeout=CLOSE_WAIT_S)

    def __enter__(self) -> DivisionPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SharedDivisions:
    """``divide(group, **options)`` by the group's measured figures: a group measured alike to one
    divided before with the same options gets that division, relabelled. ``pool``: where ``many``
    divides (None: in this process, in turn)."""

    def __init__(self, divide: Callable[..., Division], pool: DivisionPool | None = None):
        self._divide, self._pool = divide, pool
        self._done: dict[tuple, tuple[Sequence[DeviceProfile], Division]] = {}
        self._alike: dict[DeviceProfile, DeviceProfile] = {}  # each device's measured_alike
        self.divided = self.shared = 0  # how many groups were divided, and how many reused a division

    def _key(self, group: Sequence[DeviceProfile], options: dict) -> tuple:
        alike = tuple(self._alike.get(d) or self._alike.setdefault(d, measured_alike(d)) for d in group)
        return alike, tuple(sorted(options.items()))

    def __call__(self, group: Sequence[DeviceProfile], **options) -> Division:
        key = self._key(group, options)
        hit = self._done.get(key)
        if hit is not None:
            self.shared += 1
            return relabelled(hit[1], hit[0], group)
        division = self._divide(group, **options)  # a PlanError is raised, not kept
        self.divided += 1
        self._done[key] = (tuple(group), division)
        return division

    def many(self, groups: Sequence[Sequence[DeviceProfile]], **options) -> list[Division | PlanError]:
        """``self(group, **options)`` of each of ``groups`` in turn, a PlanError in place of raising it.
        With a pool, the first group of each kind not divided before is divided there, all at once, and
        then each group of a kind whose first did not fit (errors are not shared)."""
        if self._pool is None:
            return [self._try(g, options) for g in groups]
        keys = [self._key(g, options) for g in groups]
        first: dict[tuple, Sequence[DeviceProfile]] = {}
        for key, g in zip(keys, groups):
            if key not in self._done:
                first.setdefault(key, g)
        found = dict(zip(first, self._map(list(first.values()), options)))
        self.divided += len(found)
        for key, division in found.items():
            if not isinstance(division, PlanError):
                self._done[key] = (tuple(first[key]), division)
        errors = {i: found[key] for i, key in enumerate(keys) if first.get(key) is groups[i]
                  and isinstance(found[key], PlanError)}
        again = [i for i, key in enumerate(keys) if key not in self._done and i not in errors]
        errors.update(zip(again, self._map([groups[i] for i in again], options)))
        self.divided += len(again)
        out: list[Division | PlanError] = []
        for i, (key, g) in enumerate(zip(keys, groups)):
            if i in errors:
                out.append(errors[i])
                continue
            source, division = self._done[key]
            if source != tuple(g):
                self.shared += 1
                division = relabelled(division, source, g)
            out.append(division)
        return out

    def _map(self, groups: Sequence[Sequence[DeviceProfile]], options: dict) -> list[Division | PlanError]:
        """The pool's divisions of ``groups`` (PlanErrors in place); where the pool fails, a warning, and
        they and every later group are divided in this process (the same answers)."""
        if self._pool is not None:
            try:
                return self._pool.map(groups, options)
            except PoolFailed as e:
                logging.getLogger(__name__).warning("planner: %s; dividing in this process instead", e)
                self._pool = None
        out = []
        for g in groups:
            try:
                out.append(self._divide(g, **options))
            except PlanError as e:
                out.append(e)
        return out

    def _try(self, group: Sequence[DeviceProfile], options: dict) -> Division | PlanError:
        try:
            return self(group, **options)
        except PlanError as e:
            return e
