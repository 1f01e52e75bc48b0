"""Plain-data configuration of a hybrid training job: the strategy, the job's settings, the job.

The one source of a job's configuration. Every user-settable value is a field of `SyncConfig` (the
strategy) or `JobSettings` (everything else that does not depend on the cluster's groups), with its
default, its help text and its check in its `setting(...)` declaration; `edgemesh train --cluster`
and `edgemesh run` generate their flags from these fields (cli/hybrid.py). `JobConfig` is a
`JobSettings` plus what only the launcher knows: the data-parallel groups, the ps and chief devices
and the devices' names. Where the two commands need different defaults, `COMMAND_DEFAULTS` says so.

All are frozen dataclasses; a JobConfig round-trips through JSON (`to_dict` / `from_dict`), because
the chief hands it to every group process in a file. Times are in seconds (s) unless a name says
ms; ratios are fractions of a tensor's entries in (0, 1].
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
import typing
from typing import Any, Callable, Mapping

from edgemesh_tf.data import absolute_dataset_name, check_dataset_name
from edgemesh_tf.models import check_model_ref

STRATEGIES = ("bsp", "asp", "ssp", "local_sgd", "adsp", "ashl")
COMPRESSIONS = ("none", "fixed", "ashl", "budget")
STALENESS_RULES = ("published", "project")
LR_SCHEDULES = ("constant", "cosine")
COSINE_BY_DEFAULT = ("ashl", "adsp")  # strategies that commit every few local iterations: one optimizer for both


class FieldError(ValueError):
    """An invalid value of a configuration field; `owner` is its dataclass, `field` its name (the
    command line maps both to the flag)."""

    def __init__(self, owner: type, field: str, message: str):
        super().__init__(message)
        self.owner, self.field = owner, field


# ---- checks: check(name, value) -> an error message, or None when the value is fine ----

def int_at_least(lower: int) -> Callable[[str, Any], str | None]:
    def check(name, v):
        if not isinstance(v, int) or isinstance(v, bool) or v < lower:
            return "%s must be an int >= %d, got %r" % (name, lower, v)
    check.flag_min = lower  # the flag's lower bound too
    return check


def _check_int(name: str, v, lower: int) -> None:
    msg = int_at_least(lower)(name, v)
    if msg:
        raise ValueError(msg)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def positive(unit: str = "") -> Callable[[str, Any], str | None]:
    def check(name, v):
        if not (_is_number(v) and v > 0):
            return "%s must be > 0%s, got %r" % (name, unit, v)
    return check


def non_negative(unit: str = "") -> Callable[[str, Any], str | None]:
    def check(name, v):
        if not (_is_number(v) and v >= 0):
            return "%s must be >= 0%s, got %r" % (name, unit, v)
    check.flag_min = 0
    return check


def fraction(what: str = "") -> Callable[[str, Any], str | None]:
    def check(name, v):
        if not (_is_number(v) and 0 < v <= 1):
            return "%s must be %sin (0, 1], got %r" % (name, what, v)
    return check


def one_of(choices, label: str | None = None) -> Callable[[str, Any], str | None]:
    def check(name, v):
        if v not in choices:
            return "%s must be one of %s, got %r" % (label or name, ", ".join(choices), v)
    return check


def _model_ref(name, v) -> str | None:
    try:
        check_model_ref(v)
    except (ValueError, TypeError) as e:
        return "%s: %s" % (name, e)


def _dataset_name(name, v) -> str | None:
    try:
        check_dataset_name(v)
    except ValueError as e:
        return "%s: %s" % (name, e)


def setting(default=dataclasses.MISSING, help: str = "", *, check=None, flag: str | None = None,
            flag_min: float | None = None, choices=None, factory=dataclasses.MISSING):
    """A configuration field: its default, its help text (the flag's), its check (run on every
    instance; None values of optional fields are not checked), the flag's name when it is not the
    field's, a lower bound the command line enforces on top of the check (flag_min) and the allowed
    values (choices: an enum flag, checked here too)."""
    if choices is not None and check is None:
        check = one_of(choices)
    if flag_min is None:
        flag_min = getattr(check, "flag_min", None)
    return dataclasses.field(default=default, default_factory=factory, metadata={
        "help": help, "check": check, "flag": flag, "flag_min": flag_min, "choices": choices})


@functools.lru_cache(maxsize=None)
def _optional_fields(cls) -> frozenset:
    hints = typing.get_type_hints(cls)
    return frozenset(n for n, h in hints.items() if type(None) in typing.get_args(h))


def validate(obj) -> None:
    """Runs every field's check; raises FieldError naming the field and what was expected."""
    optional = _optional_fields(type(obj))
    for f in dataclasses.fields(obj):
        check = f.metadata.get("check")
        v = getattr(obj, f.name)
        if check is None or (v is None and f.name in optional):
            continue
        msg = check(f.name, v)
        if msg:
            raise FieldError(type(obj), f.name, msg)


