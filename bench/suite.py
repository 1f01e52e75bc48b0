"""Runs every benchmark under bench/ and writes bench/REPORT.md with its plots (`make bench`).

    python -m bench.suite [--quick] [--results bench/results] [--out bench] [--only NAME,...]

Without --only it runs every benchmark but those of report.NOT_IN_MAKE_BENCH (the variant table, the
final accuracy, the planner on Wi-Fi and on the Pi-class cluster, a user's own model, the set-up
time), which their own make targets run (--only NAME), so that `make bench` stays within its time.

Each benchmark runs as its own process (`python -m bench.<module>`) with a bounded time; its JSON
(stdout), exit code, wall time and the tail of its stderr go to <results>/<name>.json, with the
machine and versions in <results>/machine.json. A benchmark that fails, times out or prints no JSON
is recorded as failed and shown as failed in the report. --quick runs every benchmark small but
`emulation` (its module runs on pi4 as `emulation_pi4`): a smoke run of the whole pipeline whose
figures are not evidence. bench/report.py renders the report from the recorded files alone.
"""
import contextlib
import dataclasses
import importlib.util
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time

from bench import cli, report

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


@dataclasses.dataclass(frozen=True)
class Bench:
    """One benchmark: its module under bench/, arguments of the full and the quick run (None: not in
    the quick run), timeout (s)."""

    name: str
    module: str
    full: tuple[str, ...]
    quick: tuple[str, ...] | None
    timeout_s: float


CLUSTER = ("--cluster", "layouts/edge4.yaml")
LAN4 = ("--cluster", "layouts/lan4.yaml")  # edge4's devices on a 200 Mbit/s LAN
PI4 = ("--cluster", "layouts/pi4.yaml")  # the realistic edge cluster (Pi-class devices, 1 Gbit/s)
PI4WIFI = ("--cluster", "layouts/pi4wifi.yaml")  # the same devices on one shared Wi-Fi channel
BENCHES = (
    Bench("uneven_split", "uneven_split", ("--steps", "30"), ("--steps", "5", "--round", "5"), 900),
    # quick: the same module runs on pi4 (emulation_pi4) instead
    Bench("emulation", "emulation", CLUSTER, None, 600),
    Bench("emulation_pi4", "emulation", PI4, PI4 + ("--rounds", "1"), 600),
    # the cost model on lan4 (issue 15: within 15%)
    Bench("planner", "planner", LAN4 + ("--dataset", "cifar10", "--batch", "32", "--steps", "8", "--repeats", "2"),
          LAN4 + ("--steps", "3", "--repeats", "1"), 1200),  # quick: the small digits input
    # seconds to plan 256 and 1,024 synthetic devices over a grid of link speeds and speed spreads (issue 41)
    Bench("planning_time", "planning_time", (), ("--sizes", "64", "--links", "100,1000", "--spreads", "1,8"), 1800),
    # the job's cost model per phase against the main job (issue 45), every strategy, one and two groups, two clusters
    Bench("job_prediction", "job_prediction", ("--budget_s", "30"),
          ("--clusters", "layouts/pi4.yaml", "--strategies", "ashl,bsp", "--budget_s", "15"), 3000),
    # VGG-16 on the Pi-class cluster, memory limits enforced; quick: vgg_wide on the 8x8 digits, where the plan splits
    Bench("edgemesh_claims", "edgemesh_claims", PI4,
          PI4 + ("--model", "vgg_wide", "--dataset", "digits", "--steps", "2", "--memory", "0"), 3600),
    # past the timeout it is sent SIGTERM and prints the runs made so far; quick: edge4 only
    Bench("time_to_accuracy", "time_to_accuracy", CLUSTER + ("--variants", ""),
          CLUSTER + ("--quick", "--variants", "", "--homo_cluster", ""), 4800),
    # quick: the ps fault only (the re-admission has its own test, tests/engine/test_engine_rejoin.py)
    Bench("faults", "faults", CLUSTER, CLUSTER + ("--quick", "--scenarios", "c"), 1800),
    # the variant table (issue 16: what each of the project's rules buys), `make bench-variants`
    Bench("tta_variants", "time_to_accuracy",
          CLUSTER + ("--strategies", "ashl,adsp", "--seeds", "2", "--homo_cluster", "", "--variant_seeds", "2"),
          CLUSTER + ("--quick", "--strategies", "ashl", "--homo_cluster", ""), 3600),
    # issue 16's final accuracy against BSP converged (BSP with the limits lifted), `make bench-final`
    Bench("final_accuracy", "final_accuracy", CLUSTER,
          CLUSTER + ("--seeds", "1", "--ashl_budget_s", "20", "--bsp_budget_s", "20"), 3600),
    # the cost model's shared medium against the testbed's Wi-Fi channel, `make bench-wifi`
    Bench("planner_wifi", "planner",
          PI4WIFI + ("--model", "vgg", "--dataset", "cifar10", "--batch", "32", "--steps", "8"),
          PI4WIFI + ("--steps", "3", "--repeats", "1"), 1800),
    # the cost model on the Pi-class cluster over three rounds, `make bench-pi4`
    Bench("planner_pi4", "planner", PI4 + ("--model", "vgg16", "--dataset", "digits32", "--batch", "32", "--steps", "5",
                                           "--repeats", "3"),
          PI4 + ("--steps", "3", "--repeats", "1"), 4800),
    # a user's own model file on pi4 against the same network in plain TF on one device, `make bench-own-model`
    Bench("own_model", "own_model", PI4 + ("--model", "examples/lenet_bn.py", "--dataset", "digits32"),
          PI4 + ("--model", "examples/lenet_bn.py", "--dataset", "digits32", "--seeds", "0", "--epochs", "3",
                 "--time_budget_s", "60"), 2400),
    # the main job's set-up on a first run and a rerun with the cached profile (issue 42), `make bench-setup`
    Bench("setup_time", "setup_time", PI4 + ("--jobs", "3"), PI4 + ("--jobs", "1", "--budget_s", "30"), 2400),
)


