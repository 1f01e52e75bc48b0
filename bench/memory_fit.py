"""Measured peak memory per device against the planner's memory model, and the model's fit.

    python -m bench.memory_fit [--models vgg,vgg_wide,vgg_m,vgg16] [--batches 8,32] [--ways 1,2,4]
        [--dataset cifar10] [--steps 10] [--replica-models vgg16,vgg_wide] [--simd_bits 512,128] [--write]

For every model, batch and even filter split over `ways` devices, a fresh set of TF servers (one
per device, no CPU or memory limit: the peak is what the device needs) trains the split for --steps
steps (`measure`); each server's peak resident memory above its idle RSS is a point. Ten steps by
default: a server's peak creeps up over its first steps as freed buffers fragment its heap, and
levels off by about the tenth, where a long run lives. Every point is measured at each SIMD width of
--simd_bits (oneDNN picks other kernels and scratch at 128 bits, as the Pi-class devices compute),
and one fit covers them all. The engine replicas of --replica-models (`measure(replica=True)`: its anchors,
residuals and the pull's and push's buffers), split the same ways at the largest batch, fit the
replica terms. `report` fits the memory model's coefficients (planner/memory.py) to all points by
relative least squares and gives every point with the fitted and the plain-count (`COUNTED`)
prediction, the largest error of each and each model's error when it is left out of the fit; the
fit's error over all points is the planner's memory headroom. --write stores the fit in
edgemesh_tf/planner/memory_fit.json, which the planner then uses. Prints one JSON object.
"""
import contextlib
import dataclasses
import json
import math
import os
import sys
import time

from bench import cli
from edgemesh_tf.cluster import emulated_cluster, free_ports, parse_cluster
from edgemesh_tf.data import IMAGE_SHAPES
from edgemesh_tf.engine import RoundRunner
from edgemesh_tf.mesh import even_split_layout, single_device_layout
from edgemesh_tf.models import get_model
from edgemesh_tf.planner import memory, model_stats
from edgemesh_tf.profiling import PeakWatch, measure_memory

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _testbed(ways: int, simd_bits: int):
    """A cluster of `ways` workers computing at `simd_bits`, a ps and a chief on free loopback ports."""
    ports = free_ports(ways + 2)
    return parse_cluster({"name": "memfit%d" % ways, "devices": [
        {"name": "w%d" % i, "role": "worker", "host": "127.0.0.1", "port": p, "simd_bits": simd_bits}
        for i, p in enumerate(ports[:ways])]
        + [{"name": "ps0", "role": "ps", "host": "127.0.0.1", "port": ports[ways]},
           {"name": "chief", "role": "chief", "host": "127.0.0.1", "port": ports[ways + 1]}]})


def measure(spec, batch: int, ways: int, steps: int, simd_bits: int, replica: bool = False):
    """([(units held per dim, peak bytes)] of each device training `spec` split evenly over `ways`,
    peak bytes of the server hosting the session, None for a replica). The session is hosted apart (a
    "chief" server, which also holds the input placeholders), as the benchmarks do: a session's master
    costs its host tens of MiB (the graph, its optimisation and partitions), which would hide the
    devices' own. ``replica``: an engine replica (RoundRunner: pull, a local iteration, a dense push,
    `steps` rounds) instead of a plain training step."""
    cluster = _testbed(ways, simd_bits)
    names = [d.name for d in cluster.workers]
    stats = model_stats(spec, batch)
    with emulated_cluster(cluster, network="userspace", compute="off", memory="off") as em:
        devices = [em.device(n) for n in names]
        layout, shares = (single_device_layout(devices[0]), {}) if ways == 1 else even_split_layout(
            spec.split_dims(), devices)
        if replica:
            watch = PeakWatch({n: em.devices[n].pid for n in names})
            with contextlib.closing(RoundRunner(spec, layout, batch, em.session_target, ps_device=em.device("ps0"),
                                                group="g", groups=["g"], local_steps=1, initialize_ps=True)) as runner:
                for _ in range(steps):
                    runner.round_ms()
            peaks = watch.peaks()
        else:
            peaks = measure_memory(spec, layout, batch, em.session_target, em.device("chief"),
                                   {n: em.devices[n].pid for n in names + ["chief"]}, names + ["chief"],
                                   steps=steps).peak_bytes
    return [(_held(stats, shares, i), peaks[n]) for i, n in enumerate(names)], peaks.get("chief")


def _held(stats, shares, i: int) -> list[int]:
    """Units of each dim device ``i`` holds: its share of a split dim, else the whole dim."""
    return [shares[d.name][i] if d.name in shares else d.units for d in stats.dims]


