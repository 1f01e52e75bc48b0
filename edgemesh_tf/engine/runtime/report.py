"""What the chief reports to TensorBoard and to the final summary, per job, group and device.

Tags (see summaries/writers.py for the run directories):
  total:    accuracy, loss (training loss of the global model), phase (0 profiling, 1 AHL, 2 SHL,
            3 train), examples_per_sec, bytes_sent, bytes_received, waiting_s; texts
            "layout_table" (markdown), "phase_switches", "replans" (old and new H, D, R per group),
            "faults" (groups lost, updates rejected),
            "live_groups" and "rejected_updates" scalars; image "layout_picture"; hparams. (One tag
            per plugin: TensorBoard gives a tag to the first plugin that writes it.)
  <group>:  group/examples_per_sec, group/waiting_s, group/bytes_sent, group/bytes_received,
            group/compression_ratio, group/local_steps, group/loss
  <device>: device/compute_gflops (FLOP/s of its share of its group's iterations, in GFLOP/s),
            device/utilisation (fraction of wall time its group spent computing), device/waiting_s,
            device/bytes_sent (its link's pushes to the ps; a group's first device carries them)
Cumulative figures (bytes, waiting) are totals since the job began; rates are over the last
evaluation interval.
"""
from __future__ import annotations

import math
from typing import Mapping

from edgemesh_tf.engine.core import records, rules
from edgemesh_tf.engine.config import JobConfig
from edgemesh_tf.mesh.layout import layout_from_dict
from edgemesh_tf.planner.model_stats import model_stats
from edgemesh_tf.sync.schedule import PHASES
from edgemesh_tf.summaries import layout_view
from edgemesh_tf.summaries.writers import Writers

MIB = 1 << 20

CUSTOM_SCALARS = {
    "throughput per device": {"compute rate (GFLOP/s)": [r"device/compute_gflops"],
                              "utilisation (fraction of time computing)": [r"device/utilisation"],
                              "waiting (s, total)": [r"device/waiting_s"],
                              "bytes sent to the ps per link": [r"device/bytes_sent"]},
    "throughput per group": {"examples/s": [r"group/examples_per_sec"], "waiting (s, total)": [r"group/waiting_s"],
                             "top-k ratio": [r"group/compression_ratio"]},
}


