"""Network namespaces, veth pairs and `tbf` rate limits for emulated devices (needs root).

Addressing (the one place it is defined): all emulated links use 10.213.0.0/16. A running cluster
owns one slot S (0..255), i.e. 10.213.S.0/24; its device i (0..63) gets the /30 at 10.213.S.4i with
  10.213.S.(4i+1)  host end of the veth, in the root namespace: the device's *public* address,
                   where the delaying forwarder listens for the device's port;
  10.213.S.(4i+2)  namespace end: the TF server itself (TF binds all interfaces of its namespace).
Every process (client in the root namespace, servers in any namespace) reaches device i at its
public address: from a namespace the packet leaves through its own veth (its upload limit) and is
delivered locally in the root namespace, so no IP forwarding or NAT is needed. The forwarder then
connects to the namespace end through device i's veth (its download limit).

Direct routing (clusters whose every latency is <= DIRECT_LATENCY_MS): no forwarder; a device's
address is its namespace end, the host ends forward between each other (per-interface
`net.ipv4.conf.<veth>.forwarding`, nothing machine-wide), so a transfer still leaves through the
sender's veth (upload limit) and enters through the receiver's (download limit).

Shared media (a Wi-Fi channel): one `ifb` device per medium with one `tbf` at the medium's rate;
both directions of every member device (ingress and egress of its host-end veth, through a
`clsact` qdisc and `mirred` redirects) pass through it, so all their transfers contend for one
token bucket, as frames contend for airtime. A transfer between two members crosses the medium
twice (up to the access point, down to the other device), as in infrastructure-mode Wi-Fi.

Resource names: namespace `em-<run>-<device>`, veth `em<run><i>h` (host) / `em<run><i>n`,
medium `em<run>w<k>` (ifb).
"""
from __future__ import annotations

import dataclasses
import ipaddress
import re
import subprocess

from absl import logging

SUPERNET = ipaddress.ip_network("10.213.0.0/16")
PREFIX = "em"
MAX_DEVICES_PER_SLOT = 64
# At or below this one-way latency (ms) on every link, latency is not emulated (direct routing):
# the delay forwarder would cost ~0.3 core per Gbit/s (bench/emulation.py measures it) and a
# veth hop is ~0.02-0.05 ms, so each link's latency is under-modelled by at most this much.
DIRECT_LATENCY_MS = 0.5


# veth segments offloaded (GSO) packets up to 64 KiB by default; tbf then needs a 64 KiB bucket, which
# lets any transfer below 64 KiB pass a 10 Mbit/s link at line rate (52 ms of traffic for free). So a
# shaped veth's segments are capped at a quarter of its bucket (>= one frame): the bucket stays a few
# packets, like a real link. The cap must not be one MTU on fast links: at 1500-byte segments this
# host's veths carry about one Gbit/s even unshaped (83k packets/s a Gbit/s, all in softirq), so a
# 1 Gbit/s link falls short of its rate; at 16 KiB and above they carry several Gbit/s unshaped and a
# shaped 1 Gbit/s link its line rate less headers (docs/DESIGN.md has the figures).
FRAME_BYTES, GSO_MAX_BYTES = 1514, 65536  # an Ethernet frame at 1500 MTU; the kernel's largest GSO


@dataclasses.dataclass(frozen=True)
class Link:
    """The emulated link of one device. Rates in Mbit/s (None = unlimited); `gso_max_bytes` is the
    veth's largest segment (see `gso_max_bytes`)."""

    netns: str
    host_if: str
    ns_if: str
    host_ip: str
    ns_ip: str
    bandwidth_mbit: float | None
    gso_max_bytes: int = GSO_MAX_BYTES


def addresses(slot: int, index: int) -> tuple[str, str]:
    """(host_ip, ns_ip) of device `index` in `slot`."""
    if not 0 <= slot <= 255 or not 0 <= index < MAX_DEVICES_PER_SLOT:
        raise ValueError("slot %d / device index %d out of range" % (slot, index))
    base = int(SUPERNET.network_address) + slot * 256 + 4 * index
    return str(ipaddress.ip_address(base + 1)), str(ipaddress.ip_address(base + 2))


