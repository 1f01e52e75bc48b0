"""Model sizes and the cost model's formulas, checked by hand on small numbers."""
import subprocess
import sys

import pytest
from planner_util import device
from specs import sequential

from edgemesh_tf import layers as L
from edgemesh_tf.layers import model_from_dict
from edgemesh_tf.models.zoo import get_model
from edgemesh_tf.planner import model_stats, predict
from edgemesh_tf.planner import cost, masters, memory


def test_vgg_sizes():
    stats = model_stats(get_model("vgg", (32, 32, 3), 10), batch=32)
    by = {d.name: d for d in stats.dims}
    assert [d.name for d in stats.dims] == ["conv1", "conv2", "conv3", "conv4", "conv5", "fc1", "logits"]
    conv1 = by["conv1"]
    assert (conv1.params_per_unit, conv1.in_bytes, conv1.out_bytes) == (9 * 3 + 1, 0, 4 * 32 * 32 * 32)
    assert by["conv2"].out_bytes == 4 * 16 * 16 * 32 and by["conv2"].in_bytes == 4 * 32 * 32 * 32  # pooled
    assert by["conv2"].flops == 2 * 9 * 32 * 32 * 32 * 32 + 4 * 16 * 16 * 32  # the conv + its 2x2 max-pool
    assert by["fc1"].in_bytes == 4 * 4 * 4 * 128 and by["fc1"].params_per_unit == 4 * 4 * 128 + 1  # flattened
    assert by["logits"].params_per_unit == 257 and by["logits"].out_bytes == 40
    assert stats.param_bytes == 4 * sum(d.params_per_unit * d.units for d in stats.dims)
    assert stats.image_bytes == 4 * 32 * 32 * 3


def test_res_block_has_two_dims():
    stats = model_stats(get_model("resnet", (8, 8, 1), 10), batch=4)
    names = [d.name for d in stats.dims]
    assert names[:3] == ["stem", "res1a", "res1b"]
    assert stats.dim("res1b").params_per_unit == 9 * 32 + 1 and stats.dim("res1b").in_bytes == 4 * 8 * 8 * 32
    # A residual add of tensors of different shapes (1 input channel, 8 filters) is refused, naming the layer:
    # when the model function is traced ...
    def bad(x, classes):
        h = L.conv2d(x, "ra", 8, activation="relu")
        x = L.add([x, h], name="r_add")
        return L.dense(L.flatten(x), "logits", classes)

    with pytest.raises(ValueError, match=r"layer 'r_add' \(add\): needs two or more inputs of one shape, "
                                         r"got \[\(8, 8, 1\), \(8, 8, 8\)\]"):
        L.build_model(bad, (8, 8, 1), 2, name="bad")
    # ... and when a saved model holding one is loaded (the old res block of 8 units on a 1-channel image):
    # a res block made for 8-channel inputs, its image changed to 1 channel; its convs keep 8 filters
    saved = sequential("bad", (8, 8, 8), 2, [("res", "r"), ("dense", "logits", 2, False)]).to_dict()
    saved["image_shape"] = [8, 8, 1]
    with pytest.raises(ValueError, match=r"model 'bad', layer 'r_add' \(add\): needs two or more inputs of one "
                                         r"shape, got \[\(8, 8, 1\), \(8, 8, 8\)\]"):
        model_stats(model_from_dict(saved), 4)


