"""Small models for tests, written as layer lists: the shape the old tests used, built with the mesh API.

    sequential("m", (8, 8, 1), 4, [("conv", "conv1", 8, True), ("dense", "fc", 8), ("dense", "out", 4, False)])

("conv", name, filters[, pool]): 3x3 SAME conv + ReLU (+ 2x2 max-pool); ("dense", name, units[, relu]):
flattens a feature map first; ("res", name): a residual block (zoo.residual_block). The last layer need not
be the logits (planner tests plan conv-only stacks).
"""
from edgemesh_tf import layers as L
from edgemesh_tf.layers.graph import ModelSpec
from edgemesh_tf.layers.init import LINEAR_GAIN
from edgemesh_tf.models.zoo import conv_block, residual_block


def sequential(name, image_shape, num_classes, layers) -> ModelSpec:
    out = {}

    def fn(x, classes):
        for kind, lname, *rest in layers:
            if kind == "conv":
                x = conv_block(x, lname, rest[0], pool=bool(rest[1:] and rest[1]))
            elif kind == "res":
                x = residual_block(x, lname)
            else:
                if len(x.shape) > 1:
                    x = L.flatten(x)
                relu = rest[1] if rest[1:] else True
                x = L.dense(x, lname, rest[0], activation="relu" if relu else None, gain=2.0 if relu else LINEAR_GAIN)
        out["last"] = x
        return x

    trace_classes = num_classes
    try:
        return L.build_model(fn, image_shape, trace_classes, name=name)
    except ValueError as e:
        if "the logits of" not in str(e):
            raise
    last = out["last"]
    return ModelSpec(name, tuple(image_shape), num_classes, tuple(last._trace.layers))
