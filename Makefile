# `make run` and `make test` (and `make test-fast`) do all set-up on a fresh machine (see README.md).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RUN_ARGS ?=
QUICK ?=

.PHONY: install browser run test test-fast bench bench-variants bench-final bench-wifi bench-pi4 bench-own-model bench-setup clean

$(STAMP): requirements.txt setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

# The main job: emulated edge4 testbed, profile, plan, ASHL training, TensorBoard logs, summary.
run: install
	$(BIN)/edgemesh run $(RUN_ARGS)

# The TensorBoard browser test drives Debian's headless Chromium (needs root to install it).
browser:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# Every test, in two passes: the tests that start no emulated testbed or browser run in two pytest
# workers (pytest-xdist; a module stays on one worker, so its fixtures are made once), then the
# testbed's and the browser's tests run alone: their devices are CPU quotas and their assertions time
# them, so they need the machine to themselves. The two -m expressions together select every test
# (tests/test_readme.py checks it).
test: install browser
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not emulator and not browser" tests
	$(BIN)/python -m pytest -q -m "emulator or browser" tests

# The fast loop (under a minute, in two pytest workers): every test that starts no testbed, process or browser and takes
# under ~3 s (markers in pytest.ini; tests/test_markers.py keeps new tests honest).
test-fast: install
	$(BIN)/python -m pytest -q -n 2 -m "not emulator and not browser and not subprocess and not slow" tests

# Every benchmark (JSON in bench/results/) and bench/REPORT.md with its plots; ~94 min (time_to_accuracy ~36, job_prediction ~20,
# edgemesh_claims ~19.5, faults ~8.2, planning_time ~3).
# QUICK=1: a 9 min smoke run of the same pipeline into bench/quick/ (not evidence).
# The emulated benchmarks need root (network namespaces, cgroups).
bench: install
	$(BIN)/python -m bench.suite $(if $(QUICK),--quick --results bench/quick/results --out bench/quick,)

# The table of ASHL variants (each of the project's rules against the published ASHL), ~30 min, into the same report.
bench-variants: install
	$(BIN)/python -m bench.suite --only tta_variants $(if $(QUICK),--quick --results bench/quick/results --out bench/quick,)

# ASHL's final accuracy against BSP converged (issue 16), ~45 min (2 seeds), into the same report.
bench-final: install
	$(BIN)/python -m bench.suite --only final_accuracy $(if $(QUICK),--quick --results bench/quick/results --out bench/quick,)

# The cost model's shared medium against the testbed's Wi-Fi channel (layouts/pi4wifi.yaml), ~20 min, into the same report.
bench-wifi: install
	$(BIN)/python -m bench.suite --only planner_wifi $(if $(QUICK),--quick --results bench/quick/results --out bench/quick,)

# The cost model of VGG-16 on the Pi-class cluster over three rounds (layouts/pi4.yaml), ~60 min, into the same report.
bench-pi4: install
	$(BIN)/python -m bench.suite --only planner_pi4 $(if $(QUICK),--quick --results bench/quick/results --out bench/quick,)

# A user's model file (examples/lenet_bn.py) on pi4 against plain TF on one device, 3 seeds, ~11 min, into the same report.
bench-own-model: install
	$(BIN)/python -m bench.suite --only own_model $(if $(QUICK),--quick --results bench/quick/results --out bench/quick,)

# The main job's set-up on a first run and on a rerun with the cached profile (layouts/pi4.yaml), 3 pairs, ~12 min, into the same report.
bench-setup: install
	$(BIN)/python -m bench.suite --only setup_time $(if $(QUICK),--quick --results bench/quick/results --out bench/quick,)

clean:
	rm -rf $(VENV) build *.egg-info
