"""The final-accuracy section of bench/REPORT.md (bench/final_accuracy.py, `make bench-final`)."""
from report_common import _figure, _status_line, fmt, plt, result, table


def final_section(rec, out_dir) -> tuple[str, list[str]]:
    res = result(rec)
    text = ["## Final accuracy: ASHL against BSP converged (`make bench-final`)\n", _status_line(rec)]
    if not res:
        return "\n".join(text), []
    runs, check = res["runs"], res["check"]
    text.append(f"`{res['model']}` on {res['dataset']}, batch {res['batch']} per group, on `{res['cluster']}`; "
                f"{res['seeds']} seeds each, interleaved. ASHL (as published) trains under the cluster's limits; "
                "BSP with every limit lifted (its curve per iteration does not depend on the devices' speeds: "
                "each iteration waits for every group), so that it runs many more iterations in its "
                f"budget than under edge4's limits (~19 in 150 s there; the global steps below are the groups' "
                f"iterations summed). Converged: the last quarter of the run adds at most {fmt(100 * res['plateau'], 1)} "
                "points.\n")
    rows = [[name, r["seed"], r["limits"], fmt(r["budget_s"], 0, " s"), r["global_steps"],
             fmt(100 * r["accuracy"], 2, "%"), "yes" if r["converged"] else "no"]
            for name, rs in runs.items() for r in rs]
    text.append(table(["Strategy", "Seed", "Limits", "Trained", "Global steps", "Final accuracy", "Converged"],
                      rows) + "\n")
    verdict = "pass" if check.get("pass") else ("undecided: " + check["undecided"] if check.get("undecided")
                                                 else "**not met**")
    text.append(table(["Check (issue 16)", "Measured", "Threshold", "Result"],
                      [["ASHL final accuracy within 1 point of BSP's",
                        f"{fmt(check.get('difference'), 4)} ({fmt(check.get('ashl_final_accuracy'), 4)} - "
                        f"{fmt(check.get('bsp_final_accuracy'), 4)})", check.get("threshold", "—"), verdict]]) + "\n")
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for name, color in (("ashl", "tab:blue"), ("bsp", "tab:gray")):
        for i, r in enumerate(runs.get(name, [])):
            t, a = zip(*r["curve"]) if r["curve"] else ((), ())
            ax.plot(t, a, color=color, alpha=0.8, label=name.upper() + (" (limits lifted)" if name == "bsp" else "")
                    if i == 0 else None)
    ax.set(xlabel="training time (s; BSP's with the limits lifted, so not comparable)", ylabel="held-out accuracy",
           title="final accuracy")
    ax.legend()
    return _figure(fig, out_dir, text, "final_accuracy")
