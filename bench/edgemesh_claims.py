"""EdgeMesh's headline claims on the emulated testbed, like for like: delay per example and peak
memory per device of each device training alone, synchronous data parallelism, the planner's
filter split and its hybrid grid, all at the same batch per model update.

    python bench/edgemesh_claims.py --cluster layouts/pi4.yaml [--model vgg16] [--dataset digits32]
        [--batch 32] [--steps 5]

The paper reports a 3.2x lower average delay than stand-alone training and up to 43% less memory.
Modes, each updating the model with --batch examples per step:
  alone:<device>  the device trains the whole model alone (every worker; "single" in the paper)
  data_parallel   synchronous data parallelism over the devices that held the model alone, the
                  batch split in proportion to their measured speed alone (its strongest version)
  filter_split    the planner's one-group plan, planned for the step it runs here: one plain layout
                  with no parameter server (`plan(engine=False)`, as `edgemesh train --layout` trains
                  it), which needs less memory per device than the engine's replica; the benchmark
                  fails if it splits no dim
  even            every split dim split evenly over the one-group plan's devices (timed only: the
                  cost model's prediction of a layout the planner did not choose)
  memory_capped   the planner's named option `memory_fraction` (--memory-fraction, off with 0): the
                  one-group plan with no device predicted above that fraction of the whole model's
                  step on one device, whatever it costs in time; its figures beside the plan's own
                  are `memory_capped_option` (not the issue's checks, which are the planned hybrid's)
  hybrid          the planner's grid, planned as `edgemesh run` plans it: at the default strategy's
                  local iterations per commit (--commit-interval, ASHL's AHL preset H). With more
                  than one group, the groups run AHL's rounds concurrently, each on its own batch:
                  pull the global model from the ps, H local iterations, a dense push of the
                  change (engine/round_timer.py, the engine's replica graph), so the commits are
                  paid in its delay. A one-group grid needs no parameter server (EdgeMesh's ps is
                  between groups): it is then run, and so planned, as the one plain layout of
                  `filter_split`, and measured once (for both). The engine's own grid (what
                  `edgemesh run` would train, replicas' memory counted) is recorded as
                  `engine_grid_plan`, untimed.
Delay is ms per example: step time / batch; for the hybrid 1 / sum over groups of (batch / its
median time per local iteration while all groups run, a round's pull and push included). Its
groups commit asynchronously: the record also gives the delay charged for staleness as the planner
charges it (x (1 + s (G - 1)), grid.py), `effective_ms_per_example`; the checks use the delay as
measured, as the paper does. Memory first, each mode on a fresh testbed with the devices'
memory limits enforced (cgroup v1; a device past its budget is OOM-killed and named) and the CPU
quotas lifted (peaks do not depend on speed): peak resident memory above the idle server of every
device the mode uses. A mode that runs out of memory is
recorded with the error naming the device and is not timed. Timing then interleaves rounds of every
mode that fits on one testbed (limits off: only this phase runs there; the quotas lifted for the
set-up and each device's first run of its graph, restored before the counted warm-up step). Prints one JSON object;
exit code 1 if the filter split is not split or the hybrid plan does not run.

The cost model is checked on the same run: the step it predicts for the planned groups, the even
split and each device alone (the all-replicated alternative's groups) against the step measured
(`prediction_max_error`, at most 15% off).
"""
import argparse
import concurrent.futures
import dataclasses
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from claims_figures import PREDICTED_LAYOUTS, claims, compute_bound, option_figures, prediction_ratios  # noqa: E402
from edgemesh_tf.cluster import emulated_cluster, load_cluster  # noqa: E402
from edgemesh_tf.cluster.reach import of_testbed  # noqa: E402
from edgemesh_tf.cluster.watch import DeviceDied, watched  # noqa: E402
from edgemesh_tf.data import IMAGE_SHAPES  # noqa: E402
from edgemesh_tf.engine.config import SyncConfig  # noqa: E402
from edgemesh_tf.engine.round_timer import RoundRunner  # noqa: E402
from edgemesh_tf.engine.rules import commit_interval  # noqa: E402
from edgemesh_tf.mesh.layout import Layout, even_split_layout, single_device_layout  # noqa: E402
from edgemesh_tf.models import get_model  # noqa: E402
from edgemesh_tf.planner import PlanError, model_stats, plan, predict  # noqa: E402
from edgemesh_tf.planner.grid import GroupPlan, staleness_charge  # noqa: E402
from edgemesh_tf.planner.calibrate import calibrated, steps_to_time  # noqa: E402
from edgemesh_tf.profiling.run import budgets, profile_servers  # noqa: E402
from edgemesh_tf.profiling.step_timer import LayoutRunner, PeakWatch, measure_side_by_side  # noqa: E402

