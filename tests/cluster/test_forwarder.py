"""The delaying forwarder: latency per direction, peer latency, user-space rate limit."""
import socket
import statistics
import threading
import time

import pytest

from edgemesh_tf.cluster import forwarder
from edgemesh_tf.cluster.emulated_network import free_ports


@pytest.fixture
def echo_and_sink():
    """A loopback server that answers every stream segment ending in b"ping" (bulk data is dropped)."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen()

    def handle(c):
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            data = c.recv(65536)
            if not data:
                break
            if data.endswith(b"ping"):
                c.sendall(b"pong")
        c.close()

    def loop():
        while True:
            try:
                c, _ = ls.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(c,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    yield ls.getsockname()[1]
    ls.close()


def _rtt_ms(port, n=15):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtts = []
    for _ in range(n):
        t = time.perf_counter()
        s.sendall(b"ping")
        s.recv(64)
        rtts.append((time.perf_counter() - t) * 1e3)
    s.close()
    return statistics.median(rtts)


def test_delay_and_rate(echo_and_sink):
    delayed, limited = free_ports(2)
    listeners = forwarder.serve([
        # The peer (this process, 127.0.0.1) has its own 1 ms link: 4 + 1 ms each way.
        forwarder.Route(("127.0.0.1", delayed), ("127.0.0.1", echo_and_sink), delay_ms=4.0,
                        peer_delay_ms=(("127.0.0.1", 1.0),)),
        forwarder.Route(("127.0.0.1", limited), ("127.0.0.1", echo_and_sink), rate_mbit=40.0),
    ])
    try:
        assert 0.9 * 10.0 <= _rtt_ms(delayed) <= 10.0 + 3.0  # margin: scheduling on a busy machine
        s = socket.create_connection(("127.0.0.1", limited))
        payload = b"x" * (5 * 1000 * 1000)  # 40 Mbit: 1 s at 40 Mbit/s
        t = time.perf_counter()
        s.sendall(payload)
        s.sendall(b"ping")
        s.recv(64)  # the echo of the 4-byte tail arrives after the bulk went through
        mbit = len(payload) * 8 / 1e6 / (time.perf_counter() - t)
        s.close()
        assert mbit == pytest.approx(40.0, rel=0.3)
    finally:
        for ls in listeners:
            ls.close()


def test_refuses_foreign_addresses():
    with pytest.raises(ValueError, match="loopback"):
        forwarder.Route(("0.0.0.0", 1), ("127.0.0.1", 2))
    with pytest.raises(ValueError, match="loopback"):
        forwarder.Route(("127.0.0.1", 1), ("192.168.1.5", 2))
