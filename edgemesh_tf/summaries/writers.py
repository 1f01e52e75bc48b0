"""TensorBoard event files of a job: one run sub-directory per writer under `<logdir>/tb/`.

Writers: `total` (job-wide series, the layout picture and table, phase switches, hparams), one per
group and one per device (a single-device group shares its device's writer). Scalars are
`simple_value` events (`EventAccumulator.Scalars(tag)`); their step is milliseconds of training
time, so strategies with different step rates line up on one axis.
"""
from __future__ import annotations

import os
import sys
from typing import Mapping, Sequence

from edgemesh_tf.mesh.compat import tf


def tensorboard_command(logdir: str) -> str:
    """The command that shows `<logdir>/tb`: the `tensorboard` installed beside this Python (a venv's
    bin/, which is not on PATH unless the venv is activated) when there is one, else from PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "tensorboard")
    return "%s --logdir %s" % (beside if os.path.exists(beside) else "tensorboard", os.path.join(logdir, "tb"))


def _step(elapsed_s: float) -> int:
    return int(round(elapsed_s * 1000))


class Writers:
    def __init__(self, logdir: str, runs: Sequence[str]):
        self.root = os.path.join(logdir, "tb")
        self.writers = {}
        for name in ["total", *runs]:
            if name not in self.writers:
                self.writers[name] = tf.summary.FileWriter(os.path.join(self.root, name))

    def scalars(self, writer: str, values: Mapping[str, float], elapsed_s: float) -> None:
        summary = tf.Summary(value=[tf.Summary.Value(tag=tag, simple_value=float(v)) for tag, v in values.items()])
        self.writers[writer].add_summary(summary, global_step=_step(elapsed_s))

    def text(self, writer: str, tag: str, markdown: str, elapsed_s: float) -> None:
        """A text-plugin entry (markdown)."""
        from tensorboard.plugins.text import metadata
        tensor = tf.make_tensor_proto(markdown, dtype=tf.string)  # rank 0: rendered as one markdown document
        meta = tf.SummaryMetadata.FromString(  # tensorboard's own proto class: convert through bytes
            metadata.create_summary_metadata(display_name=tag, description="").SerializeToString())
        summary = tf.Summary(value=[tf.Summary.Value(tag=tag, tensor=tensor, metadata=meta)])
        self.writers[writer].add_summary(summary, global_step=_step(elapsed_s))

    def image(self, writer: str, tag: str, png: bytes, width: int, height: int, elapsed_s: float) -> None:
        image = tf.Summary.Image(height=height, width=width, colorspace=4, encoded_image_string=png)
        self.writers[writer].add_summary(tf.Summary(value=[tf.Summary.Value(tag=tag, image=image)]),
                                         global_step=_step(elapsed_s))

    def custom_scalars(self, categories: Mapping[str, Mapping[str, Sequence[str]]]) -> None:
        """One custom-scalars dashboard: {category: {chart title: [tag regexes]}}; a chart shows every
        run's series of the matching tags, so per-device tags give one line per device."""
        from tensorboard.plugins.custom_scalar import layout_pb2, summary as cs_summary
        layout = layout_pb2.Layout(category=[
            layout_pb2.Category(title=title, chart=[
                layout_pb2.Chart(title=chart, multiline=layout_pb2.MultilineChartContent(tag=list(tags)))
                for chart, tags in charts.items()])
            for title, charts in categories.items()])
        self.writers["total"].add_summary(cs_summary.pb(layout).SerializeToString())

    def hparams(self, writer: str, hparams: Mapping[str, object], metrics: Mapping[str, float],
                elapsed_s: float) -> None:
        """The hparams plugin's session record for this run, with its final metrics as scalars."""
        from tensorboard.plugins.hparams import summary as hp_summary
        w = self.writers[writer]
        w.add_summary(hp_summary.session_start_pb(hparams=dict(hparams)).SerializeToString())
        self.scalars(writer, metrics, elapsed_s)
        w.add_summary(hp_summary.session_end_pb(1).SerializeToString())  # api_pb2.STATUS_SUCCESS

    def flush(self) -> None:
        for w in self.writers.values():
            w.flush()

    def close(self) -> None:
        for w in self.writers.values():
            w.close()
