"""The layers behind every splittable dim of a model, with their input shape: what the profiler
times and what the planner's cost model sizes."""
from __future__ import annotations

import dataclasses

from edgemesh_tf.layers import ModelSpec, Segment


@dataclasses.dataclass(frozen=True)
class LayerShape:
    """A split dim's segment (its layer and the per-channel layers that run on its slices).

    in_shape: the segment's input [batch, ...]; units: the dim's size; first: the model's first
    split layer reads the image, which needs no gradient."""

    name: str
    segment: Segment
    in_shape: tuple[int, ...]
    units: int
    first: bool


def layer_shapes(spec: ModelSpec, batch: int) -> list[LayerShape]:
    """The segment of every splittable dim of ``spec``, in order, with its input shape at ``batch``."""
    units = spec.split_dims()
    out = []
    for seg in spec.segments():
        (source,) = seg.head.inputs
        out.append(LayerShape(seg.name, seg, (batch,) + spec.shape_of(source), units[seg.name], not out))
    return out
