"""A model as plain data: the layers a user's function traced, each naming its inputs.

The user writes a function over symbolic ``Tensor``s with the public layer functions
(``edgemesh_tf.layers``); ``build_model`` calls it once on the image tensor and records every
layer it called as a frozen ``Layer``. The resulting ``ModelSpec`` is what every part of the
framework reads: the mtf builder (``models/mesh_model``), the plain-TF reference
(``models/plain_tf``), the profiler's per-layer ops, the cost and memory model. Shapes are per
example: (height, width, channels) for feature maps, (features,) after flatten, dense or global
pooling.
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Callable

from edgemesh_tf.layers.kind import KINDS, Shape

INPUT = "input"
"""The name of the image input: the first input of the first layer."""
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")
RESERVED = ("batch", "h", "w", "c_in", "flat", INPUT)


@dataclasses.dataclass(frozen=True)
class Layer:
    """One layer: its kind (a key of ``kind.KINDS``), its unique name, the names of the layers it
    reads (``INPUT`` for the image) and its settings as sorted (key, value) pairs."""

    kind: str
    name: str
    inputs: tuple[str, ...]
    config: tuple[tuple[str, Any], ...] = ()

    def get(self, key: str, default: Any = None) -> Any:
        for k, v in self.config:
            if k == key:
                return v
        return default

    @property
    def kind_def(self):
        return KINDS[self.kind]


@dataclasses.dataclass(frozen=True)
class Segment:
    """A split dim and the layers that run on its slices before the next gather.

    head: the layer that owns the dim (a conv's filters, a dense layer's units); followers: the
    per-channel layers (batch norm, activation, pooling, dropout, ...) that consume the head's
    output in a chain and keep its channels split; the last of them is what the gather moves.
    """

    head: Layer
    followers: tuple[Layer, ...]

    @property
    def layers(self) -> tuple[Layer, ...]:
        return (self.head,) + self.followers

    @property
    def name(self) -> str:
        return self.head.name


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A CNN for ``image_shape`` = (H, W, C) inputs and ``num_classes`` outputs: ``layers`` in the
    order they were called; the last one gives the logits, shape (num_classes,) (``build_model``
    checks it).

    Raises ValueError on construction when a layer is unknown, reads a layer that does not come
    before it, repeats a name, or gets an input shape it cannot take (the message names the layer).
    """

    name: str
    image_shape: tuple[int, int, int]
    num_classes: int
    layers: tuple[Layer, ...]
    source: str = dataclasses.field(default="", compare=False)
    """Where it was loaded from (a zoo name, a model file or a saved model JSON): the reference every
    process of a job loads it by; empty for a model built in the caller's own code."""

    def __post_init__(self):
        object.__setattr__(self, "image_shape", tuple(int(v) for v in self.image_shape))
        object.__setattr__(self, "layers", tuple(self.layers))
        shapes: dict[str, Shape] = {INPUT: self.image_shape}
        for layer in self.layers:
            where = "model %r, layer %r" % (self.name, layer.name)
            if layer.kind not in KINDS:
                raise ValueError("%s: unknown kind %r; expected one of %s" % (where, layer.kind, sorted(KINDS)))
            if layer.name in shapes or layer.name in RESERVED:
                raise ValueError("%s: the name is used twice (or reserved: %s); every layer and split dim needs "
                                 "its own name" % (where, ", ".join(RESERVED)))
            if not _NAME.match(layer.name):
                raise ValueError("%s: a name must start with a letter and hold only letters, digits, '_', '.', '-'"
                                 % where)
            missing = [i for i in layer.inputs if i not in shapes]
            if missing:
                raise ValueError("%s: reads %s, which no earlier layer produces" % (where, missing))
            try:
                shapes[layer.name] = tuple(KINDS[layer.kind].output_shape(layer, [shapes[i] for i in layer.inputs]))
            except ValueError as e:
                raise ValueError("%s (%s): %s" % (where, layer.kind, e)) from None
            KINDS[layer.kind].flops(layer, [shapes[i] for i in layer.inputs])  # NoCost names the layer
            if any(s < 1 for s in shapes[layer.name]):
                raise ValueError("%s (%s): output shape %s has an empty axis; the input %s is too small for it"
                                 % (where, layer.kind, shapes[layer.name], [shapes[i] for i in layer.inputs]))
        if not self.layers:
            raise ValueError("model %r has no layers" % self.name)
        object.__setattr__(self, "_shapes", shapes)

    # -- shapes --
    def shape_of(self, name: str) -> Shape:
        """Per-example output shape of layer ``name`` (``INPUT``: the image)."""
        return self._shapes[name]

    def input_shapes(self, layer: Layer) -> list[Shape]:
        return [self._shapes[i] for i in layer.inputs]

    def layer(self, name: str) -> Layer:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise ValueError("model %r has no layer %r" % (self.name, name))

    def consumers(self, name: str) -> list[Layer]:
        return [x for x in self.layers if name in x.inputs]

    def has_modes(self) -> bool:
        """Whether training and evaluation differ (batch norm, dropout)."""
        return any(KINDS[layer.kind].has_modes for layer in self.layers)

    # -- split dims --
    def split_dims(self) -> dict[str, int]:
        """Dims a layout may split (besides "batch"): {dim name: size}, in layer order."""
        return {layer.name: KINDS[layer.kind].units(layer, self.input_shapes(layer))
                for layer in self.layers if KINDS[layer.kind].splits}

    def dims(self, batch_size: int) -> dict[str, int]:
        return {"batch": batch_size, **self.split_dims()}

    def check_splittable(self, dims) -> None:
        """Raises ValueError when one of ``dims`` (names a layout splits) is a layer of this model
        without a split dim of its own, naming the layer, its kind and the dims that can be split."""
        split = self.split_dims()
        for dim in dims:
            if dim in split or dim == "batch":
                continue
            for layer in self.layers:
                if layer.name == dim:
                    how = ("runs on the slices of the dim it follows" if KINDS[layer.kind].follows
                           else "needs whole inputs and runs replicated")
                    raise ValueError("layout: cannot split %r: layer %r (%s) has no split dim of its own (it %s); "
                                     "the model's split dims are %s" % (dim, dim, layer.kind, how, sorted(split)))

    def segments(self) -> tuple[Segment, ...]:
        """One ``Segment`` per split dim, in layer order."""
        out = []
        for layer in self.layers:
            if not KINDS[layer.kind].splits:
                continue
            chain, last = [], layer
            while True:
                users = self.consumers(last.name)
                if len(users) != 1 or not KINDS[users[0].kind].follows or len(users[0].inputs) != 1:
                    break
                last = users[0]
                chain.append(last)
            out.append(Segment(layer, tuple(chain)))
        return tuple(out)

    def summary(self) -> str:
        """A table of the layers: kind, output shape per example, split dim (a conv's or dense's own;
        "on <dim>" for a layer that runs on that dim's slices; "-" for one that runs on whole inputs),
        trainable parameters and forward MFLOPs per example; totals at the end."""
        on = {f.name: seg.name for seg in self.segments() for f in seg.followers}
        rows, params, flops = [], 0, 0
        for layer in self.layers:
            kdef, ins = KINDS[layer.kind], self.input_shapes(layer)
            n = sum(math.prod(w.shape) for w in kdef.weights(layer, ins) if w.trainable)
            f = kdef.flops(layer, ins)
            params, flops = params + n, flops + f
            dim = layer.name if kdef.splits else "on " + on[layer.name] if layer.name in on else "-"
            rows.append((layer.name, layer.kind, "x".join(map(str, self.shape_of(layer.name))), dim, n, f / 1e6))
        lines = ["model %r: %s images, %d classes" % (self.name, "x".join(map(str, self.image_shape)), self.num_classes),
                 "%-16s %-16s %-12s %-14s %10s %9s" % ("layer", "kind", "output", "split dim", "params", "MFLOPs")]
        lines += ["%-16s %-16s %-12s %-14s %10d %9.3f" % row for row in rows]
        lines.append("%-16s %-16s %-12s %-14s %10d %9.3f" % ("total", "", "", "%d split dims" % len(self.split_dims()),
                                                          params, flops / 1e6))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    # -- plain data --
    def to_dict(self) -> dict:
        """JSON-ready: {"name", "image_shape", "num_classes", "layers": [{"kind", "name", "inputs", "config"}]}.
        Raises ValueError for a layer whose settings are functions (``mtf_op``)."""
        for x in self.layers:
            if any(callable(v) for _, v in x.config):
                raise ValueError("model %r: layer %r (%s) holds Python functions, which cannot be saved; define the "
                                 "model in a model file and pass its path" % (self.name, x.name, x.kind))
        return {"name": self.name, "image_shape": list(self.image_shape), "num_classes": self.num_classes,
                "layers": [{"kind": x.kind, "name": x.name, "inputs": list(x.inputs), "config": dict(x.config)}
                           for x in self.layers]}