def link_for(run_id: str, slot: int, index: int, device: str, bandwidth_mbit: float | None,
             medium_mbit: float | None = None) -> Link:
    """Device `index`'s link; its segments fit the slower of its own tbf and its medium's (Mbit/s)."""
    host_ip, ns_ip = addresses(slot, index)
    rates = [r for r in (bandwidth_mbit, medium_mbit) if r]
    return Link(netns="%s-%s-%s" % (PREFIX, run_id, device), host_if="%s%s%dh" % (PREFIX, run_id, index),
                ns_if="%s%s%dn" % (PREFIX, run_id, index), host_ip=host_ip, ns_ip=ns_ip,
                bandwidth_mbit=bandwidth_mbit, gso_max_bytes=gso_max_bytes(min(rates) if rates else None))


def run(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = (["ip", "netns", "exec", netns] if netns else []) + list(args)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and p.returncode != 0:
        raise RuntimeError("command failed (%d): %s: %s" % (p.returncode, " ".join(cmd), p.stderr.strip()))
    return p


def tbf_burst_bytes(rate_mbit: float) -> int:
    """The token bucket of a `rate_mbit` link: max(4 frames, 2 ms of traffic), in bytes."""
    return int(max(4 * FRAME_BYTES, rate_mbit * 1e6 / 8 * 0.002))


def gso_max_bytes(rate_mbit: float | None) -> int:
    """Largest segment (bytes) a veth shaped at `rate_mbit` hands its tbf: a quarter of the bucket,
    between one frame and the kernel's 64 KiB (unshaped: None)."""
    if rate_mbit is None:
        return GSO_MAX_BYTES
    return int(min(GSO_MAX_BYTES, max(FRAME_BYTES, tbf_burst_bytes(rate_mbit) // 4)))


def tbf_args(rate_mbit: float) -> list[str]:
    """tbf with a burst of `tbf_burst_bytes` and a queue of ~50 ms, enough for TCP to keep the link
    full without adding much delay."""
    burst = tbf_burst_bytes(rate_mbit)
    limit = int(burst + rate_mbit * 1e6 / 8 * 0.05)
    return ["tbf", "rate", "%dkbit" % round(rate_mbit * 1000), "burst", str(burst), "limit", str(limit)]


def create(link: Link) -> None:
    """Creates namespace, veth pair, addresses, default route and tbf in both directions."""
    run("ip", "netns", "add", link.netns)
    gso = ("gso_max_size", str(link.gso_max_bytes))
    run("ip", "link", "add", link.host_if, *gso, "type", "veth", "peer", "name", link.ns_if, *gso, "netns", link.netns)
    run("ip", "addr", "add", link.host_ip + "/30", "dev", link.host_if)
    run("ip", "link", "set", link.host_if, "up")
    run("ip", "link", "set", "lo", "up", netns=link.netns)
    run("ip", "addr", "add", link.ns_ip + "/30", "dev", link.ns_if, netns=link.netns)
    run("ip", "link", "set", link.ns_if, "up", netns=link.netns)
    run("ip", "route", "add", "default", "via", link.host_ip, netns=link.netns)
    if link.bandwidth_mbit:
        # Host-end egress = the device's download, namespace-end egress = its upload.
        run("tc", "qdisc", "add", "dev", link.host_if, "root", *tbf_args(link.bandwidth_mbit))
        run("tc", "qdisc", "add", "dev", link.ns_if, "root", *tbf_args(link.bandwidth_mbit), netns=link.netns)


LIFTED_MBIT = 10000.0  # `set_rate` to this for a job's set-up and wind-down: no emulated link limits them


def set_rate(interface: str, rate_mbit: float, netns: str | None = None) -> None:
    """Changes the root tbf of `interface` (in `netns`) to `rate_mbit` Mbit/s (tc qdisc change:
    connections and queues stay)."""
    run("tc", "qdisc", "change", "dev", interface, "root", *tbf_args(rate_mbit), netns=netns)


def enable_forwarding(host_if: str) -> None:
    """Lets the root namespace route packets arriving on this veth (direct routing); the setting
    goes away with the veth."""
    with open("/proc/sys/net/ipv4/conf/%s/forwarding" % host_if, "w") as f:
        f.write("1")


def medium_name(run_id: str, index: int) -> str:
    return "%s%sw%d" % (PREFIX, run_id, index)


def create_medium(name: str, rate_mbit: float, host_ifs: list[str]) -> None:
    """An ifb with one tbf at `rate_mbit` through which both directions of every veth in
    `host_ifs` pass (see the module docstring)."""
    run("ip", "link", "add", name, "type", "ifb")
    run("ip", "link", "set", name, "up")
    run("tc", "qdisc", "add", "dev", name, "root", *tbf_args(rate_mbit))
    for host_if in host_ifs:
        run("tc", "qdisc", "add", "dev", host_if, "clsact")
        for hook in ("ingress", "egress"):
            run("tc", "filter", "add", "dev", host_if, hook, "protocol", "all", "u32", "match", "u32", "0", "0",
                "action", "mirred", "egress", "redirect", "dev", name)


def namespace_pids(netns: str) -> list[int]:
    p = run("ip", "netns", "pids", netns, check=False)
    return [int(x) for x in p.stdout.split()] if p.returncode == 0 else []


def destroy(netns: str, host_if: str) -> list[str]:
    """Removes the veth (with its qdiscs) and the namespace; returns errors instead of raising."""
    errors = []
    if link_exists(host_if):
        p = run("ip", "link", "del", host_if, check=False)
        if p.returncode != 0 and link_exists(host_if):
            errors.append("ip link del %s: %s" % (host_if, p.stderr.strip()))
    if netns in list_namespaces():
        p = run("ip", "netns", "del", netns, check=False)
        if p.returncode != 0:
            errors.append("ip netns del %s: %s" % (netns, p.stderr.strip()))
    return errors


def link_exists(name: str) -> bool:
    return run("ip", "link", "show", "dev", name, check=False).returncode == 0


_NETNS_RE = re.compile(r"^%s-[0-9a-f]{4}-" % PREFIX)
_LINK_RE = re.compile(r"^%s[0-9a-f]{4}[0-9]{1,2}[hn]$" % PREFIX)
_MEDIUM_RE = re.compile(r"^%s[0-9a-f]{4}w[0-9]{1,2}$" % PREFIX)


def list_namespaces() -> list[str]:
    """Our namespaces (named em-<run>-<device>)."""
    p = run("ip", "netns", "list", check=False)
    return [line.split()[0] for line in p.stdout.splitlines() if _NETNS_RE.match(line)]


def list_links() -> list[str]:
    """Our veths in the root namespace (named em<run><i>h; never a NIC that merely starts with em)."""
    p = run("ip", "-o", "link", "show", "type", "veth", check=False)
    names = [line.split(":")[1].strip().split("@")[0] for line in p.stdout.splitlines() if ":" in line]
    return [n for n in names if _LINK_RE.match(n)]


def list_media() -> list[str]:
    """Our shared-medium ifb devices (named em<run>w<k>)."""
    p = run("ip", "-o", "link", "show", "type", "ifb", check=False)
    names = [line.split(":")[1].strip().split("@")[0] for line in p.stdout.splitlines() if ":" in line]
    return [n for n in names if _MEDIUM_RE.match(n)]


def used_slots() -> set[int]:
    """Slots whose /24 has an address on some interface of the root namespace."""
    p = run("ip", "-o", "-4", "addr", "show", check=False)
    slots = set()
    for line in p.stdout.splitlines():
        for word in line.split():
            if "/" in word:
                try:
                    ip = ipaddress.ip_interface(word).ip
                except ValueError:
                    continue
                if ip in SUPERNET:
                    slots.add((int(ip) - int(SUPERNET.network_address)) // 256)
    return slots


def available() -> bool:
    """True if we may create namespaces (root with `ip` and `tc`)."""
    import os
    import shutil

    ok = os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("tc") is not None
    if not ok:
        logging.info("network namespaces unavailable (need root, ip and tc)")
    return ok
