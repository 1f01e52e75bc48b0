"""The figures of bench/edgemesh_claims.py computed from its record (pure, no TensorFlow): the issue's
checks, a named option's figures beside them, and the bounds that say why a check is out of reach.
The benchmark writes them into its record and the report (bench/report_claims.py) reads the same functions."""
from __future__ import annotations

import statistics

THRESHOLDS = {"delay_mean_alone_over_hybrid": 3.2, "delay_fastest_alone_over_hybrid": 1.5,
              "delay_data_parallel_over_hybrid": 1.3, "hybrid_over_sum_of_alone_throughput": 0.75,
              "hybrid_max_peak_over_alone_peak": 0.57, "prediction_max_error": 0.15}
AT_MOST = ("hybrid_max_peak_over_alone_peak", "prediction_max_error")  # the other checks are lower bounds
PREDICTED_LAYOUTS = ("filter_split", "hybrid", "even", "memory_capped")  # plans whose predicted steps are checked


def alone_figures(out: dict) -> tuple:
    """(modes, {device: ms per example} of the devices timed alone, the largest peak alone or None,
    {device: profiled speed} or {}, the hybrid's record or {}) (pure)."""
    m = out["modes"]
    alone = {k.split(":", 1)[1]: v for k, v in m.items() if k.startswith("alone:")}
    delays = {n: v["ms_per_example"] for n, v in alone.items() if "ms_per_example" in v}
    peaks = [max(v["peak_bytes"].values()) for v in alone.values() if "peak_bytes" in v]
    return m, delays, max(peaks, default=None), out.get("profiled_speed") or {}, m.get("hybrid", {})


def _rounded(got: dict) -> dict:
    """Every figure as a plain float to 3 decimals (figures may come as numpy scalars), names as they are."""
    return {k: v if isinstance(v, str) else round(float(v), 3) for k, v in got.items()}


def claims(out: dict) -> dict:
    """The issue's checks from the measured delays (ms/example) and peaks (pure)."""
    m, alone, peak_alone, _, hybrid_rec = alone_figures(out)
    checks, hybrid, dp = {}, hybrid_rec.get("ms_per_example"), m.get("data_parallel", {}).get("ms_per_example")
    if hybrid and alone:
        checks = {"delay_mean_alone_over_hybrid": statistics.mean(alone.values()) / hybrid,
                  "delay_fastest_alone_over_hybrid": min(alone.values()) / hybrid,
                  "hybrid_over_sum_of_alone_throughput": (1 / hybrid) / sum(1 / v for v in alone.values())}
        if dp:
            checks["delay_data_parallel_over_hybrid"] = dp / hybrid
    if hybrid_rec.get("peak_bytes") and peak_alone:
        checks["hybrid_max_peak_over_alone_peak"] = max(hybrid_rec["peak_bytes"].values()) / peak_alone
    ratios = prediction_ratios(out)
    if ratios:
        checks["prediction_max_error"] = max(abs(r - 1.0) for r in ratios.values())
    checks = {k: float(v) for k, v in checks.items()}  # plain floats: figures may come as numpy scalars
    return {k: {"value": round(v, 3), "threshold": THRESHOLDS[k], "at_most": k in AT_MOST,
                "pass": v <= THRESHOLDS[k] if k in AT_MOST else v >= THRESHOLDS[k]} for k, v in checks.items()}


def option_figures(out: dict, mode: str) -> dict:
    """A named option's mode beside the planned hybrid (pure): its max and mean peak over the
    largest peak alone, the fastest alone's delay over its delay, and its delay over the hybrid's."""
    m, alone, peak_alone, _, hybrid = alone_figures(out)
    rec, fastest = m.get(mode, {}), min(alone.values(), default=None)
    got = {"out_of_memory": rec["out_of_memory"]} if rec.get("out_of_memory") else {}
    if rec.get("peak_bytes") and peak_alone:
        got.update(max_peak_over_alone_peak=max(rec["peak_bytes"].values()) / peak_alone,
                   mean_peak_over_alone_peak=statistics.mean(rec["peak_bytes"].values()) / peak_alone)
    if rec.get("ms_per_example") and fastest:
        got["delay_fastest_alone_over_it"] = fastest / rec["ms_per_example"]
    if rec.get("ms_per_example") and hybrid.get("ms_per_example"):
        got["delay_over_hybrid"] = rec["ms_per_example"] / hybrid["ms_per_example"]
    return _rounded(got)


