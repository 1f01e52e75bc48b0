"""What bench/time_to_accuracy.py runs and how long that takes: the strategies and ASHL variants
(SyncConfig options), the defaults, the interleaved schedule of (name, seed) runs, and the time
model behind --estimate and the --max_minutes cap."""
import math
import statistics
import time

from edgemesh_tf.engine import STRATEGIES as STRATEGY_NAMES
from edgemesh_tf.engine import SyncConfig

CONSECUTIVE = 3  # "reached" = at or above target for this many evaluations in a row (issue 16)

# SyncConfig options of each strategy and variant (SyncConfig(strategy=..., **options)). A strategy
# runs as published: the SyncConfig defaults of its --sync (e.g. ASHL as published for `ashl`).
STRATEGIES = {name: {"strategy": name} for name in STRATEGY_NAMES}
PROJECT_OPTIONS = {"compression": "budget", "compress_in_ahl": True, "phase_shares": True, "replan": True,
                   "error_feedback": True, "staleness_rule": "project", "lr_schedule": "constant"}
VARIANTS = {
    "ashl_project": {"strategy": "ashl", **PROJECT_OPTIONS},  # the project's ASHL: every own rule at once
    # each of the project's improvements alone, on top of the published ASHL
    "ashl+error_feedback": {"strategy": "ashl", "error_feedback": True},
    "ashl+replan": {"strategy": "ashl", "replan": True},
    "ashl+compress_in_ahl": {"strategy": "ashl", "compress_in_ahl": True},
    "ashl+phase_shares": {"strategy": "ashl", "phase_shares": True},
    "ashl+budget_compression": {"strategy": "ashl", "compression": "budget"},
    # not run by default: the project's two other departures from the paper, alone
    "ashl+project_staleness": {"strategy": "ashl", "staleness_rule": "project"},
    "ashl+constant_lr": {"strategy": "ashl", "lr_schedule": "constant"},
    # ADSP with its own paper's constant rate instead of the optimizer it shares with ASHL by default
    "adsp+constant_lr": {"strategy": "adsp", "lr_schedule": "constant"},
}
DEFAULT_VARIANTS = ("ashl_project", "ashl+error_feedback", "ashl+replan", "ashl+compress_in_ahl",
                    "ashl+phase_shares", "ashl+budget_compression", "adsp+constant_lr")
CONFIGS = {**STRATEGIES, **VARIANTS}
MANY_SEEDS = ("ashl", "adsp")  # get --seeds on --cluster

# The time model of --estimate and the --max_minutes cap (s; docs/DESIGN.md has the runs behind each
# figure). STARTUP_S: a run's set-up with warm group processes and the limits lifted while the groups
# set up; FIRST_STARTUP_S more for a cluster's first run (the processes start); EVAL_SPACING_S: one
# evaluation during training, then the interval; FINAL_EVAL_S: the final evaluation (on
# FINAL_EVAL_EXAMPLES test images) and the checkpoint; STOP_S: the stop; EXPECTED_TRAIN_S: training
# time to target (None: runs to its budget). A run stops at its target, so its final accuracy is the
# target's give or take; bench/final_accuracy.py measures the final accuracy on the whole test set.
# EVAL_EXAMPLES: images of each evaluation during training (--eval_examples); a run pays about three.
STARTUP_S = 7.0
FIRST_STARTUP_S = 18.0
FINAL_EVAL_S = {"digits32": 3.0}
FINAL_EVAL_EXAMPLES = 1000
EVAL_EXAMPLES = 500
STOP_S = 3.0
EVAL_SPACING_S = {"digits32": 2.7}  # else --eval_interval_s
EXPECTED_TRAIN_S = {"adsp": 63.0, "ashl": 56.0, "asp": 60.0, "local_sgd": 45.0, "bsp": None, "ssp": None}
VARIANT_TRAIN_S = 56.0

DEFAULTS = {"cluster": "layouts/edge4.yaml", "tail_s": 0.0, "batch": 32, "dataset": "digits32", "model": "vgg_m", "target": 0.90, "budget_s": 80.0, "bsp_budget_s": 130.0,
            "homo_budget_s": 120.0,
            "strategies": "bsp,adsp,ashl", "seeds": 8, "other_seeds": 3,
            "homo_cluster": "layouts/homo4.yaml", "homo_strategies": "ashl,adsp", "homo_seeds": 2,
            "variants": ",".join(DEFAULT_VARIANTS), "variant_seeds": 2, "eval_interval_s": 1.0, "eval_examples": EVAL_EXAMPLES,
            "max_minutes": 0.0}
# --quick (make bench QUICK=1): the whole pipeline, small; figures are not evidence.
QUICK = {"dataset": "digits", "model": "vgg", "target": 0.9, "budget_s": 15.0, "bsp_budget_s": 15.0, "homo_budget_s": 15.0,
         "strategies": "bsp,adsp,ashl",
         "seeds": 2, "other_seeds": 1, "homo_strategies": "ashl,adsp", "homo_seeds": 1,
         "variants": "ashl_project", "variant_seeds": 1, "eval_interval_s": 0.5, "eval_examples": EVAL_EXAMPLES,
         "max_minutes": 8.0}