@dataclasses.dataclass(frozen=True)
class SyncConfig:
    """How groups synchronise with the parameter server. Defaults are the papers' (DESIGN.md)."""

    strategy: str = setting("ashl", "Synchronisation strategy of hybrid training over the parameter server. "
                            "`edgemesh train` has no default: --sync selects hybrid training (without it, "
                            "--cluster trains one layout on the servers).", flag="sync",
                            check=one_of(STRATEGIES, "sync strategy"), choices=STRATEGIES)
    staleness: int = setting(3, "SSP's and SHL's bound: commits a group may run ahead of the slowest live one.",
                             check=int_at_least(0))
    local_steps: int = setting(8, "Local SGD's H: local iterations between synchronous averagings.",
                               check=int_at_least(1))
    ahl_h_preset: int = setting(8, "ASHL: the slowest group's local iterations per commit in AHL (faster groups "
                                "get more).", check=int_at_least(1))
    shl_h_preset: int = setting(2, "ASHL: the slowest group's local iterations per commit in SHL.",
                                check=int_at_least(1))
    shl_loss: float = setting(0.15, "ASHL: switch AHL -> SHL once the global training loss is <= this; ADSP: the "
                              "target loss of its commit-rate search.")
    profile_steps: int = setting(8, "ASHL: local iterations of the timed profiling round (their median is the "
                                 "profile).", check=int_at_least(1))
    adsp_period_s: float = setting(6.0, "ADSP: scheduling period (s).", check=positive(), flag_min=0.01)
    adsp_commits: int = setting(6, "ADSP: initial commits per period (then searched online from the fitted loss "
                                "curve).", check=int_at_least(1))
    compression: str | None = setting(None, "Top-k of pushes: none (dense), fixed (top-k at --compression_ratio), "
                                      "ashl (ASHL's Algorithm 2 as published: per-group ratios, at least "
                                      "--compress_ratio, so that every round fits the longest one; SHL only unless "
                                      "--compress_in_ahl) or budget (the project's rule: a push takes at most "
                                      "--push_budget of its round's compute, ratio at least --min_ratio). "
                                      "Default: ashl for --sync ashl, else none.", choices=COMPRESSIONS)
    ratio: float = setting(0.01, "Fixed top-k ratio (fraction of entries) of --compression fixed (ASHL's "
                                 "preset is --compress_ratio).",
                           flag="compression_ratio", check=fraction("a fraction of entries "))
    compress_ratio: float = setting(0.1, "ASHL's preset top-k ratio r_preset (the authors' --compress_ratio) of "
                                    "--compression ashl: the smallest ratio Algorithm 2 plans (--compression fixed "
                                    "uses --compression_ratio).",
                                    check=fraction("a fraction of entries "))
    min_ratio: float = setting(0.01, "Smallest per-link top-k ratio of --compression budget (fraction of entries).",
                               check=fraction("a fraction of entries "))
    push_budget: float = setting(0.25, "--compression budget: a push may take this fraction of its round's compute.",
                                 check=positive())
    compress_in_ahl: bool = setting(False, "ASHL (the project's option): compress pushes in AHL too (published: "
                                    "dense in AHL, top-k in SHL).")
    phase_shares: bool = setting(False, "ASHL (the project's option): data shares D_i from each phase's own H_i "
                                 "(published: from SHL's H_i in both phases).")
    replan: bool = setting(False, "ASHL (the project's option): re-plan H, D and R from measured rounds every "
                           "--replan_interval_s, on --drift and at the switch (published: planned once from the "
                           "profile).")
    staleness_rule: str = setting("published", "SSP's and SHL's gate: published (a commit may land at most "
                                  "--staleness ahead of the slowest live group, the ASHL authors' server) or project "
                                  "(a round may start while at most --staleness ahead, so its commit lands one more "
                                  "ahead).", choices=STALENESS_RULES)
    lr_schedule: str | None = setting(None, "Learning rate per commit of a group: constant, or cosine (the ASHL "
                                      "authors': linear warm-up over --lr_warmup commits, cosine decay to 0 over "
                                      "--lr_cosine_commits, SGD weight decay 5e-4, restarted at the AHL -> SHL switch "
                                      "without warm-up). Default: cosine for --sync ashl and adsp (the same optimizer for both; "
                                      "ADSP has no switch), else constant (the decay counts commits, and a strategy "
                                      "that commits every iteration would decay H times sooner).",
                                      choices=LR_SCHEDULES)
    lr_warmup: int = setting(0, "--lr_schedule cosine: warm-up commits in AHL. The authors warm up over 5 of their "
                             "200 scheduler steps (epochs, one step per 6 commits: 2.5% of training); our runs are "
                             "~100x shorter, where 5 commits of a round of T_max would be a third of the run at "
                             "a rate that starts from 0, so the default is none.", check=int_at_least(0))
    lr_cosine_commits: int = setting(200, "--lr_schedule cosine: commits of a phase over which the rate decays (the "
                                     "authors' 200 scheduler steps; theirs step once per 6 commits over epochs, ours "
                                     "once per commit, for runs ~100x shorter).", check=int_at_least(1))
    replan_interval_s: float = setting(10.0, "ASHL with --replan: re-plan H, D and R from the rounds measured since the last plan "
                                       "this often (s), and at the switch to SHL.", check=positive())
    error_feedback: bool = setting(False, "The project's option: keep what top-k dropped and add it to the next "
                                   "push (published ASHL drops it).")
    dense_from_ratio: float = setting(1.0, "The project's option: push dense when a group's top-k ratio is at least "
                                      "this (0.5: where top-k's 8 bytes an entry, value and int32 index, reach the "
                                      "dense push's bytes, before its selection on the device and its scatter on the "
                                      "ps). Published: 1.0, top-k at every ratio below 1.",
                                      check=fraction("a fraction of entries "))
    drift: float = setting(0.5, "ASHL with --replan: re-plan at once when a group's iteration time is off the plan's by more than "
                           "this fraction (0.5: 1.5x slower or faster) for --drift_evals evaluations in a row.",
                           check=positive(), flag_min=0.01)
    drift_evals: int = setting(3, "ASHL: evaluation intervals in a row a --drift must last.", check=int_at_least(1))
    solo_commit_s: float = setting(4.0, "A job of one data-parallel group (nothing between groups to coordinate): "
                                   "seconds of training between its dense pushes of the model to the parameter "
                                   "server, which the chief evaluates and checkpoints; it pulls nothing back and "
                                   "runs one phase whatever --sync is. 0: one group runs the strategy's rounds, "
                                   "phases and compression as several groups do.", check=non_negative(" s"))
    solo_overlap: bool = setting(True, "A job of one group: each commit to the parameter server runs in the "
                                 "background while the group trains on (no round trip on the step's path; the "
                                 "last commit, after the last step, is exact). False: the group stops for each "
                                 "commit.")

    def __post_init__(self):
        if self.compression is None and self.strategy in STRATEGIES:
            object.__setattr__(self, "compression", "ashl" if self.strategy == "ashl" else "none")
        if self.lr_schedule is None:
            object.__setattr__(self, "lr_schedule", "cosine" if self.strategy in COSINE_BY_DEFAULT else "constant")
        validate(self)
        if self.lr_warmup >= self.lr_cosine_commits:
            raise FieldError(type(self), "lr_warmup", "lr_warmup (%d commits) must be < lr_cosine_commits (%d)"
                             % (self.lr_warmup, self.lr_cosine_commits))

    @property
    def weight_decay(self) -> float:
        """SGD weight decay: the ASHL authors' 5e-4 with their cosine schedule, else none."""
        return 5e-4 if self.lr_schedule == "cosine" else 0.0


