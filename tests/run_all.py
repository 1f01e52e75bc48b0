"""Runs every test (`make test`) as two pytest processes at once, on the machine's two cores.

The tests marked `emulator` (the emulated testbed: CPU quotas, shaped links, TF servers) run in the
foreground at normal priority; every other test runs beside them at a lower priority (nice), its
output kept in a file and printed after. The testbed's tests use about one core (its devices are
capped by their quotas), so the other core runs the rest; the lower priority keeps the testbed's
devices, forwarders and parameter server first in line when both want the CPU. The machine's CPU
calibration (cached once per machine) is measured before either starts, on an idle machine.

    python tests/run_all.py [PYTEST_ARGS...]    # exit 0 when both passed

Extra arguments (and PYTEST_ADDOPTS) go to both processes.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BESIDE_NICE = 10  # CFS weight 110 against 1024: about a tenth of a core when both want the same one
BESIDE_TIMEOUT_S = 3600  # the wait for the tests beside, after the testbed's have ended


def _pytest(marker: str, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-m", marker, *extra, "tests"]


def main(argv: list[str]) -> int:
    subprocess.run([sys.executable, "-c", "from edgemesh_tf.cluster import calibration; "
                    "calibration.load_or_calibrate('v1')"], cwd=ROOT, check=True, timeout=900)
    with tempfile.NamedTemporaryFile("w+", prefix="edgemesh-tests-beside-", suffix=".log") as log:
        beside = subprocess.Popen(["nice", "-n", str(BESIDE_NICE), *_pytest(
            "not emulator", ["-p", "no:cacheprovider", *argv])], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        try:
            print("tests beside the testbed's: pid %d, nice %d, output after these" % (beside.pid, BESIDE_NICE),
                  flush=True)
            main_code = subprocess.run(_pytest("emulator", argv), cwd=ROOT).returncode
            try:
                beside_code = beside.wait(BESIDE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                print("the tests beside did not end within %d s after the testbed's" % BESIDE_TIMEOUT_S)
                beside_code = 1
        finally:
            if beside.poll() is None:  # interrupted, or timed out: pytest tears its fixtures down on SIGINT
                os.killpg(beside.pid, signal.SIGINT)
                try:
                    beside.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(beside.pid, signal.SIGKILL)
                    beside.wait()
        log.seek(0)
        print("\n=== tests beside the testbed's (not emulator) ===\n" + log.read(), flush=True)
    print("testbed's tests: exit %d; tests beside: exit %d" % (main_code, beside_code))
    return 0 if main_code == beside_code == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
