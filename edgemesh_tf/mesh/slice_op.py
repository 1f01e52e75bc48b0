"""``SliceOp``: one TF function applied to every processor's slices, with gradients that are right
under any (uneven) layout.

mtf's ``slicewise`` differentiates each processor's slice with ``tf.gradients`` and stops there,
which is right only when every input is split exactly like the output. A convolution whose filters
are split reads a whole input on every device: each device's input gradient is then a partial sum,
and the kernel's gradient is partial over a split batch. ``SliceOp``'s gradient sums each input's
per-processor gradient over the mesh axes the output is split on and the input is not (a lazy
allreduce, which mtf fuses with what follows). Per-processor shapes come from the slices
themselves, so uneven splits need nothing more. The layer kinds (``edgemesh_tf/layers``) build
convolutions, depthwise convolutions, pooling and activations with it.
"""
from __future__ import annotations

from typing import Callable, Sequence

from edgemesh_tf.mesh.compat import mtf, tf

_ops = mtf.ops


def _mesh_axes(mesh_impl, shape) -> set:
    return {a for a in mesh_impl.tensor_layout(shape).tensor_axis_to_mesh_axis if a is not None}


class SliceOp(mtf.Operation):
    """y = tf_fn(*slices) on each processor; ``output_shape`` is the mtf shape of y (its split dims
    must be split like the inputs they come from). ``name`` shows in errors and TF op names."""

    def __init__(self, tf_fn: Callable, inputs: Sequence, output_shape, name: str):
        super().__init__(list(inputs), name=name)
        self._tf_fn = tf_fn
        self._outputs = [mtf.Tensor(self, mtf.convert_to_shape(output_shape), inputs[0].dtype)]

    def gradient(self, grad_ys):
        return SliceGradOp(self, grad_ys[0]).outputs

    def lower(self, lowering):
        mesh_impl = lowering.mesh_impl(self)
        y = mesh_impl.slicewise(self._tf_fn, *[lowering.tensors[x] for x in self.inputs])
        lowering.set_tensor_lowering(self.outputs[0], y)


class SliceGradOp(mtf.Operation):
    """The input gradients of a ``SliceOp`` (see the module docstring)."""

    def __init__(self, forward: SliceOp, dy):
        super().__init__(list(forward.inputs) + [forward.outputs[0], dy], name=forward.name + "_grad")
        self._forward, self._dy = forward, dy
        self._outputs = [mtf.Tensor(self, x.shape, x.dtype, index=i) for i, x in enumerate(forward.inputs)]

    def lower(self, lowering):
        mesh_impl = lowering.mesh_impl(self)
        fwd = self._forward
        xs = [lowering.tensors[x].to_laid_out_tensor().all_slices for x in fwd.inputs]
        ys = lowering.tensors[fwd.outputs[0]].to_laid_out_tensor().all_slices
        dys = lowering.tensors[self._dy].to_laid_out_tensor().all_slices
        grads = []
        for p, device in enumerate(mesh_impl.devices):
            with tf.device(device):
                grads.append(tf.gradients(ys[p], [x[p] for x in xs], grad_ys=dys[p],
                                          unconnected_gradients=tf.UnconnectedGradients.ZERO))
        out_axes = _mesh_axes(mesh_impl, fwd.outputs[0].shape)
        for i, x in enumerate(fwd.inputs):
            laid = mesh_impl.LaidOutTensor([g[i] for g in grads])
            reduced = sorted(out_axes - _mesh_axes(mesh_impl, x.shape))
            if reduced:
                laid = _ops.LazyAllreduceSum(mesh_impl, laid, reduced)
            lowering.set_tensor_lowering(self.outputs[i], laid)
