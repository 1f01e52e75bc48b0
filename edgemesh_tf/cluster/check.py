"""`edgemesh cluster check`: real servers against their cluster file. Pure: no TensorFlow, no network.

The measuring (profiling/device_check.py) gives one `Measured` per device of the file: whether its
server answered, the TensorFlow and edgemesh_tf versions its server process runs, its measured paths
to the two hubs (the master, i.e. the chief or the first worker without one, and the first ps) and
its host's MemAvailable. This module compares them with the file (`compare`), formats the table
(`format_table`) and the JSON (`to_json`), and makes the file's copy with the measured figures
(`measured_copy`).

What the file says of a path between devices a and b: the lower of their `bandwidth_mbit` (a device
without one has no limit of its own; neither has one: the file says nothing) and the sum of their
`latency_ms` (a path crosses both links, as the emulator builds it: cluster/spec.py). Of memory: the
device's `memory_mib`, compared with its share of its host's MemAvailable (the host's divided by
the file's devices at that host: they share it).

A figure is flagged when the measured one is off the file's by more than TOLERANCE (25%) either way;
a latency only beyond LATENCY_FLOOR_MS as well (an empty run's round trip jitters by a fraction of a
millisecond on a LAN, and a file's 0 means "no added delay"). A figure the file does not give is shown
and not compared. A device that did not answer, a path or memory that could not be measured, and
versions that differ from the check's own process (the chief's) or cannot be read are flagged too.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

import numpy as np

from edgemesh_tf.cluster.spec import ClusterFile, Device, parse_cluster

TOLERANCE = 0.25
"""A measured figure more than this fraction off the file's (either way) is flagged."""
LATENCY_FLOOR_MS = 1.0
"""Latencies closer than this (ms) to the file's are never flagged."""
VERSIONS = ("tensorflow", "edgemesh_tf")
"""The versions that must be the same on every device as in the check's own process."""
_VERSION_NAMES = {"tensorflow": "TensorFlow", "edgemesh_tf": "edgemesh_tf"}


@dataclasses.dataclass(frozen=True)
class Link:
    """One measured path: bandwidth_mbit (Mbit/s, fitted from timed transfers) and latency_ms (one
    way, ms: half an empty run's round trip beyond a run's own cost)."""

    bandwidth_mbit: float
    latency_ms: float


@dataclasses.dataclass(frozen=True)
class Measured:
    """What the check found of one device of the file.

    name: the device; reason: why its server did not answer ("" when it did);
    versions: {"tensorflow", "edgemesh_tf", ...} as its server process reports them ({}: unknown, and
    versions_note says why); links: {hub device name: Link} of its paths to the hubs (not to itself),
    link_notes: {hub: why that path was not measured}; mem_available_mib: MemAvailable of its host
    read on the device (MiB) or None, memory_note: why not.
    """

    name: str
    reason: str = ""
    versions: Mapping[str, str] = dataclasses.field(default_factory=dict)
    versions_note: str = ""
    links: Mapping[str, Link] = dataclasses.field(default_factory=dict)
    link_notes: Mapping[str, str] = dataclasses.field(default_factory=dict)
    mem_available_mib: float | None = None
    memory_note: str = ""

    @property
    def answered(self) -> bool:
        return not self.reason


@dataclasses.dataclass(frozen=True)
class Figure:
    """One compared figure of a device: key (e.g. "bandwidth_mbit to chief"), what was measured and
    what the file says (None: not measured / not in the file), and whether it is flagged."""

    key: str
    measured: float | None
    file: float | None
    flagged: bool


@dataclasses.dataclass(frozen=True)
class Row:
    """One device's line: its figures in column order (`columns`) and what is flagged, one sentence each."""

    device: Device
    measured: Measured
    figures: tuple[Figure, ...]
    flags: tuple[str, ...]


def hubs(cluster: ClusterFile) -> tuple[Device, Device]:
    """The devices every path is measured to: the master (chief, else the first worker) and the first ps."""
    return cluster.master, cluster.by_role("ps")[0]


