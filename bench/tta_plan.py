"""What bench/time_to_accuracy.py runs and how long that takes: the strategies and ASHL variants
(SyncConfig options), the defaults, the interleaved schedule of (name, seed) runs, and the time
model behind --estimate and the --max_minutes cap."""
import math
import statistics
import time

from edgemesh_tf.engine import STRATEGIES as STRATEGY_NAMES
from edgemesh_tf.engine import SyncConfig

CONSECUTIVE = 3  # "reached" = at or above target for this many evaluations in a row (issue 16)

# SyncConfig(**options) of each strategy (as published: the SyncConfig defaults of its --sync) and variant
STRATEGIES = {name: {"strategy": name} for name in STRATEGY_NAMES}
VARIANTS = {
    "ashl_project": {"strategy": "ashl", "compression": "budget", "compress_in_ahl": True, "phase_shares": True,
                     "replan": True, "error_feedback": True, "staleness_rule": "project", "lr_schedule": "constant"},
    # above: the project's ASHL, every own rule at once; below: each alone (the last two not run by default)
    **{"ashl+" + rule: {"strategy": "ashl", rule: True}
       for rule in ("error_feedback", "replan", "compress_in_ahl", "phase_shares")},
    "ashl+budget_compression": {"strategy": "ashl", "compression": "budget"},
    "ashl+project_staleness": {"strategy": "ashl", "staleness_rule": "project"},
    "ashl+constant_lr": {"strategy": "ashl", "lr_schedule": "constant"},
    # ADSP with its own paper's constant rate instead of the optimizer it shares with ASHL by default
    "adsp+constant_lr": {"strategy": "adsp", "lr_schedule": "constant"},
}
DEFAULT_VARIANTS = tuple(v for v in VARIANTS if v not in ("ashl+project_staleness", "ashl+constant_lr"))
CONFIGS = {**STRATEGIES, **VARIANTS}
MANY_SEEDS = ("ashl", "adsp")  # get --seeds on --cluster

# The time model of --estimate and the --max_minutes cap (s; docs/DESIGN.md has the runs behind each figure):
# a run's set-up with warm group processes (FIRST_STARTUP_S more for a cluster's first run), the stop, one
# evaluation during training on digits32 (else --eval_interval_s), the final one (with the checkpoint), and the
# training time to target (None: to its budget). EVAL_EXAMPLES: default --eval_examples.
STARTUP_S, FIRST_STARTUP_S, STOP_S, EVAL_SPACING_S, FINAL_EVAL_S = 7.0, 18.0, 3.0, 2.7, 3.0
FINAL_EVAL_EXAMPLES, EVAL_EXAMPLES = 1000, 500
EXPECTED_TRAIN_S = {"adsp": 63.0, "ashl": 56.0, "asp": 60.0, "local_sgd": 45.0, "bsp": None, "ssp": None}
VARIANT_TRAIN_S = 56.0

DEFAULTS = {"cluster": "layouts/edge4.yaml", "tail_s": 0.0, "batch": 32, "dataset": "digits32", "model": "vgg_m",
            "target": 0.90, "budget_s": 80.0, "bsp_budget_s": 130.0, "homo_budget_s": 120.0,
            "strategies": ["bsp", "adsp", "ashl"], "seeds": 8, "other_seeds": 3, "homo_cluster": "layouts/homo4.yaml",
            "homo_strategies": ["ashl", "adsp"], "homo_seeds": 2, "variants": list(DEFAULT_VARIANTS),
            "variant_seeds": 2, "eval_interval_s": 1.0, "eval_examples": EVAL_EXAMPLES, "max_minutes": 0.0}
# --quick (make bench QUICK=1): the whole pipeline, small; figures are not evidence.
QUICK = {"dataset": "digits", "model": "vgg", "budget_s": 15.0, "bsp_budget_s": 15.0, "homo_budget_s": 15.0,
         "seeds": 2, "other_seeds": 1, "homo_seeds": 1, "variants": ["ashl_project"], "variant_seeds": 1,
         "eval_interval_s": 0.5, "max_minutes": 8.0}


def base_of(name: str) -> str:
    """The strategy a variant is measured against (its --sync run as published)."""
    return CONFIGS[name]["strategy"]


def budget_of(name: str, args, homogeneous: bool = False) -> float:
    """A run's time budget (s): --homo_budget_s on --homo_cluster (slower devices), --bsp_budget_s for BSP
    (over twice ASHL's time, so that "ASHL <= 0.5x BSP" can be told), else --budget_s."""
    if homogeneous and getattr(args, "homo_budget_s", 0):
        return args.homo_budget_s
    return args.bsp_budget_s if name == "bsp" and args.bsp_budget_s else args.budget_s


def sync_config(name: str):
    return SyncConfig(**CONFIGS[name])


