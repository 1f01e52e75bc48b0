"""Every flag of `edgemesh run` and `edgemesh train` changes the job that would run: each flag is set
alone to a value other than its default, the job is built from the flags exactly as the command
builds it (`hybrid.main_job_from_flags` + `job.job_config`, `train.hybrid_job_from_flags`,
`train.single_layout_from_flags`; no TF server is started) and the value must be found where it
acts, or the flag must be rejected with a message naming it in a mode that does not read it.

`edgemesh run` and `edgemesh train` define flags of the same names, so each command is walked in its
own process: this file run as a script (`python test_flags_reach_config.py run|hybrid|single DIR`)
prints the walk as JSON; the tests below check it.
"""
import json
import os
import subprocess
import sys

import pytest
import yaml

pytestmark = [pytest.mark.subprocess]

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
W = "/job:worker/task:%d"

# Flags whose field has another name (config.py `setting(flag=...)`); every other job flag is its field.
FIELD_OF_FLAG = {"sync": "strategy", "compression_ratio": "ratio", "profile": "profile_path"}
# train's flags that only single-layout training reads: rejected with --sync (they act in `train()`)
SINGLE_LAYOUT_ONLY = {"steps", "checkpoint_dir", "checkpoint_every", "eval_every", "intra_op_threads", "group"}
# train's flags that both modes read and that are JobSettings fields
SHARED_JOB_FLAGS = {"model", "dataset", "data_path", "learning_rate", "momentum", "seed", "server_timeout_s"}


def _plan(path):
    """A plan of two single-device groups on edge4's edge0 and edge2 (the default is one per worker)."""
    groups = [{"mesh": {"model": 1}, "devices": [W % 0]}, {"mesh": {"model": 1}, "devices": [W % 2]}]
    with open(path, "w") as f:
        yaml.safe_dump({"groups": groups}, f)


def _profile(path):
    devices = [{"name": "edge%d" % i, "device": W % i + "/device:CPU:0",
                "layers": [{"name": "conv1", "compute_ms": 1.5 * (i + 1), "spread_ms": 0.1}],
                "memory_bytes": 2 ** 30, "bandwidth_mbit": 100.0, "latency_ms": 2.0, "step_overhead_ms": 1.0,
                "peak_memory_bytes": 10 ** 7} for i in range(2)]
    with open(path, "w") as f:
        json.dump({"model": "vgg", "batch": 32, "image_shape": [8, 8, 1], "num_classes": 10,
                   "ps_bandwidth_mbit": 1000.0, "devices": devices}, f)


# ---------------------------------------------------------------- the walk (in its own process)

def _other_value(flag, tmp):
    """(command-line text, parsed value) of a value other than the flag's default."""
    files = {"cluster": "layouts/edge2.yaml", "layout": os.path.join(tmp, "plan.yaml"),
             "profile": os.path.join(tmp, "profile.json"), "model": os.path.join(ROOT, "examples", "my_cnn.py")}
    kind, d = flag.parser.flag_type(), flag.default
    if flag.name == "dataset":  # a string whose value is checked (a dataset name): another built-in one
        return "--dataset=digits32", "digits32"
    if flag.name in files:
        v = files[flag.name]
    elif kind == "bool":
        return ("--no" if d else "--") + flag.name, not d
    elif kind == "string enum":
        v = next(x for x in flag.parser.enum_values if x != d)
    elif kind == "int":
        v = (d or 0) + 2
    elif kind == "float":
        v = 0.5 if d is None else 1.5 if d == 0 else d * 2 if d < 0.5 else d / 2
    else:
        v = os.path.join(tmp, "%s-x" % flag.name)
    return "--%s=%s" % (flag.name, v), v


def _walk(mode, tmp):
    from absl import flags

    if mode == "run":
        from edgemesh_tf.cli import hybrid, run  # noqa: F401  (defines the flags)
        from edgemesh_tf.cluster.spec import load_cluster
        from edgemesh_tf.engine.runtime.job import default_groups, job_config

        def build():
            job = hybrid.main_job_from_flags()
            cluster = load_cluster(job.cluster)
            cfg = job_config(cluster, default_groups(cluster, job.batch), job.settings)
            return {"job": {"cluster": job.cluster, "batch": job.batch, "emulate": job.emulate,
                            "profile_cache": job.profile_cache, "reprofile": job.reprofile, "groups": job.groups,
                            "near_tie": job.near_tie},
                    "cfg": cfg.to_dict()}
        base = []
    else:
        from edgemesh_tf.cli import train

        if mode == "hybrid":
            def build():
                job = train.hybrid_job_from_flags()
                return {"cluster": job.cluster.path, "emulate": job.emulate, "cfg": job.cfg.to_dict()}
            base = ["--cluster=layouts/edge4.yaml", "--sync=ashl"]
        else:
            def build():
                import dataclasses
                return dataclasses.asdict(train.single_layout_from_flags())
            base = []
    FLAGS = flags.FLAGS

    def parse_and_build(argv):
        FLAGS.unparse_flags()
        FLAGS(["edgemesh"] + argv)
        try:
            return {"result": build()}
        except (ValueError, SystemExit) as e:
            return {"error": str(e)}

    ours = sorted(f.name for module, fl in FLAGS.flags_by_module_dict().items()
                  if module.startswith("edgemesh_tf.") for f in fl)
    out = {"flags": ours, "baseline": parse_and_build(base), "walk": {}}
    for name in ours:
        arg, value = _other_value(FLAGS[name], tmp)
        argv = base + [arg]
        if mode == "single" and name == "emulate":
            argv = ["--cluster=layouts/edge4.yaml"] + argv  # --emulate applies with --cluster
        out["walk"][name] = {"value": value, **parse_and_build(argv)}
    return out


