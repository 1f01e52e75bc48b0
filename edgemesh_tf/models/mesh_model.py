"""Builds a ``ModelSpec`` with mtf named dimensions.

Every conv's filters (and every dense layer's units) is its own dim, named after the layer, so a
layout can split each with its own sizes. Per-channel layers (batch norm, activations, pooling,
dropout, depthwise conv) run on the split slices. A layer that needs its whole input (the next
conv or dense, flatten, add, concat) reads it gathered: the split dim renamed to ``<name>_all``,
which no layout splits, so the lowering concatenates the slices there. This is EdgeMesh's filter
division: each device computes a subset of the filters on the full input.
"""
from __future__ import annotations

from edgemesh_tf.layers import INPUT, KINDS, Layer, ModelSpec, Weight
from edgemesh_tf.layers.init import initializer
from edgemesh_tf.mesh.compat import mtf, tf
from edgemesh_tf.mesh.slice_op import SliceOp

GATHERED = "_all"


class MeshContext:
    """What a layer kind's ``mtf_forward`` builds with (see ``layers.kind.LayerKind``).

    training: batch statistics and dropout (True) or running statistics and no dropout (False).
    updates: the state assignments (batch norm's running statistics) the training step must run.
    """

    tf, mtf = tf, mtf

    def __init__(self, mesh, spec: ModelSpec, seed: int, training: bool):
        self.mesh, self.seed, self.training = mesh, seed, training
        self.split = set(spec.split_dims())
        self.updates: list = []
        self._gathered: dict = {}

    def variable(self, layer: Layer, weight: Weight, dims) -> mtf.Tensor:
        """The mtf variable ``<layer>/<weight>`` with ``dims`` (its shape's named dims); shared by
        every build of the model in one mtf graph (training and evaluation)."""
        init = initializer(tf, self.seed, "%s/%s" % (layer.name, weight.name), weight)
        with tf.variable_scope(layer.name, reuse=tf.AUTO_REUSE):
            return mtf.get_variable(self.mesh, weight.name, mtf.Shape(dims), initializer=init,
                                    trainable=weight.trainable)

    def gathered(self, x: mtf.Tensor) -> mtf.Tensor:
        """x with its last (channel) dim whole on every device: renamed to ``<dim>_all`` if split."""
        name = x.shape.dims[-1].name
        if name not in self.split:
            return x
        if x not in self._gathered:
            self._gathered[x] = mtf.rename_dimension(x, name, name + GATHERED)
        return self._gathered[x]

    def common_channels(self, xs, name: str | None) -> list:
        """Every x gathered, its channel dim renamed to ``name`` (None: the first input's)."""
        xs = [self.gathered(x) for x in xs]
        name = name or xs[0].shape.dims[-1].name
        return [x if x.shape.dims[-1].name == name else mtf.rename_dimension(x, x.shape.dims[-1].name, name)
                for x in xs]

    def slice_op(self, tf_fn, inputs, output_shape, name: str) -> mtf.Tensor:
        """``tf_fn`` on every processor's slices (``mesh.slice_op.SliceOp``)."""
        return SliceOp(tf_fn, inputs, output_shape, name).outputs[0]

    def update(self, variable: mtf.Tensor, value: mtf.Tensor) -> None:
        self.updates.append(mtf.assign(variable, value))


def logits(spec: ModelSpec, images, seed: int, training: bool = True, ctx: MeshContext | None = None):
    """mtf logits [batch, logits_all] for ``images`` [batch, h, w, c_in]; ``ctx`` collects the state
    updates of a training build."""
    ctx = ctx or MeshContext(images.mesh, spec, seed, training)
    values = {INPUT: images}
    for layer in spec.layers:
        values[layer.name] = KINDS[layer.kind].mtf_forward(ctx, layer, [values[i] for i in layer.inputs])
    return ctx.gathered(values[spec.layers[-1].name])


def import_batch(spec: ModelSpec, mesh, tf_images, tf_labels, batch_size: int):
    """(images [batch, h, w, c_in], labels [batch]) as mtf tensors."""
    h, w, c = spec.image_shape
    batch = mtf.Dimension("batch", batch_size)
    images = mtf.import_tf_tensor(mesh, tf_images, mtf.Shape(
        [batch, mtf.Dimension("h", h), mtf.Dimension("w", w), mtf.Dimension("c_in", c)]))
    return images, mtf.import_tf_tensor(mesh, tf_labels, mtf.Shape([batch]))


def loss_and_logits(spec: ModelSpec, mesh, tf_images, tf_labels, batch_size: int, seed: int,
                    ctx: MeshContext | None = None):
    """Imports a batch and returns (mean cross-entropy scalar, logits), both mtf tensors, built in
    training mode (``ctx.updates`` then holds the state updates the step must run).

    tf_images: float32 [batch, H, W, C]; tf_labels: int32 [batch].
    """
    images, labels = import_batch(spec, mesh, tf_images, tf_labels, batch_size)
    out = logits(spec, images, seed, True, ctx)
    classes = out.shape.dims[-1]
    xent = mtf.layers.softmax_cross_entropy_with_logits(out, mtf.one_hot(labels, classes, dtype=out.dtype), classes)
    return mtf.reduce_mean(xent), out
