"""Uneven lowering of mtf graphs: per-processor slice sizes instead of equal slices.

mtf assumes every processor holds an equal slice. ``UnevenMeshImpl`` takes, for each split tensor
dimension, the size each mesh coordinate gets (e.g. conv filters 64 -> 40 on a fast device, 24 on a
slow one) and computes slice shapes and begins from running sums. One slice per real device, so an
uneven split costs what an even split costs (repeating device names in ``PlacementMeshImpl`` to
fake 5:3 with 8 slices multiplies the slices and their ops; docs/DESIGN.md has its cost).

Equal slices are assumed in more places than ``slice_shape``; each is handled here:
``slice_begin``, ``allsplit``, ``broadcast_impl``, ``random``, ``make_slices``, ``LaidOutVariable``,
``Lowering.verify_slice_shapes`` and the lowerings of ``Constant``, ``OneHotOperation``, the conv
backprop-input/filter ops and ``ReshapeOperation`` (``UNEVEN_LOWERINGS``, which also fixes mtf's max-pool gradient on ties).
Gathers are direct (each part one hop, not relayed around a ring) and the gradient of a gather is a
reduce-scatter rather than an allreduce followed by a split. ``allconcat`` and
``allreduce`` rings work unchanged. Halo exchange (``receive``/shift), ``alltoall`` with uneven
sizes, ``TopK`` and while loops are refused with a ValueError when the layout is uneven.
"""
from __future__ import annotations

import random as _random
from typing import Mapping, Sequence

from edgemesh_tf.mesh.compat import mtf, placement_mesh_impl, tf

_ops = mtf.ops