def _run_walk(mode, tmp_path):
    _plan(tmp_path / "plan.yaml")
    _profile(tmp_path / "profile.json")
    p = subprocess.run([sys.executable, os.path.abspath(__file__), mode, str(tmp_path)], capture_output=True,
                       text=True, cwd=ROOT, timeout=600, env=dict(os.environ, PYTHONPATH=ROOT))
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- the checks

def _field(cfg, flag):
    name = FIELD_OF_FLAG.get(flag, flag)
    if name in cfg["sync"]:
        return cfg["sync"][name]
    assert name in cfg, "--%s: no JobConfig field %r, and no other destination known for it" % (flag, name)
    return cfg[name]


def _fields_as_flags(command):
    import dataclasses

    from edgemesh_tf.engine.config import NOT_FLAGS, JobSettings, SyncConfig

    fields = [f for f in dataclasses.fields(JobSettings) if f.name not in ("sync",) + NOT_FLAGS[command]]
    return {f.metadata.get("flag") or f.name for f in fields + list(dataclasses.fields(SyncConfig))}


def _changed_only(base_cfg, cfg, allowed):
    """The fields of cfg that differ from base_cfg are in `allowed` (no flag writes another field)."""
    diff = {k for k in cfg if k != "sync" and cfg[k] != base_cfg[k]}
    diff |= {"sync." + k for k in cfg["sync"] if cfg["sync"][k] != base_cfg["sync"][k]}
    return diff <= allowed, diff


def test_every_flag_of_run_reaches_the_main_job_and_its_job_config(tmp_path):
    walk = _run_walk("run", tmp_path)
    base = walk["baseline"]["result"]
    # the defaults of `make run`: pi4, vgg_wide on digits, ASHL, 97% or 240 s, evaluations every second
    assert base["job"] == {"cluster": "layouts/pi4.yaml", "batch": 32, "emulate": True, "profile_cache": "default",
                           "reprofile": False, "groups": None, "near_tie": 0.1}
    cfg0 = base["cfg"]
    assert (cfg0["model"], cfg0["dataset"], cfg0["sync"]["strategy"]) == ("vgg_wide", "digits", "ashl")
    assert (cfg0["target_accuracy"], cfg0["time_budget_s"], cfg0["eval_interval_s"]) == (0.97, 240.0, 1.0)
    assert cfg0["logdir"].startswith("runs/run-")
    # every flag of `edgemesh run` is a field of MainJob, JobSettings or SyncConfig (no hand-written flag)
    assert set(walk["flags"]) == _fields_as_flags("run") | {"cluster", "batch_size", "emulate", "profile_cache",
                                                             "reprofile", "groups", "near_tie"}, walk["flags"]
    for flag in walk["flags"]:
        w = walk["walk"][flag]
        assert "result" in w, (flag, w)
        r, cfg = w["result"], w["result"]["cfg"]
        if flag == "cluster":  # the main job runs on it: its devices are the groups'
            assert r["job"]["cluster"] == w["value"] and set(cfg["device_names"].values()) >= {"fast", "slow"}
        elif flag == "batch_size":  # the planner plans for it; the groups' batch
            assert r["job"]["batch"] == w["value"] and {g["batch_size"] for g in cfg["groups"]} == {w["value"]}
        elif flag == "emulate":  # run_main_job starts the testbed only if set
            assert r["job"]["emulate"] is w["value"]
        elif flag in ("profile_cache", "reprofile", "groups", "near_tie"):  # run_main_job's plan, not the config
            assert r["job"][flag] == w["value"] and _changed_only(cfg0, cfg, {"logdir"})[0], flag
        else:
            assert _field(cfg, flag) == w["value"], (flag, w["value"], _field(cfg, flag))
            field = FIELD_OF_FLAG.get(flag, flag)
            # compression and the lr schedule follow the strategy
            allowed = {field, "sync." + field, "sync.compression", "sync.lr_schedule"}
            ok, diff = _changed_only(cfg0, cfg, allowed | {"logdir"})  # a fresh logdir per run
            assert ok, (flag, diff)


