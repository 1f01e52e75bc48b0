"""The main job, end to end: testbed -> profile -> plan -> hybrid training -> summary.

    summary = run_main_job(MainJob(cluster="layouts/edge4.yaml",
                                   settings=JobSettings.for_command("run", logdir="runs/run-1")),
                           emit=records.print_line)

Starts the emulated testbed of the cluster file (or uses the real servers at its addresses),
profiles every worker (`profile.run.profile_workers`), plans groups and filter division
(`planner.plan`), writes both to the run directory, trains with the chosen strategy until the
target accuracy or the time budget, writes TensorBoard logs to `<logdir>/tb`, and returns (and
writes to `<logdir>/summary.json`) the summary: accuracy, times, throughput per device and where
each group's time went (setup_s: testbed, profiling, planning, process start-up and teardown).
The testbed is torn down on the way out, also on errors.
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Callable

from edgemesh_tf.engine.core import records
from edgemesh_tf.engine.config import JobSettings, SyncConfig, int_at_least, non_negative, setting, validate
from edgemesh_tf.planner.near_tie import DEFAULT_TOLERANCE

_MIB = 1 << 20


@dataclasses.dataclass(frozen=True)
class MainJob:
    """The main job: the cluster it runs on, the batch it plans for, whether the testbed is emulated,
    and the job's settings (`JobSettings`: model, data, strategy, stop conditions, timeouts, logdir).
    Defaults are `edgemesh run`'s: the fields' and `config.COMMAND_DEFAULTS["run"]`. `edgemesh run`'s
    flags are these fields (cli/hybrid.py)."""

    cluster: str = setting("layouts/pi4.yaml", "Cluster file (its emulated testbed is started unless "
                           "--noemulate). The default: four Pi/Jetson-class devices on 1 Gbit/s, where the planner "
                           "splits filters.")
    batch: int = setting(32, "Examples per group per local iteration (the planner plans for it).",
                         flag="batch_size", check=int_at_least(1))
    emulate: bool = setting(True, "Start the emulated testbed of the cluster file (else use its real servers).")
    profile_cache: str = setting("default", "Directory of device profiles kept between runs: a rerun on the same "
                                 "devices, model and batch reuses the profile instead of measuring again ('default': "
                                 "$XDG_CACHE_HOME/edgemesh_tf/profiles or ~/.cache/edgemesh_tf/profiles; '': keep none).")
    reprofile: bool = setting(False, "Measure the devices even when the profile cache holds a profile for them "
                              "(the new profile replaces the cached one).")
    groups: int | None = setting(None, "Data-parallel groups to plan: compare a plan of K groups with the planner's "
                                 "choice (its prediction says which is faster); unset: the best number the cost "
                                 "model finds.", check=int_at_least(1))
    near_tie: float = setting(DEFAULT_TOLERANCE, "Plans with another number of groups predicted within this fraction "
                              "of the best are timed on the cluster before training (each group's step), priced again "
                              "with the timed steps, and the fastest kept (0: keep the prediction's choice).",
                              check=non_negative(" (a fraction of the best plan's examples/s)"))
    settings: JobSettings = dataclasses.field(default_factory=lambda: JobSettings.for_command("run"))

    def __post_init__(self):
        validate(self)


def _device_info(cluster, profile, result) -> dict:
    info = {d.name: {"speed": d.speed} for d in cluster.workers}
    for d in profile.devices:
        if d.peak_memory_bytes:
            info[d.name]["measured_memory_mib"] = d.peak_memory_bytes / _MIB
    for g in result.groups:
        for name, mem in zip(g.names, g.prediction.memory_bytes):
            info[name].update(predicted_memory_mib=mem / _MIB, predicted_step_ms=g.prediction.step_ms)
    return info


def plan_summary(result, spec, cluster) -> dict:
    """What the plan chose, for the summary: its kind and predicted examples/s, the best alternative
    it beat (kind, examples/s), and per group which device computes how many units of each split
    dim ({group: {dim: {device name: units}}})."""
    names = {d.device_string: d.name for d in cluster.devices}
    dims = spec.split_dims()
    splits = {}
    for i, g in enumerate(result.groups):
        shares = g.layout.shares(dims)
        if shares:
            splits["group%d" % i] = {dim: {names.get(dev, dev): n for dev, n in by.items()} for dim, by in shares.items()}
    others = [a for a in result.alternatives if a[0] != result.kind]
    best = max(others, key=lambda a: a[1]) if others else None
    return {"kind": result.kind, "predicted_examples_per_sec": round(result.examples_per_sec, 1),
            "best_alternative": list(best) if best else None, "splits": splits}


def predicted_vs_measured(result, cluster, sync: SyncConfig, final: dict) -> dict:
    """The plan's cost of the job (engine/core/job_cost.py) per phase and group beside what the run measured:
    {"rows": job_cost.compare's rows, "flagged": how many are off by more than job_cost.GAP,
    "groups": the number of groups (1: nothing between groups to coordinate)}."""
    from edgemesh_tf.engine.core import job_cost
    from edgemesh_tf.engine.runtime.job import groups_of_plan

    names = [g.name for g in groups_of_plan(cluster, result, "the plan", 1)]
    preds = {n: g.prediction for n, g in zip(names, result.groups)}
    predicted = job_cost.phase_costs(sync, preds, {n: g.batch for n, g in zip(names, result.groups)})
    measured = job_cost.measured_phases(final["phase_transitions"], final.get("phase_totals") or {},
                                        final["groups"], final["t"])
    rows = job_cost.compare(predicted, measured)
    return {"rows": rows, "flagged": sum(r["missed"] is not None for r in rows), "groups": len(names)}


def write_predicted_vs_measured(logdir: str, pvm: dict, t: float) -> None:
    """The comparison as the text "predicted_vs_measured" of TensorBoard's run "total" (at `t` s)."""
    from edgemesh_tf.engine.core import job_cost
    from edgemesh_tf.summaries.writers import Writers

    tb = Writers(logdir, ["total"])
    try:
        tb.text("total", "predicted_vs_measured", job_cost.markdown_table(pvm["rows"]), t)
    finally:
        tb.close()


