"""Near ties between plans: the candidates the cost model cannot tell apart, and how each reads once
its groups' steps are timed on the cluster (pure: no TensorFlow).

The cost model's step predictions err by up to about ``tolerance`` (bench/planner.py), and the plan is the candidate
whose prediction is best, so its error leans optimistic. Plans whose predicted examples/s are within
``tolerance`` of the best are therefore timed before training (the main job times each group's step
on the cluster) and priced again by the same objective with each group's predicted step replaced by
the timed one; the best of those is kept. Everything else of the prediction (commits, waits, the
staleness charge) stays the cost model's.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Sequence

from edgemesh_tf.planner.cost import GroupPrediction
from edgemesh_tf.planner.grid import Plan

DEFAULT_TOLERANCE = 0.10
"""Plans predicted within this fraction of the best are timed (the planner's step error, bench/planner.py)."""


def near_ties(rates: Mapping[int, float], tolerance: float) -> list[int]:
    """The keys of ``rates`` (examples/s of each candidate, e.g. by number of groups) predicted within
    ``tolerance`` (a fraction, >= 0) of the best, best first; [] when there is none."""
    if tolerance < 0:
        raise ValueError("tolerance must be a fraction >= 0, got %r" % (tolerance,))
    if not rates:
        return []
    best = max(rates.values())
    return sorted((k for k, r in rates.items() if r >= best * (1 - tolerance)), key=lambda k: (-rates[k], k))


def timed_rate(plan: Plan, step_ms: Sequence[float],
               objective: Callable[[Sequence[GroupPrediction], int], float]) -> float:
    """``plan``'s examples/s by ``objective`` (the planner's) with group i's predicted step replaced
    by ``step_ms[i]`` (ms, timed on the cluster)."""
    if len(step_ms) != len(plan.groups):
        raise ValueError("%d timed steps for a plan of %d groups" % (len(step_ms), len(plan.groups)))
    preds = [dataclasses.replace(g.prediction, step_ms=float(s)) for g, s in zip(plan.groups, step_ms)]
    return objective(preds, plan.groups[0].batch)


def settle(plans: Mapping[int, Plan], timed: Mapping[int, Sequence[float]],
           objective: Callable[[Sequence[GroupPrediction], int], float]) -> tuple[int, dict]:
    """The number of groups of the plan to keep among near ties (``plans``, keyed by their number of
    groups) and the record of the choice: {"candidates": [{"groups", "devices" (each group's),
    "predicted", "timed" (examples/s), "step_ms": [[predicted, timed] per group]}], "kept"}.
    ``timed[k]``: the timed step of each of ``plans[k]``'s groups (ms). Ties in the timed rate keep the
    better prediction."""
    rows = [{"groups": k, "devices": [list(g.names) for g in p.groups], "predicted": round(p.examples_per_sec, 1),
             "timed": round(timed_rate(p, timed[k], objective), 1),
             "step_ms": [[round(g.prediction.step_ms, 1), round(float(s), 1)] for g, s in zip(p.groups, timed[k])]}
            for k, p in plans.items()]
    kept = max(rows, key=lambda r: (r["timed"], r["predicted"]))["groups"]
    return kept, {"candidates": rows, "kept": kept}
