"""EdgeMesh's headline claims on the emulated testbed, like for like: delay per example and peak
memory per device of each device training alone, synchronous data parallelism, the planner's filter split and its
hybrid grid, all at the same batch per model update (--batch).

    python -m bench.edgemesh_claims --cluster layouts/pi4.yaml [--model vgg16] [--dataset digits32] [--steps 5]

Modes (bench/claims_modes.py): `alone:<device>` (the whole model on one worker), `data_parallel` (synchronous, over
the devices that hold the model alone, the batch split by profiled speed), `filter_split` (the one-group plan as one
plain layout, no ps, as `edgemesh train --layout` trains it), `even` (its devices, every split dim split evenly;
timed only, to check the cost model), `memory_capped` (the named option `memory_fraction`, beside the checks) and
`hybrid` (the grid `edgemesh run` plans: more than one group run AHL's rounds side by side, their commits paid in the
delay; one group is `filter_split`'s layout, measured once). Delay: ms per example, 1 / sum over replicas of
(batch / median step). Prints one JSON object; exit 1 if the filter split is not split or the hybrid plan fails.
"""
import contextlib
import json
import statistics
import sys
import time

from bench import cli
from bench.claims_figures import PREDICTED_LAYOUTS, claims, option_figures, prediction_ratios
from bench.claims_modes import (ModeRunner, commits, even_plan, interleaved, mode_layouts, peak_memory,
                                per_iteration_ms, proportional)
from edgemesh_tf.cluster import emulated_cluster, load_cluster, of_testbed
from edgemesh_tf.data import IMAGE_SHAPES
from edgemesh_tf.engine import SyncConfig, commit_interval
from edgemesh_tf.models import get_model
from edgemesh_tf.planner import PlanError, calibrated, model_stats, plan, predict, staleness_charge, steps_to_time
from edgemesh_tf.profiling import budgets, profile_servers


def parse_args(argv=None):
    ap = cli.parser(__doc__, (
        ("cluster", "layouts/pi4.yaml"), ("model", "vgg16"),
        ("dataset", "digits32", "the input shape only", {"choices": sorted(IMAGE_SHAPES)}),
        ("batch", 32, "examples per model update in every mode"), ("steps", 5, "timed steps per mode"),
        ("commit-interval", commit_interval(SyncConfig()),
         "local iterations per commit of a multi-group hybrid grid (default: the default strategy's)"),
        ("hybrid-rounds", 3, "timed rounds of a multi-group hybrid grid (each --commit-interval iterations)"),
        ("memory", 1, "0: skip the memory phase (quick runs; every mode is timed)"),
        ("memory-fraction", 0.53, "the memory_capped mode's cap: no device above this fraction of the whole model's "
         "predicted step on one device (0: no such mode)")))
    args = ap.parse_args(argv)
    for flag in ("batch", "steps", "commit_interval", "hybrid_rounds"):
        if getattr(args, flag) < 1:
            ap.error("--%s must be >= 1, got %d" % (flag.replace("_", "-"), getattr(args, flag)))
    if not 0 <= args.memory_fraction <= 1:
        ap.error("--memory-fraction must be in [0, 1] (0: no memory_capped mode), got %g" % args.memory_fraction)
    return args


def _progress(what: str, t_start: float) -> None:
    print("[claims] %s (%.0f s in all)" % (what, time.time() - t_start), file=sys.stderr, flush=True)


def plan_modes(profile, cal, spec, stats, args, out) -> dict:
    """{mode: plan} of filter_split, hybrid (engine_grid too when the grid is one group), even and memory_capped,
    each recorded as out["<mode>_plan"]; a memory cap with no plan, or a filter split of no dim, as an error."""
    plans = {"filter_split": plan(profile, spec, batch=args.batch, engine=False)}
    grid = plan(profile, spec, batch=args.batch, commit_interval=args.commit_interval)
    if len(grid.groups) > 1:
        plans["hybrid"] = grid
    else:  # a one-group grid commits to no ps here: it runs, and so is planned, as the plain layout
        plans["hybrid"], plans["engine_grid"] = plans["filter_split"], grid
    plans["even"] = even_plan(plans["filter_split"], cal, spec, stats, args.batch)
    if args.memory_fraction:
        try:
            plans["memory_capped"] = plan(profile, spec, batch=args.batch, engine=False,
                                          memory_fraction=args.memory_fraction)
        except PlanError as e:
            out["memory_capped_plan"] = {"error": str(e)}
    for m, p in plans.items():
        out[f"{m}_plan"] = plan_record(p, args.commit_interval if commits(m, plans) else None, profile, stats)
    if args.memory_fraction:
        out["memory_capped_plan"]["memory_fraction"] = args.memory_fraction
    if not out["filter_split_plan"]["split_dims"]:
        out["errors"].append("filter_split: the planner's one-group plan splits no dim (%s); nothing to measure"
                             % out["filter_split_plan"]["groups"])
    return plans


