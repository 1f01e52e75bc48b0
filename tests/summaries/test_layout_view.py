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
