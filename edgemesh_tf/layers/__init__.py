"""The mesh API: define a CNN as a function over tensors with named split dims.

    from edgemesh_tf import layers as L

    def model(images: L.Tensor, num_classes: int) -> L.Tensor:
        x = L.conv2d(images, "conv1", 6, kernel=5, padding="valid")   # split dim "conv1": 6 filters
        x = L.relu(L.batch_norm(x))                                    # per channel: stays split
        x = L.avg_pool2d(x, 2)
        x = L.conv2d(x, "conv2", 16, kernel=5, padding="valid", activation="relu")
        x = L.global_avg_pool(x)
        return L.dense(x, "logits", num_classes, gain=1.0)

    spec = L.build_model(model, (32, 32, 1), 10, name="lenet")

Every ``conv2d`` and ``dense`` names a split dim (its filters or units) that a layout may divide
unevenly over a group's devices; per-channel layers (batch norm, activations, pooling, dropout,
depthwise conv) run on those slices; a layer that needs whole inputs (the next conv or dense,
flatten, add, concat) gathers them first. Plain mtf goes in through ``mtf_op`` (replicated). ``build_model`` records the layers as plain data
(``ModelSpec``) that the profiler, planner and trainer read; each layer kind is defined once, in
the module of this package that holds it (``KINDS``).
"""
from edgemesh_tf.layers.conv import conv2d, depthwise_conv2d
from edgemesh_tf.layers.custom import mtf_op
from edgemesh_tf.layers.dense import dense, flatten
from edgemesh_tf.layers.elementwise import ACTIVATIONS, activation, add, concat, relu
from edgemesh_tf.layers.graph import INPUT, Layer, ModelFn, ModelSpec, Segment, Tensor, build_model, model_from_dict
from edgemesh_tf.layers.kind import KINDS, LayerKind, Weight
from edgemesh_tf.layers.norm import batch_norm, dropout
from edgemesh_tf.layers.pool import avg_pool2d, global_avg_pool, max_pool2d

__all__ = ["ACTIVATIONS", "INPUT", "KINDS", "Layer", "LayerKind", "ModelFn", "ModelSpec", "Segment", "Tensor",
           "Weight", "activation", "add", "avg_pool2d", "batch_norm", "build_model", "concat", "conv2d", "dense",
           "depthwise_conv2d", "dropout", "flatten", "global_avg_pool", "max_pool2d", "model_from_dict", "mtf_op", "relu"]
