"""Shared media (one Wi-Fi channel) in the cost model (pure).

Devices whose profiles name the same ``medium`` share its rate (``DeviceProfile.medium_mbit``, from
the cluster file's `media`): every byte of a transfer with an end on the medium takes its airtime,
twice when both ends are on it (up to the access point, down to the other device, as the testbed
emulates it: ``cluster/netns.py``). A collective over the group then takes at least the medium's
bytes over its rate, whatever each device's own link allows.

In a direct exchange (a gather, or a reduce-scatter) device i's part p_i goes to (or comes from)
each of the k-1 others; on a medium with m of the k devices it crosses the medium
(k-1) * [i on it] + (m - [i on it]) times: 2(k-1) times when all are on it. That is linear in the
parts, so a medium is held as per-device weights: ms if the device's part were the whole tensor.
"""
from __future__ import annotations

from typing import Sequence

from edgemesh_tf.profiling.types import DeviceProfile

Weights = tuple[tuple[float, ...], ...]
"""Per medium of a group, per device (group order): ms the medium needs per whole tensor of the
device's part; () when no device is on a medium."""


def _ms(nbytes: float, mbit: float) -> float:
    return 8.0 * nbytes / (mbit * 1e3)


def media(group: Sequence[DeviceProfile]) -> list[tuple[float, tuple[bool, ...]]]:
    """(rate Mbit/s, which devices are on it) per shared medium of ``group``, in name order."""
    if not any(d.medium for d in group):  # the common case, on the planner's hot path
        return []
    names = sorted({d.medium for d in group if d.medium})
    return [(next(d.medium_mbit for d in group if d.medium == n), tuple(d.medium == n for d in group))
            for n in names]


def exchange_weights(group: Sequence[DeviceProfile], nbytes: float) -> Weights:
    """Weights of a direct exchange of a tensor of ``nbytes`` (see the module docstring)."""
    k, out = len(group), []
    if k < 2:
        return ()
    for rate, on in media(group):
        m = sum(on)
        out.append(tuple(_ms(nbytes * ((k - 1) * x + m - x), rate) for x in on))
    return tuple(out)


def exchange_ms(weights: Weights, shares: Sequence[int] | None, units: int) -> float:
    """ms the busiest medium needs for an exchange with parts ``shares`` of ``units`` (None: even)."""
    if not weights:
        return 0.0
    parts = [1.0 / len(weights[0])] * len(weights[0]) if shares is None else [s / units for s in shares]
    return max(sum(w * p for w, p in zip(ws, parts)) for ws in weights)


def ring_ms(group: Sequence[DeviceProfile], nbytes: float) -> float:
    """ms the busiest medium needs for mtf's ring allreduce of ``nbytes``: each device sends
    2(k-1)/k of it to the next device of the ring."""
    k = len(group)
    if k < 2:
        return 0.0
    sent = 2 * (k - 1) / k * nbytes
    return max((_ms(sent * sum(on[i] + on[(i + 1) % k] for i in range(k)), rate) for rate, on in media(group)),
               default=0.0)


def each_once_ms(group: Sequence[DeviceProfile], nbytes: Sequence[float]) -> float:
    """ms the busiest medium needs when device i moves ``nbytes[i]`` to or from a wired host (its
    input batch, its part of the model to the parameter server): once across."""
    return max((_ms(sum(b for b, x in zip(nbytes, on) if x), rate) for rate, on in media(group)), default=0.0)
