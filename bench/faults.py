"""Faults on the emulated testbed, one JSON row per scenario (issue 7), every scenario one function.

    python -m bench.faults --cluster layouts/edge4.yaml [--target 0.97] [--scenarios a,b,c,d,e] [--quick]

  a  the slowest device killed at 30% of a fault-free ASHL run's time to target: the target is still
     reached, in <= 1.3x the fault-free time
  b  a device killed during BSP, and during ASHL's SHL: no hang, the run finishes
  c  the ps killed: the job stops within 30 s naming the ps task; a restart resumes from the checkpoint
  d  the fastest device slowed 3x mid-run: ASHL re-plans, its throughput >= 80% of a fresh plan's
  e  a killed device restarted, re-admitted and used again: ASHL with one group per device, and ASP with
     two groups of two devices (the victim's group re-planned over the device left first)
All on one testbed, each scenario from every server at its configured speed; devices are SIGKILLed at
the chief's first record meeting the scenario's condition. --quick: a smoke run.
"""
import os
import signal
import sys
import tempfile
import threading
import time
import traceback

from bench import cli
from edgemesh_tf.cluster import emulated_cluster, load_cluster
from edgemesh_tf.engine import GroupSpec, PSLost, SyncConfig, default_groups, job_config, run_job, records


def _job(cluster, em, args, logdir, sync, kill=None, act=None, **kw):
    """Runs one job; kill = (device, predicate(record)) SIGKILLs the device's server, act = (function(),
    predicate(record)) calls the function, the first time the predicate holds. Returns (final or error,
    {"t": training s, "at": monotonic s} of the kill or act if it happened, wall s)."""
    done = {}
    if kill:
        act = (lambda: os.kill(em.devices[kill[0]].pid, signal.SIGKILL), kill[1])

    def emit(rec):
        if act and not done and act[1](rec):
            act[0]()
            done.update(t=getattr(rec, "t", None), at=time.monotonic())
    kw = {"target_accuracy": args.target, "time_budget_s": args.budget_s, "eval_interval_s": 0.5,
          "checkpoint_interval_s": 5.0, "lost_after_s": 3.0, "wait_timeout_s": 60.0, **kw}
    cfg = job_config(cluster, default_groups(cluster, 32), sync=sync, logdir=logdir, **kw)
    t0 = time.monotonic()
    try:
        out = run_job(cfg, cluster, testbed=em, emit=emit, fast_setup=True)
    except (PSLost, RuntimeError, TimeoutError) as e:
        out = e
    return out, done, round(time.monotonic() - t0, 1)


def _as_configured(em) -> None:
    """Every server running and every device at its configured speed, as a scenario expects at its
    start (the scenario before may have killed or slowed one)."""
    em.restart_dead()
    for name in em.slowed():
        em.set_slowdown(name, 1.0)


def _get(final, key):
    """A field of a job's final summary; None if the job failed (`final` is then its error)."""
    return final.get(key) if isinstance(final, dict) else None


def _error(final):
    return None if isinstance(final, dict) else str(final)


def scenario_a(cluster, args, work, em):
    slow = min(cluster.workers, key=lambda d: (d.speed or 1.0, d.name)).name
    base, _, _ = _job(cluster, em, args, os.path.join(work, "a-base"), SyncConfig(strategy="ashl"))
    t_base = _get(base, "time_to_target_s")
    row = {"scenario": "a", "what": f"ASHL, slowest device {slow} killed at 30% of the fault-free time to "
           "target", "fault_free_time_to_target_s": t_base}
    if t_base is None:
        return {**row, "ok": False, "error": f"the fault-free run did not reach {args.target}"}
    final, killed, _ = _job(cluster, em, args, os.path.join(work, "a-fault"), SyncConfig(strategy="ashl"),
                            kill=(slow, lambda r: isinstance(r, records.Eval) and r.t >= 0.3 * t_base))
    t = _get(final, "time_to_target_s")
    ratio = None if t is None else round(t / t_base, 3)
    return {**row, "killed_at_s": killed.get("t"), "time_to_target_s": t, "over_fault_free": ratio,
            "lost_groups": _get(final, "lost_groups"), "ok": bool(killed) and ratio is not None and ratio <= 1.3,
            "error": _error(final)}