def _frozen(v):
    return tuple(_frozen(x) for x in v) if isinstance(v, list) else v


def model_from_dict(d: dict, source: str = "") -> ModelSpec:
    """The ``ModelSpec`` of ``ModelSpec.to_dict()``; errors name ``source`` and the field."""
    try:
        layers = tuple(Layer(x["kind"], x["name"], tuple(x["inputs"]),
                             tuple(sorted((k, _frozen(v)) for k, v in x.get("config", {}).items())))
                       for x in d["layers"])
        return ModelSpec(d["name"], tuple(d["image_shape"]), int(d["num_classes"]), layers, source=source)
    except (KeyError, TypeError) as e:
        raise ValueError("%s: not a saved model (expected name, image_shape, num_classes and layers with kind, name, "
                         "inputs, config): %s %s" % (source or "model", type(e).__name__, e)) from None


# -- tracing -----------------------------------------------------------------------------------

class _Trace:
    """The layers recorded while a model function runs."""

    def __init__(self):
        self.layers: list[Layer] = []
        self.shapes: dict[str, Shape] = {}
        self.counts: dict[str, int] = {}

    def auto_name(self, kind: str) -> str:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        return "%s_%d" % (kind, self.counts[kind])


@dataclasses.dataclass(frozen=True, eq=False)
class Tensor:
    """A symbolic activation of a model being defined: per-example ``shape`` ((H, W, C) or (F,)),
    the ``layer`` that produced it and ``dim``, the split dim its channels are divided on while it
    is computed (the name of the conv or dense layer that made them; None for the image and for
    tensors that every device holds whole: a merge, a flatten)."""

    shape: Shape
    layer: str
    dim: str | None
    _trace: _Trace = dataclasses.field(repr=False)

    @property
    def channels(self) -> int:
        return self.shape[-1]


