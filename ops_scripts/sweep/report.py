"""A sweep's plots (PNG) and report (HTML), from its ``results.csv``.

Role: the output half of ``dpc sweep``. Reads the CSV the runs appended (so a report can be
rebuilt at any time, and an interrupted sweep reports what it has), averages each point's
*valid* runs (the bars span their min and max), draws each ``[[plots]]`` of the experiment
as one PNG (a panel per measure, a line per series value, the ``line`` column dashed on
the panels of its unit: ``*_s`` columns are seconds), and
writes ``report.html``: the plots, the runs that were not valid (never plotted), the whole
CSV as a table, and the experiment file. Drawn on a ``matplotlib.figure.Figure`` with the
Agg canvas (no pyplot, no display).
"""

from __future__ import annotations

import csv
import html
import re
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .experiment import Experiment, PlotSpec

__all__ = ["plot_files", "read_results", "write_report"]

Row = dict[str, Any]


def read_results(csv_path: Path) -> list[Row]:
    """The CSV's rows, numbers as numbers, ``valid`` as a bool, empty cells None."""
    if not csv_path.exists():
        return []
    with csv_path.open(newline="") as f:
        return [{k: _value(v) for k, v in r.items()} for r in csv.DictReader(f)]


def _value(text: str) -> Any:
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def plot_files(exp: Experiment) -> list[str]:
    """The PNG file names of the experiment's plots, in order."""
    return [f"plot-{i + 1}-{_safe(p.x)}.png" for i, p in enumerate(exp.plots)]


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)


def write_report(exp: Experiment, out_dir: Path) -> int:
    """Draw the plots and write ``report.html`` in ``out_dir``; the number of rows."""
    rows = read_results(out_dir / "results.csv")
    valid = [r for r in rows if r.get("valid") is True]
    (out_dir / "plots").mkdir(exist_ok=True)
    for spec, name in zip(exp.plots, plot_files(exp), strict=True):
        draw(spec, valid, out_dir / "plots" / name, exp.name)
    (out_dir / "report.html").write_text(_html(exp, rows, plot_files(exp)))
    return len(rows)


def series_of(spec: PlotSpec, rows: Sequence[Row]) -> dict[str, dict[Any, list[Row]]]:
    """``series label -> x -> rows`` (the label joins the ``series`` columns' values)."""
    out: dict[str, dict[Any, list[Row]]] = {}
    for r in rows:
        if r.get(spec.x) is None:
            continue
        label = "/".join(str(r.get(c)) for c in spec.series) if spec.series else ""
        out.setdefault(label, {}).setdefault(r[spec.x], []).append(r)
    return out


def summary(rows: Sequence[Row], column: str) -> tuple[float, float, float] | None:
    """(mean, min, max) of ``column`` over ``rows`` (None if none has it)."""
    values = [float(r[column]) for r in rows if isinstance(r.get(column), int | float)]
    if not values:
        return None
    return statistics.fmean(values), min(values), max(values)


def draw(spec: PlotSpec, rows: Sequence[Row], path: Path, title: str) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.5 * len(spec.y), 4), dpi=100)
    FigureCanvasAgg(fig)
    series = series_of(spec, rows)
    for k, y in enumerate(spec.y):
        ax = fig.add_subplot(1, len(spec.y), k + 1)
        for label, by_x in sorted(series.items()):
            points = [(x, s) for x in sorted(by_x, key=_order)
                      if (s := summary(by_x[x], y)) is not None]
            if not points:
                continue
            means = [s[0] for _, s in points]
            err = [[s[0] - s[1] for _, s in points], [s[2] - s[0] for _, s in points]]
            ax.errorbar([_xpos(x) for x, _ in points], means, yerr=err, marker="o",
                        capsize=3, label=label or None)
        if spec.line and _unit(spec.line) == _unit(y):
            at_x: dict[Any, list[Row]] = {}
            for r in rows:
                at_x.setdefault(r.get(spec.x), []).append(r)
            line = [(x, s) for x in sorted((x for x in at_x if x is not None), key=_order)
                    if (s := summary(at_x[x], spec.line)) is not None]
            if line:
                ax.plot([_xpos(x) for x, _ in line], [s[0] for _, s in line], "k--",
                        linewidth=1, label=spec.line)
        if not series:
            ax.text(0.5, 0.5, "no valid run", transform=ax.transAxes, ha="center")
        ax.set_xlabel(spec.x)
        ax.set_ylabel(y)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small", title="/".join(spec.series) if spec.series else None)
    fig.suptitle(spec.title or f"{title}: {', '.join(spec.y)} vs {spec.x}")
    fig.tight_layout()
    fig.savefig(path, format="png")


def _unit(column: str) -> str:
    """A column's unit: seconds for ``*_s``; else its own (a count)."""
    return "s" if column.endswith("_s") else column


def _order(x: Any) -> tuple[int, Any]:
    return (0, x) if isinstance(x, int | float) else (1, str(x))


def _xpos(x: Any) -> Any:
    return x if isinstance(x, int | float) else str(x)


def _html(exp: Experiment, rows: Sequence[Row], plots: Sequence[str]) -> str:
    def e(text: str) -> str:  # (text and single-quoted attributes: quotes kept as typed)
        return html.escape(text, quote=False).replace("'", "&#x27;")

    columns = list(rows[0]) if rows else []
    bad = [r for r in rows if r.get("valid") is not True]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>dpc sweep: {e(exp.name)}</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;"
        "font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
        "tr.bad{background:#fdd}pre{background:#f4f4f4;padding:1em}</style></head><body>",
        f"<h1>dpc sweep: {e(exp.name)}</h1>",
        f"<p>{len(exp.points())} point(s) &times; {exp.repeat} run(s); {len(rows)} run(s) "
        f"recorded, {len(rows) - len(bad)} valid. Each point is the mean of its valid runs; "
        "bars span their min and max. Columns: <code>ops_scripts/sweep/measures.py</code>.</p>",
    ]
    parts += [f"<p><img src='plots/{e(p)}' alt='{e(p)}'></p>" for p in plots]
    if bad:
        parts.append("<h2>Runs not valid (not plotted)</h2><ul>")
        parts += [f"<li>{e(str(r.get('run_dir')))}: {e(str(r.get('verdict')))}</li>"
                  for r in bad]
        parts.append("</ul>")
    parts.append("<h2>Every run</h2><table><tr>")
    parts += [f"<th>{e(c)}</th>" for c in columns]
    parts.append("</tr>")
    for r in rows:
        cls = "" if r.get("valid") is True else " class='bad'"
        parts.append(f"<tr{cls}>" + "".join(f"<td>{e(_cell(r.get(c)))}</td>" for c in columns)
                     + "</tr>")
    parts.append(f"</table><h2>The experiment ({e(str(exp.path))})</h2>"
                 f"<pre>{e(exp.text)}</pre></body></html>")
    return "\n".join(parts)


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