def recorded(result: dict):
    """(points, sessions, replicas, their SIMD widths) of an earlier run's JSON (``main``'s output), for a
    re-fit of the same measurements: each row's model, batch, ways and device give its stats and the
    units it held in the even split that was measured."""
    def stats_of(row):
        spec = get_model(row["model"], IMAGE_SHAPES[result["dataset"]], 10)
        return spec, model_stats(spec, row["batch"])

    def points(rows):
        out = []
        for row in rows:
            spec, stats = stats_of(row)
            w = row["ways"]
            shares = even_split_layout(spec.split_dims(), ["w%d" % i for i in range(w)])[1] if w > 1 else {}
            out.append((row["model"], stats, _held(stats, shares, row["device"]), row["measured_mib"] * 2 ** 20,
                        w, row["device"]))
        return out
    sessions = [(row["model"], stats_of(row)[1], row["ways"], row["measured_mib"] * 2 ** 20)
                for row in result.get("session_hosts", [])]
    return (points(result["points"]), sessions, points(result.get("replicas", [])),
            [row["simd_bits"] for row in result["points"]], [row["simd_bits"] for row in result.get("replicas", [])])


def report(points, models, sessions=(), replicas=()) -> dict:
    """The fit, every point's predictions, and the leave-one-model-out errors (pure). points: [(model,
    ModelStats, units held per dim, peak bytes, ways, device index)]; sessions: [(model, ModelStats,
    ways, peak bytes of the session's host)]; replicas: points of engine replicas (as points), which
    fit the replica terms. The fit's error (``fit_error``) is the largest factor, over both, by which a
    measured peak exceeds its prediction, less 1; ``model_errors`` the same per model (a plan of that
    model keeps it as its headroom); ``unseen_error`` the largest such factor on a model left out of the
    fit (the headroom of a model never measured)."""
    fit_points = lambda pts: [(s, h, w, i, p) for _, s, h, p, w, i in pts]  # noqa: E731
    fitted = memory.fit(fit_points(points), [(s, w, p) for _, s, w, p in sessions], source="bench/memory_fit.py")
    if replicas:
        fitted = memory.fit_replica(fitted, fit_points(replicas))
    worst = lambda mm, pts, r=False: round(max(abs(mm.device_bytes(s, h, w, r, i) / p - 1)  # noqa: E731
                                               for s, h, w, i, p in pts), 3)
    replica_error = worst(fitted, fit_points(replicas), True) if replicas else 0.0

    def under(plain, replica, mm=None) -> float:
        """The largest measured / predicted - 1 (>= 0) of ``mm`` (default: the fit), rounded up:
        predicted x (1 + it) reaches every peak. (The largest |predicted / measured - 1| does not: an
        error of 22.2% can be a peak 28.5% over its prediction.)"""
        ratios = [p / (mm or fitted).device_bytes(s, h, w, r, i) for pts, r in ((plain, False), (replica, True))
                  for s, h, w, i, p in fit_points(pts)]
        return round(math.ceil(max(0.0, max(ratios) - 1) * 1000) / 1000, 3)

    def unseen(m) -> float:
        """``under`` of model ``m``'s peaks by a fit of the other models' alone: what the fit misses on a
        model it never measured."""
        rest, rest_replicas = [pt for pt in points if pt[0] != m], [pt for pt in replicas if pt[0] != m]
        mm = memory.fit(fit_points(rest), ())
        if len(rest_replicas) >= 2:
            mm = memory.fit_replica(mm, fit_points(rest_replicas))
        own = [pt for pt in replicas if pt[0] == m] if len(rest_replicas) >= 2 else []
        return under([pt for pt in points if pt[0] == m], own, mm)
    measured = [m for m in models if any(pt[0] == m for pt in points)]
    by_model = {m: under([pt for pt in points if pt[0] == m], [pt for pt in replicas if pt[0] == m])
                for m in measured}
    left_out = [unseen(m) for m in measured if sum(pt[0] != m for pt in points) >= 4]
    fitted = dataclasses.replace(fitted, fit_error=under(points, replicas),
                                 model_errors=tuple(sorted(by_model.items())),
                                 unseen_error=max(left_out, default=0.0))

    def rows(pts, replica=False):
        mib = lambda mm, s, h, w, i: round(mm.device_bytes(s, h, w, replica, i) / 2 ** 20, 1)  # noqa: E731
        return [{"model": m, "batch": s.batch, "ways": w, "device": i, "measured_mib": round(p / 2 ** 20, 1),
                 "fitted_mib": mib(fitted, s, h, w, i), "counted_mib": mib(memory.COUNTED, s, h, w, i)}
                for m, s, h, p, w, i in pts]
    out = {"model": fitted.to_dict(), "points": rows(points),
           "fitted_max_abs_rel_error": max(worst(fitted, fit_points(points)), replica_error),
           "fitted_max_under_prediction": fitted.fit_error,
           "counted_max_abs_rel_error": worst(memory.COUNTED, fit_points(points))}
    if replicas:
        out.update(replicas=rows(replicas, True), replica_max_abs_rel_error=replica_error)
    out["left_out_model_max_abs_rel_error"] = {
        m: worst(memory.fit(fit_points([pt for pt in points if pt[0] != m]), ()),
                 fit_points([pt for pt in points if pt[0] == m]))
        for m in models if any(pt[0] == m for pt in points) and sum(pt[0] != m for pt in points) >= 4}
    out["within_15pct"] = out["fitted_max_abs_rel_error"] <= 0.15
    if sessions:
        out["session_hosts"] = [{"model": m, "batch": s.batch, "ways": w, "measured_mib": round(p / 2 ** 20, 1),
                                 "fitted_mib": round(fitted.session_host_bytes(s, w) / 2 ** 20, 1)}
                                for m, s, w, p in sessions]
        out["session_max_abs_rel_error"] = round(max(abs(fitted.session_host_bytes(s, w) / p - 1)
                                                     for _, s, w, p in sessions), 3)
    return out