def test_every_flag_of_train_cluster_reaches_the_job_config(tmp_path):
    from edgemesh_tf.engine.config import JobSettings, SyncConfig

    walk = _run_walk("hybrid", tmp_path)
    base = walk["baseline"]["result"]
    cfg0 = base["cfg"]
    # one set of defaults: the fields' (train differs from run only in config.COMMAND_DEFAULTS)
    defaults = JobSettings(sync=SyncConfig(strategy="ashl"))
    assert {k: cfg0[k] for k in defaults.settings_dict() if k != "sync"} == {
        k: v for k, v in defaults.settings_dict().items() if k != "sync"}
    assert [g["name"] for g in cfg0["groups"]] == ["edge0", "edge1", "edge2", "edge3"]
    # train's flags: the job fields, the single-layout ones and --layout/--batch_size/--cluster/--emulate
    assert set(walk["flags"]) == _fields_as_flags("train") | SINGLE_LAYOUT_ONLY | {
        "layout", "batch_size", "cluster", "emulate"}, walk["flags"]
    for flag in walk["flags"]:
        w = walk["walk"][flag]
        if flag in SINGLE_LAYOUT_ONLY:  # rejected, naming the flag (they act in single-layout training)
            assert "error" in w and "--" + flag in w["error"], (flag, w)
            assert ("--max_steps" if flag == "steps" else "single-layout") in w["error"], w["error"]
            continue
        assert "result" in w, (flag, w)
        r, cfg = w["result"], w["result"]["cfg"]
        if flag == "cluster":
            assert r["cluster"] == w["value"] and [g["name"] for g in cfg["groups"]] == ["fast", "slow"]
        elif flag == "layout":  # the plan's groups are the data-parallel groups
            assert [g["name"] for g in cfg["groups"]] == ["edge0", "edge2"]
        elif flag == "batch_size":
            assert {g["batch_size"] for g in cfg["groups"]} == {w["value"]}
        elif flag == "emulate":  # run_job(cfg, cluster, emulate=...)
            assert r["emulate"] is w["value"]
        else:
            assert _field(cfg, flag) == w["value"], (flag, w["value"], _field(cfg, flag))
            field = FIELD_OF_FLAG.get(flag, flag)
            ok, diff = _changed_only(cfg0, cfg, {field, "sync." + field, "sync.compression", "sync.lr_schedule"})
            assert ok, (flag, diff)


def test_every_flag_of_single_layout_train_reaches_train_or_is_rejected(tmp_path):
    walk = _run_walk("single", tmp_path)
    base = walk["baseline"]["result"]
    job_flags = {f for f in walk["flags"] if f not in SINGLE_LAYOUT_ONLY | {"layout", "batch_size", "cluster",
                                                                             "emulate"}}
    for flag in walk["flags"]:
        w = walk["walk"][flag]
        if flag == "sync":  # selects hybrid training (the test above)
            continue
        if flag in job_flags - SHARED_JOB_FLAGS:  # hybrid training's flags: rejected, naming the flag
            assert "error" in w and "--" + flag in w["error"], (flag, w)
            assert ("--steps" if flag == "max_steps" else "only for hybrid training") in w["error"], w["error"]
            continue
        assert "result" in w, (flag, w)
        r = w["result"]
        where = {"batch_size": r["kwargs"]["batch_size"], "learning_rate": r["kwargs"]["learning_rate"],
                 "momentum": r["kwargs"]["momentum"], "seed": r["kwargs"]["seed"]}
        got = where.get(flag, r["kwargs"].get(flag, r.get(flag)))
        assert got == w["value"], (flag, w["value"], got)
        assert r != base, flag


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "edgemesh_tf.cli.main", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


@pytest.mark.parametrize("args,message", [
    (("run", "--target_accuracy", "1.5"), "--target_accuracy: target_accuracy must be in (0, 1], got 1.5"),
    (("run", "--time_budget_s", "0"), "--time_budget_s"),
    (("run", "--staleness", "-1"), "--staleness"),
    (("run", "--sync", "sgd"), "--sync"),
    (("train", "--cluster", "layouts/edge4.yaml", "--sync", "asp", "--steps", "50"), "use --max_steps N"),
    (("train", "--cluster", "layouts/edge4.yaml", "--sync", "asp", "--eval_every", "5"),
     "--eval_every: only for single-layout training"),
    (("train", "--max_steps", "50"), "single-layout training trains until the global step --steps"),
    (("train", "--lost_after_s", "3"), "--lost_after_s: only for hybrid training"),
    (("train", "--cluster", "layouts/edge4.yaml", "--sync", "asp", "--max_steps", "0"),
     "flag --max_steps=0: 0 is not a positive integer"),
    (("run", "--min_ratio", "2"), "--min_ratio: min_ratio must be a fraction of entries in (0, 1], got 2.0"),
])
def test_bad_flags_are_named(args, message):
    out = _cli(*args)
    assert out.returncode != 0 and message in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr


if __name__ == "__main__":
    print(json.dumps(_walk(sys.argv[1], sys.argv[2])))