def columns(cluster: ClusterFile) -> tuple[str, ...]:
    """The compared figures' keys, in table order: bandwidth and latency to each hub, then memory."""
    out = []
    for hub in hubs(cluster):
        out += ["bandwidth_mbit to %s" % hub.name, "latency_ms to %s" % hub.name]
    return tuple(out) + ("memory_mib",)


def path_in_file(a: Device, b: Device) -> tuple[float | None, float]:
    """(bandwidth_mbit, latency_ms) the file says of the path a-b: the lower bandwidth of the two
    (None: neither gives one) and the sum of their latencies."""
    rates = [d.bandwidth_mbit for d in (a, b) if d.bandwidth_mbit is not None]
    return (min(rates) if rates else None), a.latency_ms + b.latency_ms


def memory_share_mib(cluster: ClusterFile, device: Device, mem_available_mib: float) -> int:
    """The device's share of its host's MemAvailable (whole MiB): divided among the file's devices at that host."""
    return int(math.floor(mem_available_mib / sum(1 for d in cluster.devices if d.host == device.host)))


def mismatch(measured: float, file: float, floor: float = 0.0) -> bool:
    """Whether `measured` is off `file` by more than TOLERANCE of the file's figure, either way, and by
    more than `floor` (same unit)."""
    off = abs(measured - file)
    return bool(off > TOLERANCE * abs(file) + 1e-12 and off > floor)


def _num(x: float | None, key: str = "") -> str:
    """A figure as the table shows it: '-' for None; Mbit/s and MiB whole above 100, ms to 0.01."""
    if x is None:
        return "-"
    if key.startswith("latency"):
        return "%.2f" % x
    return "%.0f" % x if abs(x) >= 100 else "%.3g" % x


def _unit(key: str) -> str:
    return "ms" if key.startswith("latency") else "MiB" if key.startswith("memory") else "Mbit/s"


def _figure_flag(name: str, f: Figure, note: str = "") -> str:
    what = f.key.replace("_mbit", "").replace("_ms", "").replace("_mib", "")
    if f.measured is None:
        return "%s: %s not measured%s" % (name, what, ": " + note if note else "")
    ratio = "the file's is 0" if not f.file else "%.0fx" % (f.measured / f.file) if f.measured >= 10 * f.file \
        else "%.2gx" % (f.measured / f.file)
    return ("%s: %s %s %s measured, the file says %s (%s; beyond %d%%%s)"
            % (name, what, _num(f.measured, f.key), _unit(f.key), _num(f.file, f.key), ratio, TOLERANCE * 100,
               " and %g ms" % LATENCY_FLOOR_MS if f.key.startswith("latency") else ""))


def _version_flags(m: Measured, own: Mapping[str, str]) -> list[str]:
    if not m.versions:
        return ["%s: versions unknown (%s)" % (m.name, m.versions_note or "not read")]
    out = []
    for k in VERSIONS:
        theirs = m.versions.get(k)
        if theirs != own.get(k):
            out.append("%s: %s %s, this process (the chief) runs %s" % (m.name, _VERSION_NAMES[k], theirs or "unknown",
                                                                       own.get(k)))
    return out


