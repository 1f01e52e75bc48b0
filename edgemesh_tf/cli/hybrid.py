"""`edgemesh train --cluster FILE --sync STRATEGY`: hybrid training with a parameter server; and the
flags of hybrid jobs, generated from the configuration's fields (engine/config.py).

    edgemesh train --cluster layouts/edge4.yaml --sync ashl --target_accuracy 0.97 --time_budget_s 120

Every data-parallel group of `--layout` (a plan file; default: one group per worker) trains its
replica in its own client process; the chief (this process) evaluates, switches phases, saves
checkpoints to `<logdir>/checkpoints` (and resumes from them), writes TensorBoard logs to
`<logdir>/tb` and prints progress. The last line is the final record as JSON.

`define_flags(command)` defines one flag per field of `SyncConfig` and `JobSettings` (and, for
`edgemesh run`, of `MainJob`): the field's name (or its `flag=`), type, default (the field's, or
`config.COMMAND_DEFAULTS[command]`'s), help text and choices. `settings_from_flags(command)` reads
them back into a `JobSettings`; `config_from_flags()` builds the whole `edgemesh train` job and
`main_job_from_flags()` the `edgemesh run` one, without starting anything. `help_groups(command)`
groups the flags under the headings of their `--help`.
"""
from __future__ import annotations

import dataclasses
import json
import sys
import typing

from absl import flags

from edgemesh_tf.engine.core import records
from edgemesh_tf.engine.config import COMMAND_DEFAULTS, NOT_FLAGS, FieldError, JobConfig, JobSettings, SyncConfig

FLAGS = flags.FLAGS
_FLAG_OF: dict[tuple[type, str], str] = {}  # (dataclass, field) -> the flag defined for it


def _flag_fields(command: str):
    """(dataclass, field) of every flag of `command`, in help order."""
    from edgemesh_tf.main_job import MainJob

    out = [(MainJob, f) for f in dataclasses.fields(MainJob) if f.name != "settings"] if command == "run" else []
    out += [(JobSettings, f) for f in dataclasses.fields(JobSettings) if f.name != "sync"]
    out += [(SyncConfig, f) for f in dataclasses.fields(SyncConfig)]
    return [(owner, f) for owner, f in out if f.name not in NOT_FLAGS[command]]


# Help headings of the job flags (cli/help.py), by the dataclass a flag comes from; JobSettings'
# fields are split by what they set. A field named nowhere here is listed under the command's name.
MAIN_JOB_HEADING = "Cluster and plan"
SETTINGS_HEADINGS = {
    "Model, data and optimiser": ("model", "dataset", "data_path", "learning_rate", "momentum", "seed"),
    "Stopping and evaluation": ("time_budget_s", "target_accuracy", "target_evaluations", "stop_after_target_s",
                                "max_steps", "max_rounds", "eval_interval_s", "eval_examples", "final_eval_examples"),
    "Logs, checkpoints and export": ("logdir", "checkpoint_interval_s", "export_dir"),
    "Timeouts and lost devices": ("server_timeout_s", "wait_timeout_s", "startup_timeout_s", "lost_after_s",
                                  "ps_timeout_s", "rejoin_limit", "profile_path"),
}
SYNC_HEADING = "Strategy (--sync and its parameters)"


def help_groups(command: str) -> list[tuple[str, tuple[str, ...]]]:
    """(heading, flag names) of the job flags `define_flags(command)` defined, in help order:
    MainJob's, JobSettings' by what they set, then SyncConfig's."""
    from edgemesh_tf.main_job import MainJob

    defined = {(owner, f.name) for owner, f in _flag_fields(command)}

    def names(owner, fields):
        return tuple(_FLAG_OF[owner, n] for n in fields if (owner, n) in defined)

    groups = [(MAIN_JOB_HEADING, names(MainJob, [f.name for f in dataclasses.fields(MainJob)]))]
    groups += [(heading, names(JobSettings, fields)) for heading, fields in SETTINGS_HEADINGS.items()]
    groups.append((SYNC_HEADING, names(SyncConfig, [f.name for f in dataclasses.fields(SyncConfig)])))
    return [(heading, group) for heading, group in groups if group]


def _default(owner: type, f: dataclasses.Field, command: str):
    if owner is not JobSettings and owner is not SyncConfig:
        return f.default
    if f.name in COMMAND_DEFAULTS[command]:
        return COMMAND_DEFAULTS[command][f.name]
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


