"""The Python API: load a cluster, start (or reach) its servers, profile, plan, train, read the result.

    import edgemesh_tf as em

    model = em.load_model("examples/lenet_bn.py", dataset="digits32")   # or em.build_model(fn, ...)
    with em.start("layouts/pi4.yaml") as cluster:       # the emulated testbed (emulate=False: real servers)
        profile = em.profile(cluster, model, batch=32)  # per-device layer times, links, memory
        plan = em.plan(profile, model)                  # groups x uneven filter division
        result = em.train(cluster, model, plan, dataset="digits32", target_accuracy=0.9)
    print(result.accuracy, result.time_to_target_s)

``em.run(...)`` does all of it in one call, as ``edgemesh run`` does. The CLI is built on the same
functions. Times are seconds, throughputs examples per second, sizes bytes.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from typing import Callable, Iterator

from edgemesh_tf.cluster.reach import SERVER_TIMEOUT_S, Servers, reach_servers
from edgemesh_tf.cluster.spec import ClusterFile, load_cluster
from edgemesh_tf.data import dataset_shape
from edgemesh_tf.engine.core import records
from edgemesh_tf.engine.config import JobSettings, fresh_run_dir
from edgemesh_tf.layers import ModelFn, ModelSpec, build_model
from edgemesh_tf.models import load_model as _load_model, save_model
from edgemesh_tf.planner import Plan, format_table, write_plan
from edgemesh_tf.planner.near_tie import DEFAULT_TOLERANCE
from edgemesh_tf.profiling.types import Profile


@dataclasses.dataclass(frozen=True)
class Cluster:
    """A cluster whose servers are up: ``file`` (the parsed cluster file), ``servers`` (their
    targets and processes) and ``emulated`` (the local testbed, or real servers at the file's addresses)."""

    file: ClusterFile
    servers: Servers
    emulated: bool


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What a training run reached.

    accuracy: the final global model's held-out accuracy (commits in flight when the target is
    reached still land, so it may end a little either side of the target); time_to_target_s:
    training seconds until an evaluation reached the target accuracy (None: not reached); why: why it stopped; train_s: training time (s);
    examples_per_sec: all groups together; bytes_sent: to and from the parameter server;
    logdir: its logs (TensorBoard under ``logdir/tb``, checkpoints, plan); export: with ``export_dir``,
    {"keras": model.keras path, "saved_model": path, "keras_accuracy": its test accuracy by plain Keras};
    record: the full final record.
    """

    accuracy: float
    time_to_target_s: float | None
    why: str
    train_s: float
    examples_per_sec: float
    bytes_sent: int
    logdir: str
    export: dict | None
    record: dict = dataclasses.field(repr=False)


def load_model(model: str | ModelFn | object, dataset: str = "digits", num_classes: int | None = None,
               name: str | None = None) -> ModelSpec:
    """A model for ``dataset``'s images: a zoo name, a model file (``.py`` defining
    ``model(images, num_classes)``, a saved ``.json`` or a Keras ``.keras``), a model function
    itself, or a ``keras.Model`` (saved to a ``.keras`` file in a fresh temporary directory, the
    reference a job's processes load it by; its weights are the job's start). ``dataset``: a built-in
    name, ``npz:PATH`` or ``dir:PATH`` (README: Bring your data); ``num_classes`` None: the dataset's."""
    shape, classes = dataset_shape(dataset)
    classes = num_classes or classes
    if _is_keras_model(model):
        path = os.path.join(tempfile.mkdtemp(prefix="edgemesh_keras_"), (name or model.name) + ".keras")
        model.save(path)
        return _load_model(path, shape, classes)
    if callable(model):
        return build_model(model, shape, classes, name=name or getattr(model, "__name__", "model"))
    return _load_model(model, shape, classes)


def _is_keras_model(obj) -> bool:
    return any(c.__module__.startswith("keras") and c.__name__ == "Model" for c in type(obj).__mro__)


@contextlib.contextmanager
def start(cluster: str | ClusterFile, emulate: bool = True,
          server_timeout_s: float = SERVER_TIMEOUT_S) -> Iterator[Cluster]:
    """The servers of ``cluster`` (a cluster file's path, or a loaded one) for the ``with`` block:
    its emulated testbed, started here and torn down at the end (also on errors), or with
    ``emulate=False`` the real servers at the file's addresses (``edgemesh server`` on each host),
    each of which must answer within ``server_timeout_s`` (else ``ServersNotAnswering``, a
    RuntimeError naming every missing task and the command that starts it)."""
    cluster = load_cluster(cluster) if isinstance(cluster, str) else cluster
    with reach_servers(cluster, emulate, server_timeout_s=server_timeout_s) as servers:
        yield Cluster(cluster, servers, emulate)


def _logdir(logdir: str | None) -> str:
    path = logdir or fresh_run_dir()
    os.makedirs(path, exist_ok=True)
    return path


