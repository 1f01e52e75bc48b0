"""Checkpoints of whole tensors and a state: `ckpt-<n>.npz` + `ckpt-<n>.json`; the one format of
the hybrid chief (the global model and the strategy state) and of single-process training
(`training/loop.py`: weights and momentum buffers, the global step).

The weights are whole tensors by name (float32), so a checkpoint restores under any layout; the
JSON holds the caller's state (the chief's: phase, controls, counters, elapsed time). Both files are written to
a temporary name and renamed, the JSON last, so a chief killed mid-write leaves the previous
checkpoint as the latest. The newest `keep` checkpoints are kept.
"""
from __future__ import annotations

import glob
import json
import os
import re
from typing import Mapping, Sequence

import numpy as np

_NAME = re.compile(r"ckpt-(\d+)\.json$")
FINAL_MODEL = "final_model"
"""The hybrid chief's ``<logdir>/final_model/``: the global model its final evaluation measured (the
checkpoints under ``checkpoints/`` also hold the rounds still in flight at the stop)."""


def _numbered(directory: str) -> list[tuple[int, str]]:
    out = []
    for path in glob.glob(os.path.join(directory, "ckpt-*.json")):
        m = _NAME.search(path)
        if m and os.path.exists(path[:-5] + ".npz"):
            out.append((int(m.group(1)), path[:-5]))
    return sorted(out)


def save(directory: str, weights: Mapping[str, np.ndarray], state: Mapping, keep: int = 3) -> str:
    """Writes checkpoint number (latest + 1); returns its path prefix (without extension)."""
    os.makedirs(directory, exist_ok=True)
    existing = _numbered(directory)
    n = existing[-1][0] + 1 if existing else 1
    prefix = os.path.join(directory, "ckpt-%d" % n)
    # npz keys cannot hold "/": store names in a parallel list
    names = sorted(weights)
    with open(prefix + ".npz.tmp", "wb") as f:
        np.savez(f, **{"t%d" % i: np.asarray(weights[k], np.float32) for i, k in enumerate(names)})
    os.replace(prefix + ".npz.tmp", prefix + ".npz")
    with open(prefix + ".json.tmp", "w") as f:
        json.dump({"tensors": names, "state": dict(state)}, f, indent=1)
    os.replace(prefix + ".json.tmp", prefix + ".json")
    for _, old in existing[:max(0, len(existing) + 1 - keep)]:
        for ext in (".json", ".npz"):
            if os.path.exists(old + ext):
                os.remove(old + ext)
    return prefix


def latest(directory: str) -> str | None:
    """Path prefix of the newest complete checkpoint in `directory`, or None."""
    found = _numbered(directory) if os.path.isdir(directory) else []
    return found[-1][1] if found else None


def load(prefix: str) -> tuple[dict[str, np.ndarray], dict]:
    """(weights by name, state) of the checkpoint at `prefix`. Errors name the file."""
    try:
        with open(prefix + ".json") as f:
            meta = json.load(f)
        with np.load(prefix + ".npz") as z:
            weights = {name: z["t%d" % i] for i, name in enumerate(meta["tensors"])}
    except (OSError, ValueError, KeyError) as e:
        raise ValueError("checkpoint %s is unreadable: %s" % (prefix, e)) from None
    return weights, meta["state"]


def tensor_problems(weights: Mapping[str, np.ndarray], shapes: Mapping[str, Sequence[int]]) -> list[str]:
    """Each tensor of `shapes` (name -> the job's shape) that `weights` (a checkpoint's) lacks or holds
    in another shape, as "tensor NAME should have shape [..], found [..]" ("found none" when absent),
    in name order; empty when every tensor restores."""
    found = {n: list(weights[n].shape) if n in weights else "none" for n in sorted(shapes)}
    return ["tensor %s should have shape %s, found %s" % (n, list(shapes[n]), found[n]) for n in sorted(shapes)
            if found[n] != list(shapes[n])]


def mismatch(prefix: str, weights: Mapping[str, np.ndarray], state: Mapping, groups: Sequence[str],
             shapes: Mapping[str, Sequence[int]]) -> str | None:
    """Why the checkpoint at `prefix` (its `weights` and the chief's `state`) is not one of this job,
    whose groups are `groups` and whose tensors have `shapes` (name -> shape), or None when it is:
    a resume restores every tensor by name and each group's strategy state by group name, so a
    checkpoint of another model or another plan (a new --cluster, a new grid) cannot be resumed."""
    problems = []
    theirs = sorted(state.get("controls", {}))
    if theirs and theirs != sorted(groups):
        problems.append("its groups are %s, this job's %s" % (theirs, sorted(groups)))
    tensors = tensor_problems(weights, shapes)
    problems += tensors[:3] + (["%d more tensors" % (len(tensors) - 3)] if len(tensors) > 3 else [])
    if not problems:
        return None
    return ("the checkpoint %s is of another job (%s): resuming restores each tensor and group by name. Give "
            "a new --logdir to start afresh, or remove %s" % (prefix, "; ".join(problems), os.path.dirname(prefix)))