def base_of(name: str) -> str:
    """The strategy a variant is measured against (its --sync run as published)."""
    return CONFIGS[name]["strategy"]


def budget_of(name: str, args, homogeneous: bool = False) -> float:
    """A run's time budget (s): on --homo_cluster --homo_budget_s (its devices are each slower than
    edge4's fastest: 80 s leaves both strategies short of the target), else --bsp_budget_s for BSP
    (which commits every iteration and waits on the slowest link each time, so that "ASHL <= 0.5x BSP"
    can be told only with a budget over twice ASHL's time), --budget_s for every other strategy and variant."""
    if homogeneous and getattr(args, "homo_budget_s", 0):
        return args.homo_budget_s
    return args.bsp_budget_s if name == "bsp" and args.bsp_budget_s else args.budget_s


def sync_config(name: str):
    opts = dict(CONFIGS[name])
    return SyncConfig(strategy=opts.pop("strategy"), **opts)


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
    names, homo, variants = csv_names(args.strategies), csv_names(args.homo_strategies), csv_names(args.variants)
    het = [(n, args.seeds if n in MANY_SEEDS else args.other_seeds) for n in names]
    het += [(v, args.variant_seeds) for v in variants]
    out = {"heterogeneous": schedule(het)}
    if args.homo_cluster and homo:
        out["homogeneous"] = schedule([(n, args.homo_seeds) for n in homo])
    return out


def expected_run_s(name: str, args, homogeneous: bool = False) -> float:
    """A run's wall time by the time model above (set-up, training to target or the budget, tail,
    the evaluations after the stop); --quick's digits: a tiny model and test set, short runs."""
    if args.dataset != "digits32":
        spacing, startup, train, final = args.eval_interval_s, 10.0, {}, 2 * args.eval_interval_s
    else:
        spacing, startup = max(args.eval_interval_s, EVAL_SPACING_S["digits32"]), STARTUP_S
        train, final = EXPECTED_TRAIN_S, FINAL_EVAL_S["digits32"]
    budget = budget_of(name, args, homogeneous)
    t = train.get(name, VARIANT_TRAIN_S if name in VARIANTS else budget / 2)
    reached = t is not None and t < budget
    return startup + (t + tail_for(spacing) + (args.tail_s or 0.0) if reached else budget) + final + STOP_S


class Clock:
    """The wall-time cap (--max_minutes): every strategy run is required; a variant run is made only
    if the time left, after the expected time of every required run still to come, allows it.
    Expected times: the median wall time measured so far of the same name (a variant: of ASHL's
    runs before any of its own), else the time model."""

    def __init__(self, args, plan):
        self.args, self.t0 = args, time.monotonic()
        self.cap_s = args.max_minutes * 60 if args.max_minutes else math.inf
        self.pending = [name for runs in plan.values() for name, _ in runs if name not in VARIANTS]
        self.walls: dict[str, list[float]] = {}
        self.skipped: list[str] = []

    def expected(self, name: str) -> float:
        for key in (name, base_of(name) if name in VARIANTS else None):
            if key in self.walls:
                return statistics.median(self.walls[key])
        return expected_run_s(name, self.args)

    def allows(self, name: str, seed: int) -> bool:
        if name not in VARIANTS:
            return True
        need = self.expected(name) + sum(self.expected(n) for n in self.pending)
        if time.monotonic() - self.t0 + need <= self.cap_s:
            return True
        self.skipped.append(f"{name} seed {seed}")
        return False

    def done(self, name: str, wall: float) -> None:
        self.walls.setdefault(name, []).append(wall)
        if name in self.pending:
            self.pending.remove(name)


def tail_for(spacing_s: float) -> float:
    """Time from the first evaluation at target until the chief has seen CONSECUTIVE in a row (s):
    the (CONSECUTIVE-1) evaluations after it, +50% of a spacing for jitter."""
    return round((CONSECUTIVE - 1 + 0.5) * spacing_s, 1)


def estimate(args) -> dict:
    """The configuration by the time model: its runs, their expected wall time (s) without the
    cap, and with it (--max_minutes: which variant runs the cap would leave out at these costs)."""
    plan = plan_of(args)
    runs = [(name, key == "homogeneous") for key, r in plan.items() for name, _ in r]
    first = FIRST_STARTUP_S * len(plan) if args.dataset == "digits32" else 0.0  # each cluster's processes start
    cost = {run: expected_run_s(run[0], args, homogeneous=run[1]) for run in runs}
    full = first + sum(cost[r] for r in runs)
    cap = args.max_minutes * 60 if args.max_minutes else math.inf
    required = [r for r in runs if r[0] not in VARIANTS]
    t, left, made, skipped = first, list(required), 0, 0
    for r in runs:
        if r[0] in VARIANTS:
            if t + cost[r] + sum(cost[m] for m in left) > cap:
                skipped += 1
                continue
            made += 1
        else:
            left.remove(r)
        t += cost[r]
    return {"runs": len(runs), "full_s": round(full), "capped_s": round(t), "variant_runs": made + skipped,
            "variant_runs_in_cap": made}


def csv_names(csv: str) -> list[str]:
    """The names of a comma-separated option ('' for none)."""
    return [n for n in (csv or "").split(",") if n]
