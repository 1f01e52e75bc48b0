"""`edgemesh cluster check` (cluster/check.py, profiling/device_check.py): real servers against their
cluster file. The comparison, the table and the measured copy of the file are pure (no TF, no
process); one subprocess test starts the servers of a localhost cluster file as a user would
(`edgemesh server --cluster FILE --device NAME`), runs the check on them and stops them by pid.
"""
import ast
import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from edgemesh_tf.cluster import check, procs, spec
from edgemesh_tf.cluster.check import Link, Measured
from edgemesh_tf.cluster.emulated_network import free_ports

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OWN = {"tensorflow": "2.21.0", "edgemesh_tf": "0.1.0"}


def _cluster(**figures):
    """Four devices on one host, pi and jetson on others; figures: {device: {field: value}}."""
    devices = [{"name": "jetson", "role": "worker", "host": "10.0.0.2", "port": 2300},
               {"name": "pi", "role": "worker", "host": "10.0.0.3", "port": 2301},
               {"name": "ps0", "role": "ps", "host": "10.0.0.1", "port": 2310},
               {"name": "chief", "role": "chief", "host": "10.0.0.1", "port": 2320}]
    for d in devices:
        d.update(figures.get(d["name"], {}))
    data = {"name": "edge", "devices": devices}
    return spec.parse_cluster(data, "edge.yaml"), data


def _measured(name, bw=(100.0, 100.0), lat=(1.0, 1.0), mem=4096.0, versions=OWN, **kw):
    """A device that answered: its paths to chief and ps0 (the hubs) and its host's MemAvailable."""
    links = {h: Link(b, t) for h, b, t in zip(("chief", "ps0"), bw, lat) if h != name and b is not None}
    return Measured(name, versions=dict(versions), links=links, mem_available_mib=mem, **kw)


def _flags(rows, name):
    return [r for r in rows if r.device.name == name][0].flags


# ---------------------------------------------------------------- the comparison (pure)

def test_the_module_imports_no_tensorflow():
    """cluster/check.py and the package modules it imports at their top level are pure Python."""
    todo, seen, bad = ["edgemesh_tf.cluster.check"], set(), []
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        path = os.path.join(REPO, *mod.split(".")) + ".py"
        if not os.path.exists(path):
            path = os.path.join(REPO, *mod.split("."), "__init__.py")
        for node in ast.parse(open(path).read()).body:  # top level only: functions import lazily
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] + ["%s.%s" % (node.module, a.name) for a in node.names]
                     if isinstance(node, ast.ImportFrom) and node.module else [])
            for n in names:
                if n.split(".")[0] in ("tensorflow", "mesh_tensorflow"):
                    bad.append((mod, n))
                elif n.startswith("edgemesh_tf") and (os.path.exists(os.path.join(REPO, *n.split(".")) + ".py")
                                                      or os.path.isdir(os.path.join(REPO, *n.split(".")))):
                    todo.append(n)
    assert "edgemesh_tf.cluster.spec" in seen
    assert not bad, bad


@pytest.mark.parametrize("measured, flagged", [(100, False), (80, False), (120, False), (124, False),
                                               (126, True), (74, True), (70, True), (130, True), (1000, True)])
def test_the_25_percent_rule_both_ways(measured, flagged):
    assert check.mismatch(measured, 100.0) is flagged


def test_latency_needs_the_floor_too():
    assert not check.mismatch(0.4, 0.0, check.LATENCY_FLOOR_MS)  # a file's 0: no added delay
    assert check.mismatch(1.5, 0.0, check.LATENCY_FLOOR_MS)
    assert not check.mismatch(12.0, 10.0, check.LATENCY_FLOOR_MS)
    assert check.mismatch(13.0, 10.0, check.LATENCY_FLOOR_MS) and check.mismatch(7.0, 10.0, check.LATENCY_FLOOR_MS)


def test_a_path_in_the_file_is_the_slower_link_and_both_delays():
    c, _ = _cluster(pi={"bandwidth_mbit": 50, "latency_ms": 3}, chief={"bandwidth_mbit": 1000, "latency_ms": 0.5})
    assert check.path_in_file(c.device("pi"), c.device("chief")) == (50, 3.5)
    assert check.path_in_file(c.device("pi"), c.device("ps0")) == (50, 3.0)  # ps0 gives no rate: no limit
    assert check.path_in_file(c.device("jetson"), c.device("ps0")) == (None, 0.0)  # neither: the file says none


