"""A CNN of our own for the built-in 8x8 digits, written with the mesh API.

    edgemesh run --model examples/my_cnn.py          # profile, plan and train it on the emulated pi4 cluster

Every conv2d / dense names a split dim (its filters / units) that the planner may divide unevenly
across a group's devices; batch norm, ReLU, pooling and dropout run on those slices.
"""
from edgemesh_tf import layers as L

INPUT_SHAPE = (8, 8, 1)  # the built-in digits dataset


def model(images: L.Tensor, num_classes: int) -> L.Tensor:
    x = L.conv2d(images, "conv1", 32)              # 3x3 SAME, 32 filters: split dim "conv1"
    x = L.relu(L.batch_norm(x))                    # per channel: runs on conv1's slices
    x = L.conv2d(x, "conv2", 64, activation="relu")
    x = L.max_pool2d(x, 2)                         # 8x8 -> 4x4
    x = L.flatten(x)
    x = L.dense(x, "fc1", 2048, activation="relu") # 2M weights
    x = L.dropout(x, 0.2)
    x = L.dense(x, "fc2", 2048, activation="relu") # 4M weights: a split spreads them over small devices
    return L.dense(x, "logits", num_classes, gain=1.0)