PAPER = {"delay_reduction_x": 3.2, "memory_change": -0.43}


def proportional(total: int, weights: list[float]) -> tuple[int, ...]:
    """`total` split in proportion to `weights`, every part >= 1, largest remainders first."""
    if total < len(weights):
        raise ValueError("cannot give %d devices at least one of %d examples" % (len(weights), total))
    spare = total - len(weights)
    raw = [spare * w / sum(weights) for w in weights]
    parts = [1 + int(r) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: -(raw[i] - int(raw[i])))[:total - sum(parts)]:
        parts[i] += 1
    return tuple(parts)


def mode_layouts(mode, plans, device, batch, dp_shares):
    """[(layout, batch)] of the replicas a mode runs concurrently; device(name) -> TF device string."""
    if mode.startswith("alone:"):
        return [(single_device_layout(device(mode.split(":", 1)[1])), batch)]
    if mode == "data_parallel":
        names = list(dp_shares)
        if len(names) == 1:
            return [(single_device_layout(device(names[0])), batch)]
        return [(Layout(mesh=(("batch", len(names)),), devices=tuple(device(n) for n in names),
                        rules=(("batch", "batch"),), sizes=(("batch", tuple(dp_shares[n] for n in names)),)), batch)]
    return [(Layout(mesh=g.layout.mesh, devices=tuple(device(n) for n in g.names), rules=g.layout.rules,
                    sizes=g.layout.sizes), g.batch) for g in plans[mode].groups]


def commits(mode, plans) -> bool:
    """Whether ``mode``'s replicas commit to the ps: the groups of a multi-group hybrid grid."""
    return mode == "hybrid" and len(plans["hybrid"].groups) > 1


def mode_commits(mode, plans, ps_device: str, every: int):
    """(ps device, H) when ``mode``'s replicas commit to the ps every H local iterations, else None."""
    return (ps_device, every) if commits(mode, plans) else None


class ModeRunner:
    """The replicas of one mode; step_ms() runs one step of each concurrently (wall ms) and keeps
    each replica's own step time in ``own[i]``. With ``commits`` = (ps device, H) a replica's step
    is an AHL round (engine/round_timer.py) and its own time is per local iteration."""

    def __init__(self, spec, layouts, target, master, tag, commits=None):
        if commits:
            ps, every = commits
            groups = [f"{tag}{i}" for i in range(len(layouts))]
            self.runners = [RoundRunner(spec, lay, b, target, ps_device=ps, group=groups[i], groups=groups,
                                        local_steps=every, initialize_ps=(i == 0), container=groups[i])
                            for i, (lay, b) in enumerate(layouts)]
        else:
            self.runners = [LayoutRunner(spec, lay, b, target, master, container=f"{tag}{i}")
                            for i, (lay, b) in enumerate(layouts)]
        self.batches = [b for _, b in layouts]
        self.own = [[] for _ in layouts]
        self.pool = concurrent.futures.ThreadPoolExecutor(len(self.runners))

    def step_ms(self):
        t0 = time.perf_counter()
        for own, f in zip(self.own, [self.pool.submit(r.step_ms) for r in self.runners]):
            own.append(f.result(timeout=600))
        return (time.perf_counter() - t0) * 1e3

    def ms_per_example(self):
        """1 / examples per ms, every replica at its own median step time (replicas are asynchronous)."""
        return 1.0 / sum(b / statistics.median(t) for b, t in zip(self.batches, self.own))

    def close(self):
        self.pool.shutdown()
        for r in self.runners:
            r.close()


def interleaved(runners, counts, warmup=2, restore_quotas=lambda: None):
    """{mode: its step_ms() timings}, ``counts[mode]`` of them, the modes taking turns one step each
    so that a shared machine's noise hits every mode alike, with each replica's own warm-up steps
    not counted: the first one (each device's first run of the graph) before ``restore_quotas()``,
    the others under the devices' quotas."""
    for r in runners.values():
        r.step_ms()
    restore_quotas()
    for r in runners.values():
        for _ in range(warmup - 1):
            r.step_ms()
        r.own = [[] for _ in r.own]
    return measure_side_by_side(runners, counts, round_steps=1, warmup=0)


