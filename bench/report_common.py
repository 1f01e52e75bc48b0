"""What the sections of bench/REPORT.md share: number formatting, markdown tables, the plotting
backend and the strategies' labels."""
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402,F401  (the sections draw with it)

LABELS = {"bsp": "BSP", "asp": "ASP", "ssp": "SSP", "local_sgd": "Local SGD", "adsp": "ADSP", "ashl": "ASHL",
          "ashl_topk1_ef": "ASHL, top-k 1% + error feedback", "ashl_topk1_no_ef": "ASHL, top-k 1%, no error feedback"}
MIB = 2 ** 20



def fmt(x, digits=3, unit=""):
    if x is None:
        return "—"
    if isinstance(x, float):
        x = round(x, digits) if digits else int(round(x))
    return f"{x}{unit}"


def table(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def result(rec):
    return rec.get("result") if rec.get("status") == "ok" or rec.get("result") else None


def _status_line(rec) -> str:
    if rec.get("status") == "ok":
        return ""
    if rec.get("status") == "not run":
        return f"Not run ({rec.get('error')}).\n"
    return f"**FAILED**: {rec.get('error')}.\n"


def _compact(v, limit=300) -> str:
    """A value in one table cell: numbers rounded, nested data as short JSON, pipes escaped."""
    if isinstance(v, (dict, list)):
        text = json.dumps(v, separators=(", ", ": "))
    else:
        text = str(fmt(v))
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _figure(fig, out_dir, text, name) -> tuple[str, list[str]]:
    """Saves `fig` as <name>.png, links it at the end of the section `text`; the section's return."""
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, name + ".png"), dpi=110)
    plt.close(fig)
    text.append(f"![{name}]({name}.png)\n")
    return "\n".join(text), [name + ".png"]
