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

from edgemesh_tf.engine import records
from edgemesh_tf.engine.config import JobConfig, JobSettings, int_at_least, setting, validate

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


def job_config_of(job: MainJob, cluster, groups, **wiring) -> JobConfig:
    """The JobConfig the main job trains with once it has planned `groups` on `cluster` (wiring:
    device_info, profile_path)."""
    from edgemesh_tf.engine.job import job_config

    return job_config(cluster, groups, job.settings, **wiring)


def run_main_job(job: MainJob, emit: Callable[[records.Record], None] = lambda rec: None) -> dict:
    """Runs the job (see the module docstring); returns the summary."""
    from edgemesh_tf.cluster.spec import load_cluster
    from edgemesh_tf.data import load_dataset
    from edgemesh_tf.engine import rules
    from edgemesh_tf.engine.job import groups_of_plan, reach_servers, run_job
    from edgemesh_tf.models import load_model
    from edgemesh_tf.planner import format_table, load_plan, plan, write_plan
    from edgemesh_tf.planner.calibrate import steps_to_time
    from edgemesh_tf.profile.run import budgets, profile_servers
    from edgemesh_tf.profile.types import save_profile

    s = job.settings
    cluster = load_cluster(job.cluster)
    data = load_dataset(s.dataset, s.data_path)
    spec = load_model(s.model, data.image_shape, data.num_classes)
    os.makedirs(s.logdir, exist_ok=True)
    t_start = time.monotonic()
    with reach_servers(cluster, job.emulate) as servers:
        testbed = servers.summary
        emit(records.Testbed(**testbed))
        t0 = time.monotonic()
        profile = profile_servers(cluster, spec, job.batch, servers, **steps_to_time(budgets(cluster), spec, job.batch))
        profile_path = os.path.join(s.logdir, "profile.json")
        save_profile(profile, profile_path)
        # a group pushes and pulls once per commit: the planner amortises that over the strategy's iterations
        result = plan(profile, spec, batch=job.batch, commit_interval=rules.commit_interval(s.sync))
        plan_path = os.path.join(s.logdir, "plan.yaml")
        write_plan(result, plan_path)
        emit(records.Planned(profile_s=round(time.monotonic() - t0, 1), profile=profile_path, plan=plan_path,
                             table=format_table(result)))
        groups = groups_of_plan(cluster, load_plan(plan_path), plan_path, job.batch)
        cfg = job_config_of(job, cluster, groups, device_info=_device_info(cluster, profile, result),
                            profile_path=profile_path)
        final = run_job(cfg, cluster, emulate=job.emulate, emit=emit, testbed=servers.testbed)
    summary = {"cluster": job.cluster, "model": s.model, "dataset": s.dataset, "strategy": s.sync.strategy,
               "testbed": testbed, "setup_s": round(time.monotonic() - t_start - final["t"], 1),
               "train_s": final["t"], "accuracy": final["accuracy"], "target_accuracy": s.target_accuracy,
               "time_to_target_s": final["time_to_target_s"], "why": final["why"],
               "phase_transitions": final["phase_transitions"], "global_steps": final["global_steps"],
               "examples_per_sec": round(sum(g["examples_per_sec"] for g in final["group_time"].values()), 1),
               "bytes_sent": final["bytes_sent"], "wait_s": final["wait_s"], "devices": final["devices"],
               "group_time": final["group_time"], "idle_devices": list(result.idle), "plan": plan_path,
               "profile": profile_path,
               "logdir": s.logdir, "tensorboard": "tensorboard --logdir %s" % os.path.join(s.logdir, "tb")}
    with open(os.path.join(s.logdir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return summary
