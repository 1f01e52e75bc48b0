"""From a ``Layout`` to an mtf mesh implementation and a TF session config."""
from __future__ import annotations

from edgemesh_tf.mesh.compat import mtf, tf
from edgemesh_tf.mesh.layout import Layout
from edgemesh_tf.mesh.uneven import UnevenMeshImpl


def mesh_impl_for(layout: Layout) -> UnevenMeshImpl:
    """The lowering implementation of ``layout`` (even and replicated layouts are special cases)."""
    shape = mtf.Shape([mtf.Dimension(name, size) for name, size in layout.mesh])
    rules = mtf.LayoutRules(list(layout.rules))
    return UnevenMeshImpl(shape, rules, list(layout.devices), dict(layout.sizes))


def check_tensor_layouts(graph, mesh_impl) -> None:
    """Every mtf tensor must map its dims to distinct mesh dims; the error names both dims."""
    rules = dict(mesh_impl.layout_rules._pairs)  # a set of (tensor dim, mesh dim)
    for op in graph.operations:
        for t in op.outputs:
            seen = {}
            for d in t.shape.dims:
                m = rules.get(d.name)
                if m is None:
                    continue
                if m in seen:
                    raise ValueError("layout: dims %r and %r of tensor %s both map to mesh dim %r; one tensor "
                                     "cannot split two dims on the same mesh dim" % (seen[m], d.name, t.name, m))
                seen[m] = d.name


def session_config(num_devices: int, intra_op_threads: int = 1) -> tf.ConfigProto:
    """In-process CPU devices ``CPU:0..num_devices-1``.

    inter-op threads >= devices + 1: with fewer, collectives between in-process devices can stall
    on a 2-core machine (docs/DESIGN.md).
    """
    return tf.ConfigProto(device_count={"CPU": max(1, num_devices)},
                          inter_op_parallelism_threads=max(2, num_devices + 1),
                          intra_op_parallelism_threads=intra_op_threads,
                          allow_soft_placement=False)