def test_everything_matching_exits_0_and_says_so():
    c, _ = _cluster(jetson={"bandwidth_mbit": 100, "latency_ms": 1, "memory_mib": 4000},
                    pi={"bandwidth_mbit": 100, "latency_ms": 1, "memory_mib": 4000})
    measured = [_measured("jetson", bw=(110, 90), lat=(1.1, 1.3)), _measured("pi"),
                _measured("ps0", mem=8192.0), _measured("chief", mem=8192.0)]
    rows = check.compare(c, measured, OWN)
    assert [r.device.name for r in rows] == ["jetson", "pi", "ps0", "chief"]
    assert all(not r.flags for r in rows) and check.exit_code(rows) == 0
    text = check.format_table(c, rows, OWN)
    assert "!" not in text.split("\n", 2)[2]
    assert text.endswith("all 4 devices answer, run the chief's versions and match the file")


def test_mismatches_either_way_are_flagged_and_named():
    c, _ = _cluster(jetson={"bandwidth_mbit": 100, "memory_mib": 2048}, pi={"bandwidth_mbit": 100, "latency_ms": 5})
    measured = [_measured("jetson", bw=(300, 100), mem=4096.0),  # 3x the file's to the chief; memory 2x
                _measured("pi", bw=(60, 100), lat=(5.2, 1.0)),  # 0.6x to the chief; latency to ps0 1 of 5 ms
                _measured("ps0"), _measured("chief")]
    rows = check.compare(c, measured, OWN)
    assert _flags(rows, "jetson") == (
        "jetson: bandwidth to chief 300 Mbit/s measured, the file says 100 (3x; beyond 25%)",
        "jetson: memory 4096 MiB measured, the file says 2048 (2x; beyond 25%) (its share of 4096 MiB available "
        "on 10.0.0.2)")
    assert _flags(rows, "pi") == ("pi: bandwidth to chief 60 Mbit/s measured, the file says 100 (0.6x; beyond 25%)",
                                  "pi: latency to ps0 1.00 ms measured, the file says 5.00 (0.2x; beyond 25% and 1 ms)")
    assert _flags(rows, "ps0") == _flags(rows, "chief") == ()
    assert check.exit_code(rows) == 1
    text = check.format_table(c, rows, OWN)
    lines = text.splitlines()
    assert lines[2].split() == ["device", "role", "versions", "Mbit/s", "chief", "ms", "chief", "Mbit/s", "ps0",
                                "ms", "ps0", "free", "MiB"]
    assert lines[3].split() == ["jetson", "worker", "same", "300", "(100)!", "1.00", "(0.00)", "100", "(100)",
                                "1.00", "(0.00)", "4096", "(2048)!"]
    assert lines[4].split()[3:5] == ["60", "(100)!"] and lines[4].split()[9:11] == ["1.00", "(5.00)!"]
    assert lines[5].split()[3:] == ["100", "(-)", "1.00", "(0.00)", "-", "-", "2048", "(-)"]  # ps0: its own column
    assert "flagged (4):" in lines and lines[-1] == "exit code 1: something above is flagged"
    assert "- " + _flags(rows, "pi")[1] in lines


def test_versions_unlike_the_chiefs_or_unknown_are_flagged():
    c, _ = _cluster()
    measured = [_measured("jetson", versions={"tensorflow": "2.20.0", "edgemesh_tf": "0.1.0"}),
                _measured("pi", versions={}, versions_note="its server does not answer edgemesh's version query"),
                _measured("ps0"), _measured("chief", versions={"tensorflow": "2.21.0", "edgemesh_tf": "0.2.0"})]
    rows = check.compare(c, measured, OWN)
    assert _flags(rows, "jetson") == ("jetson: TensorFlow 2.20.0, this process (the chief) runs 2.21.0",)
    assert _flags(rows, "pi") == ("pi: versions unknown (its server does not answer edgemesh's version query)",)
    assert _flags(rows, "chief") == ("chief: edgemesh_tf 0.2.0, this process (the chief) runs 0.1.0",)
    assert check.exit_code(rows) == 1
    cells = [line.split()[2] for line in check.format_table(c, rows, OWN).splitlines()[3:7]]
    assert cells == ["2.20.0/0.1.0!", "unknown!", "same", "2.21.0/0.2.0!"]