def peak_memory(cluster, spec, mode, plans, batch, dp_shares, commit_every, steps=2) -> dict:
    """{"peak_bytes": {device: bytes above its idle RSS}} of the devices ``mode`` uses, on a fresh
    testbed with the memory limits enforced; {"out_of_memory": error} if a device's server died.
    The CPU quotas are lifted (each server's thread pool stays sized to its quota, so the same ops
    run at once): peaks do not depend on speed, and VGG-16 at 0.1 core takes minutes a mode."""
    with emulated_cluster(cluster) as em:
        em.lift_quotas()
        layouts = mode_layouts(mode, plans, em.device, batch, dp_shares)
        by_device = {em.device(n): n for n in em.devices}
        used = sorted({by_device[d] for lay, _ in layouts for d in lay.devices})
        watch = PeakWatch({n: em.devices[n].pid for n in used})

        def run():
            runner = ModeRunner(spec, layouts, em.session_target, cluster.master.device_string, mode,
                                mode_commits(mode, plans, em.device(ps_name(cluster)), commit_every))
            for _ in range(steps):
                runner.step_ms()
            return runner

        try:
            runner = watched(run, em.check, MODE_TIMEOUT_S, "mode %s" % mode)
        except DeviceDied as dead:  # the runner is left to the teardown: closing it waits on the dead server
            return {"out_of_memory": str(dead), "devices": used}
        runner.close()
        return {"peak_bytes": watch.peaks(), "devices": used}


def ps_name(cluster) -> str:
    return cluster.by_role("ps")[0].name


MODE_TIMEOUT_S = 900.0  # set-up and steps of one mode in the memory phase (VGG-16 on a 0.15-core device: ~3 s a step)


def _progress(what: str, t_start: float) -> None:
    print("[claims] %s (%.0f s in all)" % (what, time.time() - t_start), file=sys.stderr, flush=True)


def even_plan(one_group, profile, spec, stats, batch):
    """The one-group plan's devices with every split dim split evenly (for the cost model's check)."""
    names = one_group.groups[0].names
    layout, shares = even_split_layout(spec.split_dims(), names)
    pred = predict([profile.device(n) for n in names], stats, shares, profile_batch=profile.batch)
    return dataclasses.replace(one_group, kind="even", groups=(GroupPlan(names, layout, pred, batch),))


def per_iteration_ms(pred, commit_every: int | None) -> float:
    """A group's predicted ms per local iteration: its step, plus its ps push and pull over the
    iterations between commits when it commits (None: it does not)."""
    return pred.step_ms + (pred.ps_sync_ms / commit_every if commit_every else 0.0)


