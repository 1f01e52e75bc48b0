"""The planner against measurement on the emulated testbed.

    python -m bench.planner --cluster layouts/edge4.yaml [--model vgg] [--dataset digits] [--batch 32]

A round (`profile_and_measure`) on the emulated cluster, its memory limits off (each device alone
is measured, whatever it may hold): profiles every worker, plans one group as the plain layout it
measures, without a ps, and measures the planned layout, the even split over every worker and over
the three fastest (`even:3`) and each worker alone (the all-replicated alternative's groups) side
by side: median step time against the cost model's prediction, calibrated as the planner uses it
and uncalibrated (`prediction_max_error`, `uncalibrated_max_error`: the largest
|predicted / measured - 1|; issue 15's bound is 15%). --repeats rounds run on the same testbed and
each layout's ratios are the medians over them (`*_by_round`: each round's; `repeat_max_errors`:
each round's largest error), since this machine's speed drifts over minutes.
Prints one JSON object. (Peak memory of a split against one device is bench/edgemesh_claims.py's; the
planning time on large clusters is bench/planning_time.py's.)
"""
import json
import statistics
import time

from bench import cli
from edgemesh_tf.cluster import emulated_cluster, load_cluster, watched
from edgemesh_tf.data import IMAGE_SHAPES
from edgemesh_tf.mesh import even_split_layout, single_device_layout, tf
from edgemesh_tf.models import get_model
from edgemesh_tf.planner import calibrated, model_stats, plan, predict, slowness, steps_to_time
from edgemesh_tf.profiling import LayoutRunner, budgets, measure_side_by_side, profile_workers


def profile_and_measure(em, cluster, spec, args) -> dict:
    """One round on a running testbed: profile every worker, plan one group, and measure the planned
    layout, the even splits and each worker alone side by side against their predicted steps."""
    workers, t0 = [d.name for d in cluster.workers], time.time()
    profile = profile_workers(cluster, spec, args.batch, em.session_target, {n: d.pid for n, d in em.devices.items()},
                              **steps_to_time(budgets(cluster), spec, args.batch))
    cal = calibrated(profile, spec)  # the plan's model (planner/calibrate.py); as measured reported beside it
    out = {"profile_s": round(time.time() - t0, 1),
           "profile": json.loads(profile.to_json())}  # as measured: lets the cost model be re-checked offline
    stats = model_stats(spec, args.batch)
    planned = plan(profile, spec, batch=args.batch, engine=False).groups[0]  # the plain layout measured here
    layouts = {"planned": (planned.layout, planned.names, dict(planned.layout.sizes))}  # (layout, devices, sizes)
    evens = {"even": workers}
    if len(workers) > 3:  # the calibration's split step is over three: both group sizes are checked
        evens["even:3"] = sorted(workers, key=slowness(profile).get)[:3]
    for k, names in evens.items():
        lay, sizes = even_split_layout(spec.split_dims(), [em.device(n) for n in names])
        layouts[k] = (lay, names, sizes)
    # all-replicated: every worker trains the whole model alone
    layouts.update({"alone:" + n: (single_device_layout(em.device(n)), (n,), {}) for n in workers})
    step_ms = lambda prof, names, sizes: predict([prof.device(n) for n in names], stats, sizes,  # noqa: E731
                                                 profile_batch=profile.batch).step_ms
    containers = {k: k.replace(":", "_") for k in layouts}
    runners = {k: LayoutRunner(spec, lay, args.batch, em.session_target, cluster.master.device_string,
                               container=containers[k]) for k, (lay, _, _) in layouts.items()}
    try:
        times = measure_side_by_side(runners, args.steps)
    finally:
        for r in runners.values():
            r.close()
        # the next round builds its layouts in the same containers (the plan's shapes may differ)
        tf.Session.reset(em.session_target, containers=list(containers.values()))
    med = {k: statistics.median(v) for k, v in times.items()}
    sizes = dict(planned.layout.sizes)
    out["planned_layout"] = {"devices": list(planned.names),
                             "sizes": {d.name: list(sizes.get(d.name, ())) or "replicated" for d in stats.dims}}
    out["layouts"] = {}
    for k, (_, names, assign) in layouts.items():
        pred = planned.prediction.step_ms if k == "planned" else step_ms(cal, names, assign)
        raw = step_ms(profile, names, assign)
        out["layouts"][k] = {
            "devices": list(names), "sizes": {d: list(v) for d, v in assign.items()},
            "predicted_step_ms": round(pred, 2),
            "measured_median_step_ms": round(med[k], 2), "predicted_over_measured": round(pred / med[k], 3),
            "uncalibrated_step_ms": round(raw, 2), "uncalibrated_over_measured": round(raw / med[k], 3),
            "examples_per_sec": round(args.batch * 1e3 / med[k], 1), "steps": len(times[k])}
    out["planned_over_even_throughput"] = round(med["even"] / med["planned"], 3)
    out["calibration"] = {"compute_scale": cal.compute_scale,  # the split step it was fitted to: out["profile"]
                          "split_overhead_ms_per_peer": {d.name: d.split_overhead_ms for d in cal.devices},
                          "whole_step_ms": {d.name: d.whole_step_ms for d in profile.devices if d.whole_step_ms}}
    return out


