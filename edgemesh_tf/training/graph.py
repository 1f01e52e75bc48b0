"""One training graph: an mtf model lowered under a layout, with SGD/momentum applied per slice.

The update is applied in TF on the lowered slices (one assign per slice, on the slice's device),
and each assign depends on every read of its variable in the step. mtf's own training step leaves
the gradient computation's variable reads (the backward pass reads kernels again) unordered against
the optimizer's assigns, which gave wrong first-layer updates in 4 of 30 runs on TF 2.21
(docs/DESIGN.md). Ordering each assign after the reads of its own variable, rather than after every
gradient, keeps devices that share no collective (replicated layers) from waiting for each other.
Momentum buffers are mtf variables laid out like their weights, so checkpoints hold whole
(master) tensors and can be restored under any other layout.
"""
from __future__ import annotations

import dataclasses

from edgemesh_tf.mesh.build import check_tensor_layouts, mesh_impl_for
from edgemesh_tf.mesh.compat import mtf, tf
from edgemesh_tf.mesh.layout import Layout
from edgemesh_tf.mesh.uneven import UnevenLowering
from edgemesh_tf.models import mesh_model
from edgemesh_tf.layers import ModelSpec


@dataclasses.dataclass
class TrainGraph:
    """Handles into a built graph. Shapes: images [batch, H, W, C] float32, labels [batch] int32."""

    graph: tf.Graph
    images: tf.Tensor
    labels: tf.Tensor
    loss: tf.Tensor
    logits: tf.Tensor          # evaluation mode: batch norm's running statistics, no dropout
    train_op: tf.Operation
    global_step: tf.Variable
    init_op: tf.Operation
    copy_masters_to_slices: tf.Operation  # every variable, momentum slots included (checkpoints)
    copy_slices_to_masters: tf.Operation
    copy_weights_to_slices: tf.Operation  # the weights and state only (``weights``): momentum stays in the
    copy_slices_to_weights: tf.Operation  # slices, where the step reads it (an engine round)
    learning_rate: tf.Tensor   # float32 scalar, fed per step (default: the build's learning_rate)
    gradients: dict            # master variable name -> whole-tensor gradient (tf.Tensor)
    weights: dict              # master variable name -> whole-tensor value read from the slices (trainable
                               # weights and layer state such as batch norm's running statistics)
    layout: Layout
    batch_size: int


def _ancestors(tensors) -> set:
    """The ops that computing ``tensors`` runs (inputs and control inputs, transitively)."""
    seen, todo = set(), [t.op for t in tensors]
    while todo:
        op = todo.pop()
        if op in seen:
            continue
        seen.add(op)
        todo.extend(t.op for t in op.inputs)
        todo.extend(op.control_inputs)
    return seen


def _reads_of(var, step_ops: set) -> list:
    """The reads of resource variable ``var`` that the step performs. (Other reads exist: the copies
    between masters and slices read a slice right after assigning it; depending on those would
    re-run the copy inside every step.)"""
    return [op for op in var.handle.consumers() if op.type == "ReadVariableOp" and op in step_ops]


MASTER_PLACEMENTS = ("spread", "first")



