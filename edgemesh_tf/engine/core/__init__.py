"""The engine's pure core: what a job decides, with no TensorFlow and no processes.

`decide.Decisions` is the chief's state machine: `step(snapshot) -> actions`, `state()` and
`restore()` are all the chief calls (`actions.py` holds the snapshot and the actions). `rules.py`
says what each strategy does with its controls; a strategy that decides beyond them has a driver of
its own (`drive_ashl.py`, `drive_adsp.py`). `liveness.py` tracks the groups' heartbeats, `records.py`
types every event a job writes, `progress.py` turns evaluations into the progress line, and
`job_cost.py` prices the job the runtime runs (the planner chooses its grid on it). Nothing here
imports TensorFlow or `engine.runtime` (tests/engine/test_engine_decide.py checks both).
"""