def add_layer(kind: str, inputs: list[Tensor], name: str | None, **config) -> Tensor:
    """Records a layer of ``kind`` reading ``inputs``; returns its output. Layer functions call it;
    it checks the inputs belong to one model and computes the output shape (errors name the layer)."""
    if not inputs or not all(isinstance(t, Tensor) for t in inputs):
        raise TypeError("%s%s: inputs must be edgemesh_tf.layers Tensors (from the model function's argument or "
                        "another layer), got %r" % (kind, " %r" % name if name else "", inputs))
    trace = inputs[0]._trace
    if any(t._trace is not trace for t in inputs):
        raise ValueError("%s %r: inputs come from different models" % (kind, name))
    name = trace.auto_name(kind) if name is None else name
    if not isinstance(name, str):
        raise TypeError("%s: name must be a string, got %r" % (kind, name))
    layer = Layer(kind, name, tuple(t.layer for t in inputs), tuple(sorted(config.items())))
    kdef = KINDS[kind]
    if name in trace.shapes:
        raise ValueError("%s %r: the name is already taken by an earlier layer; every layer and split dim needs its "
                         "own name" % (kind, name))
    if name in RESERVED:
        raise ValueError("%s %r: the name is reserved (%s)" % (kind, name, ", ".join(RESERVED)))
    if not _NAME.match(name):
        raise ValueError("%s %r: a name must start with a letter and hold only letters, digits, '_', '.', '-'"
                         % (kind, name))
    try:
        shape = tuple(kdef.output_shape(layer, [t.shape for t in inputs]))
    except ValueError as e:
        raise ValueError("layer %r (%s): %s" % (name, kind, e)) from None
    if any(s < 1 for s in shape):
        raise ValueError("layer %r (%s): output shape %s has an empty axis; the input %s is too small for it"
                         % (name, kind, shape, [t.shape for t in inputs]))
    trace.layers.append(layer)
    trace.shapes[name] = shape
    dim = name if kdef.splits else (inputs[0].dim if kdef.follows else None)
    return Tensor(shape, name, dim, trace)


ModelFn = Callable[[Tensor, int], Tensor]
"""A model function: ``model(images, num_classes) -> logits`` over ``Tensor``s, images of shape
(H, W, C) per example, logits (num_classes,)."""


def build_model(fn: ModelFn, image_shape: tuple[int, int, int], num_classes: int | None,
                name: str = "model") -> ModelSpec:
    """Traces ``fn`` on an image tensor of ``image_shape`` and returns the ``ModelSpec`` it defines.
    ``num_classes`` None: as many as the last layer's outputs (``fn`` then gets 0 for it).

    Raises ValueError naming the layer when a layer cannot take its input, or when ``fn`` does not
    return a Tensor of this model.
    """
    trace = _Trace()
    trace.shapes[INPUT] = tuple(image_shape)
    out = fn(Tensor(tuple(int(v) for v in image_shape), INPUT, None, trace), num_classes or 0)
    if not isinstance(out, Tensor) or out._trace is not trace:
        raise ValueError("model %r: the model function must return the logits Tensor it built, got %r" % (name, out))
    if out.layer != (trace.layers[-1].name if trace.layers else None):
        raise ValueError("model %r: the model function returned %r, not its last layer %r"
                         % (name, out.layer, trace.layers[-1].name if trace.layers else None))
    if num_classes is None:
        if len(out.shape) != 1:
            raise ValueError("model %r: the last layer %r gives shape %s per example; expected class scores "
                             "(classes,)" % (name, out.layer, out.shape))
        num_classes = out.shape[0]
    spec = ModelSpec(name, tuple(image_shape), num_classes, tuple(trace.layers))
    if spec.shape_of(out.layer) != (num_classes,):
        raise ValueError("model %r: the last layer %r gives shape %s per example; expected (%d,), the logits of "
                         "%d classes (end with dense(x, 'logits', num_classes))"
                         % (name, out.layer, spec.shape_of(out.layer), num_classes, num_classes))
    return spec
