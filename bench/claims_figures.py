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


def alone_figures(modes: dict) -> tuple[dict[str, float], int | None]:
    """({device: ms per example} of the devices timed alone, the largest peak alone or None) (pure)."""
    alone = {k.split(":", 1)[1]: v for k, v in modes.items() if k.startswith("alone:")}
    delays = {n: v["ms_per_example"] for n, v in alone.items() if "ms_per_example" in v}
    peaks = [max(v["peak_bytes"].values()) for v in alone.values() if "peak_bytes" in v]
    return delays, max(peaks, default=None)


def claims(out: dict) -> dict:
    """The issue's checks from the measured delays (ms/example) and peaks (pure)."""
    m = out["modes"]
    alone, peak_alone = alone_figures(m)
    checks = {}
    hybrid = m.get("hybrid", {}).get("ms_per_example")
    if hybrid and alone:
        checks["delay_mean_alone_over_hybrid"] = statistics.mean(alone.values()) / hybrid
        checks["delay_fastest_alone_over_hybrid"] = min(alone.values()) / hybrid
        checks["hybrid_over_sum_of_alone_throughput"] = (1 / hybrid) / sum(1 / v for v in alone.values())
        if m.get("data_parallel", {}).get("ms_per_example"):
            checks["delay_data_parallel_over_hybrid"] = m["data_parallel"]["ms_per_example"] / hybrid
    if m.get("hybrid", {}).get("peak_bytes") and peak_alone:
        checks["hybrid_max_peak_over_alone_peak"] = max(m["hybrid"]["peak_bytes"].values()) / peak_alone
    ratios = prediction_ratios(out)
    if ratios:
        checks["prediction_max_error"] = max(abs(r - 1.0) for r in ratios.values())
    checks = {k: float(v) for k, v in checks.items()}  # plain floats: figures may come as numpy scalars
    return {k: {"value": round(v, 3), "threshold": THRESHOLDS[k], "at_most": k in AT_MOST,
                "pass": v <= THRESHOLDS[k] if k in AT_MOST else v >= THRESHOLDS[k]}
            for k, v in checks.items()}


def option_figures(out: dict, mode: str) -> dict:
    """A named option's mode beside the planned hybrid (pure): its max and mean peak over the
    largest peak alone, the fastest alone's delay over its delay, and its delay over the hybrid's."""
    m = out["modes"]
    rec, hybrid = m.get(mode, {}), m.get("hybrid", {})
    alone, peak_alone = alone_figures(m)
    fastest = min(alone.values(), default=None)
    got = {"out_of_memory": rec["out_of_memory"]} if rec.get("out_of_memory") else {}
    if rec.get("peak_bytes") and peak_alone:
        got["max_peak_over_alone_peak"] = max(rec["peak_bytes"].values()) / peak_alone
        got["mean_peak_over_alone_peak"] = statistics.mean(rec["peak_bytes"].values()) / peak_alone
    if rec.get("ms_per_example"):
        if fastest:
            got["delay_fastest_alone_over_it"] = fastest / rec["ms_per_example"]
        if hybrid.get("ms_per_example"):
            got["delay_over_hybrid"] = rec["ms_per_example"] / hybrid["ms_per_example"]
    return {k: v if isinstance(v, str) else round(float(v), 3) for k, v in got.items()}


def compute_bound(out: dict) -> dict | None:
    """What no division can beat (pure): with every worker's compute used in full and no communication,
    delay per example = the fastest alone's / (sum of the profiled speeds relative to the fastest).
    {"speed_sum", "fastest_over_bound", "mean_over_bound", "hybrid_share_of_bound"}."""
    speeds, m = out.get("profiled_speed"), out["modes"]
    alone = alone_figures(m)[0]
    if not speeds or not alone:
        return None
    fastest = min(alone.values())
    bound_ms = fastest / sum(speeds.values())
    got = {"speed_sum": round(sum(speeds.values()), 3), "fastest_over_bound": round(fastest / bound_ms, 3),
           "mean_over_bound": round(statistics.mean(alone.values()) / bound_ms, 3)}
    if m.get("hybrid", {}).get("ms_per_example"):
        got["hybrid_share_of_bound"] = round(bound_ms / m["hybrid"]["ms_per_example"], 3)
    return got


def plan_devices(out: dict) -> list[str]:
    """The devices of the planned hybrid's groups, in order."""
    return [n for g in (out.get("hybrid_plan") or {}).get("groups", []) for n in g["devices"]]


def data_parallel_bound(out: dict) -> dict | None:
    """Why the hybrid's lead over synchronous data parallelism is what it is (pure): each one's compute
    bound (the fastest alone's delay over the sum of its devices' profiled speeds), the share of it
    each reached, and the hybrid's share at which data parallelism as measured would be the
    threshold's times slower ("hybrid_share_needed"); None without the figures."""
    speeds, m = out.get("profiled_speed"), out["modes"]
    alone, dp, hybrid = alone_figures(m)[0], m.get("data_parallel", {}), m.get("hybrid", {})
    on, dp_on = plan_devices(out), dp.get("devices", [])
    if not (alone and dp.get("ms_per_example") and hybrid.get("ms_per_example") and on and dp_on
            and all(n in (speeds or {}) for n in on + dp_on)):
        return None
    fastest = min(alone.values())
    dp_sum, hy_sum = sum(speeds[n] for n in dp_on), sum(speeds[n] for n in on)
    dp_share = fastest / dp_sum / dp["ms_per_example"]
    return {"data_parallel_speed_sum": round(dp_sum, 3), "hybrid_speed_sum": round(hy_sum, 3),
            "ratio_at_bounds": round(hy_sum / dp_sum, 3), "data_parallel_share_of_bound": round(dp_share, 3),
            "hybrid_share_of_bound": round(fastest / hy_sum / hybrid["ms_per_example"], 3),
            "hybrid_share_needed": round(THRESHOLDS["delay_data_parallel_over_hybrid"] * dp_share * dp_sum / hy_sum, 3)}


def memory_spread(out: dict) -> dict | None:
    """Where the hybrid's largest peak is (pure): the device, its peak and the mean over the largest
    alone, and its share of the plan's profiled speed (of each layer, by time); None without peaks."""
    peaks, peak_alone = out["modes"].get("hybrid", {}).get("peak_bytes"), alone_figures(out["modes"])[1]
    speeds, on = out.get("profiled_speed") or {}, plan_devices(out)
    if not peaks or not peak_alone:
        return None
    top = max(peaks, key=peaks.get)
    got = {"max_device": top, "max_peak_over_alone_peak": round(peaks[top] / peak_alone, 3),
           "mean_peak_over_alone_peak": round(statistics.mean(peaks.values()) / peak_alone, 3)}
    if top in speeds and on:
        got["max_device_speed_share"] = round(speeds[top] / sum(speeds[n] for n in on), 3)
    return got


def prediction_ratios(out: dict, field: str = "predicted_over_measured") -> dict[str, float]:
    """{layout: predicted / measured step} of every planned and even group and every device alone
    that was timed (pure); field "uncalibrated_over_measured": by the layer times as measured."""
    got = {}
    for m in PREDICTED_LAYOUTS:
        for g in (out.get(f"{m}_plan") or {}).get("groups", []):
            if field in g:
                got[f"{m}[{','.join(g['devices'])}]"] = g[field]
    for k, v in out["modes"].items():
        if k.startswith("alone:") and field in v:
            got[k] = v[field]
    return got