def test_missing_figures_a_silent_device_and_an_unmeasured_path():
    c, _ = _cluster(pi={"bandwidth_mbit": 100})
    measured = [Measured("jetson", reason="nothing listens there (connection refused)"),
                Measured("pi", versions=dict(OWN), links={"chief": Link(95.0, 0.5)},
                         link_notes={"ps0": "timing the path failed: deadline"}, mem_available_mib=None,
                         memory_note="reading /proc/meminfo on the device failed: no such file"),
                _measured("ps0"), _measured("chief")]
    rows = check.compare(c, measured, OWN)
    assert _flags(rows, "jetson") == ("jetson: did not answer (/job:worker/task:0 at 10.0.0.2:2300): nothing "
                                      "listens there (connection refused)",)
    assert _flags(rows, "pi") == ("pi: bandwidth to ps0 not measured: timing the path failed: deadline",
                                  "pi: memory not measured: reading /proc/meminfo on the device failed: no such file")
    assert not _flags(rows, "ps0")  # figures the file does not give are shown, not compared
    lines = check.format_table(c, rows, OWN).splitlines()
    assert lines[3].split() == ["jetson", "worker", "no", "answer", "-", "-", "-", "-", "-"]
    assert lines[4].split()[3:] == ["95", "(100)", "0.50", "(0.00)", "-", "(100)!", "-", "(0.00)!", "-", "(-)!"]
    report = check.to_json(c, rows, OWN)
    json.dumps(report)  # JSON-ready as it is
    assert report["exit_code"] == 1 and report["flagged"] == 3 and report["hubs"] == ["chief", "ps0"]
    jetson, pi = report["devices"][:2]
    assert not jetson["answered"] and jetson["reason"].startswith("nothing listens")
    assert pi["figures"]["bandwidth_mbit to chief"] == {"measured": 95.0, "file": 100, "flagged": False}
    assert pi["links"] == {"chief": {"bandwidth_mbit": 95.0, "latency_ms": 0.5}}


def test_devices_at_one_host_share_its_memory():
    c, _ = _cluster(ps0={"memory_mib": 1000})
    assert check.memory_share_mib(c, c.device("ps0"), 4001.0) == 2000  # ps0 and chief on 10.0.0.1
    assert check.memory_share_mib(c, c.device("pi"), 4001.0) == 4001
    rows = check.compare(c, [_measured("ps0", mem=4000.0)], OWN)
    assert _flags(rows, "ps0")[-1].startswith("ps0: memory 2000 MiB measured, the file says 1000 (2x")


def test_latencies_split_into_links_and_bandwidth_is_the_fastest_path():
    own = {"a": 1.0, "b": 2.0, "c": 3.0}
    paths = {(x, y): own[x] + own[y] for x, y in (("a", "b"), ("a", "c"), ("b", "c"))}
    assert check.split_latencies(paths) == pytest.approx(own)
    assert check.split_latencies({("a", "b"): 3.0}) == pytest.approx({"a": 1.5, "b": 1.5})  # left open: half each
    assert check.split_latencies({("a", "b"): 0.1, ("a", "c"): 0.1, ("b", "c"): 5.0})["a"] == 0.0  # never below 0
    c, _ = _cluster()
    measured = [_measured("jetson", bw=(100, 80), lat=(3.0, 4.0), mem=1000.0),
                _measured("pi", bw=(20, 30), lat=(6.0, 7.0)), _measured("chief", bw=(None, 900), lat=(0, 3.0))]
    figures = check.device_figures(c, measured)
    assert figures["jetson"]["bandwidth_mbit"] == 100 and figures["pi"]["bandwidth_mbit"] == 30
    assert figures["chief"]["bandwidth_mbit"] == 900  # ps0 measured no path of its own: chief's is one of its
    assert figures["jetson"]["latency_ms"] == pytest.approx(2.0) and figures["pi"]["latency_ms"] == pytest.approx(5.0)
    assert figures["jetson"]["memory_mib"] == 1000 and figures["chief"]["memory_mib"] == 2048  # shares 10.0.0.1
    assert "ps0" not in figures


def test_the_measured_copy_keeps_the_rest_of_the_file():
    c, data = _cluster(pi={"bandwidth_mbit": 10, "latency_ms": 9, "memory_mib": 100, "speed": 0.5})
    data["media"] = {}
    measured = [_measured("pi", bw=(50, 60), lat=(1.0, 1.0), mem=3000.0), Measured("jetson", reason="down")]
    copy = check.measured_copy(c, data, measured)
    pi = [d for d in copy["devices"] if d["name"] == "pi"][0]
    assert pi == {"name": "pi", "role": "worker", "host": "10.0.0.3", "port": 2301, "bandwidth_mbit": 60.0,
                  "latency_ms": pytest.approx(2 / 3, abs=1e-3), "memory_mib": 3000, "speed": 0.5}
    assert copy["devices"][0] == data["devices"][0]  # jetson did not answer: the file's figures stay
    assert copy["name"] == "edge" and copy["media"] == {}
    assert data["devices"][1]["bandwidth_mbit"] == 10  # the parsed file is left as it was
    assert spec.parse_cluster(copy).device("pi").memory_mib == 3000