def compare(cluster: ClusterFile, measured: Sequence[Measured], own_versions: Mapping[str, str]) -> list[Row]:
    """One Row per device of `cluster` (file order): its measured figures beside the file's, and what
    is flagged (the module docstring's rules). own_versions: the check's own process's versions."""
    by_name = {m.name: m for m in measured}
    rows = []
    for d in cluster.devices:
        m = by_name.get(d.name) or Measured(d.name, reason="not checked")
        if not m.answered:
            rows.append(Row(d, m, (), ("%s: did not answer (%s at %s): %s" % (d.name, d.device_string, d.address,
                                                                             m.reason),)))
            continue
        figures, flags = [], _version_flags(m, own_versions)
        for hub in hubs(cluster):
            if hub.name == d.name:
                figures += [Figure("bandwidth_mbit to %s" % hub.name, None, None, False),
                            Figure("latency_ms to %s" % hub.name, None, None, False)]
                continue
            bw_file, lat_file = path_in_file(d, hub)
            link = m.links.get(hub.name)
            for key, got, want, floor in (("bandwidth_mbit", link and link.bandwidth_mbit, bw_file, 0.0),
                                          ("latency_ms", link and link.latency_ms, lat_file, LATENCY_FLOOR_MS)):
                f = Figure("%s to %s" % (key, hub.name), got, want,
                           got is None or (want is not None and mismatch(got, want, floor)))
                figures.append(f)
                if f.flagged and (key == "bandwidth_mbit" or got is not None):  # an unmeasured path: one flag
                    flags.append(_figure_flag(d.name, f, m.link_notes.get(hub.name, "")))
        share = None if m.mem_available_mib is None else memory_share_mib(cluster, d, m.mem_available_mib)
        f = Figure("memory_mib", share, d.memory_mib,
                   share is None or (d.memory_mib is not None and mismatch(share, d.memory_mib)))
        figures.append(f)
        if f.flagged:
            flags.append(_figure_flag(d.name, f, m.memory_note) if share is None else
                         "%s (its share of %s MiB available on %s)" % (_figure_flag(d.name, f),
                                                                        _num(m.mem_available_mib), d.host))
        rows.append(Row(d, m, tuple(figures), tuple(flags)))
    return rows


def exit_code(rows: Sequence[Row]) -> int:
    """0 when every device answered and nothing is flagged, else 1."""
    return 1 if any(r.flags for r in rows) else 0


def _versions_cell(m: Measured, own: Mapping[str, str]) -> str:
    if not m.versions:
        return "unknown!"
    same = all(m.versions.get(k) == own.get(k) for k in VERSIONS)
    return "same" if same else "/".join(m.versions.get(k) or "?" for k in VERSIONS) + "!"


def _cell(f: Figure) -> str:
    return "%s (%s)%s" % (_num(f.measured, f.key), _num(f.file, f.key), "!" if f.flagged else "")


def format_table(cluster: ClusterFile, rows: Sequence[Row], own_versions: Mapping[str, str]) -> str:
    """The check's report: a header, one row per device (each figure `measured (file)`, '!' when
    flagged), then each flag on a line and a last line saying whether everything matches."""
    master, ps = hubs(cluster)
    head = ["device", "role", "versions"] + ["Mbit/s %s" % master.name, "ms %s" % master.name,
                                            "Mbit/s %s" % ps.name, "ms %s" % ps.name, "free MiB"]
    body = []
    for r in rows:
        if not r.measured.answered:
            body.append([r.device.name, r.device.role, "no answer"] + ["-"] * 5)
            continue
        body.append([r.device.name, r.device.role, _versions_cell(r.measured, own_versions)]
                    + ["-" if f.measured is None and f.file is None and not f.flagged else _cell(f) for f in r.figures])
    widths = [max(len(line[i]) for line in [head] + body) for i in range(len(head))]
    lines = ["edgemesh cluster check of %s: %d devices; this process (the chief) runs TensorFlow %s, edgemesh_tf %s"
             % (cluster.path, len(cluster.devices), own_versions.get("tensorflow"), own_versions.get("edgemesh_tf")),
             "each figure: measured (the cluster file's); '!' off by more than %d%% (latency: and %g ms); paths to "
             "%s and %s; free MiB: the device's share of its host's MemAvailable"
             % (TOLERANCE * 100, LATENCY_FLOOR_MS, master.name, ps.name)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [head] + body]
    flags = [f for r in rows for f in r.flags]
    if flags:
        lines.append("flagged (%d):" % len(flags))
        lines += ["- " + f for f in flags]
        lines.append("exit code 1: something above is flagged")
    else:
        lines.append("all %d devices answer, run the chief's versions and match the file" % len(rows))
    return "\n".join(lines)