def compute_bound(out: dict) -> dict | None:
    """What no division can beat (pure): with every worker's compute used in full and no communication,
    delay per example = the fastest alone's / (sum of the profiled speeds relative to the fastest)."""
    _, alone, _, speeds, hybrid = alone_figures(out)
    if not speeds or not alone:
        return None
    bound_ms = min(alone.values()) / sum(speeds.values())
    return _rounded({"speed_sum": sum(speeds.values()), "fastest_over_bound": min(alone.values()) / bound_ms,
                     "mean_over_bound": statistics.mean(alone.values()) / bound_ms,
                     **({"hybrid_share_of_bound": bound_ms / hybrid["ms_per_example"]}
                        if hybrid.get("ms_per_example") else {})})


def plan_devices(out: dict) -> list[str]:
    """The devices of the planned hybrid's groups, in order."""
    return [n for g in (out.get("hybrid_plan") or {}).get("groups", []) for n in g["devices"]]


def data_parallel_bound(out: dict) -> dict | None:
    """The hybrid and synchronous data parallelism each against its compute bound (pure): the bounds' ratio,
    the share of its bound each reached, and the hybrid's share at which data parallelism as measured
    would be the threshold's times slower ("hybrid_share_needed"); None without the figures."""
    m, alone, _, speeds, hybrid = alone_figures(out)
    dp, on = m.get("data_parallel", {}), plan_devices(out)
    if not (alone and dp.get("ms_per_example") and hybrid.get("ms_per_example") and on and dp.get("devices")
            and all(n in speeds for n in on + dp["devices"])):
        return None
    dp_sum, hy_sum = sum(speeds[n] for n in dp["devices"]), sum(speeds[n] for n in on)
    dp_share = min(alone.values()) / dp_sum / dp["ms_per_example"]
    return _rounded({"data_parallel_speed_sum": dp_sum, "hybrid_speed_sum": hy_sum, "ratio_at_bounds": hy_sum / dp_sum,
                     "data_parallel_share_of_bound": dp_share,
                     "hybrid_share_of_bound": min(alone.values()) / hy_sum / hybrid["ms_per_example"],
                     "hybrid_share_needed": THRESHOLDS["delay_data_parallel_over_hybrid"] * dp_share * dp_sum / hy_sum})


def memory_spread(out: dict) -> dict | None:
    """Where the hybrid's largest peak is (pure): the device, its peak and the mean over the largest
    alone, and its share of the plan's profiled speed (of each layer, by time); None without peaks."""
    _, _, peak_alone, speeds, hybrid = alone_figures(out)
    peaks, on = hybrid.get("peak_bytes"), plan_devices(out)
    if not peaks or not peak_alone:
        return None
    top = max(peaks, key=peaks.get)
    return _rounded({"max_device": top, "max_peak_over_alone_peak": peaks[top] / peak_alone,
                     "mean_peak_over_alone_peak": statistics.mean(peaks.values()) / peak_alone,
                     **({"max_device_speed_share": speeds[top] / sum(speeds[n] for n in on)}
                        if top in speeds and on else {})})


def prediction_ratios(out: dict, field: str = "predicted_over_measured") -> dict[str, float]:
    """{layout: predicted / measured step} of every planned and even group and every device alone
    that was timed (pure); field "uncalibrated_over_measured": by the layer times as measured."""
    got = {f"{m}[{','.join(g['devices'])}]": g[field] for m in PREDICTED_LAYOUTS
           for g in (out.get(f"{m}_plan") or {}).get("groups", []) if field in g}
    return {**got, **{k: v[field] for k, v in out["modes"].items() if k.startswith("alone:") and field in v}}
