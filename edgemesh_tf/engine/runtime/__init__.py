"""The engine's runtime: the TensorFlow sessions and processes around the pure core.

`job.py` launches a job (its groups' processes, the chief, the rejoiner); `chief.py` runs the
evaluation replica, the control board and the checkpoints and asks `core.decide` what to do;
`group.py` is a group's process (its replica's graph from `graph.py`, its rounds and commits through
`control.py`); `warm.py` keeps processes with TensorFlow imported for jobs in turn; `export.py` writes
the trained model as .keras and SavedModel; `report.py` writes the summary and its board fields.
"""