def test_step_memory_and_sync_by_hand(monkeypatch):
    monkeypatch.setattr(cost, "MEMORY", memory.COUNTED)  # the plain count, by hand below (the shipped fit differs)
    # Two dense layers of 4 units; fc flattens the 8x8x1 image (64 features); 4 output bytes per unit.
    spec = sequential("m", (8, 8, 1), 4, [("dense", "fc", 4), ("dense", "out", 4, False)])
    stats = model_stats(spec, batch=10)
    a = device("a", {"fc": 40.0, "out": 2.0}, bw=8.0, lat=1.0, overhead=3.0, task=0)   # 8 Mbit/s = 1000 bytes/ms
    b = device("b", {"fc": 80.0, "out": 4.0}, bw=16.0, lat=2.0, overhead=5.0, task=1)  # 2000 bytes/ms
    p = predict([a, b], stats, {"fc": (3, 1)}, profile_batch=20)  # batch 10 of a profile at 20: half the ms
    fc, out = p.layers
    assert fc.compute_ms == pytest.approx((20 * 3 / 4, 40 * 1 / 4)) and out.compute_ms == (1.0, 2.0)
    # gather: 10 ex * 4 bytes * the busier direction of the device's own link (1000 and 2000 bytes/ms):
    # a receives b's 1 unit and sends its 3 to b, b receives 3 and sends 1
    # + 1 hop * (1 + 2) ms (a device-to-device path crosses both devices' links)
    gather = (3 + 10 * 4 * 3 / 1000, 3 + 10 * 4 * 3 / 2000)
    # fc's input is the image: nothing to allreduce
    assert fc.comm_ms == pytest.approx(max(gather))
    # base: per device 2 * round trip + its input batch (10 * 256 image bytes) over its own link
    base = max(2 * 3.0 + 10 * 256 / 1000, 2 * 5.0 + 10 * 256 / 2000)
    assert p.separable_ms == pytest.approx(max(15, 10) + max(gather) + 2.0 + base)
    assert p.step_ms <= p.separable_ms  # the simulation only removes waiting the bound counts
    assert p.comm_ms == pytest.approx(gather)
    # the masters as mtf's placer puts them, in creation order (a = task 0 takes ties): fc/kernel (1024 bytes)
    # -> a; fc/bias (16), out/kernel (64), out/bias (16) -> b; their momentum slots: fc/kernel's (1024) -> b,
    # the other three -> a. Each device pushes and pulls the weights it masters over its own link:
    # a 1024 bytes at 1000 bytes/ms, b 96 at 2000
    assert masters.pushed_bytes([a, b], stats) == [1024, 96]
    # memory: 3 copies * 4 bytes * params + batch * (image + inputs + own outputs), and the whole tensors
    # each device holds: its masters (a: 1024 + 96 = 1120 bytes, b: 96 + 1024) + an engine replica's anchor
    # and residual of the weights it masters (a: 2 * 1024, b: 2 * 96)
    acts = 10 * (4 * 64 + 4 * 4)  # image + out's input (fc's gathered output)
    assert p.memory_bytes == (acts + 1120 + 2 * 1024 + 12 * 65 * 3 + 10 * 4 * 3 + 12 * 5 * 4 + 10 * 16,
                              acts + 1120 + 2 * 96 + 12 * 65 * 1 + 10 * 4 * 1 + 12 * 5 * 4 + 10 * 16)
    # the same devices the other way round: the masters follow the TF device strings, not the group's order
    assert predict([b, a], stats, {"fc": (1, 3)}, profile_batch=20).memory_bytes == p.memory_bytes[::-1]
    assert p.ps_sync_ms == pytest.approx(2 * max(1024 / 1000, 96 / 2000) + 2 * 2.0)
    # a round's copies of the weights between masters and slices (momentum stays in the slices): a master
    # sends each other device its share of a split tensor (fc's: a holds 3 of 4 units) and a replicated
    # tensor whole (out's). a sends b 1/4 of fc/kernel: 256 bytes; b sends a 3/4 of fc/bias and out's two
    # tensors whole: 12 + 64 + 16 = 92. b receives 256 at 2000 bytes/ms, a sends them at 1000: each copy
    # 0.256 ms, + a hop over both links (2 * 2 ms); paid twice
    assert masters.copied_bytes([a, b], stats, {"fc": (3, 1)}) == ([256, 92], [92, 256])
    assert p.copy_ms == pytest.approx(2 * (256 / 1000 + 2 * 2.0))
    # nothing split: every tensor goes whole to the other device (a sends 1024 bytes, b 96)
    assert predict([a, b], stats, {}, profile_batch=20).copy_ms == pytest.approx(2 * (1024 / 1000 + 2 * 2.0))
    assert predict([a], stats, {}, profile_batch=20).copy_ms == 0.0


