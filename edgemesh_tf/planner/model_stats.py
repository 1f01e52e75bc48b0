"""Static sizes of a ModelSpec, per splittable dim: what the cost model needs besides measurements.

All activations are float32 (4 bytes). Per-example quantities are multiplied by the batch by the
cost model. Shapes follow ``models/mesh_model.py``: 3x3 SAME convs, 2x2 VALID max-pool (h // 2),
the first dense layer flattens its input, every layer's output is gathered on all devices.
"""
from __future__ import annotations

import dataclasses
import math

from edgemesh_tf.models.shapes import layer_shapes
from edgemesh_tf.models.spec import ModelSpec

FLOAT_BYTES = 4


@dataclasses.dataclass(frozen=True)
class DimStats:
    """One splittable dim (a layer, or one conv of a res block).

    units: filters / output units (the size of the dim).
    params_per_unit: weights of one unit: kernel fan-in + 1 bias.
    out_bytes: output activation bytes per example after ReLU/pool: what the forward allconcat gathers.
    in_bytes: input activation bytes per example: the input gradient the backward pass allreduces;
      0 for the first layer, whose input (the image) needs no gradient.
    flops: forward FLOPs (2 x MACs) per example of the whole layer.
    act_bytes: output activation bytes per example before pooling (what the backward pass keeps).
    """

    name: str
    units: int
    params_per_unit: int
    out_bytes: int
    in_bytes: int
    flops: int
    act_bytes: int


@dataclasses.dataclass(frozen=True)
class ModelStats:
    """Per-dim stats in layer order, for ``batch`` examples per step.

    engine: the step runs as an engine replica (the main job, `edgemesh run`, hybrid training): every
      device also keeps anchors and residuals and passes whole tensors through ps buffers
      (``memory.MemoryModel.replica_bytes``), and the group's first device hosts its session. False:
      as one plain layout with no parameter server, its session on the chief (`edgemesh train
      --layout`), which needs less memory.
    """

    model: str
    batch: int
    dims: tuple[DimStats, ...]
    image_bytes: int  # per example
    engine: bool = True

    @property
    def param_bytes(self) -> int:
        """float32 bytes of all weights and biases of the model."""
        return FLOAT_BYTES * sum(d.params_per_unit * d.units for d in self.dims)

    def dim(self, name: str) -> DimStats:
        for d in self.dims:
            if d.name == name:
                return d
        raise ValueError("model %s has no split dim %r; dims: %s" % (self.model, name, [d.name for d in self.dims]))


def model_stats(spec: ModelSpec, batch: int, engine: bool = True) -> ModelStats:
    """Sizes of every split dim of ``spec`` (in layer order) for ``batch`` examples per step;
    ``engine``: see ``ModelStats``."""
    if batch < 1:
        raise ValueError("batch must be a positive integer, got %r" % batch)
    dims: list[DimStats] = []
    for layer in layer_shapes(spec, 1):
        features = math.prod(layer.in_shape[1:])
        in_bytes = 0 if layer.first else FLOAT_BYTES * features  # the image needs no gradient
        if layer.kind == "conv":
            _, h, w, c = layer.in_shape
            oh, ow = (h // 2, w // 2) if layer.pool else (h, w)
            dims.append(DimStats(layer.name, layer.units, 9 * c + 1, FLOAT_BYTES * oh * ow * layer.units, in_bytes,
                                 2 * 9 * c * layer.units * h * w, FLOAT_BYTES * h * w * layer.units))
        else:
            dims.append(DimStats(layer.name, layer.units, features + 1, FLOAT_BYTES * layer.units, in_bytes,
                                 2 * features * layer.units, FLOAT_BYTES * layer.units))
    h0, w0, c0 = spec.image_shape
    return ModelStats(spec.name, batch, tuple(dims), FLOAT_BYTES * h0 * w0 * c0, engine)