def profile_and_plan(cluster, spec, batch: int, servers, logdir: str, sync: SyncConfig, *, emulate: bool = True,
                     cache_dir: str = "", reprofile: bool = False, **plan_options):
    """Profiles every worker of reached ``servers`` for ``spec`` at ``batch`` (or reuses the profile that
    ``cache_dir`` holds for the same devices, model and batch, unless ``reprofile``; a fresh profile is
    stored there) and plans groups and filter division for the job ``sync``'s strategy runs (job_cost.plan_job);
    writes ``<logdir>/profile.json`` and ``<logdir>/plan.yaml``. Returns (profile, plan, profile path,
    plan path, cache), cache: {"entry": the cache file or None, "reused": bool, "age_s": age of a
    reused profile, "profiled_iteration_ms": {group: ms} the first job on it measured, or {}}. plan_options: of ``planner.plan`` (e.g. memory_fraction, groups)."""
    from edgemesh_tf.engine.core import job_cost
    from edgemesh_tf.planner import write_plan
    from edgemesh_tf.planner.calibrate import steps_to_time
    from edgemesh_tf.profiling import cache as profile_cache
    from edgemesh_tf.profiling.run import budgets, profile_servers
    from edgemesh_tf.profiling.types import save_profile

    os.makedirs(logdir, exist_ok=True)
    description = profile_cache.describe(cluster, spec, batch, emulate)
    key = profile_cache.key_of(description)
    cached = profile_cache.load_cached(cache_dir, key) if cache_dir and not reprofile else None
    if cached is not None:
        profile = cached.profile
        cache = {"entry": cached.path, "reused": True, "age_s": round(cached.age_s(time.time()), 1),
                 "profiled_iteration_ms": cached.iteration_ms}
    else:
        profile = profile_servers(cluster, spec, batch, servers, fast_setup=True,
                                  **steps_to_time(budgets(cluster), spec, batch))
        entry = profile_cache.store(cache_dir, key, profile, description) if cache_dir else None
        cache = {"entry": entry, "reused": False, "age_s": 0.0, "profiled_iteration_ms": {}}
    profile_path = os.path.join(logdir, "profile.json")
    save_profile(profile, profile_path)
    result = job_cost.plan_job(profile, spec, batch, sync, **plan_options)
    plan_path = os.path.join(logdir, "plan.yaml")
    write_plan(result, plan_path)
    return profile, result, profile_path, plan_path, cache


NEAR_TIE_DEVICES = 16
"""Clusters of up to this many workers re-plan every other number of groups to find near ties."""