def to_json(cluster: ClusterFile, rows: Sequence[Row], own_versions: Mapping[str, str]) -> dict[str, Any]:
    """The measured figures as JSON-ready data: the chief's versions, the hubs, and per device what was
    measured, what the file says, and what is flagged."""
    devices = []
    for r in rows:
        m = r.measured
        figures = {f.key: {"measured": f.measured, "file": f.file, "flagged": f.flagged} for f in r.figures}
        devices.append({"name": r.device.name, "role": r.device.role, "address": r.device.address,
                        "answered": m.answered, "reason": m.reason or None,
                        "versions": dict(m.versions) or None, "versions_note": m.versions_note or None,
                        "links": {h: dataclasses.asdict(link) for h, link in m.links.items()},
                        "link_notes": dict(m.link_notes), "mem_available_mib": m.mem_available_mib,
                        "memory_note": m.memory_note or None, "figures": figures, "flags": list(r.flags)})
    master, ps = hubs(cluster)
    return {"cluster": cluster.path, "chief_versions": dict(own_versions), "hubs": [master.name, ps.name],
            "tolerance": TOLERANCE, "latency_floor_ms": LATENCY_FLOOR_MS, "devices": devices,
            "flagged": sum(len(r.flags) for r in rows), "exit_code": exit_code(rows)}


def split_latencies(paths: Mapping[tuple[str, str], float]) -> dict[str, float]:
    """Each device's own one-way latency (ms) from measured paths {(a, b): latency of a-b}: the
    least-squares split of every path into its two links (a path's latency is the sum of its ends'),
    the smallest such split when the paths leave it open (two devices: half each), never below 0."""
    names = sorted({n for pair in paths for n in pair})
    if not names:
        return {}
    a = np.zeros((len(paths), len(names)))
    for i, (x, y) in enumerate(paths):
        a[i, names.index(x)] = a[i, names.index(y)] = 1.0
    solved = np.linalg.lstsq(a, np.asarray(list(paths.values()), float), rcond=None)[0]
    return {n: max(0.0, float(v)) for n, v in zip(names, solved)}


def device_figures(cluster: ClusterFile, measured: Sequence[Measured]) -> dict[str, dict[str, float]]:
    """{device: {"bandwidth_mbit", "latency_ms", "memory_mib"}}: each device's own figures from what was
    measured, as the cluster file gives them. Bandwidth: its fastest measured path (a path runs at the
    slower of its two links, so the device's own is at least that); latency: `split_latencies` over every
    measured path; memory: its share of its host's MemAvailable (whole MiB). A figure that was not
    measured is left out."""
    paths: dict[tuple[str, str], list[Link]] = {}
    for m in measured:
        for hub, link in m.links.items():
            paths.setdefault(tuple(sorted((m.name, hub))), []).append(link)
    latency = split_latencies({p: sum(x.latency_ms for x in v) / len(v) for p, v in paths.items()})
    out: dict[str, dict[str, float]] = {}
    for m in measured:
        d = cluster.device(m.name)
        mine = [link for p, v in paths.items() if m.name in p for link in v]
        fig: dict[str, float] = {}
        if mine:
            fig["bandwidth_mbit"] = round(max(x.bandwidth_mbit for x in mine), 1)
            fig["latency_ms"] = round(latency[m.name], 3)
        if m.mem_available_mib is not None:
            fig["memory_mib"] = memory_share_mib(cluster, d, m.mem_available_mib)
        if fig:
            out[m.name] = fig
    return out


def measured_copy(cluster: ClusterFile, data: Mapping[str, Any], measured: Sequence[Measured]) -> dict[str, Any]:
    """The parsed cluster file `data` (what `cluster` was read from) with each device's bandwidth_mbit,
    latency_ms and memory_mib replaced by the measured ones (`device_figures`; a figure not measured
    keeps the file's), everything else as it was; checked as a cluster file (ClusterFileError names the
    device and field)."""
    figures = device_figures(cluster, measured)
    devices = []
    for raw in data["devices"]:
        raw = dict(raw)
        raw.update(figures.get(raw.get("name"), {}))
        devices.append(raw)
    out = dict(data, devices=devices)
    parse_cluster(out, cluster.path + " (with the measured figures)")
    return out
