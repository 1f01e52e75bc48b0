"""Device profiles kept between runs, so that a rerun of a job skips the profiling it already did.

    key = profile_key(cluster, spec, batch, emulate=True)
    profile = load_cached(cache_dir, key)            # None: not cached, stale, or unreadable
    ...                                              # else profile the devices, then
    store(cache_dir, key, profile, describe(cluster, spec, batch, emulate=True))

An entry is one JSON file ``<cache_dir>/<key>.json``: the profile (``Profile.to_json``'s fields)
and a description of what it was measured for. The key is a digest of everything a profile
depends on: each worker's definition in the cluster file (name, address, role, speed or CPU quota,
memory, link rate and latency, shared medium, SIMD width), the chief's and the ps's addresses, the
model's layers, the batch, whether the testbed is emulated, and the profiler's own source code (a
changed profiler measures anew). Any change to one of them is a different key, so a different
device, model or batch is profiled afresh. An entry older than ``max_age_s`` is stale (a device
may have changed in ways the file does not say). The first job that trains on a fresh profile
records each group's measured iteration time in the entry (``record_iterations``); a later job that
reuses the profile compares its own against them (``off_profile``, the same measurement on both
sides) and ``drop``s the entry when a group is off: its devices have changed.

Pure except for the file reads and writes; no TensorFlow.
"""
from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import time

from edgemesh_tf.cluster.spec import ClusterFile
from edgemesh_tf.layers import ModelSpec
from edgemesh_tf.profiling.types import Profile, profile_from_dict

DEFAULT_CACHE_DIR = os.path.join("~", ".cache", "edgemesh_tf", "profiles")
"""Where `edgemesh run` keeps profiles unless told otherwise (``default_cache_dir``)."""
MAX_AGE_S = 7 * 24 * 3600.0
"""An entry older than this (s) is re-measured: a week covers a working session's reruns."""
_PROFILER_DIR = os.path.dirname(os.path.abspath(__file__))


def default_cache_dir() -> str:
    """$EDGEMESH_PROFILE_CACHE when set (the tests point it at a directory of their own), else
    ``$XDG_CACHE_HOME/edgemesh_tf/profiles`` when XDG_CACHE_HOME is set, else ``~/.cache/edgemesh_tf/profiles``."""
    if os.environ.get("EDGEMESH_PROFILE_CACHE"):
        return os.path.expanduser(os.environ["EDGEMESH_PROFILE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME")
    return os.path.join(base, "edgemesh_tf", "profiles") if base else os.path.expanduser(DEFAULT_CACHE_DIR)


def _model_data(spec: ModelSpec) -> dict:
    """The model's layers as JSON-ready data; a Python function in a layer's settings (``mtf_op``)
    stands as its module and qualified name."""
    def plain(v):
        if callable(v):
            return "%s.%s" % (getattr(v, "__module__", "?"), getattr(v, "__qualname__", repr(v)))
        if isinstance(v, (tuple, list)):
            return [plain(x) for x in v]
        return v
    return {"image_shape": list(spec.image_shape), "num_classes": spec.num_classes,
            "layers": [{"kind": x.kind, "name": x.name, "inputs": list(x.inputs),
                        "config": {k: plain(v) for k, v in x.config}} for x in spec.layers]}


def _profiler_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(_PROFILER_DIR, "*.py"))):
        if os.path.basename(path) != "cache.py":
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()[:16]


def describe(cluster: ClusterFile, spec: ModelSpec, batch: int, emulate: bool) -> dict:
    """What a profile is measured for, as plain data (the key's input; stored beside the profile)."""
    devices = [{k: v for k, v in dataclasses.asdict(d).items()} for d in cluster.devices]
    return {"cluster": cluster.path, "devices": devices, "media": [list(m) for m in cluster.media],
            "cpu_budget_cores": cluster.cpu_budget_cores if emulate else None, "model": spec.name,
            "layers": _model_data(spec), "batch": batch, "emulated": emulate, "profiler": _profiler_digest()}


def key_of(description: dict) -> str:
    """The cache key (hex, 24 characters) of a ``describe`` result; the cluster file's path and the
    model's name are left out (the same devices and layers under another name are the same profile)."""
    data = {k: v for k, v in description.items() if k not in ("cluster", "model")}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:24]


def profile_key(cluster: ClusterFile, spec: ModelSpec, batch: int, emulate: bool) -> str:
    return key_of(describe(cluster, spec, batch, emulate))


def entry_path(cache_dir: str, key: str) -> str:
    return os.path.join(os.path.expanduser(cache_dir), key + ".json")


@dataclasses.dataclass(frozen=True)
class Cached:
    """A profile read from the cache: its file, when it was measured (s since the epoch) and
    {group: ms} of each group's iteration in the first job that trained on it (empty until recorded)."""

    profile: Profile
    path: str
    measured_at: float
    iteration_ms: dict = dataclasses.field(default_factory=dict)

    def age_s(self, now: float) -> float:
        return max(0.0, now - self.measured_at)


def load_cached(cache_dir: str, key: str, max_age_s: float = MAX_AGE_S, now: float | None = None) -> Cached | None:
    """The entry ``key`` of ``cache_dir``, or None when there is none, it is older than ``max_age_s``
    or it cannot be read (a damaged entry is re-measured, not an error)."""
    path = entry_path(cache_dir, key)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        cached = Cached(profile_from_dict(data["profile"], path), path, float(data["measured_at"]),
                        {str(g): float(ms) for g, ms in data.get("iteration_ms", {}).items()})
    except (OSError, ValueError, KeyError, TypeError):
        return None
    now = time.time() if now is None else now
    return cached if cached.age_s(now) <= max_age_s else None


def store(cache_dir: str, key: str, profile: Profile, description: dict, now: float | None = None) -> str:
    """Writes ``profile`` as entry ``key`` (atomically); returns its path."""
    path = entry_path(cache_dir, key)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = {"measured_at": time.time() if now is None else now, "for": description,
            "profile": json.loads(profile.to_json())}
    _write(path, data)
    return path


def record_iterations(path: str, iteration_ms: dict[str, float]) -> bool:
    """Adds {group: measured ms per iteration} to the entry at ``path`` as the reference a later job
    on the same profile is checked against; False when the entry is gone or unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return False
    data["iteration_ms"] = {g: float(ms) for g, ms in iteration_ms.items() if ms}
    _write(path, data)
    return True


def _write(path: str, data: dict) -> None:
    """Atomically: a reader never sees half a file."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, default=str)
    os.replace(tmp, path)


def drop(path: str) -> bool:
    """Removes a cache entry (a run found its profile wrong); False when it was already gone."""
    try:
        os.remove(path)
        return True
    except FileNotFoundError:
        return False


DRIFT_TOLERANCE = 0.5
"""A group whose measured iteration time is more than this fraction off the one measured when its
profile was fresh (1.5x slower or faster) says the profile no longer describes its devices."""


def off_profile(reference_ms: dict[str, float], measured_ms: dict[str, float],
                tolerance: float = DRIFT_TOLERANCE) -> dict[str, tuple[float, float]]:
    """{group: (reference ms, measured ms)} of the groups whose measured iteration time (ms) is off the
    reference by more than ``tolerance`` either way (ratio above 1 + tolerance or under
    1 / (1 + tolerance)); groups without both figures (0 or missing) are left out."""
    out = {}
    for group, reference in reference_ms.items():
        measured = measured_ms.get(group) or 0.0
        if reference > 0 and measured > 0 and not 1 / (1 + tolerance) <= measured / reference <= 1 + tolerance:
            out[group] = (reference, measured)
    return out
