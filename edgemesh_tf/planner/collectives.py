"""Critical-path latency of the collectives of the uneven lowering on a group.

A transfer from device a to device b waits lat_a + lat_b (both links, one way each); TF's
receiver-initiated transfers are requested at step start, so only the path latency remains once
the tensor is ready. Gathers and reduce-scatters are direct (``UnevenMeshImpl``): one hop. A full
allreduce (the gradient of a layer whose predecessor is replicated) is mtf's ring, in group order.
"""
from __future__ import annotations

from typing import Sequence


def _hop(lat: Sequence[float], a: int, b: int) -> float:
    return lat[a % len(lat)] + lat[b % len(lat)]


def direct_latency_ms(lat: Sequence[float]) -> float:
    """A direct gather or reduce-scatter: every part one hop; the slowest pair of links."""
    if len(lat) < 2:
        return 0.0
    top = sorted(lat, reverse=True)
    return top[0] + top[1]


def allconcat_latency_ms(lat: Sequence[float]) -> float:
    """mtf's ``allconcat_ring``: a part travels up to n//2 hops, relayed by each device on the way
    (source -> source-1 -> ... -> target, and the mirror image); the slowest path."""
    n = len(lat)
    worst = 0.0
    for target in range(n):
        for dist in range(1, n // 2 + 1):
            left = sum(_hop(lat, target + j + 1, target + j) for j in range(dist))
            right = sum(_hop(lat, target - j - 1, target - j) for j in range(dist))
            worst = max(worst, left, right)
    return worst


def _single_shard_latency(lat: Sequence[float]) -> float:
    """``allreduce_ring_single_shard``: reduce chains from both ends to the centre, combine, then
    broadcast outwards; the longest path through that DAG."""
    n = len(lat)
    if n == 1:
        return 0.0
    lc = n // 2 - 1 if n % 2 == 0 else n // 2
    rc = lc + 1 if n % 2 == 0 else lc
    left = sum(_hop(lat, i - 1, i) for i in range(1, lc + 1))          # xs[0] .. xs[lc] on device lc
    right = sum(_hop(lat, i + 1, i) for i in range(rc, n - 1))         # xs[n-1] .. xs[rc] on device rc
    at_lc = max(left, right + (_hop(lat, rc, lc) if rc != lc else 0.0))
    at_rc = max(right, left + _hop(lat, lc, rc)) if rc != lc else at_lc
    out_left = at_lc + sum(_hop(lat, i + 1, i) for i in range(lc))       # broadcast to 0..lc-1
    out_right = at_rc + sum(_hop(lat, i - 1, i) for i in range(rc + 1, n))
    return max(at_lc, at_rc, out_left, out_right)


def allreduce_latency_ms(lat: Sequence[float], elements: int) -> float:
    """mtf's ``allreduce_ring``: n shards on rotated rings when the tensor has >= 1024 elements
    divisible by n (they run in parallel: the slowest rotation), else one shard.

    Every path of ``_single_shard_latency`` is a run of adjacent hops, so each rotation is read off
    prefix sums of the hops around the ring: O(n) for all n rotations (not O(n^2))."""
    n = len(lat)
    if elements < 1024 or elements % n:
        return _single_shard_latency(lat)
    if n == 1:
        return 0.0
    prefix = [0.0]
    for j in range(2 * n):  # hop j: device j -> j + 1 around the ring, twice round
        prefix.append(prefix[-1] + lat[j % n] + lat[(j + 1) % n])
    lc = n // 2 - 1 if n % 2 == 0 else n // 2
    rc = lc + 1 if n % 2 == 0 else lc
    worst = 0.0
    for s in range(n):
        run = lambda a, b: prefix[s + b] - prefix[s + a]  # hops a .. b-1 of the ring rotated by s
        left, right = run(0, lc), run(rc, n - 1)
        if rc != lc:
            middle = run(lc, lc + 1)
            at_lc, at_rc = max(left, right + middle), max(right, left + middle)
        else:
            at_lc = at_rc = max(left, right)
        worst = max(worst, at_lc, at_rc, at_lc + left, at_rc + right)
    return worst
