"""TensorBoard scalars of a job: one run sub-directory per writer under `<logdir>/tb/`.

`total` holds the job-wide series (accuracy, loss, phase, examples/s, bytes); `<group>` one per
group (examples/s, waiting, bytes, compression ratio, local iterations, loss). Written as
`simple_value` scalar events (`EventAccumulator.Scalars(tag)`), step = seconds of training
(wall time) x 1000, i.e. ms, so strategies with different step rates line up on one axis.
"""
from __future__ import annotations

import os
from typing import Mapping

from edgemesh_tf.mesh.compat import tf


class ScalarWriters:
    def __init__(self, logdir: str, groups):
        self.root = os.path.join(logdir, "tb")
        self.writers = {name: tf.summary.FileWriter(os.path.join(self.root, name))
                        for name in ["total", *groups]}

    def scalars(self, writer: str, values: Mapping[str, float], elapsed_s: float) -> None:
        summary = tf.Summary(value=[tf.Summary.Value(tag=tag, simple_value=float(v)) for tag, v in values.items()])
        self.writers[writer].add_summary(summary, global_step=int(round(elapsed_s * 1000)))

    def text(self, writer: str, tag: str, markdown: str, elapsed_s: float) -> None:
        """A text-plugin entry (markdown)."""
        from tensorboard.plugins.text import metadata  # only the chief needs the plugin module
        tensor = tf.make_tensor_proto([markdown], dtype=tf.string)
        meta = metadata.create_summary_metadata(display_name=tag, description="")
        summary = tf.Summary(value=[tf.Summary.Value(tag=tag, tensor=tensor, metadata=meta)])
        self.writers[writer].add_summary(summary, global_step=int(round(elapsed_s * 1000)))

    def flush(self) -> None:
        for w in self.writers.values():
            w.flush()

    def close(self) -> None:
        for w in self.writers.values():
            w.close()