def measure_all(args):
    """(points, sessions, replicas, their SIMD widths), measured: every model, batch and split of ``args``
    at each SIMD width."""
    jobs = [(m, b, False) for m in args.models for b in args.batches]  # (model, batch, an engine replica)
    jobs += [(m, max(args.batches), True) for m in args.replica_models]
    points, sessions, replicas, point_bits, replica_bits = [], [], [], [], []
    for bits in args.simd_bits:
        for m, b, replica in jobs:
            spec = get_model(m, IMAGE_SHAPES[args.dataset], 10)
            stats = model_stats(spec, b)
            for w in args.ways:
                devices, session = measure(spec, b, w, args.steps, bits, replica=replica)
                (replicas if replica else points).extend((m, stats, held, peak, w, i)
                                                         for i, (held, peak) in enumerate(devices))
                (replica_bits if replica else point_bits).extend([bits] * w)
                if not replica:
                    sessions.append((m, stats, w, session))
                print(f"[memory_fit] {m}{' replica' if replica else ''} batch {b} on {w} at {bits} bits: "
                      f"{[round(peak / 2 ** 20) for _, peak in devices]} MiB"
                      + (f", session host {session / 2 ** 20:.0f} MiB" if session else ""), file=sys.stderr, flush=True)
    return points, sessions, replicas, point_bits, replica_bits


def main():
    args = cli.parser(__doc__, (
        ("models", ["vgg", "vgg_wide", "vgg_m", "vgg16"]), ("batches", [8, 32]), ("ways", [1, 2, 4]),
        ("dataset", "cifar10", None, {"choices": sorted(IMAGE_SHAPES)}),
        ("steps", 10, "steps (replicas: rounds) per point, see above"),
        ("replica-models", ["vgg16", "vgg_wide"],
         "models whose engine replicas are measured at the largest batch (the replica terms)"),
        ("simd_bits", [512, 128], "SIMD widths the workers compute at (cluster/simd.py)"),
        ("refit", "", "fit the points recorded in this JSON file (an earlier run's output) instead of measuring"),
        ("write", False, "store the fit in " + memory.FIT_PATH))).parse_args()
    t0 = time.time()
    if args.refit:
        with open(args.refit) as f:
            result = json.load(f)
        points, sessions, replicas, point_bits, replica_bits = recorded(result)
        args.models = sorted({m for m, *_ in points})
        args.dataset, args.steps = result["dataset"], result["steps"]
    else:
        points, sessions, replicas, point_bits, replica_bits = measure_all(args)
    fit = report(points, args.models, sessions, replicas)
    for rows, bits in ((fit["points"], point_bits), (fit.get("replicas", []), replica_bits)):
        for row, b in zip(rows, bits):
            row["simd_bits"] = b
    out = {"dataset": args.dataset, "steps": args.steps, **fit, "seconds": round(time.time() - t0, 1),
           "command": " ".join(["python", "-m", "bench.memory_fit", *sys.argv[1:]])}
    if args.write:
        keep = ("model", "command", "fitted_max_abs_rel_error", "fitted_max_under_prediction",
                "left_out_model_max_abs_rel_error")
        with open(memory.FIT_PATH, "w") as f:
            json.dump({**{k: out[k] for k in keep}, "date": time.strftime("%Y-%m-%d"), "points": len(points),
                       "replica_points": len(replicas)}, f, indent=1)
    cli.emit(out)


if __name__ == "__main__":
    main()