def test_meminfo_and_the_deadline_without_tensorflow():
    from edgemesh_tf.profiling import device_check

    assert device_check.mem_available_mib("MemTotal: 8000 kB\nMemAvailable:    2048000 kB\n") == 2000.0
    with pytest.raises(ValueError, match="MemAvailable"):
        device_check.mem_available_mib("MemTotal: 8000 kB\n")
    assert device_check.measure_timeout_s(4) == 70.0


# ---------------------------------------------------------------- real servers on localhost

NAMES = (("fast", "worker"), ("slow", "worker"), ("ps0", "ps"), ("chief", "chief"))


@pytest.fixture(scope="module")
def local_servers(tmp_path_factory):
    """The servers of a localhost cluster file whose device `fast` claims 1 Mbit/s, each started as
    `edgemesh server --cluster FILE --device NAME`; stopped by pid at the end."""
    tmp = str(tmp_path_factory.mktemp("check"))
    path = os.path.join(tmp, "local.yaml")
    devices = [{"name": n, "role": r, "host": "127.0.0.1", "port": p} for (n, r), p in zip(NAMES, free_ports(4))]
    devices[0]["bandwidth_mbit"] = 1  # localhost moves Gbit/s: far from it
    with open(path, "w") as f:
        yaml.safe_dump({"name": "local", "devices": devices}, f, sort_keys=False)
    started = {}
    try:
        for n, _ in NAMES:
            with open(os.path.join(tmp, n + ".log"), "w") as log:
                started[n] = procs.spawn([sys.executable, "-m", "edgemesh_tf.cli.main", "server", "--cluster", path,
                                          "--device", n, "--ready_file", os.path.join(tmp, n + ".ready"),
                                          "--intra_op_threads", "1", "--inter_op_threads", "1"], cwd=REPO,
                                         stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONPATH=REPO))
        deadline = time.monotonic() + 60
        for n, _ in NAMES:
            while not os.path.exists(os.path.join(tmp, n + ".ready")):
                assert started[n].poll() is None, open(os.path.join(tmp, n + ".log")).read()[-2000:]
                assert time.monotonic() < deadline, "server %s did not start within 60 s" % n
                time.sleep(0.1)
        yield path, tmp
    finally:  # also when a test failed: only the servers started here
        for p in started.values():
            procs.terminate(p, 5.0)


@pytest.mark.subprocess
def test_check_on_localhost_servers_measures_every_device_and_flags_the_far_figure(local_servers):
    path, tmp = local_servers
    out, written = os.path.join(tmp, "check.json"), os.path.join(tmp, "measured.yaml")
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "edgemesh_tf.cli.main", "cluster", "check", "--cluster", path, "--json",
                        "--out", out, "--write_cluster", written], cwd=REPO, capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=REPO))
    took = time.monotonic() - t0
    assert p.returncode == 1, (p.stdout[-3000:], p.stderr[-3000:])
    report = json.loads(p.stdout)
    assert report == json.load(open(out))
    import edgemesh_tf

    own = report["chief_versions"]
    assert own["tensorflow"] and own["edgemesh_tf"] == edgemesh_tf.__version__
    by_name = {d["name"]: d for d in report["devices"]}
    assert list(by_name) == [n for n, _ in NAMES]
    for name, d in by_name.items():
        assert d["answered"], d
        assert d["versions"] == own, d  # read in each server's process: the same venv here
        assert d["mem_available_mib"] > 0, d
        hubs = {"chief", "ps0"} - {name}
        assert set(d["links"]) == hubs, d
        for link in d["links"].values():
            assert link["bandwidth_mbit"] > 10 and 0 <= link["latency_ms"] < 50, d
    fast = by_name["fast"]
    assert fast["figures"]["bandwidth_mbit to chief"]["flagged"] and fast["figures"]["bandwidth_mbit to ps0"]["flagged"]
    assert any(f.startswith("fast: bandwidth to chief ") and "the file says 1 " in f for f in fast["flags"])
    assert not [f for d in report["devices"] for f in d["flags"] if "bandwidth" in f and not f.startswith("fast")]
    copy = spec.load_cluster(written)
    assert copy.device("fast").bandwidth_mbit == round(max(x["bandwidth_mbit"] for x in fast["links"].values()), 1)
    assert copy.device("slow").memory_mib == by_name["slow"]["figures"]["memory_mib"]["measured"] > 0
    assert took < 40, took
