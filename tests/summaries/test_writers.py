"""The TensorBoard side of a job's output (summaries/writers.py)."""
import os
import sys

from edgemesh_tf.summaries.writers import tensorboard_command


def test_the_tensorboard_command_names_the_tensorboard_beside_this_python():
    """A venv's tensorboard is not on PATH unless the venv is activated: the command names it by path."""
    command = tensorboard_command("runs/x")
    program = command.split(" --logdir ")[0]
    assert command.endswith(" --logdir " + os.path.join("runs/x", "tb")), command
    assert program == os.path.join(os.path.dirname(sys.executable), "tensorboard") and os.path.exists(program)
