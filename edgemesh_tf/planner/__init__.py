"""Planner: one cost model drives EdgeMesh's adaptive grid and filter division (pure python, no TF).

    stats = model_stats(spec, batch)           # per split dim: units, params, bytes, FLOPs
    predict(group, stats, assignment)          # cost model: step ms, memory bytes, PS sync ms
    divide(group, stats)                       # filter division of one model-parallel group
    plan(profile, spec)                        # grid: data-parallel groups x model-parallel width
    write_plan(plan, path) / load_plan(path)   # layout YAML with a `predicted:` block
"""
from edgemesh_tf.planner.cost import GroupPrediction, LayerPrediction
from edgemesh_tf.planner.predict import predict
from edgemesh_tf.planner.division import Division, PlanError, divide
from edgemesh_tf.planner.calibrate import calibrated, slowness, steps_to_time
from edgemesh_tf.planner.grid import GroupPlan, Plan, capability_groups, plan, staleness_charge
from edgemesh_tf.planner.model_stats import DimStats, ModelStats, model_stats
from edgemesh_tf.planner.write import LoadedGroup, LoadedPlan, format_table, load_plan, write_plan

__all__ = ["DimStats", "Division", "GroupPlan", "GroupPrediction", "LayerPrediction", "LoadedGroup", "LoadedPlan",
           "ModelStats", "Plan", "PlanError", "calibrated", "capability_groups", "divide", "format_table", "load_plan",
           "model_stats", "plan", "predict", "slowness", "staleness_charge", "steps_to_time", "write_plan"]