def settle_near_tie(cluster, spec, batch: int, sync: SyncConfig, profile, result, servers, tolerance: float):
    """``result`` or, when plans of another number of groups are predicted within ``tolerance`` of it
    (``planner.near_tie``), the one of them that is fastest once each group's step is timed on the
    reached ``servers`` (the groups of one plan at once, one plan after another, so that a device holds
    one layout at a time; the testbed's limits lifted while they set up); returns (plan, record or
    None: no near tie)."""
    from edgemesh_tf.engine.core import job_cost
    from edgemesh_tf.planner import PlanError
    from edgemesh_tf.planner.near_tie import near_ties, settle
    from edgemesh_tf.profiling.profiler import layout_steps_ms

    plans = {len(result.groups): result}
    coarse = dict(result.candidates)  # the grid search's best rate per number of groups, at coarse shares
    ref = coarse.get(len(result.groups), result.examples_per_sec)
    for k, rate in result.candidates if len(profile.devices) <= NEAR_TIE_DEVICES else ():
        if k not in plans and rate >= ref * (1 - 2 * tolerance):  # refined, a candidate moves by a few %
            try:
                plans[k] = job_cost.plan_job(profile, spec, batch, sync, groups=k)
            except PlanError:
                continue
    tied = near_ties({k: p.examples_per_sec for k, p in plans.items()}, tolerance)
    if len(tied) < 2:
        return result, None

    known: dict = {}  # a group's layout -> its timed step (ms): a group two plans share is timed once

    def time_plan(p):
        todo = {"group%d" % i: g.layout for i, g in enumerate(p.groups) if g.layout not in known}
        if todo:
            steps = layout_steps_ms(spec, batch, todo, servers.target, cluster.master.device_string, repeats=3,
                                    testbed_limits=servers.testbed)
            known.update({todo[name]: ms for name, ms in steps.items()})
        return [known[g.layout] for g in p.groups]
    def timed_plan(k):
        if servers.testbed is None:
            return time_plan(plans[k])
        from edgemesh_tf.cluster.watch import watched  # a device whose server dies ends the wait, naming it
        return watched(lambda: time_plan(plans[k]), servers.testbed.check, 600.0,
                       "timing the %d-group plan of a near tie" % k)
    t0 = time.monotonic()
    timed = {k: timed_plan(k) for k in tied}
    kept, record = settle({k: plans[k] for k in tied}, timed, job_cost.objective(sync))
    return plans[kept], dict(record, tolerance=tolerance, planned=len(result.groups),
                             seconds=round(time.monotonic() - t0, 1))


def check_profile(final: dict, cache: dict) -> dict:
    """Whether a cached profile still describes the devices. The first job on a fresh profile records
    each group's measured iteration time in its cache entry; a job that reuses the profile compares
    its own against those (``profiling.cache.off_profile``: the engine's measurement on both sides,
    so a plan's model error is no drift). An entry that is off is dropped, so the next run measures
    the devices again. Returns {"off": {group: [reference ms, measured ms]}, "dropped": the dropped
    cache file or None}."""
    from edgemesh_tf.profiling.cache import drop, off_profile, record_iterations

    measured = {n: t.get("iteration_ms") or 0.0 for n, t in final.get("group_time", {}).items()}
    reference = cache.get("profiled_iteration_ms") or {}
    off = off_profile(reference, measured)
    if cache.get("entry") and not reference and measured:
        record_iterations(cache["entry"], measured)
    dropped = cache["entry"] if off and cache.get("entry") and drop(cache["entry"]) else None
    return {"off": {g: [round(r, 1), round(m, 1)] for g, (r, m) in off.items()}, "dropped": dropped}


def train_planned(cluster, plan_path: str, batch: int, settings: JobSettings, servers, emulate: bool,
                  emit: Callable[[records.Record], None] = lambda rec: None, **wiring) -> dict:
    """Hybrid training of the plan at ``plan_path`` on reached ``servers`` with ``settings``;
    returns the chief's final record (``engine.runtime.job.run_job``), with ``export`` (``engine.runtime.export``'s
    result, or {"error": why} when the export failed) when ``settings.export_dir`` is set. wiring:
    device_info, profile_path."""
    from edgemesh_tf.engine.runtime.job import groups_of_plan, job_config, run_job
    from edgemesh_tf.planner import load_plan

    groups = groups_of_plan(cluster, load_plan(plan_path), plan_path, batch)
    cfg = job_config(cluster, groups, settings, **wiring)
    # on the emulated testbed the groups set up (first graph runs, warm-up) with the devices' limits lifted:
    # nothing is measured then, and the limits are back before the chief starts the clock
    final = run_job(cfg, cluster, emulate=emulate, emit=emit, testbed=servers.testbed,
                    fast_setup=servers.testbed is not None)
    if settings.export_dir:
        from edgemesh_tf.engine.runtime.export import export_run

        try:
            export = export_run(settings.model, settings.dataset, settings.data_path, settings.logdir,
                                settings.export_dir, timeout_s=settings.startup_timeout_s)
        except (RuntimeError, TimeoutError) as e:  # the trained model stays in <logdir>/final_model
            export = {"error": str(e)}
        final = dict(final, export=export)
    return final


