"""Ops that assume equal slices: lowered per processor, or refused with a clear error."""
import numpy as np
import pytest

from edgemesh_tf.mesh.build import check_tensor_layouts, session_config
from edgemesh_tf.mesh.compat import mtf, tf
from edgemesh_tf.mesh.layout import Layout, local_devices
from edgemesh_tf.mesh.uneven import UnevenLowering, UnevenMeshImpl
from edgemesh_tf.training.graph import build_train_graph

D = local_devices(3)


def _lower(fn, split_sizes, mesh=(("model", 3),)):
    """Builds fn(mesh) -> mtf tensor under a 3-device uneven mesh; returns its value."""
    graph = tf.Graph()
    with graph.as_default():
        g = mtf.Graph()
        m = mtf.Mesh(g, "m")
        out = fn(m)
        impl = UnevenMeshImpl(mtf.Shape([mtf.Dimension(n, s) for n, s in mesh]),
                              mtf.LayoutRules([(k, "model") for k in split_sizes]), D, split_sizes)
        check_tensor_layouts(g, impl)
        lowering = UnevenLowering(g, {m: impl})
        slices = [t.shape.as_list() for t in lowering.tensors[out].to_laid_out_tensor().all_slices]
        result = lowering.export_to_tf_tensor(out)
        with tf.Session(graph=graph, config=session_config(3)) as sess:
            return sess.run(result), slices


def test_one_hot_uneven_offsets():
    idx = np.array([0, 3, 5, 9], np.int32)
    got, slices = _lower(lambda m: mtf.one_hot(mtf.import_tf_tensor(m, tf.constant(idx), mtf.Shape([mtf.Dimension("b", 4)])),
                                                mtf.Dimension("cls", 10)), {"cls": (5, 3, 2)})
    np.testing.assert_array_equal(got, np.eye(10)[idx])
    assert [s[-1] for s in slices] == [5, 3, 2]


def test_constant_and_broadcast_uneven():
    got, slices = _lower(lambda m: mtf.constant(m, 2.0, mtf.Shape([mtf.Dimension("a", 2), mtf.Dimension("cls", 7)]))
                         + mtf.zeros(m, mtf.Shape([mtf.Dimension("cls", 7)])), {"cls": (4, 2, 1)})
    np.testing.assert_array_equal(got, np.full((2, 7), 2.0))
    assert slices == [[2, 4], [2, 2], [2, 1]]


def test_import_reshape_and_reduce_uneven():
    x = np.arange(24, dtype=np.float32).reshape(2, 12)
    def fn(m):
        t = mtf.import_tf_tensor(m, tf.constant(x), mtf.Shape([mtf.Dimension("a", 2), mtf.Dimension("cls", 12)]))
        t = mtf.rename_dimension(t, "cls", "all")          # allconcat of uneven slices
        t = mtf.rename_dimension(t, "all", "cls")          # allsplit with sizes
        return mtf.reduce_sum(t * 2.0, reduced_dim=t.shape.dims[-1])
    got, _ = _lower(fn, {"cls": (7, 3, 2)})
    np.testing.assert_allclose(got, 2 * x.sum(axis=1))


def test_top_k_refused_under_uneven_layout():
    def fn(m):
        t = mtf.import_tf_tensor(m, tf.ones([2, 6]), mtf.Shape([mtf.Dimension("a", 2), mtf.Dimension("cls", 6)]))
        return mtf.top_1(t, t.shape.dims[0])[0]
    with pytest.raises(ValueError, match="TopKOperation.*not supported under an uneven layout"):
        _lower(fn, {"cls": (3, 2, 1)})


def test_two_dims_of_one_tensor_on_one_mesh_dim(vgg_digits):
    lay = Layout(mesh=(("model", 2),), devices=tuple(D[:2]), rules=(("batch", "model"), ("conv1", "model")))
    with pytest.raises(ValueError, match="'batch' and 'conv1' of tensor .* both map to mesh dim 'model'"):
        build_train_graph(vgg_digits, lay, 32)