def test_allreduce_of_input_gradient():
    spec = sequential("m", (8, 8, 1), 4, [("dense", "fc", 4), ("dense", "out", 4, False)])
    stats = model_stats(spec, batch=10)
    devs = [device("d%d" % i, {"fc": 1.0, "out": 1.0}, bw=8.0, lat=1.0, overhead=0.0, task=i) for i in range(2)]
    out = predict(devs, stats, {"out": (2, 2)}).layers[1]
    # reduce-scatter: (k-1)/k * bytes / bw_min + one direct hop of (1 + 1) ms
    reduce_ms = 1 / 2 * 10 * 16 / 1000 + 2.0
    gather = 2.0 + 10 * 4 * 2 / 1000
    assert out.comm_ms == pytest.approx(gather + reduce_ms)


def test_gather_and_reduce_scatter_charge_the_owners_uplink():
    """Three devices: a large share's owner sends it to both peers (its uplink is the gather's
    bottleneck); the reduce-scatter to uneven shares: the owner receives two partial sums of it."""
    spec = sequential("m", (8, 8, 1), 4, [("dense", "fc", 8), ("dense", "out", 4, False)])
    stats = model_stats(spec, batch=10)
    devs = [device("d%d" % i, {"fc": 1.0, "out": 1.0}, bw=8.0, lat=1.0, overhead=0.0, task=i) for i in range(3)]
    fc, out = predict(devs, stats, {"fc": (6, 1, 1), "out": (2, 1, 1)}).layers
    unit = 10 * 4 / 1000  # ms per unit of fc's output (10 examples * 4 bytes at 1000 bytes/ms)
    assert fc.comm_ms == pytest.approx(2.0 + 2 * 6 * unit)  # d0 sends 6 units twice; receives only 2
    # out's gather (2, 1, 1): d0 sends its 2 units twice (4 units), d1 and d2 receive 3
    # out's input gradient, fc's whole output (8 units, 8 * unit ms over a link), to fc's shares:
    # d0 receives 2 partial sums of its 6 units and sends its partial sums of the other 2
    assert out.comm_ms == pytest.approx(2.0 + 4 * unit + 2.0 + 8 * unit * max(2 * 6, 8 - 6) / 8)
    # fc split (3, 3, 2): d0 and d1 receive 2 * 3, d2 sends the others 6
    even = predict(devs, stats, {"fc": (3, 3, 2), "out": (2, 1, 1)}).layers[1]
    assert even.comm_ms == pytest.approx(2.0 + 4 * unit + 2.0 + 8 * unit * 6 / 8)


def test_bad_assignment_and_profile_are_named():
    spec = sequential("m", (8, 8, 1), 4, [("dense", "fc", 4)])
    stats = model_stats(spec, batch=2)
    devs = [device("d%d" % i, {"fc": 1.0}, task=i) for i in range(2)]
    with pytest.raises(ValueError, match=r"shares of 'fc' must be 2 positive integers adding up to 4, got \[3, 0\]"):
        predict(devs, stats, {"fc": (3, 0)})
    with pytest.raises(ValueError, match="unknown dim"):
        predict(devs, stats, {"fc2": None})
    with pytest.raises(ValueError, match=r"device slow: bandwidth_mbit must be a number > 0 \(Mbit/s\), got 0.0"):
        predict([devs[0], device("slow", {"fc": 1.0}, bw=0)], stats, {})
    with pytest.raises(ValueError, match="device d1 has no timing for layer 'fc'|profile of device d1 has no timing"):
        predict([devs[0], device("d1", {"other": 1.0})], stats, {})


@pytest.mark.subprocess
def test_planner_does_not_import_tensorflow():
    code = "import sys, edgemesh_tf.planner, edgemesh_tf.cli.plan; sys.exit('tensorflow' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