def step_ms(prof, stats, names, sizes, commit_every=None) -> float:
    """The cost model's ms per local iteration of a group by ``prof``'s layer times (calibrated or as profiled)."""
    return per_iteration_ms(predict([prof.device(n) for n in names], stats, dict(sizes), profile_batch=prof.batch,
                                    ps_bandwidth_mbit=prof.ps_bandwidth_mbit), commit_every)


def plan_record(p, every, profile, stats) -> dict:
    """What a plan divided and what it predicts, group by group; uncalibrated: by the layer times as profiled."""
    return {"kind": p.kind, "split_dims": sorted({name for g in p.groups for name, _ in g.layout.sizes
                                                  if len(g.names) > 1}),
            "predicted_examples_per_sec": round(p.examples_per_sec, 2),
            "alternatives": {k: round(v, 2) for k, v in p.alternatives},
            "candidates": {k: round(v, 2) for k, v in p.candidates}, "commit_interval": every, "idle": list(p.idle),
            "groups": [{"devices": list(g.names), "sizes": {k: list(v) for k, v in g.layout.sizes},
                        "predicted_step_ms": round(per_iteration_ms(g.prediction, every), 1),
                        "predicted_ps_sync_ms": round(g.prediction.ps_sync_ms, 1),
                        "uncalibrated_step_ms": round(step_ms(profile, stats, g.names, g.layout.sizes, every), 1),
                        "predicted_memory_mib": [round(b / 2 ** 20, 1) for b in g.prediction.memory_bytes],
                        "predicted_compute_ms": [round(x, 1) for x in g.prediction.compute_ms],
                        "predicted_comm_ms": [round(x, 1) for x in g.prediction.comm_ms]} for g in p.groups]}


def memory_phase(cluster, spec, plans, args, out, workers, speed, t_start) -> dict:
    """Each device alone, then the other modes, each on a fresh testbed under the memory limits (CPU quotas
    lifted); returns the data-parallel shares, by profiled speed, of the devices that held the model alone."""
    alone = [f"alone:{n}" for n in workers]
    for mode in alone if args.memory else ():
        out["modes"][mode] = peak_memory(cluster, spec, mode, plans, args.batch, {}, args.commit_interval)
        _progress("memory of " + mode, t_start)
    held = [n for n in workers if not args.memory or "peak_bytes" in out["modes"][f"alone:{n}"]]
    dp = dict(zip(held, proportional(args.batch, [speed[n] for n in held]))) if held else {}
    out.update({"data_parallel_shares": dp} if dp else {})
    for mode in modes_of(out, plans, dp, workers)[len(alone):] if args.memory else ():
        out["modes"][mode] = peak_memory(cluster, spec, mode, plans, args.batch, dp, args.commit_interval)
        _progress("memory of " + mode, t_start)
    return dp


def modes_of(out, plans, dp, workers) -> list[str]:
    """The modes measured: each device alone, data parallelism, the filter split unless it is the
    hybrid's plan (then measured once, as the hybrid), the hybrid, the memory cap."""
    filter_split = [] if out["errors"] or out["filter_split_is_the_hybrid_plan"] else ["filter_split"]
    return ([f"alone:{n}" for n in workers] + (["data_parallel"] if dp else []) + filter_split + ["hybrid"]
            + (["memory_capped"] if "memory_capped" in plans else []))


def timing_phase(cluster, spec, plans, args, out, timed, dp) -> None:
    """Every mode in ``timed`` on one testbed, interleaved; their steps and delays into out["modes"]; a
    multi-group hybrid's delay also charged for staleness as the planner charges it."""
    with emulated_cluster(cluster, memory="off") as em, contextlib.ExitStack() as stack:
        em.lift_quotas()  # set-up and first runs only: restored before the counted warm-up and the timing
        runners = {m: stack.enter_context(contextlib.closing(ModeRunner(
            spec, mode_layouts(m, plans, em.device, args.batch, dp), em, cluster, m.replace(":", "_"), m, plans,
            args.commit_interval))) for m in timed}
        counts = {m: args.hybrid_rounds if commits(m, plans) else args.steps for m in timed}
        times = interleaved(runners, counts, restore_quotas=em.restore_quotas)
    for m in timed:
        out["modes"].setdefault(m, {}).update(
            median_step_ms=[round(statistics.median(t), 1) for t in runners[m].own],
            examples_per_step=runners[m].batches, ms_per_example=round(runners[m].ms_per_example(), 3),
            steps=len(times[m]))
    if commits("hybrid", plans) and "hybrid" in timed:
        rec, g = out["modes"]["hybrid"], len(plans["hybrid"].groups)
        rec.update(rounds=rec.pop("steps"), local_steps_per_round=args.commit_interval,
                   effective_ms_per_example=round(rec["ms_per_example"]
                                                  * staleness_charge(g, plans["hybrid"].staleness_penalty), 3))