def fresh_testbed_servers(servers, names) -> None:
    """Starts the testbed's servers of devices ``names`` again, idle, before training
    (``EmulatedCluster.fresh_servers``): what their allocators kept of the profile's and the near-tie
    timings' freed memory does not count against their budgets, so a device trains within the same
    memory whether or not this run profiled."""
    servers.testbed.fresh_servers(names)
    servers.pids.update({n: servers.testbed.devices[n].pid for n in names})


def cache_dir(setting_value: str) -> str:
    """The profile cache directory a ``MainJob.profile_cache`` names: "default" is
    ``profiling.cache.default_cache_dir()``, "" keeps no cache, any other value is a path (~ expanded)."""
    from edgemesh_tf.profiling.cache import default_cache_dir

    if setting_value == "default":
        return default_cache_dir()
    return os.path.expanduser(setting_value) if setting_value else ""


def run_main_job(job: MainJob, emit: Callable[[records.Record], None] = lambda rec: None) -> dict:
    """Runs the job (see the module docstring); returns the summary."""
    from edgemesh_tf.cluster.spec import load_cluster
    from edgemesh_tf.data import load_dataset
    from edgemesh_tf.engine.runtime.job import reach_servers
    from edgemesh_tf.models import initial_weights, load_model
    from edgemesh_tf.models.keras_out import check_exportable
    from edgemesh_tf.planner import format_table, write_plan

    s = job.settings
    cluster = load_cluster(job.cluster)
    data = load_dataset(s.dataset, s.data_path)
    spec = load_model(s.model, data.image_shape, data.num_classes)
    if s.export_dir:
        check_exportable(spec)  # before any training: a model that cannot go out says so now
    os.makedirs(s.logdir, exist_ok=True)
    t_start = time.monotonic()
    with reach_servers(cluster, job.emulate, server_timeout_s=s.server_timeout_s) as servers:
        testbed = servers.summary
        emit(records.Testbed(**testbed))
        t0 = time.monotonic()
        profile, result, profile_path, plan_path, cache = profile_and_plan(
            cluster, spec, job.batch, servers, s.logdir, s.sync, emulate=job.emulate,
            cache_dir=cache_dir(job.profile_cache), reprofile=job.reprofile, groups=job.groups)
        tie = None
        if job.near_tie and job.groups is None:
            result, tie = settle_near_tie(cluster, spec, job.batch, s.sync, profile, result, servers, job.near_tie)
            if tie is not None and tie["kept"] != tie["planned"]:
                write_plan(result, plan_path)
        emit(records.Planned(profile_s=round(time.monotonic() - t0, 1), profile=profile_path, plan=plan_path,
                             table=format_table(result), reused=cache["entry"] if cache["reused"] else "",
                             reused_age_s=cache["age_s"]))
        if servers.testbed is not None and (not cache["reused"] or tie is not None):
            fresh_testbed_servers(servers, [d.name for d in cluster.workers])
        final = train_planned(cluster, plan_path, job.batch, s, servers, job.emulate, emit,
                              device_info=_device_info(cluster, profile, result), profile_path=profile_path)
        cache.update(check_profile(final, cache))
    from edgemesh_tf.summaries.writers import tensorboard_command
    pvm = predicted_vs_measured(result, cluster, s.sync, final)
    write_predicted_vs_measured(s.logdir, pvm, final["t"])
    summary = {"cluster": job.cluster, "model": s.model, "dataset": s.dataset, "strategy": s.sync.strategy,
               "testbed": testbed, "setup_s": round(time.monotonic() - t_start - final["t"], 1),
               "train_s": final["t"], "accuracy": final["accuracy"], "target_accuracy": s.target_accuracy,
               "time_to_target_s": final["time_to_target_s"], "why": final["why"],
               "phase_transitions": final["phase_transitions"], "global_steps": final["global_steps"],
               "examples_per_sec": round(sum(g["examples_per_sec"] for g in final["group_time"].values()), 1),
               "bytes_sent": final["bytes_sent"], "wait_s": final["wait_s"], "devices": final["devices"],
               "group_time": final["group_time"], "idle_devices": list(result.idle), "plan": plan_path,
               "planned": plan_summary(result, spec, cluster), "near_tie": tie,
               "predicted_vs_measured": pvm,
               "profile": profile_path, "profile_cache": cache, "initial_weights": spec.source if initial_weights(spec) else None,
               "export": final.get("export"),
               "logdir": s.logdir, "tensorboard": tensorboard_command(s.logdir)}
    with open(os.path.join(s.logdir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return summary