class UnevenMeshImpl(placement_mesh_impl.PlacementMeshImpl):
    """A ``PlacementMeshImpl`` whose split dims may have a different size on each processor.

    Args:
      shape: mesh shape (mtf.Shape or "batch:2;model:2"-style).
      layout: mtf layout rules (tensor dim name -> mesh dim name).
      devices: one TF device per processor, row-major over ``shape``.
      split_sizes: {tensor dim name: sizes per coordinate along its mesh dim}; a split dim that is
        absent is split evenly.
    """

    def __init__(self, shape, layout, devices: Sequence[str],
                 split_sizes: Mapping[str, Sequence[int]] | None = None):
        super().__init__(shape, layout, list(devices))
        self._split_sizes = {k: tuple(int(s) for s in v) for k, v in (split_sizes or {}).items()}

    # --- shapes -------------------------------------------------------------------------------
    @property
    def is_uneven(self) -> bool:
        return any(len(set(v)) > 1 for v in self._split_sizes.values())

    def dim_sizes(self, tensor_dim) -> tuple[int, ...] | None:
        """Per-coordinate sizes of ``tensor_dim`` along its mesh axis, or None if not split."""
        axis = self.tensor_dimension_to_mesh_axis(tensor_dim)
        if axis is None:
            return None
        n = self.shape[axis].size
        sizes = self._split_sizes.get(tensor_dim.name)
        if sizes is None:
            if tensor_dim.size % n:
                raise ValueError("dimension %r (size %d) is split over mesh dim %r of size %d but has no sizes; "
                                 "it does not divide evenly" % (tensor_dim.name, tensor_dim.size,
                                                                self.shape[axis].name, n))
            return (tensor_dim.size // n,) * n
        if len(sizes) != n or sum(sizes) != tensor_dim.size:
            raise ValueError("sizes %s of dimension %r must have %d entries adding up to %d"
                             % (list(sizes), tensor_dim.name, n, tensor_dim.size))
        return sizes

    def _axes(self, tensor_shape):
        return self.tensor_layout(tensor_shape).tensor_axis_to_mesh_axis

    def slice_shape_of(self, tensor_shape, pnum: int) -> list[int]:
        """Shape of processor ``pnum``'s slice of a tensor of ``tensor_shape``."""
        coords = _ops.pnum_to_processor_coordinates(self.shape, pnum)
        return [d.size if a is None else self.dim_sizes(d)[coords[a]]
                for d, a in zip(tensor_shape.dims, self._axes(tensor_shape))]

    def slice_shapes(self, tensor_shape) -> list[list[int]]:
        return [self.slice_shape_of(tensor_shape, p) for p in range(self.size)]

    def slice_shape(self, tensor_shape):
        """The largest slice's shape. mtf calls this only for size counters once the lowerings that
        need exact shapes are replaced (see ``UNEVEN_LOWERINGS``)."""
        shapes = self.slice_shapes(tensor_shape)
        return [max(col) for col in zip(*shapes)] if shapes and shapes[0] else []

    def slice_begin(self, tensor_shape, pnum):
        coords = _ops.pnum_to_processor_coordinates(self.shape, pnum)
        return [0 if a is None else sum(self.dim_sizes(d)[:coords[a]])
                for d, a in zip(tensor_shape.dims, self._axes(tensor_shape))]

    def laid_out_size(self, tensor_shape):
        return sum(_ops.list_product(s) for s in self.slice_shapes(tensor_shape))

    # --- slicing and collectives ---------------------------------------------------------------
    def make_slices(self, tf_tensor, tensor_shape):
        if self.tensor_layout(tensor_shape).is_fully_replicated:
            return [tf_tensor] * self.size

        def my_fn(pnum):
            return tf.slice(tf_tensor, self.slice_begin(tensor_shape, pnum), self.slice_shape_of(tensor_shape, pnum))
        return mtf.parallel([tf_tensor.device] * self.size, my_fn, list(range(self.size)))

    def broadcast_impl(self, old_slices, old_shape, new_shape):
        shapes = self.slice_shapes(new_shape)

        def tf_fn(x, pnum):
            return tf.zeros(shapes[pnum], dtype=x.dtype) + _ops._expand_dims(x, old_shape, new_shape)
        return self.slicewise(tf_fn, old_slices, self.laid_out_pnum())

    def random(self, shape, tf_fn, kwargs):
        op_seed = _random.random()  # as mtf: equal slices of the same op get equal seeds

        def my_fn(pnum):
            seed = hash("%s,%s" % (op_seed, self.slice_begin(shape, pnum)))
            return tf_fn(self.slice_shape_of(shape, pnum), seed=seed, **kwargs)
        return self.slicewise(my_fn, self.laid_out_pnum())

    def allsplit(self, x, mesh_axis, split_axis, which=None, sizes: Sequence[int] | None = None):
        """Keeps each processor's piece of a replicated axis; ``sizes`` per coordinate (default even)."""
        if which is not None:
            if self.is_uneven:
                raise ValueError("allsplit with an explicit `which` is not supported for uneven layouts")
            return super().allsplit(x, mesh_axis, split_axis, which)
        n = self.shape[mesh_axis].size

        def my_fn(t, pnum):
            coord = _ops.pnum_to_processor_coordinates(self.shape, pnum)[mesh_axis]
            full = t.shape.as_list()[split_axis]
            parts = sizes if sizes is not None else _even(full, n, mesh_axis)
            begin = [sum(parts[:coord]) if i == split_axis else 0 for i in range(t.shape.ndims)]
            size = [parts[coord] if i == split_axis else -1 for i in range(t.shape.ndims)]
            return tf.slice(t, begin, size)
        return self.slicewise(my_fn, x, self.laid_out_pnum())

    def allconcat(self, x, mesh_axis, concat_axis):
        """Every processor concatenates the slices of its group, each fetched straight from its
        owner: one hop per part. (mtf's ring relays parts through up to n/2 neighbours: on edge
        links, where latency dominates, that multiplies the latency; it also keeps relay copies.)"""
        def direct(tensors, devices):
            out = []
            for dev in devices:
                with tf.device(dev):
                    out.append(tf.concat(tensors, axis=concat_axis))
            return out
        return self._collective_with_groups(x, [mesh_axis], direct)

    def reduce_scatter(self, partial, mesh_axis, split_axis, sizes: Sequence[int]):
        """Sum of the group's partial sums, each processor keeping only its ``sizes`` piece of
        ``split_axis``: what allreduce followed by allsplit computes, with each piece sent once,
        straight to its owner ((k-1)/k of the bytes of a ring allreduce, one hop, no full-size sum)."""
        def direct(tensors, devices):
            ndims = tensors[0].shape.ndims
            out = []
            for t, dev in enumerate(devices):
                begin = [sum(sizes[:t]) if a == split_axis else 0 for a in range(ndims)]
                size = [sizes[t] if a == split_axis else -1 for a in range(ndims)]
                parts = []
                for src, x in zip(devices, tensors):
                    with tf.device(src):
                        parts.append(tf.slice(x, begin, size))
                with tf.device(dev):
                    out.append(tf.add_n(parts))
            return out
        return self._collective_with_groups(partial, [mesh_axis], direct)

    def alltoall(self, x, mesh_axis, split_axis, concat_axis):
        if self._uneven_on_axis(mesh_axis):
            raise ValueError("alltoall over mesh dim %r is not supported with uneven sizes %s; change the layout "
                             "so that this reshape does not move a split between dims"
                             % (self.shape[mesh_axis].name, self._sizes_on_axis(mesh_axis)))
        return super().alltoall(x, mesh_axis, split_axis, concat_axis)

    def receive(self, x, mesh_axis, source_pcoord):
        shapes = {tuple(t.shape.as_list()) for t in x.to_laid_out_tensor().tensor_list}
        if len(shapes) > 1:
            raise ValueError("halo exchange / shift over mesh dim %r needs equal slices, got slice shapes %s; "
                             "do not split spatial dims unevenly" % (self.shape[mesh_axis].name, sorted(shapes)))
        return super().receive(x, mesh_axis, source_pcoord)

    def _sizes_on_axis(self, mesh_axis) -> dict[str, tuple[int, ...]]:
        """Explicit sizes of the tensor dims split over ``mesh_axis``."""
        mesh_dim = self.shape[mesh_axis].name
        rules = dict(self.layout_rules._pairs)
        return {d: s for d, s in self._split_sizes.items() if rules.get(d) == mesh_dim}

    def _uneven_on_axis(self, mesh_axis) -> bool:
        return any(len(set(s)) > 1 for s in self._sizes_on_axis(mesh_axis).values())

    class LaidOutVariable(placement_mesh_impl.PlacementMeshImpl.LaidOutVariable):
        """Slice variables with per-processor shapes."""

        def __init__(self, variable, mesh_impl):  # pylint: disable=super-init-not-called
            self._variable = variable
            self._mesh_impl = mesh_impl
            shape = variable.outputs[0].shape
            if self.slice_is_master:
                self._laid_out_tensor = mesh_impl.LaidOutTensor([variable.get_master()])
                self._copy_slices_to_master = tf.group([])
                self._copy_master_to_slices = tf.group([])
                return
            slices, as_master = [], []
            for pnum in range(mesh_impl.size):
                with tf.device(mesh_impl.devices[pnum]):
                    slices.append(tf.get_variable(
                        "%s_slice_%d" % (variable.name, pnum), mesh_impl.slice_shape_of(shape, pnum),
                        dtype=variable.slice_dtype, collections=[]))
                    as_master.append(tf.cast(slices[-1], variable.master_dtype))
            self._laid_out_tensor = mesh_impl.LaidOutTensor(slices)
            self._copy_master_to_slices = self.assign_to_slices(
                mtf.assign_slice, mesh_impl.make_slices(variable.get_master(), shape))
            # concatenated where the master lives: mtf's default, the first slice's device, made device 0 of a
            # split receive every split tensor whole and forward it (~1.5 x the model's bytes more than its peers)
            self._copy_slices_to_master = variable.assign_to_master(
                mesh_impl.combine_slices(as_master, shape, device=variable.master_device))


def _even(full: int, n: int, mesh_axis) -> list[int]:
    if full % n:
        raise ValueError("allsplit of an axis of size %d over %d processors (mesh axis %d) needs explicit sizes"
                         % (full, n, mesh_axis))
    return [full // n] * n


# --- lowerings of ops that assume equal slices -------------------------------------------------

def _conv2d_output_slice_shapes(op, mesh_impl) -> list[list[int]]:
    """Per-processor shapes of a conv2d backprop op's output (transpose and 3d are refused)."""
    if op._is_transpose or op._conv_dimension != 2:
        raise ValueError("%s: only conv2d (not transpose/3d) is supported by the uneven lowering" % op.name)
    return mesh_impl.slice_shapes(op.outputs[0].shape)


def _lower_conv_backprop_input(op, lowering):
    mesh_impl = lowering.mesh_impl(op)
    dy, conv_filter = op.inputs
    k = op._num_nonbatch_dims
    shapes = _conv2d_output_slice_shapes(op, mesh_impl)

    def tf_fn(tf_dy, tf_filter, pnum):
        s = shapes[pnum]
        input_sizes = [_ops.list_product(s[:-k])] + s[-k:]
        dx = tf.nn.conv2d_backprop_input(input_sizes, tf_filter, _ops._tf_flatten_batch_dims(tf_dy, k),
                                         op._strides, op._padding)
        return _ops._tf_restore_batch_dims(dx, k, tf_dy)
    dx = mesh_impl.slicewise(tf_fn, lowering.tensors[dy], lowering.tensors[conv_filter], mesh_impl.laid_out_pnum())
    out_axis = mesh_impl.tensor_dimension_to_mesh_axis(dy.shape.dims[-1])
    if out_axis is not None:  # reducing out the output channels
        dx = _ops.LazyAllreduceSum(mesh_impl, dx, [out_axis])
    lowering.set_tensor_lowering(op.outputs[0], dx)


def _lower_conv_backprop_filter(op, lowering):
    mesh_impl = lowering.mesh_impl(op)
    conv_input, dy = op.inputs
    k = op._num_nonbatch_dims
    shapes = _conv2d_output_slice_shapes(op, mesh_impl)

    def tf_fn(tf_input, tf_dy, pnum):
        return tf.nn.conv2d_backprop_filter(
            _ops._tf_flatten_batch_dims(tf_input, k), shapes[pnum], _ops._tf_flatten_batch_dims(tf_dy, k),
            op._strides, op._padding)
    df = mesh_impl.slicewise(tf_fn, lowering.tensors[conv_input], lowering.tensors[dy], mesh_impl.laid_out_pnum())
    reduced = [mesh_impl.tensor_dimension_to_mesh_axis(d) for d in dy.shape.dims[:-k]]
    reduced = [a for a in reduced if a is not None]
    if reduced:  # reducing out the batch dims
        df = _ops.LazyAllreduceSum(mesh_impl, df, reduced)
    lowering.set_tensor_lowering(op.outputs[0], df)


def _lower_constant(op, lowering):
    mesh_impl = lowering.mesh_impl(op)
    shapes = mesh_impl.slice_shapes(op.outputs[0].shape)

    def tf_fn(pnum):
        return tf.constant(value=op._value, dtype=op.outputs[0].dtype, shape=shapes[pnum])
    lowering.set_tensor_lowering(op.outputs[0], mesh_impl.slicewise(tf_fn, mesh_impl.laid_out_pnum()))


def _lower_one_hot(op, lowering):
    mesh_impl = lowering.mesh_impl(op)
    shape = op.outputs[0].shape

    def tf_fn(indices, pnum):
        depth = mesh_impl.slice_shape_of(shape, pnum)[-1]
        offset = mesh_impl.slice_begin(shape, pnum)[-1]
        return tf.one_hot(indices - offset, depth, on_value=tf.cast(op._on_value, op._dtype),
                          off_value=tf.cast(op._off_value, op._dtype), dtype=op._dtype)
    y = mesh_impl.slicewise(tf_fn, lowering.tensors[op.inputs[0]], mesh_impl.laid_out_pnum())
    lowering.set_tensor_lowering(op.outputs[0], y)


def _lower_reshape(op, lowering):
    """mtf's reshape lowering with per-processor sizes for allsplit and the reshaped slices."""
    old_shape, new_shape = op.inputs[0].shape, op.outputs[0].shape
    mesh_impl = lowering.mesh_impl(op)
    slices = lowering.tensors[op.inputs[0]]
    old_cum = mesh_impl.mesh_axis_to_cumprod(old_shape)
    new_cum = mesh_impl.mesh_axis_to_cumprod(new_shape)
    allsplit_after = []
    for mesh_axis, (oc, nc) in enumerate(zip(old_cum, new_cum)):
        if oc == nc or oc is not None:
            continue
        new_axis = new_shape.cumprod_to_tensor_axis(nc)
        sizes = mesh_impl.dim_sizes(new_shape.dims[new_axis])
        old_axis = old_shape.cumprod_to_tensor_axis(nc)
        if old_axis is not None and old_shape.dims[old_axis].size == new_shape.dims[new_axis].size:
            if isinstance(slices, _ops.LazyAllreduceSum) and list(slices.mesh_axes) == [mesh_axis]:
                slices = mesh_impl.reduce_scatter(slices.laid_out_input, mesh_axis, old_axis, sizes)
            else:
                slices = mesh_impl.allsplit(slices, mesh_axis, old_axis, sizes=sizes)
        elif old_axis is not None and len(set(sizes)) > 1:
            raise ValueError("reshape %s -> %s splits %r unevenly across a change of dim size; not supported"
                             % (old_shape, new_shape, new_shape.dims[new_axis].name))
        elif old_axis is not None:
            slices = mesh_impl.allsplit(slices, mesh_axis, old_axis)
        else:
            allsplit_after.append((mesh_axis, new_axis, sizes))
    for mesh_axis, (oc, nc) in enumerate(zip(old_cum, new_cum)):
        if oc != nc and oc is not None and nc is not None:
            split_axis = old_shape.cumprod_to_tensor_axis(nc)
            if split_axis is None:
                raise ValueError("reshape %s -> %s moves a split between dims; reshape to insert a new dim first"
                                 % (old_shape, new_shape))
            slices = mesh_impl.alltoall(slices, mesh_axis, split_axis, old_shape.cumprod_to_tensor_axis(oc))
    for mesh_axis, (oc, nc) in enumerate(zip(old_cum, new_cum)):
        if oc != nc and nc is None:
            slices = mesh_impl.allconcat(slices, mesh_axis, old_shape.cumprod_to_tensor_axis(oc))
    shapes = mesh_impl.slice_shapes(new_shape)
    for shape in shapes:
        for _, new_axis, _ in allsplit_after:
            shape[new_axis] = new_shape.dims[new_axis].size
    if all(s == shapes[0] for s in shapes):
        slices = mesh_impl.slicewise_delay_allreduce(lambda x: tf.reshape(x, shapes[0]), slices)
    else:
        slices = mesh_impl.slicewise(lambda x, pnum: tf.reshape(x, shapes[pnum]), slices, mesh_impl.laid_out_pnum())
    for mesh_axis, new_axis, sizes in allsplit_after:
        slices = mesh_impl.allsplit(slices, mesh_axis, new_axis, sizes=sizes)
    lowering.set_tensor_lowering(op.outputs[0], slices)


def _lower_pool_backprop(op, lowering):
    """Max-pool gradient routed to one maximum per window, as TF's MaxPoolGrad does.

    mtf's own lowering multiplies dy by ``x == max``, which sends the gradient to every tied
    maximum; images with flat regions (digits) have ties, and the gradients then differ from
    plain TF's by up to 2e-3.
    """
    if op._pool_fn_string != "MAX_2D":
        return op.lower(lowering)
    mesh_impl = lowering.mesh_impl(op)
    window = [1] + list(op._ksize) + [1]
    strides = [1] + list(op._strides) + [1]

    def tf_fn(x, y, dy):
        flat = [_ops._tf_flatten_batch_dims(t, 3) for t in (x, y, dy)]
        dx = tf.raw_ops.MaxPoolGrad(orig_input=flat[0], orig_output=flat[1], grad=flat[2], ksize=window,
                                    strides=strides, padding="VALID")
        return _ops._tf_restore_batch_dims(dx, 3, x)
    dx = mesh_impl.slicewise(tf_fn, *[lowering.tensors[t] for t in op.inputs])
    lowering.set_tensor_lowering(op.outputs[0], dx)


def _refuse_if_uneven(op, lowering):
    mesh_impl = lowering.mesh_impl(op)
    if mesh_impl.is_uneven:
        raise ValueError("%s (%s) is not supported under an uneven layout (sizes %s); use an even layout for "
                         "this model" % (op.name, type(op).__name__, mesh_impl._split_sizes))
    op.lower(lowering)


UNEVEN_LOWERINGS = {
    _ops.Conv2or3dBackpropInputOperation: _lower_conv_backprop_input,
    _ops.Conv2or3dBackpropFilterOperation: _lower_conv_backprop_filter,
    _ops.Constant: _lower_constant,
    _ops.OneHotOperation: _lower_one_hot,
    _ops.ReshapeOperation: _lower_reshape,
    _ops.PoolBackPropOperation: _lower_pool_backprop,
    _ops.TopKOperation: _refuse_if_uneven,
    _ops.WhileLoopOperation: _refuse_if_uneven,
}


class UnevenLowering(mtf.Lowering):
    """``mtf.Lowering`` that lowers the ops in ``UNEVEN_LOWERINGS`` with per-processor shapes and
    checks every slice's shape (mtf checks slice 0 only)."""

    def __init__(self, graph, mesh_to_impl):  # pylint: disable=super-init-not-called
        self.mesh_to_impl = mesh_to_impl
        self.graph = graph
        self._counters = []
        self.tensors = {}
        self.operations = {}
        self.variables = {}
        for op in graph.operations:
            with tf.name_scope(op.name):
                lower = UNEVEN_LOWERINGS.get(type(op))
                if lower is not None and isinstance(self.mesh_impl(op), UnevenMeshImpl):
                    lower(op, self)
                else:
                    op.lower(self)

    def add_counter(self, key, value):
        self._counters.append((key, value))

    def verify_slice_shapes(self, tensor, laid_out_tensor):
        mesh_impl = self.mesh_impl(tensor)
        if not isinstance(mesh_impl, UnevenMeshImpl):
            return super().verify_slice_shapes(tensor, laid_out_tensor)
        slices = laid_out_tensor.to_laid_out_tensor().all_slices \
            if not isinstance(laid_out_tensor, _ops.LazyAllreduceSum) else laid_out_tensor.laid_out_input.all_slices
        for pnum, t in enumerate(slices):
            actual = t.shape.as_list() if hasattr(t, "shape") else None
            expected = mesh_impl.slice_shape_of(tensor.shape, pnum)
            if actual is not None and actual != expected:
                raise ValueError("wrong slice shape for %s on processor %d (%s): expected %s, got %s"
                                 % (tensor.name, pnum, mesh_impl.devices[pnum], expected, actual))
