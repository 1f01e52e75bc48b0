"""Every layer kind of the mesh API (``edgemesh_tf.layers``) computes what plain TF computes.

Property tests: for each kind, a tiny model around it (random shapes, kernels, strides, paddings,
dilations) is trained one step under a random uneven split of its split dims over three in-process
devices; its loss, evaluation logits, every variable's gradient and every variable after the step
(batch norm's moving statistics included) equal the plain-TF model's (``PlainModel``, the same
initial weights) within 1e-5 (relative where values are large). Dropout is compared by its
statistics, since the two random streams differ. An unsplit layout follows plain TF's loss curve
to 5 decimals over 20 momentum-SGD steps. (Malformed models: test_layer_errors.py.)

Each example builds one TF graph holding both the mtf step and the plain-TF model (variables under
``plain/``) and runs them in one session: ~0.5-1.5 s an example, ~1 min for the file.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from edgemesh_tf import layers as L
from edgemesh_tf.mesh.build import mesh_impl_for, session_config
from edgemesh_tf.mesh.compat import mtf, tf
from edgemesh_tf.mesh.layout import local_devices, single_device_layout, split_layout
from edgemesh_tf.mesh.uneven import UnevenLowering
from edgemesh_tf.models import mesh_model
from edgemesh_tf.models.plain_tf import PlainModel
from edgemesh_tf.training.graph import build_train_graph
from edgemesh_tf.training.loop import restore_or_init

D3 = local_devices(3)
SEED, LR, MOMENTUM = 5, 0.05, 0.9
TOL = dict(rtol=1e-5, atol=1e-5)
SLOW = pytest.mark.slow  # graph-building tests: 2-10 s each


def examples(n):
    return settings(max_examples=n, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# -- strategies ----------------------------------------------------------------------------------

@st.composite
def uneven(draw, units):
    """``units`` over 3 devices: each share >= 1, not all equal (units >= 4)."""
    assert units >= 4
    a = draw(st.integers(1, units - 2))
    b = draw(st.integers(1, units - 1 - a))
    s = [a, b, units - a - b]
    if len(set(s)) == 1:  # units = 3k, k >= 2
        s = [a + 1, b, units - a - b - 1]
    return tuple(s)


def int_or_pair(lo, hi):
    return st.one_of(st.integers(lo, hi), st.tuples(st.integers(lo, hi), st.integers(lo, hi)))


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _min_size(window, dilation, padding, lo=2):
    """Per axis, the smallest input a window fits in (VALID) or ``lo``."""
    return [max(lo, (k - 1) * d + 1) if padding == "valid" else lo for k, d in zip(_pair(window), _pair(dilation))]


@st.composite
def image_for(draw, window=1, dilation=1, padding="same", channels=(1, 3), slack=4):
    """An (H, W, C) image shape the window fits in."""
    mh, mw = _min_size(window, dilation, padding)
    return (draw(st.integers(mh, mh + slack)), draw(st.integers(mw, mw + slack)), draw(st.integers(*channels)))


@st.composite
def window_args(draw, kernel=(1, 5), strides=(1, 2), dilation=(1, 2), square_strides=False):
    """kernel, strides, dilation, padding of a conv: never strides > 1 with dilation > 1; with
    ``square_strides`` the same stride in rows and columns (TF's depthwise convolution)."""
    k = draw(int_or_pair(*kernel))
    s = draw(st.integers(*strides) if square_strides else int_or_pair(*strides))
    d = 1 if _pair(s) != (1, 1) else draw(int_or_pair(*dilation))
    return dict(kernel=k, strides=s, dilation=d, padding=draw(st.sampled_from(["same", "valid"])))


BATCH = st.integers(2, 4)
FILTERS = st.integers(4, 8)
ACT = st.sampled_from([None, "relu", "gelu", "sigmoid", "leaky_relu"])


# -- running both models ---------------------------------------------------------------------------

def _batch(spec, batch, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.standard_normal((batch, *spec.image_shape)).astype(np.float32)
    return x, rng.randint(0, spec.num_classes, batch).astype(np.int32)


def run_both(spec, shares, batch, plain_spec=None, data_seed=0):
    """Builds ``spec``'s training step under ``split_layout(shares, D3)`` and the plain-TF model of
    ``plain_spec`` (default ``spec``) in one graph; runs the step once on a random batch.

    Returns {"mesh"/"plain": {"loss", "logits" (evaluation mode), "grads" {master name: whole
    gradient}, "before"/"after" {name: value} of every variable around the step}}. The plain-TF
    step is ``w - LR·g`` (the first momentum step from zero buffers) and its state updates.
    """
    g = build_train_graph(spec, split_layout(shares, D3), batch, learning_rate=LR, momentum=MOMENTUM, seed=SEED)
    with g.graph.as_default(), tf.variable_scope("plain"):
        plain = PlainModel(plain_spec or spec, SEED)
        loss = plain.loss(g.images, g.labels)
        updates = list(plain.updates)
        logits = plain.logits(g.images, training=False)
        trainable = {n: v for n, v in plain.variables.items() if v.trainable}
        grads = dict(zip(trainable, tf.gradients(loss, list(trainable.values()))))
        init = tf.variables_initializer(list(plain.variables.values()))
    x, y = _batch(spec, batch, data_seed)
    feed = {g.images: x, g.labels: y}
    with tf.Session(graph=g.graph, config=session_config(3)) as sess:
        restore_or_init(sess, g, checkpoint_dir=None)
        sess.run(init)
        m, p = sess.run([dict(loss=g.loss, logits=g.logits, grads=g.gradients, before=g.weights),
                         dict(loss=loss, logits=logits, grads=grads, before=plain.variables)], feed)
        sess.run([g.train_op] + updates, feed)
        m["after"], p["after"] = sess.run([g.weights, plain.variables], feed)
    for name, v in trainable.items():
        p["after"][name] = p["before"][name] - LR * p["grads"][name]
    return {"mesh": m, "plain": p}


def assert_matches(r, what=""):
    """The mtf run equals the plain-TF one: loss, logits, gradients, weights before and after."""
    m, p = r["mesh"], r["plain"]
    np.testing.assert_allclose(m["loss"], p["loss"], err_msg="loss " + what, **TOL)
    np.testing.assert_allclose(m["logits"], p["logits"], err_msg="logits " + what, **TOL)
    assert set(m["grads"]) == set(p["grads"]), what
    assert set(m["before"]) == set(p["before"]), what
    for name in p["grads"]:
        np.testing.assert_allclose(m["grads"][name], p["grads"][name], err_msg="gradient of %s %s" % (name, what),
                                   **TOL)
    for name in p["before"]:
        np.testing.assert_array_equal(m["before"][name], p["before"][name], err_msg="initial %s %s" % (name, what))
        np.testing.assert_allclose(m["after"][name], p["after"][name], err_msg="%s after a step %s" % (name, what),
                                   **TOL)


def check(spec, shares, batch, **kwargs):
    assert_matches(run_both(spec, shares, batch, **kwargs), "%s under %s" % (spec.layers, shares))


def with_logits(body):
    """A model function: ``body(images)``, then dense logits."""
    def fn(x, n):
        return L.dense(body(x), "logits", n, gain=1.0)
    return fn


# -- each kind under an uneven split ----------------------------------------------------------------

@st.composite
def conv_cases(draw):
    """A conv of random geometry reading a split 1x1 conv (gathered first: the gradient of its
    input sums the devices' parts) and split itself."""
    w = draw(window_args())
    f0, f, act, bias = draw(FILTERS), draw(FILTERS), draw(ACT), draw(st.booleans())
    spec = L.build_model(with_logits(lambda x: L.flatten(L.conv2d(
        L.conv2d(x, "conv0", f0, kernel=1), "conv", f, activation=act, use_bias=bias, **w))),
        draw(image_for(w["kernel"], w["dilation"], w["padding"])), 3)
    return spec, {"conv0": draw(uneven(f0)), "conv": draw(uneven(f))}, draw(BATCH)


DILATED = (L.build_model(with_logits(lambda x: L.flatten(L.conv2d(L.conv2d(x, "conv0", 4, kernel=1), "conv", 4,
                                                                  kernel=2, dilation=2))), (2, 2, 1), 3),
           {"conv0": (1, 1, 2), "conv": (1, 1, 2)}, 2)
"""The CPU kernel of the conv2d op's input gradient refused any dilation above 1 (conv.py's _conv2d)."""


@SLOW
@examples(4)
@given(conv_cases())
@example(DILATED)
def test_conv2d(case):
    check(*case)


@st.composite
def depthwise_cases(draw):
    w = draw(window_args(square_strides=True))
    f, act, bias = draw(FILTERS), draw(ACT), draw(st.booleans())

    def body(x):
        x = L.conv2d(x, "conv", f, kernel=draw(st.integers(1, 3)))
        return L.flatten(L.depthwise_conv2d(x, activation=act, use_bias=bias, name="dw", **w))
    spec = L.build_model(with_logits(body), draw(image_for(w["kernel"], w["dilation"], w["padding"])), 3)
    return spec, {"conv": draw(uneven(f))}, draw(BATCH)


ONE_CHANNEL_1X1 = (L.build_model(with_logits(lambda x: L.flatten(L.depthwise_conv2d(
    L.conv2d(x, "conv", 4, kernel=1), kernel=1, name="dw"))), (2, 2, 1), 3), {"conv": (1, 1, 2)}, 2)
"""oneDNN's depthwise kernel aborted on a device's one-channel slice with a 1x1 kernel (conv.py's _depthwise)."""


@SLOW
@examples(4)
@given(depthwise_cases())
@example(ONE_CHANNEL_1X1)
def test_depthwise_conv2d_after_a_split_conv(case):
    check(*case)


@st.composite
def dense_cases(draw):
    units, classes, act, bias = draw(st.integers(4, 10)), draw(st.integers(4, 6)), draw(ACT), draw(st.booleans())
    reduce = draw(st.sampled_from([L.flatten, L.global_avg_pool]))
    spec = L.build_model(lambda x, n: L.dense(L.dense(reduce(x), "fc", units, activation=act, use_bias=bias),
                                              "logits", n, gain=1.0), draw(image_for(slack=3)), classes)
    return spec, {"fc": draw(uneven(units)), "logits": draw(uneven(classes))}, draw(BATCH)


@SLOW
@examples(4)
@given(dense_cases())
def test_dense_split_and_its_logits_split(case):
    check(*case)


@st.composite
def pool_cases(draw, pool_fn):
    p, s = draw(int_or_pair(2, 3)), draw(st.one_of(st.none(), int_or_pair(1, 3)))
    padding, f = draw(st.sampled_from(["same", "valid"])), draw(FILTERS)
    spec = L.build_model(with_logits(lambda x: L.flatten(pool_fn(
        L.conv2d(x, "conv", f, kernel=draw(st.integers(1, 3))), p, strides=s, padding=padding, name="pool"))),
        draw(image_for(p, 1, padding)), 3)
    return spec, {"conv": draw(uneven(f))}, draw(BATCH)


@SLOW
@examples(4)
@given(pool_cases(L.max_pool2d))
def test_max_pool2d_after_a_split_conv(case):
    check(*case)


@SLOW
@examples(4)
@given(pool_cases(L.avg_pool2d))
def test_avg_pool2d_after_a_split_conv(case):
    check(*case)


@st.composite
def global_pool_cases(draw):
    f, act = draw(FILTERS), draw(ACT)
    spec = L.build_model(with_logits(lambda x: L.global_avg_pool(
        L.conv2d(x, "conv", f, kernel=draw(st.integers(1, 3)), activation=act))), draw(image_for()), 3)
    return spec, {"conv": draw(uneven(f))}, draw(BATCH)


@SLOW
@examples(3)
@given(global_pool_cases())
def test_global_avg_pool_after_a_split_conv(case):
    check(*case)


@st.composite
def flatten_cases(draw):
    f, units, pooled = draw(FILTERS), draw(st.integers(4, 8)), draw(st.booleans())

    def body(x):
        x = L.conv2d(x, "conv", f, kernel=draw(st.integers(1, 3)))
        x = L.max_pool2d(x, 2, padding="same") if pooled else x  # flatten gathers a follower's output
        return L.dense(L.flatten(x, name="flat_1"), "fc", units, activation="relu")
    spec = L.build_model(with_logits(body), draw(image_for()), 3)
    return spec, {"conv": draw(uneven(f)), "fc": draw(uneven(units))}, draw(BATCH)


@SLOW
@examples(3)
@given(flatten_cases())
def test_flatten_of_a_split_conv(case):
    check(*case)


@st.composite
def batch_norm_cases(draw):
    f = draw(FILTERS)
    momentum, eps = draw(st.sampled_from([0.0, 0.5, 0.9, 0.99])), draw(st.sampled_from([1e-3, 1e-2]))
    reduce = draw(st.sampled_from([L.flatten, L.global_avg_pool]))

    def body(x):
        x = L.conv2d(x, "conv", f, kernel=draw(st.integers(1, 3)), use_bias=draw(st.booleans()))
        return reduce(L.relu(L.batch_norm(x, momentum=momentum, epsilon=eps, name="bn")))
    spec = L.build_model(with_logits(body), draw(image_for()), 3)
    return spec, {"conv": draw(uneven(f))}, draw(BATCH)


@SLOW
@examples(4)
@given(batch_norm_cases())
def test_batch_norm_after_a_split_conv_and_its_moving_statistics(case):
    """Training mode (batch statistics) in the loss and gradients, evaluation mode (running
    statistics) in the logits; after one step the moving mean and variance equal plain TF's."""
    spec = case[0]
    r = run_both(*case)
    assert_matches(r, str(spec.layers))
    for stat in ("bn/moving_mean", "bn/moving_variance"):  # the step moved them
        assert not np.allclose(r["mesh"]["after"][stat], r["mesh"]["before"][stat]), stat


def _dropout_model(rate, f, kernel=1):
    def body(x):
        x = L.conv2d(x, "conv", f, kernel=kernel)
        if rate is not None:
            x = L.dropout(x, rate, name="drop")
        return L.flatten(x)
    return with_logits(body)


@SLOW
@examples(2)
@given(image_for(), FILTERS, st.data())
def test_dropout_rate_zero_is_the_identity(shape, f, data):
    spec = L.build_model(_dropout_model(0.0, f), shape, 3)
    without = L.build_model(_dropout_model(None, f), shape, 3)
    check(spec, {"conv": data.draw(uneven(f))}, 3, plain_spec=without)


@SLOW
@examples(2)
@given(image_for(), FILTERS, st.floats(0.1, 0.8), st.data())
def test_dropout_is_the_identity_in_evaluation(shape, f, rate, data):
    spec = L.build_model(_dropout_model(rate, f), shape, 3)
    without = L.build_model(_dropout_model(None, f), shape, 3)
    r = run_both(spec, {"conv": data.draw(uneven(f))}, 3, plain_spec=without)
    np.testing.assert_allclose(r["mesh"]["logits"], r["plain"]["logits"], **TOL)


def mtf_training_values(spec, layout, x, names):
    """{layer name: its output} of ``spec`` built in training mode under ``layout`` for images ``x``."""
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(SEED)
        mesh = mtf.Mesh(mtf.Graph(), "mesh")
        images, _ = mesh_model.import_batch(spec, mesh, tf.constant(x), tf.zeros([len(x)], tf.int32), len(x))
        ctx = mesh_model.MeshContext(mesh, spec, SEED, training=True)
        values = {L.INPUT: images}
        for layer in spec.layers:
            values[layer.name] = L.KINDS[layer.kind].mtf_forward(ctx, layer, [values[i] for i in layer.inputs])
        gathered = {n: ctx.gathered(values[n]) for n in names}
        lowering = UnevenLowering(mesh.graph, {mesh: mesh_impl_for(layout)})
        out = {n: lowering.export_to_tf_tensor(t) for n, t in gathered.items()}
        init, copy = tf.global_variables_initializer(), lowering.copy_masters_to_slices()
        with tf.variable_scope("plain"):
            plain = PlainModel(spec, SEED)
            plain_values = {L.INPUT: tf.constant(x)}
            for layer in spec.layers:
                plain_values[layer.name] = plain._layer(layer, [plain_values[i] for i in layer.inputs])
            plain_init = tf.variables_initializer(list(plain.variables.values()))
    with tf.Session(graph=graph, config=session_config(3)) as sess:
        sess.run([init, plain_init])
        sess.run(copy)
        return sess.run([out, {n: plain_values[n] for n in names}])


@SLOW
@examples(2)
@given(st.sampled_from([0.1, 0.3, 0.5, 0.7]), st.data())
def test_dropout_in_training_drops_a_fraction_near_its_rate(rate, data):
    """Of >= 2000 elements, the fraction of zeros is within 0.06 of the rate (> 4 standard
    deviations) in the mtf model and in plain TF; the kept ones are scaled by 1/(1 - rate)."""
    f = data.draw(FILTERS)
    spec = L.build_model(_dropout_model(rate, f, kernel=3), (8, 8, 2), 3)
    x, _ = _batch(spec, 8)
    mesh, plain = mtf_training_values(spec, split_layout({"conv": data.draw(uneven(f))}, D3), x, ["conv", "drop"])
    for name, v in (("mesh", mesh), ("plain", plain)):
        before, after = v["conv"], v["drop"]
        assert before.size >= 2000 and np.all(before != 0)
        kept = after != 0
        assert abs(1 - kept.mean() - rate) < 0.06, (name, 1 - kept.mean(), rate)
        np.testing.assert_allclose(after[kept], before[kept] / (1 - rate), rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(mesh["conv"], plain["conv"], **TOL)


@st.composite
def activation_cases(draw):
    """Every activation on the slices of one split conv, the results concatenated (each gathered),
    then one more activation on the (unsplit) concatenation."""
    f, last = draw(FILTERS), draw(st.sampled_from(sorted(L.ACTIVATIONS)))

    def body(x):
        h = L.conv2d(x, "conv", f, kernel=draw(st.integers(1, 3)))
        branches = [L.activation(h, name, name="act_" + name) for name in L.ACTIVATIONS]
        return L.global_avg_pool(L.activation(L.concat(branches, name="cat"), last))
    spec = L.build_model(with_logits(body), draw(image_for(slack=2)), 3)
    return spec, {"conv": draw(uneven(f))}, draw(BATCH)


@SLOW
@examples(3)
@given(activation_cases())
def test_every_activation_on_split_channels(case):
    assert {x.get("fn") for x in case[0].layers if x.kind == "activation"} >= set(L.ACTIVATIONS)
    check(*case)


@st.composite
def add_cases(draw):
    """add of two split convs (one through a follower); with ``residual``, of the image too."""
    f, residual = draw(FILTERS), draw(st.booleans())

    def body(x):
        a = L.conv2d(x, "conv_a", f, kernel=draw(st.integers(1, 3)))
        b = L.relu(L.conv2d(x, "conv_b", f, kernel=draw(st.integers(1, 3)), gain=0.5))
        return L.flatten(L.relu(L.add([a, b] + ([x] if residual else []), name="sum")))
    shape = draw(image_for(channels=(f, f) if residual else (1, 3)))
    spec = L.build_model(with_logits(body), shape, 3)
    return spec, {"conv_a": draw(uneven(f)), "conv_b": draw(uneven(f))}, draw(BATCH)


@SLOW
@examples(3)
@given(add_cases())
def test_add_of_split_convs(case):
    check(*case)


@st.composite
def concat_cases(draw):
    """concat of two split convs (one through a follower), read by a third split conv."""
    fa, fb, fc = draw(FILTERS), draw(FILTERS), draw(FILTERS)

    def body(x):
        a = L.conv2d(x, "conv_a", fa, kernel=draw(st.integers(1, 3)))
        b = L.batch_norm(L.conv2d(x, "conv_b", fb, kernel=draw(st.integers(1, 3))))
        x = L.relu(L.concat([a, b], name="cat"))
        return L.global_avg_pool(L.conv2d(x, "conv_c", fc, kernel=draw(st.integers(1, 3))))
    spec = L.build_model(with_logits(body), draw(image_for()), 3)
    return spec, {"conv_a": draw(uneven(fa)), "conv_b": draw(uneven(fb)), "conv_c": draw(uneven(fc))}, draw(BATCH)


@SLOW
@examples(2)
@given(concat_cases())
def test_concat_of_split_convs(case):
    check(*case)


# -- an unsplit layout trains like plain TF --------------------------------------------------------

def curve_model(x, n):
    x = L.conv2d(x, "conv1", 6, kernel=5, padding="valid")
    x = L.relu(L.batch_norm(x, name="bn1"))
    x = L.avg_pool2d(x, 2)
    x = L.conv2d(x, "conv2", 8, kernel=3, activation="relu")
    return L.dense(L.global_avg_pool(x), "logits", n, gain=1.0)


@SLOW
def test_unsplit_layout_follows_the_plain_tf_loss_curve():
    """20 momentum-SGD steps on 4 fixed random batches (each seen 5 times): build_train_graph under
    one device against PlainModel with build_train_graph's rule ``m = momentum·m + g; w -= lr·m``
    (and batch norm's state updates): losses equal to 5 decimals at every step, and so are the
    weights and the evaluation logits after the last step."""
    spec = L.build_model(curve_model, (12, 12, 1), 10, name="curve")
    batch, steps = 16, 20
    rng = np.random.RandomState(1)
    templates = rng.standard_normal((10, 12, 12, 1))  # one per class: the data can be learnt
    labels = [rng.randint(0, 10, batch).astype(np.int32) for _ in range(4)]
    data = [((templates[y] + 0.5 * rng.standard_normal((batch, 12, 12, 1))).astype(np.float32), y) for y in labels]
    g = build_train_graph(spec, single_device_layout(D3[0]), batch, learning_rate=LR, momentum=MOMENTUM, seed=SEED)
    with g.graph.as_default(), tf.variable_scope("plain"), tf.device(D3[0]):
        plain = PlainModel(spec, SEED)
        loss = plain.loss(g.images, g.labels)
        logits = plain.logits(g.images, training=False)
        trainable = [v for v in plain.variables.values() if v.trainable]
        step, buffers = list(plain.updates), []
        for v, grad in zip(trainable, tf.gradients(loss, trainable)):
            buffers.append(tf.Variable(tf.zeros(v.shape), trainable=False))
            step.append(v.assign_sub(LR * buffers[-1].assign(MOMENTUM * buffers[-1] + grad)))
        init = tf.variables_initializer(list(plain.variables.values()) + buffers)
    mesh_losses, plain_losses = [], []
    with tf.Session(graph=g.graph, config=session_config(1)) as sess:
        restore_or_init(sess, g, checkpoint_dir=None)
        sess.run(init)
        for i in range(steps):
            x, y = data[i % len(data)]
            a, b, _, _ = sess.run([g.loss, loss, g.train_op, step], {g.images: x, g.labels: y})
            mesh_losses.append(a)
            plain_losses.append(b)
        x, y = data[0]
        weights, mesh_logits, plain_weights, plain_logits = sess.run(
            [g.weights, g.logits, plain.variables, logits], {g.images: x, g.labels: y})
    np.testing.assert_array_almost_equal(mesh_losses, plain_losses, decimal=5)
    assert np.mean(mesh_losses[-4:]) < np.mean(mesh_losses[:4]) - 0.1, mesh_losses  # it trained
    for name, w in plain_weights.items():
        np.testing.assert_array_almost_equal(weights[name], w, decimal=5, err_msg=name)
    np.testing.assert_array_almost_equal(mesh_logits, plain_logits, decimal=5)
