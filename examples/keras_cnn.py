"""Bring a Keras model and your own arrays: build a Keras CNN, train it on the emulated pi4 cluster,
and evaluate the trained model with plain Keras.

    .venv/bin/python examples/keras_cnn.py build out/                # out/keras_cnn.keras, out/digits.npz
    .venv/bin/edgemesh run --model out/keras_cnn.keras --dataset npz:out/digits.npz \\
        --export_dir out/export --target_accuracy 0.9 --time_budget_s 90      # as root; ~3 min
    .venv/bin/python examples/keras_cnn.py evaluate out/export/model.keras out/digits.npz

The model is ordinary Keras (5x5 VALID convolutions, average pooling, batch normalisation, a
residual add, global average pooling, dropout, a softmax output). edgemesh reads the saved file, splits
each Conv2D's filters and the Dense layer's units over the devices of a group as its plan says,
starts from the file's weights, and writes the trained model back as ``model.keras`` with the same
layers and names. The arrays stand in for yours: ``x_*`` uint8 images (N, 32, 32, 1), ``y_*`` int labels.
"""
import os
import sys

import numpy as np


def build_model(keras):
    L = keras.layers
    images = keras.Input((32, 32, 1), name="images")
    x = L.Conv2D(16, 5, padding="valid", activation="relu", name="conv1")(images)      # 28x28x16
    x = L.AveragePooling2D(2, name="pool1")(L.BatchNormalization(name="bn1")(x))       # 14x14x16
    y = L.ReLU(name="relu2")(L.BatchNormalization(name="bn2")(L.Conv2D(16, 3, padding="same", name="conv2")(x)))
    x = L.Add(name="residual")([x, y])
    x = L.Conv2D(32, 5, padding="valid", activation="relu", name="conv3")(x)            # 10x10x32
    x = L.GlobalAveragePooling2D(name="gap")(L.AveragePooling2D(2, name="pool3")(x))   # 32
    x = L.Dropout(0.2, name="dropout")(x)
    return keras.Model(images, L.Dense(10, activation="softmax", name="classes")(x), name="keras_cnn")


def build(out: str) -> None:
    import keras

    from edgemesh_tf.data import load_dataset

    os.makedirs(out, exist_ok=True)
    build_model(keras).save(os.path.join(out, "keras_cnn.keras"))
    d = load_dataset("digits32")   # float [0, 1]; stored as uint8, as images usually are
    np.savez(os.path.join(out, "digits.npz"), **{
        "x_train": np.round(d.train_x * 255).astype(np.uint8), "y_train": d.train_y,
        "x_test": np.round(d.test_x * 255).astype(np.uint8), "y_test": d.test_y})
    print("wrote %s and %s" % (os.path.join(out, "keras_cnn.keras"), os.path.join(out, "digits.npz")))


def evaluate(model_path: str, npz_path: str) -> float:
    import keras

    model = keras.models.load_model(model_path)
    with np.load(npz_path) as z:
        x, y = z["x_test"].astype(np.float32) / 255.0, z["y_test"]
    accuracy = float(np.mean(np.argmax(model.predict(x, verbose=0), axis=-1) == y))
    print("plain Keras: %s, layers %s, test accuracy %.4f" % (
        model_path, [layer.name for layer in model.layers], accuracy))
    return accuracy


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "build":
        build(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "evaluate":
        evaluate(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