def scenario_b(cluster, args, work, em):
    rows, victim = [], cluster.workers[1].name
    for label, sync, when, at in (
            ("BSP", SyncConfig(strategy="bsp"), lambda r: isinstance(r, records.Eval) and r.t >= args.b_kill_s,
             f" at {args.b_kill_s:.0f} s"),
            ("SHL", SyncConfig(strategy="ashl"), lambda r: isinstance(r, records.Phase) and r.new == "shl",
             " at the switch to SHL")):
        _as_configured(em)  # the victim killed by the run before is started again
        final, killed, wall = _job(cluster, em, args, os.path.join(work, "b-" + label), sync,
                                   kill=(victim, when), time_budget_s=args.b_budget_s, target_accuracy=None)
        finished = isinstance(final, dict) and final["why"].startswith("time budget")
        lost = _get(final, "lost_groups")
        rows.append({"scenario": "b", "what": f"{label}: device {victim} killed{at}", "killed_at_s": killed.get("t"),
                     "finished": finished, "wall_s": wall, "budget_s": args.b_budget_s, "lost_groups": lost,
                     "ok": bool(killed) and finished and lost == [victim], "error": _error(final)})
    return rows


def scenario_c(cluster, args, work, em):
    ps = next(d.name for d in cluster.devices if d.role == "ps")
    logdir = os.path.join(work, "c")
    err, killed, _ = _job(cluster, em, args, logdir, SyncConfig(strategy="ashl"), target_accuracy=None,
                          kill=(ps, lambda r: isinstance(r, records.Checkpoint) and r.global_steps > 0))
    stopped_after = round(time.monotonic() - killed["at"], 1) if killed else None
    named = isinstance(err, PSLost) and "/job:ps/task:0 (%s)" % ps in str(err)
    ckpt = records.read(logdir, records.Checkpoint)[-1]
    if killed:  # the ps comes back empty, at the same address, as a rebooted machine would
        em.restart_device(ps)
    final, _, _ = _job(cluster, em, args, logdir, SyncConfig(strategy="ashl"), target_accuracy=None,
                       time_budget_s=ckpt.t + 5.0)
    resume = records.read(logdir, records.Resume)
    resumed = bool(resume) and resume[-1].global_steps == ckpt.global_steps
    return {"scenario": "c", "what": f"ps {ps} killed after the first checkpoint, then the job restarted",
            "stopped_after_s": stopped_after, "error_names_ps": named, "error": str(err).splitlines()[0][:200],
            "resumed_from_checkpoint": resumed, "resumed_global_steps": resume[-1].global_steps if resume else None,
            "ok": named and stopped_after is not None and stopped_after <= 30 and resumed
            and isinstance(final, dict)}