def selected(only: list[str]) -> list[Bench]:
    """The benchmarks named in `only`, else those of `make bench` (all but report.NOT_IN_MAKE_BENCH)."""
    return [b for b in BENCHES if (b.name in only if only else b.name not in report.NOT_IN_MAKE_BENCH)]


def _version(*dists) -> str | None:
    """The installed version of the first of ``dists`` that is installed, as "version (dist)"; None if none."""
    from importlib.metadata import PackageNotFoundError, version
    for dist in dists:
        with contextlib.suppress(PackageNotFoundError):
            return f"{version(dist)} ({dist})"
    return None


def _first_field(path: str, prefix: str) -> str | None:
    """The value after ``prefix`` on the first line of ``path`` that starts with it (/proc files)."""
    try:
        with open(path) as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith(prefix)), None)
    except OSError:
        return None


def machine(command: str) -> dict:
    """Cores, CPU model, memory, versions, date, git commit and the exact command of this run."""
    mem, commit = _first_field("/proc/meminfo", "MemTotal"), None
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
    return {"cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": command,
            "cpu_model": _first_field("/proc/cpuinfo", "model name"),
            "memory_gib": round(int(mem.split()[0]) / 2 ** 20, 1) if mem else None,
            "tensorflow": _version("tensorflow-cpu", "tensorflow"), "mesh-tensorflow": _version("mesh-tensorflow"),
            "git_commit": commit}


def record_machine(path: str, info: dict, only: list[str]) -> dict:
    """Writes the machine record of this run; a partial run (--only) keeps the full run's record
    and is added to its "partial_runs". Returns what was written."""
    if only and os.path.exists(path):
        with open(path) as f:
            full = json.load(f)
        full["partial_runs"] = full.get("partial_runs", []) + [
            {k: info.get(k) for k in ("command", "date", "git_commit", "seconds")} | {"only": only}]
        info = full
    with open(path, "w") as f:
        json.dump(info, f, indent=1)
    return info


def _last_json(stdout: str):
    """The JSON object a benchmark printed: the whole stdout, else its last line that parses."""
    for text in (stdout, *reversed(stdout.strip().splitlines())):
        with contextlib.suppress(ValueError):
            return json.loads(text)
    return None


def run_bench(b: Bench, quick: bool) -> dict:
    """Runs one benchmark in its own process group, never longer than its timeout; a quick run leaves
    out (and records as not run) those without quick arguments."""
    if quick and b.quick is None:  # shown as not run, replacing an older record
        return {"name": b.name, "status": "not run", "quick": True, "seconds": 0.0,
                "error": "not in the quick run; `make bench` runs it"}
    print(f"[bench] {b.name}: running (at most {b.timeout_s:.0f} s)", file=sys.stderr, flush=True)
    module = b.module if "." in b.module else "bench." + b.module
    args = [sys.executable, "-m", module, *(b.quick if quick else b.full)]
    rec = {"name": b.name, "command": shlex.join(["python", *args[1:]]),
           "timeout_s": b.timeout_s, "date": time.strftime("%Y-%m-%d %H:%M:%S"), "quick": quick}
    if importlib.util.find_spec(module) is None:
        return {**rec, "status": "failed", "error": f"module {module} does not exist", "seconds": 0.0}
    t0 = time.monotonic()
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=b.timeout_s)
        error = None if proc.returncode == 0 else f"exit code {proc.returncode}"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)  # its own session: the benchmark and its children only
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        error = f"timed out after {b.timeout_s:.0f} s"
    result = _last_json(out)
    if result is None and error is None:
        error = "printed no JSON"
    rec.update(seconds=round(time.monotonic() - t0, 1), exit_code=proc.returncode, result=result,
               status="failed" if error else "ok", error=error, stderr_tail=err.strip().splitlines()[-15:])
    return rec


def main():
    args = cli.parser(__doc__, (
        ("quick", False, "small smoke run of the whole pipeline; figures are not evidence"),
        ("results", os.path.join(HERE, "results"), "directory of the recorded JSON"),
        ("out", HERE, "directory of REPORT.md and its plots"),
        ("only", [], "comma-separated benchmark names (default: all)",
         {"choices": [b.name for b in BENCHES]}))).parse_args()
    os.makedirs(args.results, exist_ok=True)
    info = {**machine(shlex.join(["python", "-m", "bench.suite", *sys.argv[1:]])), "quick": args.quick}
    t0 = time.monotonic()
    for b in selected(args.only):
        rec = run_bench(b, args.quick)
        print(f"[bench] {b.name}: {rec['status']} in {rec['seconds']} s"
              + (f" ({rec['error']})" if rec["error"] else ""), file=sys.stderr, flush=True)
        with open(os.path.join(args.results, f"{b.name}.json"), "w") as f:
            json.dump(rec, f, indent=1)
    info["seconds"] = round(time.monotonic() - t0, 1)
    record_machine(os.path.join(args.results, "machine.json"), info, args.only)
    path = report.render(args.results, args.out)
    print(f"[bench] wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
