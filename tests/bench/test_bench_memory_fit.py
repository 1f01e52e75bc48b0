"""bench/memory_fit.py's report (pure): the fit of measured peaks, each point's predictions, the
error on a model left out of the fit."""
from bench_modules import load

from edgemesh_tf.models import get_model
from edgemesh_tf.planner import memory
from edgemesh_tf.planner.model_stats import model_stats

memory_fit = load("memory_fit")
TRUE = memory.MemoryModel(60 * 2 ** 20, 4.0, 2.0, 2.5)


def _points():
    out = []
    for name in ("vgg", "vgg_wide", "vgg16"):
        for b in (8, 32):
            stats = model_stats(get_model(name, (32, 32, 3), 10), b)
            for k in (1, 2, 4):
                for i in range(k):
                    held = [d.units if d.units < k else d.units // k for d in stats.dims]
                    out.append((name, stats, held, TRUE.device_bytes(stats, held, k, rank=i), k, i))
    return out


def test_report_fits_exact_points_and_predicts_a_left_out_model():
    out = memory_fit.report(_points(), ["vgg", "vgg_wide", "vgg16"])
    assert out["fitted_max_abs_rel_error"] <= 0.001 and out["within_15pct"]
    assert out["counted_max_abs_rel_error"] > 0.3  # the plain count misses the runtime and the factors
    assert all(e <= 0.001 for e in out["left_out_model_max_abs_rel_error"].values())
    row = out["points"][0]
    assert set(row) == {"model", "batch", "ways", "device", "measured_mib", "fitted_mib", "counted_mib"}
    assert len(out["points"]) == 3 * 2 * (1 + 2 + 4)


def test_report_fits_the_replica_terms_and_its_error_counts_in_the_headroom():
    import dataclasses

    true = dataclasses.replace(TRUE, replica_factor=1.5, replica_split_bytes=80 * 2 ** 20)
    replicas = [(m, s, h, true.device_bytes(s, h, k, True, i), k, i) for m, s, h, _, k, i in _points()]
    out = memory_fit.report(_points(), ["vgg", "vgg_wide", "vgg16"], replicas=replicas)
    assert abs(out["model"]["replica_factor"] - 1.5) < 1e-3 and out["replica_max_abs_rel_error"] <= 0.001
    assert len(out["replicas"]) == len(replicas) and out["model"]["fit_error"] <= 0.001
    off = [(m, s, h, p * (1.3 if k == 4 else 1.0), k, i) for m, s, h, p, k, i in replicas]  # four-way peaks 30% over
    worse = memory_fit.report(_points(), ["vgg", "vgg_wide", "vgg16"], replicas=off)
    assert worse["fitted_max_abs_rel_error"] == worse["replica_max_abs_rel_error"] > 0.05
    # the headroom covers every measured peak: the largest under-prediction, not the largest |error|
    fitted = memory.MemoryModel(**worse["model"])
    ratios = [p / fitted.device_bytes(s, h, k, True, i) for _, s, h, p, k, i in off]
    assert fitted.fit_error == worse["fitted_max_under_prediction"]
    assert max(ratios) - 1 <= fitted.fit_error < max(ratios) - 1 + 0.001 and fitted.fit_error > 0.05
    assert all(r <= fitted.headroom for r in ratios)
    # per model: each model's own largest under-prediction covers its peaks
    errors = dict(fitted.model_errors)
    assert set(errors) == {"vgg", "vgg_wide", "vgg16"} and max(errors.values()) == fitted.fit_error
    for m in errors:
        own = [p / fitted.device_bytes(s, h, k, True, i) for name, s, h, p, k, i in off if name == m]
        assert max(own) <= fitted.headroom_for(m) < max(own) + 0.001
    # one model's peaks over its fit widen its own headroom and the fallback's, not another measured model's
    one = [(m, s, h, p * (1.3 if k == 4 and m == "vgg_wide" else 1.0), k, i) for m, s, h, p, k, i in replicas]
    errors = dict(memory_fit.report(_points(), ["vgg", "vgg_wide", "vgg16"], replicas=one)["model"]["model_errors"])
    assert errors["vgg_wide"] > 0.05 and errors["vgg_wide"] > 2 * errors["vgg16"]


def test_a_recorded_run_is_refitted_from_its_rows():
    """``--refit``: an earlier run's rows give back each point's model, units held and rank, so the same
    measurements fit a changed memory model without measuring again."""
    from edgemesh_tf.mesh.layout import even_split_layout

    points = []  # as measure() holds them: each dim split as evenly as integers allow
    for name, stats, _, _, k, i in _points():
        spec = get_model(name, (32, 32, 3), 10)
        held = memory_fit._held(stats, even_split_layout(spec.split_dims(), ["w%d" % j for j in range(k)])[1]
                                if k > 1 else {}, i)
        points.append((name, stats, held, TRUE.device_bytes(stats, held, k, rank=i), k, i))
    out = memory_fit.report(points, ["vgg", "vgg_wide", "vgg16"])
    for row in out["points"]:
        row["simd_bits"] = 512
    again, sessions, replicas, bits, _ = memory_fit.recorded({"dataset": "cifar10", "steps": 10, **out})
    assert not sessions and not replicas and bits == [512] * len(points)
    assert [(m, h, k, i) for m, _, h, _, k, i in again] == [(m, h, k, i) for m, _, h, _, k, i in points]
    assert all(abs(p - q) <= 0.05 * 2 ** 20 for (*_, p, _, _), (*_, q, _, _) in zip(again, points))
    refit = memory_fit.report(again, ["vgg", "vgg_wide", "vgg16"])["model"]
    assert abs(refit["master_factor"] - TRUE.master_factor) < 0.01 and abs(refit["weight_factor"] - 4.0) < 0.01