def scenario_d(cluster, args, work, em):
    victim = max(cluster.workers, key=lambda d: (d.speed or 1.0, d.name)).name
    budget, slow_at = args.d_budget_s, 0.3 * args.d_budget_s
    window = 0.6 * budget  # the last 40% of the run: after the slow-down and the re-plan
    sync = SyncConfig(strategy="ashl", shl_loss=1e-9, replan=True)  # AHL throughout: one phase, so rates compare
    runs = {}
    for label, slowdown, act in (
            ("slowed_mid_run", 1.0, (lambda: em.set_slowdown(victim, 3.0),
                                     lambda r: isinstance(r, records.Eval) and r.t >= slow_at)),
            ("fresh_plan", 3.0, None)):
        logdir = os.path.join(work, "d-" + label)
        em.set_slowdown(victim, slowdown)
        final, info, _ = _job(cluster, em, args, logdir, sync, act=act, time_budget_s=budget, target_accuracy=None)
        rates = [r.examples_per_sec for r in records.read(logdir, records.Eval) if r.t >= window]  # examples/s
        runs[label] = {"examples_per_sec": sum(rates) / len(rates) if rates else None, "slowed_at_s": info.get("t"),
                       "drift_replans": [{"t": r.t, "why": r.why[:160]} for r in records.read(logdir, records.Replan)
                                         if r.why.startswith("drift")], "error": _error(final)}
    a, b = runs["slowed_mid_run"]["examples_per_sec"], runs["fresh_plan"]["examples_per_sec"]
    ratio = None if not a or not b else round(a / b, 3)
    replanned = any(victim in r["why"] and r["t"] >= slow_at for r in runs["slowed_mid_run"]["drift_replans"])
    return {"scenario": "d", "what": f"ASHL, {victim} slowed 3x at {slow_at:.0f} s: re-planned, throughput in the "
            f"last {budget - window:.0f} s against a fresh plan for the new speeds", **runs,
            "throughput_over_fresh_plan": ratio, "replanned_on_drift": replanned,
            "ok": replanned and ratio is not None and ratio >= 0.8}


def _first(logdir, predicate, job, timeout_s):
    """The first chief record meeting predicate, waited for at most timeout_s (None if none)."""
    deadline = time.monotonic() + timeout_s
    while True:
        hit = next((r for r in records.read(logdir) if predicate(r)), None)
        if hit is not None or time.monotonic() >= deadline or not job.is_alive():
            return hit
        time.sleep(0.2)


def _planned_groups(cluster):
    """edge0-edge1 and edge2-edge3, filters split 2:1 and 1:1 (the first four workers)."""
    w = cluster.workers[:4]

    def group(a, b, frac):
        split = lambda n: [int(n * frac), n - int(n * frac)]
        return GroupSpec(f"{w[a].name}-{w[b].name}", {
            "mesh": {"model": 2}, "devices": [w[a].device_string, w[b].device_string],
            "rules": {"conv1": "model", "conv2": "model"}, "sizes": {"conv1": split(32), "conv2": split(64)}}, 32)
    return group(0, 1, 2 / 3), group(2, 3, 1 / 2)


def _readmission_run(cluster, em, logdir, label, sync, groups, victim, budget_s):
    """Kills `victim` once training has begun, restarts its server once its group is lost (and, for a
    multi-device group, once that group was re-planned and re-admitted without it)."""
    cfg = job_config(cluster, groups, sync=sync, logdir=logdir, time_budget_s=budget_s, eval_interval_s=0.5,
                     checkpoint_interval_s=30.0, lost_after_s=3.0, wait_timeout_s=60.0)
    spec = next(g for g in groups if victim in cfg.names_of(g.layout["devices"]))
    group, multi = spec.name, len(spec.layout["devices"]) > 1
    out, row = {}, {"scenario": "e", "what": label}

    def train():
        try:
            out["final"] = run_job(cfg, cluster, testbed=em, fast_setup=True)
        except Exception as e:  # noqa: BLE001 - reported in the row, its traceback on stderr
            traceback.print_exc()
            out["error"] = repr(e)
    job = threading.Thread(target=train, daemon=True)
    job.start()
    started = _first(logdir, lambda r: isinstance(r, records.Eval) and r.global_steps >= 20
                     and r.phase != "profiling", job, 240)
    if started:
        os.kill(em.devices[victim].pid, signal.SIGKILL)
        row["killed_at_s"] = started.t
        lost = _first(logdir, lambda r: isinstance(r, records.Lost) and r.group == group, job, 60)
        if lost and multi:
            first = _first(logdir, lambda r: isinstance(r, records.Readmitted) and r.group == group, job, 60)
            row["replanned_over"] = first and first.devices
        if lost:
            em.restart_device(victim)
            row["device_restarted_at_s"] = round(records.read(logdir)[-1].t, 1)
    job.join(budget_s + 180)
    final = out.get("final")
    readmits = [r for r in records.read(logdir, records.Readmitted) if r.group == group]
    last = readmits[-1] if readmits else None
    after = [r.group_examples_per_sec[group] for r in records.read(logdir, records.Eval) if last and r.t > last.t]
    replans = [r.t for r in records.read(logdir, records.Replan, records.Phase) if "re-admitted" in r.why]
    row.update({"lost_at_s": next((r.t for r in records.read(logdir, records.Lost)), None),
                "restarts": [{"t": r.t, "devices": r.devices, "layout": r.layout}
                             for r in records.read(logdir, records.Restarted)],
                "readmitted_at_s": [r.t for r in readmits], "readmitted_on": last and last.devices,
                "ashl_replanned_at_s": replans or None,
                "examples_per_sec_after_readmission": round(sum(after) / len(after), 1) if after else None,
                "lost_groups_at_end": final and final["lost_groups"], "error": out.get("error")})
    whole = bool(last) and sorted(last.devices) == sorted(cfg.names_of(spec.layout["devices"]))
    row["ok"] = bool(final) and final["lost_groups"] == [] and whole and bool(after) and max(after) > 0 and (
        not multi or row.get("replanned_over") == [n for n in last.devices if n != victim]) and (
        sync.strategy != "ashl" or bool(replans))
    return row


