"""Does a gRPC server answer? Raw HTTP/2 (connection preface, SETTINGS, PING): no TF import needed,
and a PING round trip measures the network path to the server (forwarder delay included)."""
from __future__ import annotations

import os
import socket
import struct
import time
from typing import Callable, Mapping

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_SETTINGS, _PING = 0x4, 0x6


def _frame(kind: int, flags: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", 0) + payload


def _read_frame(sock: socket.socket) -> tuple[int, int, bytes]:
    head = _recv_exact(sock, 9)
    length = int.from_bytes(head[:3], "big")
    return head[3], head[4], _recv_exact(sock, length)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        data = sock.recv(n - len(buf))
        if not data:
            raise ConnectionError("connection closed")
        buf += data
    return buf


def _handshake(host: str, port: int, timeout_s: float) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(_PREFACE + _frame(_SETTINGS, 0))
    while True:
        kind, flags, _ = _read_frame(sock)
        if kind == _SETTINGS and not flags & 1:
            sock.sendall(_frame(_SETTINGS, 1))
            return sock


def answers(address: str, timeout_s: float = 2.0) -> bool:
    """True if an HTTP/2 (gRPC) server at host:port completes the connection preface."""
    host, port = address.rsplit(":", 1)
    try:
        _handshake(host, int(port), timeout_s).close()
        return True
    except (OSError, ConnectionError):
        return False


def ping_rtt_ms(address: str, timeout_s: float = 5.0) -> float:
    """One HTTP/2 PING round trip (ms) on a fresh connection (gRPC rejects frequent pings)."""
    host, port = address.rsplit(":", 1)
    sock = _handshake(host, int(port), timeout_s)
    try:
        payload = os.urandom(8)
        t = time.perf_counter()
        sock.sendall(_frame(_PING, 0, payload))
        while True:
            kind, flags, data = _read_frame(sock)
            if kind == _PING and flags & 1 and data == payload:
                return (time.perf_counter() - t) * 1e3
    finally:
        sock.close()


def wait_until_answering(addresses: Mapping[str, str], timeout_s: float,
                         check_alive: Callable[[], None] | None = None) -> float:
    """Waits until every server (name -> host:port) answers; returns the seconds waited.

    Raises TimeoutError naming the servers that did not answer within `timeout_s`; `check_alive`
    may raise earlier (e.g. when a server process has exited).
    """
    t0 = time.monotonic()
    pending = dict(addresses)
    while pending:
        for name, address in list(pending.items()):
            if answers(address, timeout_s=1.0):
                del pending[name]
        if not pending:
            break
        if check_alive:
            check_alive()
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError("servers not answering after %.0f s: %s" % (
                timeout_s, ", ".join("%s (%s)" % kv for kv in sorted(pending.items()))))
        time.sleep(0.2)
    return time.monotonic() - t0
