"""Emulated testbed check: does each device deliver the speed, bandwidth and latency of its file?

    python -m bench.emulation --cluster layouts/edge4.yaml     # prints JSON; exit 1 if off by >15%
    python -m bench.emulation --cluster layouts/pi4.yaml       # the realistic edge cluster (1 Gbit/s)
    python -m bench.emulation --cluster layouts/pi4wifi.yaml   # devices sharing one Wi-Fi channel

Every run also reports the delay forwarder's cost (`forwarder`: CPU s per MB it carries, at full speed
and paced at 1 Gbit/s, and what one core could carry); a cluster with a shared medium also what two
devices get when they send at once (`medium`: each about half the channel).
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

from bench import cli
from edgemesh_tf.cluster import emulated_cluster, forwarder, free_ports, measure, procs

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

OPTIONS = (("cluster", "layouts/edge4.yaml", "Cluster file."),
           ("tolerance", 0.15, "Allowed relative error of every figure."),
           ("rounds", 3, "Interleaved rounds of compute timing per device (the fastest counts)."))


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has used."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _sink() -> tuple[socket.socket, tuple[str, int]]:
    """A loopback listener and its address: it reads one connection to its end, then answers one byte."""
    ls = socket.create_server(("127.0.0.1", 0))

    def serve():
        with ls.accept()[0] as c:
            buf = bytearray(1 << 20)
            while c.recv_into(buf):
                pass
            c.sendall(b"k")

    threading.Thread(target=serve, daemon=True).start()
    return ls, ls.getsockname()


def _send(address: tuple[str, int], nbytes: int, pace_mbit: float | None, write: int = 16 * 1024) -> float:
    """Sends `nbytes` in `write`-byte writes (gRPC-sized messages), paced at `pace_mbit` if given;
    returns the seconds until the sink confirmed all of it."""
    with socket.create_connection(address) as s:
        buf, sent, t0 = b"x" * write, 0, time.perf_counter()
        while sent < nbytes:
            s.sendall(buf)
            sent += write
            if pace_mbit:
                ahead = t0 + sent * 8 / (pace_mbit * 1e6) - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)
        s.shutdown(socket.SHUT_WR)
        s.recv(1)
    return time.perf_counter() - t0


def forwarder_cost(mb: float = 50.0, delay_ms: float = 0.5) -> dict:
    """CPU of the delay forwarder process per MB it forwards (one route, `delay_ms` of delay), at
    full speed and paced at 1 Gbit/s, on loopback. Plain data for JSON."""
    out = {"delay_ms": delay_ms, "mb_per_run": mb, "cpu_count": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        for label, pace in (("full_speed", None), ("paced_1gbit", 1000.0)):
            ls, sink = _sink()
            listen, routes = ("127.0.0.1", free_ports(1)[0]), os.path.join(tmp, label + ".json")
            with open(routes, "w") as f:
                json.dump([forwarder.Route(listen, sink, delay_ms).to_json()], f)
            p = subprocess.Popen([sys.executable, "-m", "edgemesh_tf.cluster.forwarder", routes, routes + ".ready"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                deadline = time.monotonic() + 30
                while not os.path.exists(routes + ".ready") and time.monotonic() < deadline and p.poll() is None:
                    time.sleep(0.02)
                cpu0 = _cpu_s(p.pid)
                wall = _send(listen, int(mb * 1e6), pace)
                cpu = _cpu_s(p.pid) - cpu0
            finally:
                procs.terminate(p, 10)
                ls.close()
            out[label] = {"mbit_s": round(mb * 8 / wall, 1), "cpu_s_per_mb": round(cpu / mb, 5),
                          "cpu_cores_used": round(cpu / wall, 3),
                          "max_mbit_s_on_one_core": round(8 / (cpu / mb), 0) if cpu > 0 else None}
    out["cores_needed_at_1gbit"] = round(1000 / 8 * out["paced_1gbit"]["cpu_s_per_mb"], 3)
    return out


def main():
    args = cli.parser(__doc__, OPTIONS).parse_args()
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    with emulated_cluster(args.cluster) as cluster:
        result = measure.measure(cluster, tolerance=args.tolerance, rounds=args.rounds)
        result["testbed"] = {k: v for k, v in cluster.summary().items() if k in ("network", "compute", "memory",
                                                                               "latency", "media")}
    result["forwarder"] = forwarder_cost()
    return 0 if cli.emit(result, indent=1)["all_within_tolerance"] else 1


if __name__ == "__main__":
    sys.exit(main())
