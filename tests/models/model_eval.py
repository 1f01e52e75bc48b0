"""A model's evaluation logits in plain TF with given weights, for the Keras tests."""


def plain_logits(spec, x, weights=None):
    """(evaluation-mode logits of ``spec`` on ``x`` in plain TF, the weights used): ``weights``
    {``<layer>/<weight>``: array}, or the initializers' when None."""
    from edgemesh_tf.mesh.compat import tf
    from edgemesh_tf.models.plain_tf import PlainModel

    with tf.Graph().as_default() as g:
        images = tf.placeholder(tf.float32, [len(x), *spec.image_shape])
        model = PlainModel(spec, seed=3)
        logits = model.logits(images, training=False)
        with tf.Session(graph=g) as sess:
            sess.run(tf.variables_initializer(list(model.variables.values())))
            for n, v in model.variables.items():
                if weights is not None:
                    v.load(weights[n], sess)
            return sess.run(logits, {images: x}), sess.run(dict(model.variables))