def build_train_graph(spec: ModelSpec, layout: Layout, batch_size: int, *, learning_rate: float = 0.05,
                      momentum: float = 0.9, seed: int = 0, master_device: str | None = None,
                      mesh_impl=None, container: str = "", weight_decay: float = 0.0,
                      master_placement: str = "spread") -> TrainGraph:
    """Builds the model, its loss and one SGD-with-momentum step under ``layout``:
    ``m = momentum·m + g + weight_decay·w; w -= lr·m`` (PyTorch's SGD), lr fed as ``learning_rate``.

    Args:
      master_device: the input placeholders and the global step (and the masters on "first");
        defaults to the layout's first device.
      master_placement: where whole (master) variables live: "spread" over the layout's devices by
        bytes, or all on "first": ``master_device``.
      mesh_impl: overrides the lowering implementation (benchmarks compare mtf's stock one);
        ``layout`` then only names the master device.
      container: TF resource container of the variables: graphs that share servers at the same
        time need distinct containers (variables on a server are shared by name otherwise).
    Raises:
      ValueError: the layout does not fit the model (names the dim/device and the expected value).
    """
    if mesh_impl is None:
        spec.check_splittable(dim for dim, _ in layout.rules)
        layout.validate(spec.dims(batch_size))
    graph = tf.Graph()
    with graph.as_default(), tf.container(container):
        tf.set_random_seed(seed)
        mtf_graph = mtf.Graph()
        master = master_device or layout.devices[0]
        if master_placement not in MASTER_PLACEMENTS:
            raise ValueError("master placement must be one of %s, got %r" % (MASTER_PLACEMENTS, master_placement))
        # mtf's placer puts each master variable on the device holding the fewest master bytes so far:
        # with every master on one device the first device of a split held the whole model on top of
        # its slices (VGG-16, batch 32, 4 ways: 402 MiB against ~141 on the others; docs/DESIGN.md)
        placer = mtf.utils.BalancedVariablePlacer(list(layout.devices) if master_placement == "spread" else [master])
        mesh = mtf.Mesh(mtf_graph, "mesh", variable_placer=placer)
        with tf.device(master):
            images = tf.placeholder(tf.float32, [batch_size, *spec.image_shape], name="images")
            labels = tf.placeholder(tf.int32, [batch_size], name="labels")
            global_step = tf.train.get_or_create_global_step()
            lr = tf.placeholder_with_default(tf.constant(float(learning_rate), tf.float32), [], name="learning_rate")
        ctx = mesh_model.MeshContext(mesh, spec, seed, training=True)
        loss, logits = mesh_model.loss_and_logits(spec, mesh, images, labels, batch_size, seed, ctx)
        if spec.has_modes():  # batch norm or dropout: evaluation reads running statistics, drops nothing
            logits = mesh_model.logits(spec, mesh_model.import_batch(spec, mesh, images, labels, batch_size)[0],
                                       seed, training=False)
        weights = list(mtf_graph.trainable_variables)
        state = [v for v in mtf_graph.all_variables if not v.trainable]  # before the momentum slots
        grads = mtf.gradients([loss], [v.outputs[0] for v in weights])
        with tf.variable_scope("momentum"):
            slots = [mtf.get_variable(mesh, v.name.replace("/", "_"), v.shape, initializer=tf.zeros_initializer(),
                                      trainable=False) for v in weights]
        mesh_impl = mesh_impl or mesh_impl_for(layout)
        check_tensor_layouts(mtf_graph, mesh_impl)
        lowering = UnevenLowering(mtf_graph, {mesh: mesh_impl})

        grad_slices = [lowering.tensors[g].to_laid_out_tensor().all_slices for g in grads]
        tf_loss = lowering.export_to_tf_tensor(loss)
        step_ops = _ancestors([x for slices in grad_slices for x in slices] + [tf_loss])
        updates = []
        for v, slot, g_slices in zip(weights, slots, grad_slices):
            w_slices = lowering.variables[v].laid_out_tensor.all_slices
            m_slices = lowering.variables[slot.operation].laid_out_tensor.all_slices
            for dev, w, m, g in zip(mesh_impl.devices, w_slices, m_slices, g_slices):
                with tf.device(dev):
                    if weight_decay:  # read before w's update below, which waits for m_new
                        g = g + weight_decay * w.read_value()
                    with tf.control_dependencies(_reads_of(m, step_ops)):
                        m_new = m.assign(momentum * m + g)
                    with tf.control_dependencies(_reads_of(w, step_ops)):
                        updates.append(w.assign_sub(lr * m_new))
        updates += [lowering.lowered_operation(op) for op in ctx.updates]
        with tf.control_dependencies(updates), tf.device(master):
            train_op = global_step.assign_add(1).op
        kept = [lowering.variables[v] for v in weights + state]

        return TrainGraph(
            graph=graph, images=images, labels=labels, loss=tf_loss,
            logits=lowering.export_to_tf_tensor(logits), train_op=train_op, global_step=global_step, learning_rate=lr,
            init_op=tf.global_variables_initializer(),
            copy_masters_to_slices=lowering.copy_masters_to_slices(),
            copy_slices_to_masters=lowering.copy_slices_to_masters(),
            copy_weights_to_slices=tf.group([v.copy_master_to_slices for v in kept]),
            copy_slices_to_weights=tf.group([v.copy_slices_to_master for v in kept]),
            gradients={v.name: lowering.export_to_tf_tensor(g) for v, g in zip(weights, grads)},
            weights={v.name: lowering.export_to_tf_tensor(v.outputs[0]) for v in weights + state},
            layout=layout, batch_size=batch_size)
