"""The emulated testbed's network plans (emulator.py starts them): network namespaces with veth pairs
and tbf rate limits (netns.py), or, without root, loopback ports behind the user-space forwarder."""
from __future__ import annotations

import socket

from absl import logging

from edgemesh_tf.cluster import forwarder, netns, state as state_lib

CLIENT = "client"  # the view of a client process in the root namespace (not a device)


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports: all held open at once while they are chosen (ports picked
    one at a time may repeat, and a repeated port stops the forwarder binding its routes)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def plan_netns(cluster, run: state_lib.RunState):
    """Creates the links of `cluster` (an `EmulatedCluster`; its rate_limits, media and latency are
    filled in); returns (client addresses, per-server addresses, forwarder routes, namespaces)."""
    slot, addrs, routes, links = run.data["slot"], {}, [], {}
    direct = all(d.latency_ms <= netns.DIRECT_LATENCY_MS for d in cluster.spec.devices)
    medium_rate = dict(cluster.spec.media)
    for i, d in enumerate(cluster.spec.devices):
        link = netns.link_for(run.run_id, slot, i, d.name, d.bandwidth_mbit, medium_rate.get(d.medium))
        run.record("links", {"netns": link.netns, "host_if": link.host_if})
        netns.create(link)
        links[d.name] = link
        if d.bandwidth_mbit:
            cluster.rate_limits += [(None, link.host_if, d.bandwidth_mbit), (link.netns, link.ns_if, d.bandwidth_mbit)]
        addrs[d.name] = "%s:%d" % (link.ns_ip if direct else link.host_ip, d.port)
        if direct:
            netns.enable_forwarding(link.host_if)
    for k, (medium, rate) in enumerate(cluster.spec.media):
        members = [d.name for d in cluster.spec.devices if d.medium == medium]
        ifb = netns.medium_name(run.run_id, k)
        run.record("links", {"netns": "", "host_if": ifb})
        netns.create_medium(ifb, rate, [links[n].host_if for n in members])
        cluster.rate_limits.append((None, ifb, rate))
        cluster.media[medium] = {"bandwidth_mbit": rate, "devices": members, "how": "one tbf on ifb " + ifb}
    if direct:
        cluster.latency = "direct"
        logging.info("every link has <= %.2g ms of latency: no delay forwarder (direct routing; latency "
                     "unmodelled, at most %.2g ms per link)", netns.DIRECT_LATENCY_MS, netns.DIRECT_LATENCY_MS)
        return addrs, {d.name: addrs for d in cluster.spec.devices}, [], {n: l.netns for n, l in links.items()}
    peers = tuple((links[d.name].ns_ip, d.latency_ms) for d in cluster.spec.devices if d.latency_ms)
    for d in cluster.spec.devices:
        l = links[d.name]
        routes.append(forwarder.Route(listen=(l.host_ip, d.port), target=(l.ns_ip, d.port),
                                      delay_ms=d.latency_ms, peer_delay_ms=peers))
    return addrs, {d.name: addrs for d in cluster.spec.devices}, routes, {n: l.netns for n, l in links.items()}


def plan_userspace(cluster):
    """Loopback ports; a forwarder route per (source, destination) with rate and delay."""
    devices = cluster.spec.devices
    ports = iter(free_ports(len(devices) * (len(devices) + 1)))  # one per server, one per (source, destination)
    server_port = {d.name: next(ports) for d in devices}
    views: dict[str, dict[str, str]] = {}
    routes = []
    medium_rate = dict(cluster.spec.media)
    if medium_rate:
        logging.warning("user space: shared media %s are not shared; each member's rate is capped at the "
                        "medium's", sorted(medium_rate))
        cluster.media = {m: {"bandwidth_mbit": r, "how": "not shared (user space): a cap on each member's rate",
                             "devices": [d.name for d in devices if d.medium == m]} for m, r in medium_rate.items()}
    for src in [None] + list(devices):
        view = {}
        for dst in devices:
            if src is not None and src.name == dst.name:
                view[dst.name] = "127.0.0.1:%d" % server_port[dst.name]
                continue
            port = next(ports)
            rates = [r for r in (dst.bandwidth_mbit, src.bandwidth_mbit if src else None,
                                 medium_rate.get(dst.medium), medium_rate.get(src.medium) if src else None) if r]
            routes.append(forwarder.Route(listen=("127.0.0.1", port), target=("127.0.0.1", server_port[dst.name]),
                                          delay_ms=dst.latency_ms + (src.latency_ms if src else 0.0),
                                          rate_mbit=min(rates) if rates else None))
            view[dst.name] = "127.0.0.1:%d" % port
        views[src.name if src else CLIENT] = view
    return views.pop(CLIENT), views, routes, {}