def define_flags(command: str) -> list[str]:
    """Defines the job flags of `edgemesh train` (command "train") or `edgemesh run` ("run") from the
    configuration fields; returns their names."""
    names = []
    for owner, f in _flag_fields(command):
        name = f.metadata.get("flag") or f.name
        default = _default(owner, f, command)
        help_text = f.metadata["help"]
        if callable(default):
            help_text += " Default: %s." % default.__doc__
            default = None
        hint = typing.get_type_hints(owner)[f.name]
        kind = next((a for a in typing.get_args(hint) if a is not type(None)), hint)
        bound = {} if f.metadata.get("flag_min") is None else {"lower_bound": f.metadata["flag_min"]}
        if f.metadata.get("choices"):
            flags.DEFINE_enum(name, default, list(f.metadata["choices"]), help_text)
        elif kind is bool:
            flags.DEFINE_bool(name, default, help_text)
        elif kind is int:
            flags.DEFINE_integer(name, default, help_text, **bound)
        elif kind is float:
            flags.DEFINE_float(name, default, help_text, **bound)
        elif kind is str:
            flags.DEFINE_string(name, default, help_text)
        else:
            raise TypeError("no flag type for %s.%s: %r" % (owner.__name__, f.name, hint))
        _FLAG_OF[owner, f.name] = name
        names.append(name)
    return names


def _values(owner: type, command: str) -> dict:
    out = {}
    for (o, field), name in _FLAG_OF.items():
        if o is owner:
            v = FLAGS[name].value
            default = COMMAND_DEFAULTS[command].get(field)
            out[field] = default() if v is None and callable(default) else v
    return out


def _named(e: FieldError) -> ValueError:
    """The error of a field, naming its flag."""
    name = _FLAG_OF.get((e.owner, e.field))
    return ValueError("--%s: %s" % (name, e) if name else str(e))


def settings_from_flags(command: str) -> JobSettings:
    """The JobSettings the job flags of `command` say; errors name the flag and what was expected."""
    try:
        return JobSettings(sync=SyncConfig(**_values(SyncConfig, command)), **_values(JobSettings, command))
    except FieldError as e:
        raise _named(e) from None


def main_job_from_flags():
    """`edgemesh run`'s MainJob from its flags (nothing is started)."""
    from edgemesh_tf.main_job import MainJob

    settings = settings_from_flags("run")
    try:
        return MainJob(settings=settings, **_values(MainJob, "run"))
    except FieldError as e:
        raise _named(e) from None


@dataclasses.dataclass(frozen=True)
class HybridJob:
    """What `edgemesh train --cluster --sync` runs: `run_job(cfg, cluster, emulate)`."""

    cfg: JobConfig
    cluster: object  # ClusterFile
    emulate: bool


def config_from_flags() -> HybridJob:
    """`edgemesh train --cluster FILE --sync S`'s job from the flags (--cluster, --layout, --batch_size,
    --emulate and the generated job flags), without starting anything; raises ValueError (or
    SystemExit for a malformed cluster file) naming the flag or file."""
    from edgemesh_tf.cli import cluster_from_flag
    from edgemesh_tf.engine.runtime.job import default_groups, groups_of_plan, job_config
    from edgemesh_tf.planner import load_plan
    from edgemesh_tf.profiling.types import load_profile

    settings = settings_from_flags("train")
    cluster = cluster_from_flag(FLAGS.cluster, "edgemesh train")
    if settings.profile_path:
        load_profile(settings.profile_path)  # a malformed profile is named now, not when a device is lost
    if FLAGS["layout"].present:
        groups = groups_of_plan(cluster, load_plan(FLAGS.layout), FLAGS.layout, FLAGS.batch_size)
    else:
        groups = default_groups(cluster, FLAGS.batch_size)
    return HybridJob(job_config(cluster, groups, settings), cluster, FLAGS.emulate)


def run(job: HybridJob) -> None:
    """Runs `job` (config_from_flags); raises SystemExit with a clear message when it fails."""
    from edgemesh_tf.engine.runtime.job import run_job

    cfg = job.cfg
    try:
        final = run_job(cfg, job.cluster, emulate=job.emulate, emit=records.print_line, fast_setup=True)
    except (RuntimeError, TimeoutError) as e:  # PSLost, every group lost, a wait that timed out
        raise SystemExit("edgemesh train: %s" % e)
    from edgemesh_tf.summaries.writers import tensorboard_command
    print("done: %s; accuracy %.4f after %.1f s, %d steps, %.2f MB sent, %.1f s waiting; %s"
          % (final["why"], final["accuracy"], final["t"], final["global_steps"], final["bytes_sent"] / 1e6,
             final["wait_s"], tensorboard_command(cfg.logdir)), flush=True)
    print(json.dumps({k: v for k, v in final.items() if k != "curve"}), flush=True)
    bad = {g: c for g, c in final["group_exit_codes"].items() if c and g not in final["lost_groups"]}
    if bad:
        sys.exit("edgemesh train: group processes exited with errors %s; see %s/groups/*.log" % (bad, cfg.logdir))