class JobReport:
    def __init__(self, cfg: JobConfig, spec):
        self.cfg = cfg
        groups = []
        for g in cfg.groups:
            layout = layout_from_dict(g.layout, source="group %s" % g.name)
            groups.append((g.name, layout, model_stats(spec, g.batch_size)))
        self.groups = groups
        names = dict(cfg.device_names)
        self.rows = layout_view.layout_rows(groups, names)
        self.first = {g.name: names.get(g.layout["devices"][0], g.layout["devices"][0]) for g in cfg.groups}
        self.tb = Writers(cfg.logdir, [*cfg.group_names, *[r.name for r in self.rows]])
        self._last_t, self._last = 0.0, {}

    def _rows(self, measured: Mapping[str, Mapping] = {}):
        info = self.cfg.device_info
        return layout_view.layout_rows(
            self.groups, dict(self.cfg.device_names),
            speeds={n: i.get("speed") for n, i in info.items()},
            predicted={n: {"memory_mib": i.get("predicted_memory_mib"), "step_ms": i.get("predicted_step_ms")}
                       for n, i in info.items()},
            measured={n: {"memory_mib": info.get(n, {}).get("measured_memory_mib"), **measured.get(n, {})}
                      for n in set(info) | set(measured)})

    def layout(self, elapsed_s: float, measured: Mapping[str, Mapping] = {}) -> str:
        """Writes the layout picture and table; returns the markdown table."""
        rows = self._rows(measured)
        table = layout_view.markdown_table(rows)
        self.tb.text("total", "layout_table", table, elapsed_s)
        png = layout_view.render_png(rows, title="%s, %d group(s)" % (self.cfg.model, len(self.groups)))
        width, height = _png_size(png)
        self.tb.image("total", "layout_picture", png, width, height, elapsed_s)
        self.tb.flush()
        return table

    def start(self, resumed_at: float) -> None:
        self.tb.custom_scalars(CUSTOM_SCALARS)
        self._last_t = resumed_at
        self.layout(resumed_at)

    def record(self, rec: records.Record) -> None:
        """A record's text in TensorBoard: phase switches, re-plans (old and new H, D, R per group as a
        markdown table), lost, restarted or re-admitted groups and rejected updates, at their time."""
        if isinstance(rec, records.Phase):
            self.tb.text("total", "phase_switches", "**%s → %s** at %.1f s: %s" % (rec.old, rec.new, rec.t, rec.why),
                         rec.t)
        elif isinstance(rec, records.Replan):
            rows = ["| group | H | D | R |", "|---|---|---|---|"]
            for g, new in rec.new.items():
                old = rec.old.get(g, {})
                rows.append("| %s | %s | %s | %s |" % (g, *("%s → %s" % (old.get(k, "—"), new[k])
                                                               for k in ("H", "D", "R"))))
            self.tb.text("total", "replans", "**re-plan** at %.1f s (%s): %s\n\n%s" % (
                rec.t, rec.phase, rec.why, "\n".join(rows)), rec.t)
        elif isinstance(rec, records.Rejected):
            self.tb.text("total", "faults", "**%d update(s) rejected** by the parameter server (not finite) by %.1f s"
                         % (rec.rejected, rec.t), rec.t)
        elif isinstance(rec, records.GroupEvent):
            what = "lost" if isinstance(rec, records.Lost) else rec.KIND.replace("_", " ")
            self.tb.text("total", "faults", "**group %s %s** (devices %s) at %.1f s: %s" % (
                rec.group, what, ", ".join(rec.devices), rec.t, rec.why.splitlines()[0]), rec.t)
        else:
            return
        self.tb.flush()

    def eval(self, rec: records.Eval, totals: Mapping[str, Mapping], controls: Mapping[str, rules.GroupControl]) -> None:
        """Writes one evaluation's scalars: the record's, and per group and device from the totals and
        controls of the tick it was measured at."""
        now = rec.t
        dt = now - self._last_t
        rate = lambda g, k: (totals[g][k] - self._last.get(g, {}).get(k, 0.0)) / dt if dt > 0 else 0.0
        for g, t in totals.items():
            self.tb.scalars(g, {"group/examples_per_sec": rec.group_examples_per_sec[g], "group/waiting_s": t["wait_s"],
                                "group/bytes_sent": t["bytes_sent"], "group/bytes_received": t["bytes_received"],
                                "group/compression_ratio": controls[g].ratio,
                                "group/local_steps": controls[g].local_steps,
                                "group/loss": t["loss"] if math.isfinite(t.get("loss", math.nan)) else 0.0}, now)
        for r in self.rows:
            t = totals[r.group]
            self.tb.scalars(r.name, {"device/compute_gflops": rate(r.group, "steps") * r.flops_per_step / 1e9,
                                     "device/utilisation": rate(r.group, "compute_s"),
                                     "device/waiting_s": t["wait_s"],
                                     "device/bytes_sent": t["bytes_sent"] if self.first[r.group] == r.name else 0.0},
                            now)
        self.tb.scalars("total", {"accuracy": rec.accuracy, "loss": rec.loss, "phase": PHASES.index(rec.phase),
                                  "examples_per_sec": rec.examples_per_sec,
                                  "bytes_sent": sum(t["bytes_sent"] for t in totals.values()),
                                  "bytes_received": sum(t["bytes_received"] for t in totals.values()),
                                  "waiting_s": sum(t["wait_s"] for t in totals.values()),
                                  "live_groups": rec.live_groups, "rejected_updates": rec.rejected}, now)
        self.tb.flush()
        self._last_t, self._last = now, {g: dict(t) for g, t in totals.items()}

    def end(self, final: records.Final, totals: Mapping[str, Mapping], train_s: float,
            memory: Mapping[str, int] = {}) -> dict:
        """Per device and group figures of the whole run (added to the final record), the layout
        with measured step times and memory peaks (``memory``: {device: peak bytes above its idle
        server while training}, where known; the profile's peaks otherwise), and the hparams record."""
        devices, groups, measured = {}, {}, {}
        for g, t in totals.items():
            busy = t["compute_s"] + t["pull_s"] + t["push_s"] + t["wait_s"]
            groups[g] = {"examples_per_sec": t["examples"] / train_s if train_s > 0 else 0.0,
                         "compute_s": t["compute_s"], "communication_s": t["pull_s"] + t["push_s"],
                         "waiting_s": t["wait_s"], "other_s": max(0.0, train_s - busy),
                         "iteration_ms": 1000 * t["compute_s"] / t["steps"] if t["steps"] else None}
        for r in self.rows:
            t = totals[r.group]
            devices[r.name] = {"group": r.group, "compute_gflops": t["steps"] * r.flops_per_step / 1e9 / train_s
                               if train_s > 0 else 0.0,
                               "utilisation": t["compute_s"] / train_s if train_s > 0 else 0.0,
                               "examples_per_sec": groups[r.group]["examples_per_sec"]}
            measured[r.name] = {"step_ms": groups[r.group]["iteration_ms"]}
            predicted = self.cfg.device_info.get(r.name, {}).get("predicted_memory_mib")
            if predicted is not None:
                devices[r.name]["predicted_memory_mib"] = predicted
            if r.name in memory:
                measured[r.name]["memory_mib"] = devices[r.name]["peak_memory_mib"] = memory[r.name] / MIB
        self.layout(final.t, measured)
        sync = self.cfg.sync
        self.tb.hparams("total", {"strategy": sync.strategy, "layout": "; ".join(
            "%s: %s" % (g, "+".join(self.cfg.device_names.get(d, d) for d in l.devices)) for g, l, _ in self.groups),
            "compression": sync.compression, "ratio": sync.ratio if sync.compression == "fixed" else 0.0,
            "error_feedback": sync.error_feedback, "groups": len(self.groups)},
            {"hparams/final_accuracy": final.accuracy,
             "hparams/time_to_target_s": final.time_to_target_s if final.time_to_target_s is not None else -1.0,
             "hparams/train_s": final.t}, final.t)
        self.tb.close()
        return {"devices": devices, "group_time": groups}


def _png_size(png: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
