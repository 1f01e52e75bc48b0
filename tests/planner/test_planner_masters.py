"""Where the engine's master tensors live (mtf's placer replayed) and what a group moves for them per
commit; tests/training/test_master_placement.py checks the placement against a built graph."""
import pytest
from planner_util import device

from edgemesh_tf import layers as L
from edgemesh_tf.models.zoo import get_model
from edgemesh_tf.planner import cost, masters, model_stats


def test_tensors_are_listed_in_creation_order_with_the_dim_their_channels_follow():
    def fn(x, classes):
        h = L.batch_norm(L.conv2d(x, "c1", 4, activation="relu"), name="bn1")  # per channel: c1's dim
        h = L.add([h, L.conv2d(h, "c2", 4)], name="sum")                      # gathered whole: no dim
        h = L.batch_norm(h, name="bn2")
        return L.dense(L.flatten(h), "logits", classes)

    stats = model_stats(L.build_model(fn, (4, 4, 1), 3, name="m"), 2)
    got = [(t.name, t.nbytes, t.dim, t.kind) for t in stats.tensors]
    weights = [("c1/kernel", 4 * 9 * 4, "c1", "weight"), ("c1/bias", 16, "c1", "weight"),
               ("bn1/gamma", 16, "c1", "weight"), ("bn1/beta", 16, "c1", "weight"),
               ("bn1/moving_mean", 16, "c1", "state"), ("bn1/moving_variance", 16, "c1", "state"),
               ("c2/kernel", 4 * 9 * 4 * 4, "c2", "weight"), ("c2/bias", 16, "c2", "weight"),
               ("bn2/gamma", 16, None, "weight"), ("bn2/beta", 16, None, "weight"),
               ("bn2/moving_mean", 16, None, "state"), ("bn2/moving_variance", 16, None, "state"),
               ("logits/kernel", 4 * 64 * 3, "logits", "weight"), ("logits/bias", 12, "logits", "weight")]
    assert got == weights + [("momentum/" + n, b, d, "momentum") for n, b, d, k in weights if k == "weight"]
    assert sum(t.nbytes for t in stats.tensors if t.kind != "momentum") == stats.param_bytes


def test_placement_is_greedy_by_bytes_in_creation_order_ties_to_the_smallest_device_string():
    assert masters.placed_ranks((10, 1, 1, 1, 20), 2) == (0, 1, 1, 1, 1)
    assert masters.placed_ranks((5, 5, 5), 3) == (0, 1, 2)
    # ranks are device strings in order, whatever the group's order
    a, b = device("a", {}, task=1), device("b", {}, task=0)
    stats = model_stats(get_model("vgg", (8, 8, 1), 10), 4)
    assert masters.master_devices([a, b], stats)[0] == 1 and masters.master_devices([b, a], stats)[0] == 0


def test_a_model_whose_bytes_sit_in_one_tensor_syncs_at_that_tensor_s_pace_not_a_kth_of_the_model():
    """vgg_wide's fc2 kernel is 88% of its 19 MB: split over three devices, the one that masters it pushes and
    pulls it alone, over its own link (here 200 Mbit/s, the parameter server's link faster)."""
    stats = model_stats(get_model("vgg_wide", (8, 8, 1), 10), 8)
    group = [device(n, {}, bw=200.0, lat=0.5, task=i) for i, n in enumerate(("e1", "e2", "e3"))]
    pushed = masters.pushed_bytes(group, stats)
    assert sum(pushed) == stats.param_bytes
    assert max(pushed) > 0.85 * stats.param_bytes
    assert cost.ps_sync_ms(group, stats, 1000.0) == pytest.approx(2 * max(pushed) * 8 / 200e3 + 2 * 0.5)
    assert cost.ps_sync_ms(group, stats, 1000.0) > 2.5 * (2 * stats.param_bytes / 3 * 8 / 200e3)
    # one device: the whole model, nothing copied
    assert masters.pushed_bytes(group[:1], stats) == [stats.param_bytes]
    assert masters.copied_bytes(group[:1], stats, {}) == ([0.0], [0.0])


def test_a_split_weight_s_master_sends_each_device_its_share_and_a_replicated_one_the_whole():
    stats = model_stats(get_model("vgg_wide", (8, 8, 1), 10), 8)
    group = [device(n, {}, task=i) for i, n in enumerate(("e1", "e2", "e3"))]
    fc2 = {t.name: (t, m) for t, m in zip(stats.tensors, masters.master_devices(group, stats))}
    (kernel, m), (slot, m_slot) = fc2["fc2/kernel"], fc2["momentum/fc2/kernel"]
    assert m != m_slot  # the weight and its momentum slot land on different devices
    units = stats.dim("fc2").units
    shares = (units - 2 * (units // 4), units // 4, units // 4)
    split, _ = masters.copied_bytes(group, stats, {"fc2": shares})
    whole, received = masters.copied_bytes(group, stats, {})
    # the weight's master sends the others' shares of it; with fc2 replicated it sends it to both whole
    others = sum(s for i, s in enumerate(shares) if i != m) / units
    assert whole[m] - split[m] == pytest.approx(kernel.nbytes * (2 - others), rel=1e-9)
    assert sum(whole) == sum(received) == pytest.approx(2 * stats.param_bytes)  # momentum stays in the slices
