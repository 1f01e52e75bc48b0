"""What the sections of bench/REPORT.md share: number formatting, markdown tables, the plotting
backend, the strategies' labels and the `section` decorator that heads every section."""
import functools
import inspect
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the sections draw with it)

LABELS = {"bsp": "BSP", "asp": "ASP", "ssp": "SSP", "local_sgd": "Local SGD", "adsp": "ADSP", "ashl": "ASHL"}


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


def section(title: str):
    """Turns ``body(res, text, out_dir, **kw) -> [plot file names] or None`` into a section renderer
    ``(rec, out_dir, **kw) -> (markdown, plots)``: ``text`` starts with the heading (``title``
    formatted with ``kw`` and the body's defaults) and the record's status (a failed one's result is still
    shown); a record without a result is those alone."""
    def wrap(body):
        defaults = {k: p.default for k, p in inspect.signature(body).parameters.items() if p.default is not p.empty}

        @functools.wraps(body)
        def render(rec, out_dir, **kw):
            status, error = rec.get("status"), rec.get("error")
            text = [title.format(**{**defaults, **kw}) + "\n", "" if status == "ok" else f"Not run ({error}).\n"
                    if status == "not run" else f"**FAILED**: {error}.\n"]
            plots = (body(rec["result"], text, out_dir, **kw) or []) if rec.get("result") else []
            return "\n".join(text), plots
        return render
    return wrap


def compact(v, limit=300) -> str:
    """A value in one table cell: numbers rounded, nested data as short JSON, pipes escaped."""
    text = json.dumps(v, separators=(", ", ": ")) if isinstance(v, (dict, list)) else str(fmt(v))
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def ci(interval, digits=3) -> str:
    return "—" if not interval else f"[{fmt(interval[0], digits)}, {fmt(interval[1], digits)}]"


def figure(fig, out_dir, text, name) -> list[str]:
    """Saves ``fig`` as <name>.png and links it at the end of the section ``text``; [its file name]."""
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, name + ".png"), dpi=110)
    plt.close(fig)
    text.append(f"![{name}]({name}.png)\n")
    return [name + ".png"]


def identity_scatter(ax, points, xlabel, ylabel, title) -> None:
    """(x, y, label) points against the y = x line, both axes from 0."""
    top = max(max(x, y) for x, y, _ in points) * 1.15
    ax.plot([0, top], [0, top], color="grey", lw=0.8, label="y = x")
    ax.scatter([x for x, _, _ in points], [y for _, y, _ in points], color="tab:red", zorder=3)
    for x, y, label in points:
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(5, -10), fontsize=8)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title, xlim=(0, top), ylim=(0, top))