def schedule(names_seeds: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """(name, seed) in run order: seed 0 of every name, then seed 1, ...; the order of the names
    rotated by one each seed (no strategy always runs first after the testbed starts)."""
    out, top = [], max((n for _, n in names_seeds), default=0)
    for seed in range(top):
        row = [name for name, n in names_seeds if n > seed]
        r = seed % len(row) if row else 0
        out += [(name, seed) for name in row[r:] + row[:r]]
    return out


def plan_of(args) -> dict[str, list[tuple[str, int]]]:
    """{"heterogeneous": [(name, seed), ...], "homogeneous": [...]} of the arguments: strategies
    and variants interleaved by seed on --cluster, the --homo_strategies on --homo_cluster."""
    het = [(n, args.seeds if n in MANY_SEEDS else args.other_seeds) for n in args.strategies]
    out = {"heterogeneous": schedule(het + [(v, args.variant_seeds) for v in args.variants])}
    if args.homo_cluster and args.homo_strategies:
        out["homogeneous"] = schedule([(n, args.homo_seeds) for n in args.homo_strategies])
    return out


def expected_run_s(name: str, args, homogeneous: bool = False) -> float:
    """A run's wall time by the time model above (set-up, training to target or the budget, tail,
    the evaluations after the stop); --quick's digits: a tiny model and test set, short runs."""
    spacing, startup, train, final = args.eval_interval_s, 10.0, {}, 2 * args.eval_interval_s
    if args.dataset == "digits32":
        spacing, startup, train, final = max(spacing, EVAL_SPACING_S), STARTUP_S, EXPECTED_TRAIN_S, FINAL_EVAL_S
    budget = budget_of(name, args, homogeneous)
    t = train.get(name, VARIANT_TRAIN_S if name in VARIANTS else budget / 2)
    reached = t is not None and t < budget
    return startup + (t + tail_for(spacing) + (args.tail_s or 0.0) if reached else budget) + final + STOP_S


class Clock:
    """The wall-time cap (--max_minutes): every strategy run is required; a variant run is made only if the
    time left, after the expected time of every required run still to come, allows it. Expected time (s): the
    median wall time measured so far of the name (a variant: else of its strategy), else the time model."""

    def __init__(self, args, plan, now=None):
        self.args, self.now = args, now or time.monotonic
        self.t0, self.cap_s = self.now(), args.max_minutes * 60 if args.max_minutes else math.inf
        self.pending = [(n, key == "homogeneous") for key, runs in plan.items() for n, _ in runs if n not in VARIANTS]
        self.walls: dict[str, list[float]] = {}
        self.skipped: list[str] = []

    def expected(self, name: str, homogeneous: bool = False) -> float:
        for key in (name, base_of(name) if name in VARIANTS else None):
            if key in self.walls:
                return statistics.median(self.walls[key])
        return expected_run_s(name, self.args, homogeneous)

    def allows(self, name: str, seed: int) -> bool:
        if name in VARIANTS and self.now() - self.t0 + self.expected(name) + sum(
                self.expected(*run) for run in self.pending) > self.cap_s:
            self.skipped.append(f"{name} seed {seed}")
            return False
        return True

    def done(self, name: str, wall: float | None) -> None:
        """A run of `name` made in `wall` s (None: not measured); plan order: --cluster's runs come first."""
        if wall is not None:
            self.walls.setdefault(name, []).append(wall)
        names = [n for n, _ in self.pending]
        if name in names:
            del self.pending[names.index(name)]


def tail_for(spacing_s: float) -> float:
    """Time from the first evaluation at target until the chief has seen CONSECUTIVE in a row (s):
    the (CONSECUTIVE-1) evaluations after it, +50% of a spacing for jitter."""
    return round((CONSECUTIVE - 1 + 0.5) * spacing_s, 1)


def estimate(args) -> dict:
    """The configuration by the time model: its runs, their expected wall time (s) without the cap, and
    with it (--max_minutes: Clock's rule at the model's costs, each cluster's processes started once)."""
    plan, t = plan_of(args), [0.0]
    runs = [(name, key == "homogeneous") for key, r in plan.items() for name, _ in r]
    clock = Clock(args, plan, now=lambda: t[0])
    t[0] = FIRST_STARTUP_S * len(plan) if args.dataset == "digits32" else 0.0  # after t0: counts against the cap
    full = t[0] + sum(expected_run_s(name, args, homo) for name, homo in runs)
    for name, homo in runs:
        if clock.allows(name, 0):
            t[0] += expected_run_s(name, args, homo)
            clock.done(name, None)
    variants = sum(name in VARIANTS for name, _ in runs)
    return {"runs": len(runs), "full_s": round(full), "capped_s": round(t[0]), "variant_runs": variants,
            "variant_runs_in_cap": variants - len(clock.skipped)}