@dataclasses.dataclass(frozen=True)
class GroupSpec:
    """One data-parallel group: its name (for logs and counters), its layout as a dict (the
    `Layout.to_dict` form) and its batch size per local iteration."""

    name: str
    layout: Mapping[str, Any]
    batch_size: int


@dataclasses.dataclass(frozen=True)
class JobSettings:
    """A hybrid job's settings that do not depend on its groups or cluster: what `edgemesh train
    --cluster --sync` and `edgemesh run` set from their flags (one flag per field, same name unless
    `flag=` says otherwise), and what `MainJob` holds before it has planned the groups."""

    model: str = setting("vgg", "The model: a zoo name (vgg, vgg_wide, resnet, vgg16, vgg_m), a Python file that "
                         "defines model(images, num_classes) with edgemesh_tf.layers (README: Your own model) or a "
                         "saved Keras model, FILE.keras (README: Bring a Keras model; training starts from its "
                         "weights).",
                         check=_model_ref)
    dataset: str = setting("digits", "Dataset: built in (digits, digits32, synthetic), read from --data_path "
                           "(cifar10, mnist), or your own: npz:FILE (arrays x_train, y_train, x_test, y_test) or "
                           "dir:FOLDER (one sub-folder of images per class; options after a '?', e.g. "
                           "dir:FOLDER?image_size=32x32&test_fraction=0.2&color_mode=grayscale&seed=0; README: Bring "
                           "your data).",
                           check=_dataset_name)
    data_path: str | None = setting(None, "Directory holding the cifar10 / mnist files (nothing is downloaded).")
    learning_rate: float = setting(0.02, "SGD learning rate (each group's local SGD).", check=non_negative())
    momentum: float = setting(0.9, "Momentum of the local SGD.", check=non_negative())
    seed: int = setting(0, "Seed for weights and data order.", check=int_at_least(0))
    eval_interval_s: float = setting(1.0, "Hybrid: seconds between the chief's evaluations of the global model.",
                                     check=positive(" s"), flag_min=0.05)
    eval_examples: int = setting(1000, "Hybrid: held-out examples of each evaluation during training (a fixed "
                                 "random subset; the final evaluation uses the whole test set), so that evaluations "
                                 "of a large test set keep up with --eval_interval_s.", check=int_at_least(1))
    final_eval_examples: int | None = setting(None, "Hybrid: held-out examples of the final evaluation (the first "
                                              "of the same fixed random order, so they hold the evaluations' "
                                              "subset when at least --eval_examples); unset: the whole test set.",
                                              check=int_at_least(1))
    checkpoint_interval_s: float = setting(10.0, "Hybrid: seconds between checkpoints of the global model and the "
                                           "strategy state.", check=positive(" s"), flag_min=0.1)
    time_budget_s: float = setting(240.0, "Hybrid: training wall-time budget (s).", check=positive(" s"),
                                   flag_min=0.1)
    target_accuracy: float | None = setting(None, "Hybrid: stop once the held-out accuracy reaches this (0..1]; "
                                            "unset: train for the whole --time_budget_s.", check=fraction())
    max_steps: int | None = setting(None, "Hybrid: stop after this many LOCAL ITERATIONS SUMMED OVER ALL GROUPS (a "
                                    "group's local iteration is one batch of its own; not the global step of "
                                    "single-layout `edgemesh train --steps`); unset: no limit.",
                                    check=int_at_least(1))
    max_rounds: int | None = setting(None, "Hybrid: each group stops by itself after this many rounds (commits to "
                                     "the parameter server), the job when all have; unset: no limit.",
                                     check=int_at_least(1))
    target_evaluations: int = setting(1, "Hybrid: --target_accuracy is reached when this many evaluations in a "
                                      "row are at or above it; the time to target is the first of them (a dip "
                                      "below starts the count again).", check=int_at_least(1))
    stop_after_target_s: float = setting(0.0, "Hybrid: keep training this long (s) after reaching "
                                         "--target_accuracy (0: stop at once).", check=non_negative(" s"))
    wait_timeout_s: float = setting(60.0, "Hybrid: the longest any wait for another process may take during "
                                    "training (s).", check=positive(" s"), flag_min=1.0)
    startup_timeout_s: float = setting(180.0, "Hybrid: the longest wait for the group processes to start (import TF, "
                                       "build their graphs, connect) and for the chief to initialise the global "
                                       "model (s).", check=positive(" s"), flag_min=1.0)
    lost_after_s: float = setting(10.0, "Hybrid: a group whose process exited, or that has sent no report (a round's "
                                  "statistics or a heartbeat while it waits) for this long (s), is declared lost: "
                                  "gates stop counting it and the others take over its data.",
                                  check=positive(" s"), flag_min=0.5)
    ps_timeout_s: float = setting(10.0, "Hybrid: stop the job, naming the ps task, when the parameter server has not "
                                  "answered for this long (s).", check=positive(" s"), flag_min=0.5)
    server_timeout_s: float = setting(30.0, "With --noemulate: the longest wait (s) for every TF server of the "
                                      "cluster file to answer before the job starts; past it the job stops, naming "
                                      "each missing task, its address and the command that starts it.",
                                      check=positive(" s"), flag_min=1.0)
    rejoin_limit: int = setting(3, "Hybrid: restart a lost group when its devices answer again (on fewer of them, "
                                "re-planned, if only some do) at most this many times (0: never).",
                                check=int_at_least(0))
    profile_path: str | None = setting(None, "Hybrid: device profile JSON (edgemesh profile) from which a group that "
                                       "lost a device has its filters re-divided over the devices it has left "
                                       "(without it, the fastest device left holds the whole model).",
                                       flag="profile")
    logdir: str = setting("runs/hybrid", "Hybrid: run directory (checkpoints, TensorBoard logs, group logs).")
    export_dir: str | None = setting(None, "Hybrid: write the trained global model here as a Keras model file "
                                     "(model.keras) and a SavedModel (saved_model/), and report its test accuracy "
                                     "computed by plain Keras; unset: checkpoints only.")
    sync: SyncConfig = dataclasses.field(default_factory=SyncConfig)

    def __post_init__(self):
        if not isinstance(self.sync, SyncConfig):
            raise FieldError(type(self), "sync", "sync must be a SyncConfig, got %r" % (self.sync,))
        validate(self)
        object.__setattr__(self, "model", check_model_ref(self.model))  # a file: its absolute path, for every process
        object.__setattr__(self, "dataset", absolute_dataset_name(self.dataset))  # npz:/dir: likewise

    def settings_dict(self) -> dict:
        """The JobSettings fields of this object (also of a JobConfig), as keyword arguments."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(JobSettings)}

    def job_config(self, groups, **wiring) -> "JobConfig":
        """The JobConfig of these settings for `groups`; wiring: ps_device, chief_device,
        device_names, device_info (or JobSettings fields to override)."""
        return JobConfig(**{**self.settings_dict(), **wiring}, groups=tuple(groups))

    @classmethod
    def for_command(cls, command: str, **overrides) -> "JobSettings":
        """The settings a command uses by default (`COMMAND_DEFAULTS[command]` over the fields'
        defaults), with `overrides` (JobSettings or SyncConfig fields)."""
        values = {k: (v() if callable(v) else v) for k, v in COMMAND_DEFAULTS[command].items()}
        values.update(overrides)
        sync_names = {f.name for f in dataclasses.fields(SyncConfig)}
        sync = values.pop("sync", None) or SyncConfig(**{k: values.pop(k) for k in list(values) if k in sync_names})
        return cls(sync=sync, **values)


def fresh_run_dir() -> str:
    """runs/run-<date>-<time>, a new directory per run"""
    return os.path.join("runs", time.strftime("run-%Y%m%d-%H%M%S"))


# The ONE table of where `edgemesh train --cluster --sync` and `edgemesh run` differ from the
# fields' defaults above (field name -> default; a callable is called when the job is built), and
# of the fields that are not a command's flags. Nothing else differs between them.
COMMAND_DEFAULTS: dict[str, dict[str, Any]] = {
    # --sync has no default: it selects hybrid training (flag-only; train's job always has a strategy)
    "train": {"strategy": None},
    # the main job (`make run`): train to 97% held-out accuracy, each run in a fresh directory; a
    # weight-heavy CNN (vgg_wide, ~4.5 M parameters at 8x8) that the planner splits over the Pi-class
    # cluster because it pays there (MainJob's default cluster)
    "run": {"target_accuracy": 0.97, "logdir": fresh_run_dir, "model": "vgg_wide"},
}
NOT_FLAGS: dict[str, tuple[str, ...]] = {
    "train": (),
    "run": ("profile_path",),  # the main job profiles the devices itself and re-plans from that profile
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobConfig(JobSettings):
    """Everything a chief or a group process needs to build its graphs: the `JobSettings` fields
    (see there and `setting(...)` help) plus

    groups: the data-parallel groups; ps_device / chief_device: TF devices of the parameter server
    and of the chief; device_names: TF device string -> the device's name in the cluster file (for
    reports); device_info: {device name: {"speed", "predicted_memory_mib", "measured_memory_mib",
    "predicted_step_ms"}}, whatever is known, for the layout picture; job_token: what the chief sets
    the ps's ready flag to and the groups wait for (a job on servers that ran one before must not
    start on that job's flag, board or stop signal).
    """

    groups: tuple[GroupSpec, ...]
    ps_device: str = "/job:ps/task:0"
    chief_device: str = "/job:chief/task:0"
    device_names: Mapping[str, str] = dataclasses.field(default_factory=dict)
    device_info: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    job_token: int = 1  # set per launch by run_job: the ps's ready flag of this job (sync/ps.py)

    def __post_init__(self):
        if not self.groups:
            raise ValueError("a job needs at least one data-parallel group")
        names = [g.name for g in self.groups]
        if len(set(names)) != len(names):
            raise ValueError("group names must be distinct, got %r" % names)
        for g in self.groups:
            _check_int("batch_size of group %s" % g.name, g.batch_size, 1)
        super().__post_init__()

    @property
    def group_names(self) -> list[str]:
        return [g.name for g in self.groups]

    def names_of(self, devices) -> list[str]:
        """The cluster names of TF device strings (each once, in order; unknown ones as they are)."""
        return [self.device_names.get(d, d) for d in dict.fromkeys(devices)]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, d: Mapping) -> "JobConfig":
        d = dict(d)
        d["groups"] = tuple(GroupSpec(**g) for g in d["groups"])
        d["sync"] = SyncConfig(**d.get("sync", {}))
        return cls(**d)
