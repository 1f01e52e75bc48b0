"""Writes small Keras models, one or more per supported Keras layer, as ``<out>/<case>.keras`` with
random weights (batch norm's moving statistics too) and ``<out>/<case>.npz``: inputs ``x`` and Keras's
own ``predict`` of them ``y``. Run as a script (Keras runs eagerly; the tests' TensorFlow does not):

    python tests/models/keras_cases.py OUT_DIR
"""
import os
import sys

import numpy as np


def cases(keras):
    L = keras.layers

    def functional(shape, body):
        inp = keras.Input(shape)
        return keras.Model(inp, body(inp))

    def head(x, softmax=False):
        return L.Dense(3, activation="softmax" if softmax else None, name="logits")(L.Flatten(name="flatten")(x))

    return {
        "conv_valid5_relu": functional((9, 9, 2), lambda x: head(L.Conv2D(4, 5, padding="valid", activation="relu",
                                                                          name="conv1")(x))),
        "conv_same_stride2_rect": functional((9, 8, 2), lambda x: head(L.Conv2D(5, (3, 2), strides=2, padding="same",
                                                                                name="conv1")(x))),
        "conv_dilated_nobias": functional((9, 9, 1), lambda x: head(L.Conv2D(4, 3, dilation_rate=2, use_bias=False,
                                                                             activation="elu", name="conv1")(x))),
        "depthwise": functional((9, 9, 3), lambda x: L.Dense(3, name="logits")(L.GlobalAveragePooling2D(name="gap")(
            L.DepthwiseConv2D(3, strides=2, padding="same", activation="relu", name="dw")(x)))),
        "pools": functional((10, 10, 2), lambda x: head(L.AveragePooling2D(2, padding="valid", name="avg")(
            L.MaxPooling2D(3, strides=2, padding="same", name="max")(L.Conv2D(4, 3, name="conv1")(x))))),
        "avg_same": functional((9, 9, 2), lambda x: head(L.AveragePooling2D(3, strides=2, padding="same",
                                                                            name="avg")(x))),
        "batch_norm_relu_softmax": functional((8, 8, 2), lambda x: head(L.ReLU(name="act")(L.BatchNormalization(
            momentum=0.9, epsilon=1e-3, name="bn")(L.Conv2D(4, 3, name="conv1")(x))), softmax=True)),
        "residual_concat": functional((8, 8, 3), lambda x: _residual(L, x)),
        "dropout_activation": functional((6, 6, 1), lambda x: L.Dense(3, activation="softmax", name="out")(
            L.Dropout(0.5, name="drop")(L.Activation("tanh", name="tanh")(L.Dense(7, name="fc")(L.Flatten()(x)))))),
        "relu6_softmax_layer": functional((7, 7, 2), lambda x: L.Softmax(name="probs")(head(L.ReLU(6.0, name="r6")(
            L.Conv2D(4, 3, name="conv1")(x))))),
        "sequential": keras.Sequential([keras.Input((8, 8, 1)), L.Conv2D(3, 3, activation="relu"), L.Conv2D(4, 3),
                                        L.MaxPooling2D(), L.Flatten(), L.Dense(3), L.Activation("softmax")]),
    }


def _residual(L, x):
    a = L.Conv2D(4, 3, padding="same", activation="relu", name="a")(x)
    b = L.BatchNormalization(name="b_bn")(L.Conv2D(4, 3, padding="same", name="b")(a))
    s = L.Add(name="sum")([a, b])
    c = L.Concatenate(name="cat")([s, L.Conv2D(2, 1, name="side")(x)])
    return L.Dense(3, name="logits")(L.GlobalAveragePooling2D(name="gap")(c))


def randomize(model, rng):
    for layer in model.layers:
        ws = layer.get_weights()
        if not ws:
            continue
        new = [rng.standard_normal(w.shape).astype(np.float32) * 0.5 for w in ws]
        if type(layer).__name__ == "BatchNormalization":
            new[3] = np.abs(new[3]) + 0.5   # moving variance
        layer.set_weights(new)


def main(out: str) -> None:
    import keras

    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, model in cases(keras).items():
        randomize(model, rng)
        x = rng.standard_normal((3, *model.inputs[0].shape[1:])).astype(np.float32)
        model.save(os.path.join(out, name + ".keras"))
        np.savez(os.path.join(out, name + ".npz"), x=x, y=model.predict(x, verbose=0))


if __name__ == "__main__":
    main(sys.argv[1])