def profile(cluster: Cluster, model: ModelSpec, batch: int = 32) -> Profile:
    """Measures every worker of ``cluster`` for ``model`` at ``batch`` examples per step: each layer's
    forward+backward time, each link's bandwidth and latency, peak memory, and a few whole steps
    (ASHL's short pre-training) that calibrate the planner."""
    from edgemesh_tf.planner.calibrate import steps_to_time
    from edgemesh_tf.profiling.run import budgets, profile_servers

    return profile_servers(cluster.file, model, batch, cluster.servers,
                           **steps_to_time(budgets(cluster.file), model, batch))


def plan(profile: Profile, model: ModelSpec, batch: int | None = None, strategy: str = "ashl", **options) -> Plan:
    """EdgeMesh's grid and filter division of ``model`` on the profiled devices: data-parallel
    groups, and inside each an uneven split of every conv's filters and dense layer's units, for
    the job ``strategy`` runs (each phase's local iterations, commits and waits, priced by the rules the
    engine applies: engine/core/job_cost.py). options: ``planner.plan``'s (groups, memory_fraction, engine, ...).
    ``format_table(plan)`` prints it; ``plan.groups[i].layout.sizes`` holds each dim's shares."""
    from edgemesh_tf.engine.core import job_cost
    from edgemesh_tf.engine.config import SyncConfig

    return job_cost.plan_job(profile, model, batch, SyncConfig(strategy=strategy), **options)


def _reference(model: ModelSpec, logdir: str) -> str:
    """The reference every process of a job loads ``model`` by: where it came from, else a saved copy."""
    return model.source or save_model(model, os.path.join(logdir, "model.json"))


def train(cluster: Cluster, model: ModelSpec, plan: Plan, *, strategy: str = "ashl", dataset: str = "digits",
          data_path: str | None = None, batch: int | None = None, logdir: str | None = None,
          emit: Callable[[records.Record], None] = records.print_line, **settings) -> TrainResult:
    """Hybrid training of ``model`` under ``plan`` on ``cluster`` with ``strategy`` (bsp, asp, ssp,
    local_sgd, adsp, ashl; give the one the plan was made for) until ``target_accuracy`` or
    ``time_budget_s``. ``settings``: any field of ``engine.config.JobSettings`` / ``SyncConfig``
    (target_accuracy, time_budget_s, learning_rate, lr_schedule, staleness, export_dir, ...); unset, they are
    ``edgemesh run``'s defaults (``edgemesh run --helpfull``): target 0.97, 240 s, logs in a fresh
    ``runs/run-<time>``. ``emit`` receives every progress record (default: printed). Returns a ``TrainResult``."""
    from edgemesh_tf.main_job import train_planned
    from edgemesh_tf.models.keras_out import check_exportable

    if settings.get("export_dir"):
        check_exportable(model)
    logdir = _logdir(logdir)
    plan_path = os.path.join(logdir, "plan.yaml")
    write_plan(plan, plan_path)
    job = JobSettings.for_command("run", model=_reference(model, logdir), dataset=dataset, data_path=data_path,
                                  logdir=logdir, strategy=strategy, **settings)
    final = train_planned(cluster.file, plan_path, batch or plan.groups[0].batch, job, cluster.servers,
                          cluster.emulated, emit)
    return TrainResult(final["accuracy"], final["time_to_target_s"], final["why"], final["t"],
                       round(sum(g["examples_per_sec"] for g in final["group_time"].values()), 1),
                       final["bytes_sent"], logdir, final.get("export"), final)


def run(cluster: str = "layouts/pi4.yaml", model: str | ModelSpec = "vgg", *, emulate: bool = True, batch: int = 32,
        groups: int | None = None, near_tie: float = DEFAULT_TOLERANCE, profile_cache: str = "default",
        reprofile: bool = False, emit: Callable[[records.Record], None] = records.print_line, **settings) -> dict:
    """The main job in one call (``edgemesh run``): start the cluster, profile, plan, train, tear
    down. ``groups``: plan this many data-parallel groups (default: the number the cost model finds
    best); ``near_tie``: plans predicted within this fraction of the best are timed on the cluster and
    the fastest kept (0: off); ``profile_cache`` and ``reprofile``: as ``edgemesh run``'s flags.
    ``settings``: fields of ``JobSettings`` / ``SyncConfig`` (dataset, strategy, target_accuracy,
    time_budget_s, logdir, ...).
    Returns the summary ``edgemesh run`` prints (also in ``<logdir>/summary.json``)."""
    from edgemesh_tf.main_job import MainJob, run_main_job

    if isinstance(model, ModelSpec):
        settings.setdefault("logdir", fresh_run_dir())
        model = _reference(model, _logdir(settings["logdir"]))
    job = MainJob(cluster=cluster, batch=batch, emulate=emulate, groups=groups, near_tie=near_tie,
                  profile_cache=profile_cache, reprofile=reprofile,
                  settings=JobSettings.for_command("run", model=model, **settings))
    return run_main_job(job, emit=emit)


__all__ = ["Cluster", "TrainResult", "format_table", "load_model", "plan", "profile", "run", "start", "train"]
