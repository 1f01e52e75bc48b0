"""Static sizes of a ModelSpec, per splittable dim: what the cost model needs besides measurements.

All activations are float32 (4 bytes). Per-example quantities are multiplied by the batch by the
cost model. Each split dim's figures come from its segment (``layers.Segment``): the layer that owns
the dim and the per-channel layers (batch norm, activation, pooling, ...) that run on its slices
before the gather; each layer kind gives its own shapes, weights and FLOPs. Layers outside every
segment (flatten, add, concat) run replicated and are not priced: their work is element-wise.
"""
from __future__ import annotations

import dataclasses
import functools
import math

from edgemesh_tf.layers import KINDS
from edgemesh_tf.models.shapes import layer_shapes
from edgemesh_tf.layers import ModelSpec

FLOAT_BYTES = 4


@dataclasses.dataclass(frozen=True)
class DimStats:
    """One splittable dim (a layer, or one conv of a res block).

    units: filters / output units (the size of the dim).
    params_per_unit: weights of one unit over the segment: kernel fan-in + 1 bias (+ 4 with batch norm).
    out_bytes: output activation bytes per example after ReLU/pool: what the forward allconcat gathers.
    in_bytes: input activation bytes per example: the input gradient the backward pass allreduces;
      0 for the first layer, whose input (the image) needs no gradient.
    flops: forward FLOPs (2 x MACs) per example of the whole segment.
    act_bytes: the segment's largest activation per example (a conv's output before its pooling):
      what the memory model scales for what the backward pass keeps.
    """

    name: str
    units: int
    params_per_unit: int
    out_bytes: int
    in_bytes: int
    flops: int
    act_bytes: int


@dataclasses.dataclass(frozen=True)
class TensorStats:
    """One whole (master) variable of an engine replica (``planner.masters``).

    nbytes: float32 bytes. dim: the split dim its last axis runs over (its layer's, or for a
    per-channel layer the dim of the input it runs on), or None when it is replicated whatever the
    layout. kind: "weight" (trainable), "state" (statistics a layer updates itself) or "momentum" (a
    weight's optimizer slot: it stays in the slices during training, never sent to the parameter server).
    """

    name: str
    nbytes: int
    dim: str | None
    kind: str


@dataclasses.dataclass(frozen=True)
class ModelStats:
    """Per-dim stats in layer order, for ``batch`` examples per step.

    engine: the step runs as an engine replica (the main job, `edgemesh run`, hybrid training): every
      device also keeps anchors and residuals and passes whole tensors through ps buffers
      (``memory.MemoryModel.replica_bytes``), and the group's first device hosts its session. False:
      as one plain layout with no parameter server, its session on the chief (`edgemesh train
      --layout`), which needs less memory.
    tensors: every master variable, in the order the engine creates them (``tensor_stats``).
    """

    model: str
    batch: int
    dims: tuple[DimStats, ...]
    image_bytes: int  # per example
    engine: bool = True
    tensors: tuple[TensorStats, ...] = ()

    @functools.cached_property
    def tensor_bytes(self) -> tuple[int, ...]:
        """``tensors``' bytes, in order (``masters.placed_ranks``' key)."""
        return tuple(t.nbytes for t in self.tensors)

    @functools.cached_property
    def momentum_mask(self) -> tuple[bool, ...]:
        """Per tensor of ``tensors``: whether it is a momentum slot (``masters.rank_bytes``' key)."""
        return tuple(t.kind == "momentum" for t in self.tensors)

    @property
    def param_bytes(self) -> int:
        """float32 bytes of all weights and state (what the parameter server holds)."""
        return sum(t.nbytes for t in self.tensors if t.kind != "momentum")

    def dim(self, name: str) -> DimStats:
        for d in self.dims:
            if d.name == name:
                return d
        raise ValueError("model %s has no split dim %r; dims: %s" % (self.model, name, [d.name for d in self.dims]))


def model_stats(spec: ModelSpec, batch: int, engine: bool = True) -> ModelStats:
    """Sizes of every split dim of ``spec`` (in layer order) for ``batch`` examples per step, each
    summed over its segment (the dim's layer and the per-channel layers on its slices, as the
    layer kinds define them); ``engine``: see ``ModelStats``."""
    if batch < 1:
        raise ValueError("batch must be a positive integer, got %r" % batch)
    dims: list[DimStats] = []
    for shape in layer_shapes(spec, 1):
        seg, units = shape.segment, shape.units
        params = flops = act = 0
        for layer in seg.layers:
            kind, ins = KINDS[layer.kind], spec.input_shapes(layer)
            params += sum(w.size for w in kind.weights(layer, ins))
            flops += kind.flops(layer, ins)
            act = max(act, math.prod(spec.shape_of(layer.name)))
        in_bytes = 0 if shape.first else FLOAT_BYTES * math.prod(shape.in_shape[1:])  # the image needs no gradient
        out_bytes = FLOAT_BYTES * math.prod(spec.shape_of(seg.layers[-1].name))
        dims.append(DimStats(seg.name, units, -(-params // units), out_bytes, in_bytes, flops, FLOAT_BYTES * act))
    h0, w0, c0 = spec.image_shape
    return ModelStats(spec.name, batch, tuple(dims), FLOAT_BYTES * h0 * w0 * c0, engine, tensor_stats(spec))


def tensor_stats(spec: ModelSpec) -> tuple[TensorStats, ...]:
    """The master variables of ``spec`` in creation order (training/graph.py): each layer's weights
    in layer order as its kind lists them, then the momentum slot of every trainable weight. A
    weight's dim is its layer's channel dim as the mtf build names it: a split layer's own, a
    per-channel layer's single input's, None after a layer that gathers its inputs whole."""
    channel: dict[str, str | None] = {}
    out = []
    for layer in spec.layers:
        kind = KINDS[layer.kind]
        if kind.splits:
            channel[layer.name] = layer.name
        elif kind.follows and len(layer.inputs) == 1:
            channel[layer.name] = channel.get(layer.inputs[0])
        else:
            channel[layer.name] = None
        for w in kind.weights(layer, spec.input_shapes(layer)):
            out.append(TensorStats("%s/%s" % (layer.name, w.name), FLOAT_BYTES * w.size, channel[layer.name],
                                   "weight" if w.trainable else "state"))
    out += [TensorStats("momentum/" + t.name, t.nbytes, t.dim, "momentum") for t in list(out) if t.kind == "weight"]
    return tuple(out)
