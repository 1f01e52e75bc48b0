"""LeNet-5 with batch normalisation for 32x32x1 images (the ``digits32`` dataset), in the mesh API.

    .venv/bin/edgemesh run --model examples/lenet_bn.py --dataset digits32   # as root: profile, plan, train to 97%

conv1 (6 filters), conv2 (16 filters), fc1 (120 units) and fc2 (84 units) are split dims the
planner may divide unevenly over a group's devices; batch norm, ReLU and pooling run on the slices.
"""
from edgemesh_tf import layers as L

INPUT_SHAPE = (32, 32, 1)  # the images it is written for: digits32


def model(images: L.Tensor, num_classes: int) -> L.Tensor:
    x = L.conv2d(images, "conv1", 6, kernel=5, padding="valid")   # 28x28x6, split dim "conv1"
    x = L.avg_pool2d(L.relu(L.batch_norm(x)), 2)                   # 14x14x6, on conv1's slices
    x = L.conv2d(x, "conv2", 16, kernel=5, padding="valid")       # gathers conv1 first: 10x10x16
    x = L.avg_pool2d(L.relu(L.batch_norm(x)), 2)                   # 5x5x16, on conv2's slices
    x = L.flatten(x)                                               # gathers conv2: 400 per example
    x = L.dense(x, "fc1", 120, activation="relu")                  # split dim "fc1": 120 units
    x = L.dense(x, "fc2", 84, activation="relu")                   # split dim "fc2": 84 units
    return L.dense(x, "logits", num_classes, gain=1.0)             # logits: no activation, gain 1
