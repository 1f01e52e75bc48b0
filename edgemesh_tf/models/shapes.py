"""The layer behind every splittable dim of a model, with its input shape: what the profiler times
and what the planner's cost model sizes."""
from __future__ import annotations

import dataclasses
import math

from edgemesh_tf.models.spec import ModelSpec


@dataclasses.dataclass(frozen=True)
class LayerShape:
    """A splittable dim's layer. in_shape: [batch, H, W, C] (conv) or [batch, features] (dense)."""

    name: str
    kind: str            # "conv" or "dense"
    in_shape: tuple[int, ...]
    units: int
    pool: bool
    first: bool          # the model's first layer: no gradient to its input


def layer_shapes(spec: ModelSpec, batch: int) -> list[LayerShape]:
    """The layer of every splittable dim of ``spec``, in order, with its input shape at ``batch``."""
    h, w, c = spec.image_shape
    shape: tuple[int, ...] = (batch, h, w, c)
    out = []
    for layer in spec.layers:
        if layer.kind == "conv":
            out.append(LayerShape(layer.name, "conv", shape, layer.units, layer.pool, not out))
            hh, ww = (shape[1] // 2, shape[2] // 2) if layer.pool else (shape[1], shape[2])
            shape = (batch, hh, ww, layer.units)
        elif layer.kind == "res":
            if shape[-1] != layer.units:
                raise ValueError("res block %r: input has %d channels, block has %d" % (layer.name, shape[-1], layer.units))
            out.append(LayerShape(layer.name + "a", "conv", shape, layer.units, False, not out))
            out.append(LayerShape(layer.name + "b", "conv", shape, layer.units, False, False))
        elif layer.kind == "dense":
            if len(shape) > 2:
                shape = (batch, math.prod(shape[1:]))
            out.append(LayerShape(layer.name, "dense", shape, layer.units, False, not out))
            shape = (batch, layer.units)
        else:
            raise ValueError("layer %r: unknown kind %r; expected conv, res or dense" % (layer.name, layer.kind))
    return out
