"""A delaying (and optionally rate-limiting) TCP forwarder: network latency without `netem`.

Each route listens on one loopback/namespace address and forwards every connection to one target,
delaying the data of both directions by `delay_ms` plus the one-way latency of the connecting
peer's own link (`peer_delay_ms`, by source IP): a path between two devices crosses both links.
`rate_mbit` adds a user-space rate limit (the fallback when `tbf` is unavailable).

Threads, not asyncio: asyncio's epoll wait rounds timers up to whole milliseconds, which alone
would be a 25% error on a 2 ms link; `time.sleep` overshoots by ~0.1 ms.

Run as a process: `python -m edgemesh_tf.cluster.forwarder ROUTES.json READY_FILE`.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import queue
import signal
import socket
import struct
import sys
import threading
import time

try:
    import ctypes

    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _prctl = None

SO_TIMESTAMPNS = 35  # Linux; not exported by the socket module
_CMSG_SPACE = socket.CMSG_SPACE(16)
CHUNK = 64 * 1024
# The forwarder's own hop each way (wake-up, sleep overshoot, copy; measured, docs/DESIGN.md): it is
# taken off the emulated delay, so that a link measures the delay its cluster file gives.
HOP_MS = 0.15
QUEUE_S = 0.05  # rate-limited data buffered ahead of the wire (s), like tbf's queue


@dataclasses.dataclass(frozen=True)
class Route:
    """listen/target: (ip, port). Delays in ms (one way), rate in Mbit/s (None = unlimited)."""

    listen: tuple[str, int]
    target: tuple[str, int]
    delay_ms: float = 0.0
    peer_delay_ms: tuple[tuple[str, float], ...] = ()
    rate_mbit: float | None = None

    def __post_init__(self):
        for ip, _ in (self.listen, self.target):
            addr = ipaddress.ip_address(ip)
            if not (addr.is_loopback or addr in ipaddress.ip_network("10.213.0.0/16")):
                raise ValueError("forwarder only uses loopback or 10.213.0.0/16 addresses, got %s" % ip)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @staticmethod
    def from_json(d: dict) -> "Route":
        return Route(listen=tuple(d["listen"]), target=tuple(d["target"]), delay_ms=d["delay_ms"],
                     peer_delay_ms=tuple(tuple(p) for p in d["peer_delay_ms"]), rate_mbit=d["rate_mbit"])


def _precise_timers() -> None:
    """Timer slack 1 ns for this thread (default 50 µs): delays are a few ms, so it matters."""
    if _prctl is not None:
        _prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK


def _recv_stamped(sock: socket.socket, n: int) -> tuple[bytes, float]:
    """recv() plus the kernel's arrival time of the data (time.monotonic() scale), so that thread
    wake-up delays of the forwarder do not add to the emulated latency."""
    data, ancillary, _, _ = sock.recvmsg(n, _CMSG_SPACE)
    now_mono, now_real = time.monotonic(), time.time()
    for level, kind, raw in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= 16:
            sec, nsec = struct.unpack("qq", raw[:16])
            return data, min(now_mono, now_mono - (now_real - (sec + nsec * 1e-9)))
    return data, now_mono


def _pump(src: socket.socket, dst: socket.socket, delay_s: float, rate_mbit: float | None, done) -> None:
    """Copies src -> dst, each chunk delivered `delay_s` after it was read (and after its
    serialisation time at `rate_mbit`)."""
    q: queue.Queue = queue.Queue()
    chunk = CHUNK if not rate_mbit else max(1500, min(CHUNK, int(rate_mbit * 1e6 / 8 * 0.005)))

    def reader():
        wire_free = 0.0
        try:
            while True:
                data, now = _recv_stamped(src, chunk)
                if not data:
                    break
                if rate_mbit:
                    wire_free = max(now, wire_free) + len(data) * 8 / (rate_mbit * 1e6)
                    q.put((wire_free + delay_s, data))
                    ahead = wire_free - time.monotonic()
                    if ahead > QUEUE_S:  # back-pressure instead of an unbounded buffer
                        time.sleep(ahead - QUEUE_S)
                else:
                    q.put((now + delay_s, data))
        except OSError:
            pass
        q.put(None)

    def writer():
        _precise_timers()
        try:
            while True:
                item = q.get()
                if item is None:
                    dst.shutdown(socket.SHUT_WR)
                    break
                wait = item[0] - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                dst.sendall(item[1])
        except OSError:
            # Unblock the reader (and the other direction): the connection is broken.
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        done()

    threading.Thread(target=reader, daemon=True).start()
    threading.Thread(target=writer, daemon=True).start()


def _serve_connection(route: Route, conn: socket.socket, peer_ip: str) -> None:
    delay_ms = route.delay_ms + dict(route.peer_delay_ms).get(peer_ip, 0.0)
    delay_s = max(0.0, delay_ms - HOP_MS) / 1e3 if delay_ms else 0.0
    try:
        upstream = socket.create_connection(route.target, timeout=10)
    except OSError:
        conn.close()
        return
    upstream.settimeout(None)
    for s in (conn, upstream):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    remaining = [2]
    lock = threading.Lock()

    def done():
        with lock:
            remaining[0] -= 1
            if remaining[0] == 0:
                conn.close()
                upstream.close()

    _pump(conn, upstream, delay_s, route.rate_mbit, done)
    _pump(upstream, conn, delay_s, route.rate_mbit, done)


def serve(routes: list[Route]) -> list[socket.socket]:
    """Binds all routes and serves them on daemon threads; returns the listening sockets."""
    listeners = []
    for route in routes:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(route.listen)
        s.listen(128)
        listeners.append(s)

        def accept_loop(s=s, route=route):
            while True:
                try:
                    conn, (peer_ip, _) = s.accept()
                except OSError:
                    return
                threading.Thread(target=_serve_connection, args=(route, conn, peer_ip), daemon=True).start()

        threading.Thread(target=accept_loop, daemon=True).start()
    return listeners


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        routes = [Route.from_json(r) for r in json.load(f)]
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    serve(routes)
    with open(argv[2] + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(argv[2] + ".tmp", argv[2])
    print("forwarder ready: %d routes" % len(routes), flush=True)
    stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