def split_dims(p) -> list[str]:
    """The dims some group of plan ``p`` splits."""
    return sorted({name for g in p.groups for name, _ in g.layout.sizes if len(g.names) > 1})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="layouts/pi4.yaml")
    ap.add_argument("--model", default="vgg16")
    ap.add_argument("--dataset", default="digits32", choices=sorted(IMAGE_SHAPES), help="the input shape only")
    ap.add_argument("--batch", type=int, default=32, help="examples per model update in every mode")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per mode")
    ap.add_argument("--commit-interval", type=int, default=commit_interval(SyncConfig()),
                    help="local iterations per commit of a multi-group hybrid grid (default: what `edgemesh run` "
                         "plans for, the default strategy's)")
    ap.add_argument("--hybrid-rounds", type=int, default=3,
                    help="timed rounds of a multi-group hybrid grid (each --commit-interval iterations)")
    ap.add_argument("--memory", type=int, default=1, help="0: skip the memory phase (quick runs; every mode is timed)")
    # 0.55 measured 0.574 of the largest alone (run 5, predicted 262 MiB on jetson0); on that run's profile
    # 0.53 brings in pi3 at +16% predicted delay, 253 MiB predicted on the largest
    ap.add_argument("--memory-fraction", type=float, default=0.53,
                    help="the memory_capped mode's cap: no device above this fraction of the whole model's predicted "
                         "step on one device (0: no such mode)")
    args = ap.parse_args()
    for flag in ("batch", "steps", "commit_interval", "hybrid_rounds"):
        if getattr(args, flag) < 1:
            ap.error("--%s must be >= 1, got %d" % (flag.replace("_", "-"), getattr(args, flag)))
    if not 0 <= args.memory_fraction <= 1:
        ap.error("--memory-fraction must be in [0, 1] (0: no memory_capped mode), got %g" % args.memory_fraction)
    t_start = time.time()
    spec = get_model(args.model, IMAGE_SHAPES[args.dataset], 10)
    cluster = load_cluster(args.cluster)
    workers = [d.name for d in cluster.workers]
    out = {"cluster": args.cluster, "model": args.model, "dataset": args.dataset, "batch": args.batch,
           "steps": args.steps, "commit_interval": args.commit_interval, "paper": PAPER, "modes": {}, "errors": []}
    with emulated_cluster(cluster, memory="off") as em:
        profile = profile_servers(cluster, spec, args.batch, of_testbed(em),
                                  **steps_to_time(budgets(cluster), spec, args.batch))
    _progress("profiled", t_start)
    out["profile"] = json.loads(profile.to_json())  # as measured: lets the cost model be re-checked offline
    # the planner plans from the calibrated layer times (planner/calibrate.py); as measured reported beside them
    cal = calibrated(profile, spec)
    out["compute_scale"] = cal.compute_scale
    out["split_overhead_ms_per_peer"] = {d.name: d.split_overhead_ms for d in cal.devices}
    stats = model_stats(spec, args.batch, engine=False)  # the one-group layouts run here without a ps

    def uncalibrated_step_ms(names, sizes, commit_every=None) -> float:
        return round(per_iteration_ms(predict([profile.device(n) for n in names], stats, dict(sizes),
                                              profile_batch=profile.batch,
                                              ps_bandwidth_mbit=profile.ps_bandwidth_mbit), commit_every), 1)

    grid = plan(profile, spec, batch=args.batch, commit_interval=args.commit_interval)
    plans = {"filter_split": plan(profile, spec, batch=args.batch, engine=False)}
    # a one-group grid commits to no ps here: it runs, and so is planned, as the plain layout; the
    # engine's own is recorded (untimed) as engine_grid
    if len(grid.groups) > 1:
        plans["hybrid"] = grid
    else:
        plans["hybrid"], plans["engine_grid"] = plans["filter_split"], grid
    plans["even"] = even_plan(plans["filter_split"], cal, spec, stats, args.batch)
    if args.memory_fraction:
        try:
            plans["memory_capped"] = plan(profile, spec, batch=args.batch, engine=False,
                                          memory_fraction=args.memory_fraction)
        except PlanError as e:
            out["memory_capped_plan"] = {"error": str(e)}
    for m, p in plans.items():
        every = args.commit_interval if commits(m, plans) else None
        out[f"{m}_plan"] = {"kind": p.kind, "split_dims": split_dims(p), "predicted_examples_per_sec":
                            round(p.examples_per_sec, 2), "alternatives": {k: round(v, 2) for k, v in p.alternatives},
                            "candidates": {k: round(v, 2) for k, v in p.candidates}, "commit_interval": every,
                            "idle": list(p.idle),
                            "groups": [{"devices": list(g.names), "sizes": {k: list(v) for k, v in g.layout.sizes},
                                        "predicted_step_ms": round(per_iteration_ms(g.prediction, every), 1),
                                        "predicted_ps_sync_ms": round(g.prediction.ps_sync_ms, 1),
                                        "uncalibrated_step_ms": uncalibrated_step_ms(g.names, g.layout.sizes, every),
                                        "predicted_memory_mib": [round(b / 2 ** 20, 1) for b in g.prediction.memory_bytes],
                                        "predicted_compute_ms": [round(x, 1) for x in g.prediction.compute_ms],
                                        "predicted_comm_ms": [round(x, 1) for x in g.prediction.comm_ms]}
                                       for g in p.groups]}
    if args.memory_fraction:
        out["memory_capped_plan"]["memory_fraction"] = args.memory_fraction
    if not out["filter_split_plan"]["split_dims"]:
        out["errors"].append("filter_split: the planner's one-group plan splits no dim (%s); nothing to measure"
                             % out["filter_split_plan"]["groups"])
    speed = {d.name: 1.0 / sum(t.compute_ms for t in d.layers) for d in profile.devices}
    out["profiled_speed"] = {n: round(v / max(speed.values()), 3) for n, v in speed.items()}
    alone = [f"alone:{n}" for n in workers]
    dp = {n: 0 for n in workers}  # the devices that hold the model alone, set by the memory phase
    if args.memory:
        for mode in alone:
            out["modes"][mode] = peak_memory(cluster, spec, mode, plans, args.batch, {}, args.commit_interval)
            _progress("memory of " + mode, t_start)
        dp = {n: 0 for n in workers if "peak_bytes" in out["modes"][f"alone:{n}"]}
    if dp:
        shares = proportional(args.batch, [speed[n] for n in dp])
        dp = dict(zip(dp, shares))
        out["data_parallel_shares"] = dp
    # the grid may choose the one-group plan itself: it is then measured once, as the hybrid
    same_plan = out["filter_split_plan"]["groups"] == out["hybrid_plan"]["groups"]
    out["filter_split_is_the_hybrid_plan"] = same_plan
    modes = alone + (["data_parallel"] if dp else []) + (["filter_split"] if not out["errors"] and not same_plan
                                                          else []) + ["hybrid"]
    modes += ["memory_capped"] if "memory_capped" in plans else []
    for mode in modes[len(alone):] if args.memory else ():
        out["modes"][mode] = peak_memory(cluster, spec, mode, plans, args.batch, dp, args.commit_interval)
        _progress("memory of " + mode, t_start)
    for mode, rec in out["modes"].items():
        if "peak_bytes" in rec:
            rec["max_peak_mib"] = round(max(rec["peak_bytes"].values()) / 2 ** 20, 1)
            rec["mean_peak_mib"] = round(statistics.mean(rec["peak_bytes"].values()) / 2 ** 20, 1)
    timed = [m for m in modes if "out_of_memory" not in out["modes"].get(m, {})] + ["even"]
    with emulated_cluster(cluster, memory="off") as em:
        runners = {}
        try:
            em.lift_quotas()  # set-up and first runs only: restored before the counted warm-up and the timing
            for m in timed:
                runners[m] = ModeRunner(spec, mode_layouts(m, plans, em.device, args.batch, dp),
                                        em.session_target, cluster.master.device_string, m.replace(":", "_"),
                                        mode_commits(m, plans, em.device(ps_name(cluster)), args.commit_interval))
            counts = {m: args.hybrid_rounds if commits(m, plans) else args.steps for m in timed}
            times = interleaved(runners, counts, restore_quotas=em.restore_quotas)
        finally:
            for r in runners.values():
                r.close()
    _progress("timed " + ", ".join(timed), t_start)
    for m in timed:
        out["modes"].setdefault(m, {}).update(
            median_step_ms=[round(statistics.median(t), 1) for t in runners[m].own],
            examples_per_step=runners[m].batches, ms_per_example=round(runners[m].ms_per_example(), 3),
            steps=len(times[m]))
    if commits("hybrid", plans) and "hybrid" in timed:
        rec, g = out["modes"]["hybrid"], len(plans["hybrid"].groups)
        rec.update(rounds=rec.pop("steps"), local_steps_per_round=args.commit_interval,
                   effective_ms_per_example=round(rec["ms_per_example"] * staleness_charge(g, plans["hybrid"].staleness_penalty), 3))
    if same_plan and not out["errors"] and "hybrid" in timed:
        out["modes"]["filter_split"] = {**out["modes"]["hybrid"], "same_plan_as": "hybrid"}
        timed.append("filter_split")
    for m in PREDICTED_LAYOUTS:  # the planner's step prediction against the step measured here
        if m in timed:
            for grp, measured in zip(out[f"{m}_plan"]["groups"], out["modes"][m]["median_step_ms"]):
                grp["measured_step_ms"] = measured
                grp["predicted_over_measured"] = round(grp["predicted_step_ms"] / measured, 3)
                grp["uncalibrated_over_measured"] = round(grp["uncalibrated_step_ms"] / measured, 3)
    for n in workers:  # each device alone: the cost model's step, calibrated and as measured, against the measured one
        rec = out["modes"].get(f"alone:{n}", {})
        if rec.get("median_step_ms"):
            ms = predict([cal.device(n)], stats, {}, profile_batch=profile.batch).step_ms
            raw_ms = uncalibrated_step_ms([n], ())
            rec.update(predicted_step_ms=round(ms, 1), uncalibrated_step_ms=raw_ms,
                       predicted_over_measured=round(ms / rec["median_step_ms"][0], 3),
                       uncalibrated_over_measured=round(raw_ms / rec["median_step_ms"][0], 3))
    if "hybrid" not in timed:
        out["errors"].append("hybrid: the planned grid ran out of memory: %s" % out["modes"]["hybrid"]["out_of_memory"])
    out["checks"] = claims(out)
    if "memory_capped" in plans:
        out["memory_capped_option"] = option_figures(out, "memory_capped")
    out["compute_bound"] = compute_bound(out)
    raw = prediction_ratios(out, "uncalibrated_over_measured")
    out["uncalibrated_max_error"] = round(float(max(abs(r - 1) for r in raw.values())), 3) if raw else None
    out["seconds"] = round(time.time() - t_start, 1)
    print(json.dumps(out, indent=1, default=lambda o: o.item()))  # numpy scalars as plain numbers
    if out["errors"]:
        print("edgemesh_claims: " + "; ".join(out["errors"]), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