def scenario_e(cluster, args, work, em):
    rows, victim = [], cluster.workers[1].name
    for name, label, sync, groups in (
            ("e-ashl", f"ASHL, one group per device: {victim} killed, then its server restarted",
             SyncConfig(strategy="ashl", shl_loss=1e-9), default_groups(cluster, 32)),
            ("e-planned", f"ASP, two groups of two devices: {victim} killed (its group re-planned over the "
             "device left), then its server restarted", SyncConfig(strategy="asp"), _planned_groups(cluster))):
        _as_configured(em)  # the run before may have ended before its restart
        rows.append(_readmission_run(cluster, em, os.path.join(work, name), label, sync, groups, victim,
                                     args.e_budget_s))
    return rows


SCENARIOS = {"a": scenario_a, "b": scenario_b, "c": scenario_c, "d": scenario_d, "e": scenario_e}
OPTIONS = (("cluster", "layouts/edge4.yaml"), ("target", 0.97),
           ("budget_s", 120.0, "training budget of the runs to target (s)"),
           ("b_budget_s", 20.0, "training budget of scenario b's runs (s)"),
           ("b_kill_s", 8.0, "when scenario b kills a device during BSP (s)"),
           ("d_budget_s", 40.0, "training budget of scenario d's runs (s)"),
           ("e_budget_s", 60.0, "training budget of scenario e's runs (s)"),
           ("scenarios", list(SCENARIOS), "comma-separated subset of a..e", {"choices": SCENARIOS}),
           ("quick", False, "target 0.9, shorter budgets (smoke run)"))
QUICK = {"target": 0.9, "budget_s": 40.0, "b_budget_s": 12.0, "b_kill_s": 4.0, "d_budget_s": 20.0, "e_budget_s": 45.0}


def main():
    args = cli.parser(__doc__, OPTIONS).parse_args()
    vars(args).update(QUICK if args.quick else {})
    cluster, work, t0, rows = load_cluster(args.cluster), tempfile.mkdtemp(prefix="faults-"), time.time(), []
    with emulated_cluster(cluster) as em:
        for x in args.scenarios:
            _as_configured(em)
            row = SCENARIOS[x](cluster, args, work, em)
            rows += row if isinstance(row, list) else [row]
    out = cli.emit({"cluster": args.cluster, "target_accuracy": args.target, "logdirs": work, "scenarios": rows,
                    "all_ok": all(r["ok"] for r in rows), "seconds": round(time.time() - t0, 1)}, indent=1)
    return 0 if out["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
