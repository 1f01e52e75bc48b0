"""Divisions shared between groups whose devices are measured alike.

A group's division (``division.divide``) depends on its devices' measured figures and their ring
order, never on their names: two groups whose i-th devices have the same layer times, memory, link
and medium get the same shares and the same prediction. A large cluster of a few device kinds deals
many such groups, so the planner divides each kind of group once and relabels the result for the
others. Errors are not shared: a PlanError
names the device that does not fit.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from edgemesh_tf.planner.division import Division
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


class SharedDivisions:
    """``divide(group, **options)`` by the group's measured figures: a group measured alike to one
    divided before with the same options gets that division, relabelled."""

    def __init__(self, divide: Callable[..., Division]):
        self._divide = divide
        self._done: dict[tuple, tuple[Sequence[DeviceProfile], Division]] = {}
        self._alike: dict[DeviceProfile, DeviceProfile] = {}  # each device's measured_alike
        self.divided = self.shared = 0  # how many groups were divided, and how many reused a division

    def __call__(self, group: Sequence[DeviceProfile], **options) -> Division:
        alike = tuple(self._alike.get(d) or self._alike.setdefault(d, measured_alike(d)) for d in group)
        key = (alike, tuple(sorted(options.items())))
        hit = self._done.get(key)
        if hit is not None:
            self.shared += 1
            return relabelled(hit[1], hit[0], group)
        division = self._divide(group, **options)  # a PlanError is raised, not kept
        self.divided += 1
        self._done[key] = (tuple(group), division)
        return division
