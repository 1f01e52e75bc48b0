"""The layout as a picture and a table: shares, FLOPs per device, markdown, PNG."""
import pytest

from edgemesh_tf.mesh.layout import Layout, single_device_layout
from edgemesh_tf.models import get_model
from edgemesh_tf.planner.model_stats import model_stats
from edgemesh_tf.summaries import layout_view

SPEC = get_model("vgg", (8, 8, 1), 10)
STATS = model_stats(SPEC, 32)
UNEVEN = Layout(mesh=(("model", 2),), devices=("/job:worker/task:0", "/job:worker/task:1"),
                rules=(("conv1", "model"), ("conv2", "model"), ("fc1", "model")),
                sizes=(("conv1", (20, 12)), ("conv2", (40, 24)), ("fc1", (80, 48))))
SINGLE = single_device_layout("/job:worker/task:2")


def test_shares_and_flops_follow_the_split():
    a, b = layout_view.device_shares(UNEVEN, STATS)
    assert a["conv1"] == pytest.approx(20 / 32) and b["conv2"] == pytest.approx(24 / 64)
    assert a["logits"] == b["logits"] == 1.0  # replicated
    whole = layout_view.flops_per_step(layout_view.device_shares(SINGLE, STATS)[0], STATS)
    assert whole == pytest.approx(3 * 32 * sum(d.flops for d in STATS.dims))
    split = [layout_view.flops_per_step(s, STATS) for s in (a, b)]
    logits = 3 * 32 * STATS.dim("logits").flops
    assert sum(split) == pytest.approx(whole + logits)  # every layer once, the replicated logits twice
    assert split[0] > split[1]


def test_table_and_picture():
    names = {"/job:worker/task:0": "edge0", "/job:worker/task:1": "edge1", "/job:worker/task:2": "edge2"}
    rows = layout_view.layout_rows([("g0", UNEVEN, STATS), ("edge2", SINGLE, STATS)], names,
                                   speeds={"edge0": 1.0, "edge1": 0.5},
                                   predicted={"edge0": {"memory_mib": 12.5, "step_ms": 30.0}},
                                   measured={"edge0": {"step_ms": 33.3}})
    table = layout_view.markdown_table(rows)
    assert "| conv1 | 62% | 38% | 100% |" in table
    assert "edge0 (g0)" in table and "12 / –" in table and "30.0 / 33.3" in table
    png = layout_view.render_png(rows)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


LAYERS = ("conv1", "conv2", "fc1", "logits")


def _rows(group, shares_per_device, start=0):
    """DeviceRows of one group; shares_per_device: one {layer: share} per device."""
    return [layout_view.DeviceRow(device="/d%d" % (start + i), name="dev%d" % (start + i), group=group,
                                  shares=dict(s), flops_per_step=1e9, speed=1.0)
            for i, s in enumerate(shares_per_device)]


def _even(n, layers=LAYERS):
    return _rows("g", [{l: 1.0 / n for l in layers}] * n)


def _png_size(png):
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


@pytest.mark.parametrize("n", [1, 4, 12])
def test_picture_is_700_px_wide_whatever_the_number_of_devices(n):
    assert _png_size(layout_view.render_png(_even(n)))[0] == 700


def test_picture_grows_taller_with_the_bars():
    few = _png_size(layout_view.render_png(_even(2)))[1]
    more_layers = _png_size(layout_view.render_png(_even(2, LAYERS + ("fc2", "fc3", "fc4"))))[1]
    more_groups = _png_size(layout_view.render_png(
        _rows("a", [{l: 0.5 for l in LAYERS}] * 2) + _rows("b", [{l: 1.0 for l in LAYERS}], start=2)))[1]
    assert more_layers > few + 50 and more_groups > few + 50


def test_uneven_split_gives_segments_of_the_shares():
    names = {"/job:worker/task:0": "edge0", "/job:worker/task:1": "edge1", "/job:worker/task:2": "edge2"}
    rows = layout_view.layout_rows([("g0", UNEVEN, STATS), ("edge2", SINGLE, STATS)], names)
    bars = layout_view.bar_segments(rows)
    assert [(b.group, b.layer) for b in bars] == [("g0", l) for l in rows[0].shares] + [("edge2", "all layers")]
    conv1 = bars[0]
    assert conv1.layer == "conv1" and conv1.note == ""
    assert [s.device for s in conv1.segments] == ["edge0", "edge1"]
    assert [s.width for s in conv1.segments] == pytest.approx([20 / 32, 12 / 32])
    assert sum(s.width for s in conv1.segments) == pytest.approx(1.0)
    assert [s.text for s in conv1.segments] == ["62%", "38%"]
    logits = next(b for b in bars if b.group == "g0" and b.layer == "logits")
    assert logits.segments == [(None, 1.0, "replicated on all 2")]
    assert bars[-1].segments == [("edge2", 1.0, "whole model on edge2")]  # a replica: one bar, not one per layer


def test_replicated_layer_is_one_grey_bar_not_300_percent():
    rows = _rows("g", [{"conv1": w, "logits": 1.0} for w in (0.5, 0.3, 0.2)])
    conv1, logits = layout_view.bar_segments(rows)
    assert len(conv1.segments) == 3
    assert logits.segments == [(None, 1.0, "replicated on all 3")] and logits.note == ""


def test_groups_keep_the_order_of_the_rows():
    rows = _rows("z", [{"conv1": 1.0}]) + _rows("a", [{"conv1": 0.5}] * 2, start=1)
    assert [b.group for b in layout_view.bar_segments(rows)] == ["z", "a"]


def test_narrow_segments_have_no_text():
    rows = _rows("g", [{"conv1": w} for w in (0.9, 0.05, 0.05)])
    (bar,) = layout_view.bar_segments(rows)
    assert [s.text for s in bar.segments] == ["90%", "", ""]
    rows = _rows("g", [{"conv1": w} for w in (0.84, 0.08, 0.08)])
    assert [s.text for s in layout_view.bar_segments(rows)[0].segments] == ["84%", "8%", "8%"]


def test_partly_replicated_layer_is_normalised_and_noted():
    # a 2 x 2 mesh (batch x model) with conv1 not split on "model": every device holds half of the batch
    rows = _rows("g", [{"conv1": 0.5}] * 4)
    (bar,) = layout_view.bar_segments(rows)
    assert [s.width for s in bar.segments] == pytest.approx([0.25] * 4)
    assert bar.note == "x2 replicated"
    assert _png_size(layout_view.render_png(rows))[0] == 700