RATIOS = ("predicted_over_measured", "uncalibrated_over_measured")


def over_repeats(rounds: list[dict]) -> dict:
    """Each layout's record over the rounds (pure): medians of its predicted and measured steps and of
    each ratio, every round's ratio (`*_by_round`) and the steps measured in all."""
    out = {}
    for k, first in rounds[0].items():
        recs = [r[k] for r in rounds if k in r]
        out[k] = {**first, "steps": sum(r["steps"] for r in recs), "rounds": len(recs)}
        for field in ("predicted_step_ms", "measured_median_step_ms", "uncalibrated_step_ms") + RATIOS:
            out[k][field] = round(statistics.median(r[field] for r in recs), 3)
        for field in RATIOS:
            out[k][field + "_by_round"] = [r[field] for r in recs]
        out[k]["examples_per_sec"] = round(first["examples_per_sec"] * first["measured_median_step_ms"]
                                           / out[k]["measured_median_step_ms"], 1)
    return out


def max_error(layouts: dict, field: str) -> float:
    """The largest |ratio - 1| over the layouts (pure)."""
    return round(float(max(abs(v[field] - 1) for v in layouts.values())), 3)


def main():
    ap = cli.parser(__doc__, (
        ("cluster", "layouts/edge4.yaml"), ("model", "vgg"), ("batch", 32),
        ("dataset", "digits", None, {"choices": sorted(IMAGE_SHAPES)}),
        ("steps", 15, "timed steps per layout and round"),
        ("repeats", 3, "rounds of profiling, planning and measuring"),
        ("round_timeout", 1800.0, "seconds a round may take before the benchmark fails naming it")))
    args = ap.parse_args()
    if args.repeats < 1 or args.steps < 1:
        ap.error("--repeats and --steps must be at least 1, got %d and %d" % (args.repeats, args.steps))
    t_start = time.time()
    spec = get_model(args.model, IMAGE_SHAPES[args.dataset], 10)
    cluster = load_cluster(args.cluster)
    out = {"cluster": args.cluster, "model": args.model, "dataset": args.dataset, "batch": args.batch}

    # memory limits off: the layouts measured here include each device alone, which the weakest devices
    # of a tight cluster cannot hold
    with emulated_cluster(cluster, memory="off") as em:
        # bounded: a session on a dead server waits on its RPCs for minutes (cluster/watch.py)
        reps = [watched(lambda: profile_and_measure(em, cluster, spec, args), em.check, args.round_timeout,
                        "round %d of %d (profile, plan, measure)" % (i + 1, args.repeats))
                for i in range(args.repeats)]
    out.update(reps[0])  # the first round's profile, plan and calibration; the layouts over all rounds below
    layouts = over_repeats([r["layouts"] for r in reps])
    over_even = round(statistics.median(r["planned_over_even_throughput"] for r in reps), 3)
    out.update(profile_s=[r["profile_s"] for r in reps], planned_layouts=[r["planned_layout"] for r in reps],
               repeats=args.repeats, layouts=layouts, planned_over_even_throughput=over_even,
               prediction_max_error=max_error(layouts, "predicted_over_measured"),
               uncalibrated_max_error=max_error(layouts, "uncalibrated_over_measured"),
               repeat_max_errors=[max_error(r["layouts"], "predicted_over_measured") for r in reps])
    out.update(predictions_within_15pct=bool(out["prediction_max_error"] <= 0.15),
               seconds=round(time.time() - t_start, 1))
    cli.emit(out)


if __name__ == "__main__":
    main()