def record_predictions(out, timed, workers, cal, profile, stats) -> None:
    """The planner's step prediction against the step measured: each planned and even group, each device alone."""
    for m in PREDICTED_LAYOUTS:
        for grp, measured in zip(out[f"{m}_plan"]["groups"], out["modes"][m]["median_step_ms"]) if m in timed else ():
            grp.update(measured_step_ms=measured, predicted_over_measured=round(grp["predicted_step_ms"] / measured, 3),
                       uncalibrated_over_measured=round(grp["uncalibrated_step_ms"] / measured, 3))
    for n in workers:
        rec = out["modes"].get(f"alone:{n}", {})
        if rec.get("median_step_ms"):
            ms, raw_ms = step_ms(cal, stats, [n], ()), round(step_ms(profile, stats, [n], ()), 1)
            rec.update(predicted_step_ms=round(ms, 1), uncalibrated_step_ms=raw_ms,
                       predicted_over_measured=round(ms / rec["median_step_ms"][0], 3),
                       uncalibrated_over_measured=round(raw_ms / rec["median_step_ms"][0], 3))


def main(argv=None):
    args, t_start = parse_args(argv), time.time()
    spec, cluster = get_model(args.model, IMAGE_SHAPES[args.dataset], 10), load_cluster(args.cluster)
    workers = [d.name for d in cluster.workers]
    out = {"cluster": args.cluster, "model": args.model, "dataset": args.dataset, "batch": args.batch,
           "steps": args.steps, "commit_interval": args.commit_interval, "modes": {}, "errors": []}
    with emulated_cluster(cluster, memory="off") as em:
        profile = profile_servers(cluster, spec, args.batch, of_testbed(em),
                                  **steps_to_time(budgets(cluster), spec, args.batch))
    _progress("profiled", t_start)
    cal = calibrated(profile, spec)  # the plan's layer times; as profiled reported beside them
    out.update(profile=json.loads(profile.to_json()),  # as measured: lets the cost model be re-checked offline
               compute_scale=cal.compute_scale,
               split_overhead_ms_per_peer={d.name: d.split_overhead_ms for d in cal.devices})
    stats = model_stats(spec, args.batch, engine=False)  # the one-group layouts run here without a ps
    plans = plan_modes(profile, cal, spec, stats, args, out)
    speed = {d.name: 1.0 / sum(t.compute_ms for t in d.layers) for d in profile.devices}
    out["profiled_speed"] = {n: round(v / max(speed.values()), 3) for n, v in speed.items()}
    out["filter_split_is_the_hybrid_plan"] = out["filter_split_plan"]["groups"] == out["hybrid_plan"]["groups"]
    dp = memory_phase(cluster, spec, plans, args, out, workers, speed, t_start)
    timed = [m for m in modes_of(out, plans, dp, workers) if "out_of_memory" not in out["modes"].get(m, {})] + ["even"]
    timing_phase(cluster, spec, plans, args, out, timed, dp)
    _progress("timed " + ", ".join(timed), t_start)
    if out["filter_split_is_the_hybrid_plan"] and not out["errors"] and "hybrid" in timed:
        out["modes"]["filter_split"] = {**out["modes"]["hybrid"], "same_plan_as": "hybrid"}
        timed.append("filter_split")
    record_predictions(out, timed, workers, cal, profile, stats)
    if "hybrid" not in timed:
        out["errors"].append("hybrid: the planned grid ran out of memory: %s" % out["modes"]["hybrid"]["out_of_memory"])
    raw = prediction_ratios(out, "uncalibrated_over_measured")
    out["checks"] = claims(out)
    out.update({"memory_capped_option": option_figures(out, "memory_capped")} if "memory_capped" in plans else {})
    out.update(uncalibrated_max_error=round(float(max(abs(r - 1) for r in raw.values())), 3) if raw else None,
               seconds=round(time.time() - t_start, 1))
    cli.emit(out, indent=1)
    if out["errors"]:
        sys.exit("edgemesh_claims: " + "; ".join(out["errors"]))


if __name__ == "__main__":
    main()
