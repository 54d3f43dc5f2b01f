"""The report of ``dpc reconcile``: a verdict line per run, ``report.md`` and a PNG per run.

Role: the I/O edge that turns the small results of the Spark parts (``model.RunResult``:
verdicts, per-failure availability, counts of differences) and the new results' delays
(``availability.new_results``, a DataFrame) into what a reader looks at. It computes no
verdict: what it prints is what it was given.

Theory of operation. The verdict line is one line per run (under :data:`LINE_MAX`
characters): "valid" with what was checked, or the first invalid (else unknown) property
and subject with its evidence, shortened. The plot of a run shows the delay of each new
result over time, one series per client, the failures shaded from fault to heal. A client
log may hold millions of results: :func:`sample_delays` reduces each client's series in
Spark to at most ``max_points`` buckets of equal width, keeping in each the result with the
largest delay (so spikes survive, which an average or a stride would hide), and only that
is brought to the driver, streamed run by run (``toLocalIterator`` over a sorted frame).
Plots are drawn on a ``matplotlib.figure.Figure`` with the Agg canvas: no pyplot, no
display, no global state.

Invariants: file names come from :func:`plot_file` (a label may hold '/': it is made safe,
and a hash keeps two labels apart); every table cell is one line with '|' escaped.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ops_scripts.reconcile.model import Availability, RunResult, Verdict

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["LINE_MAX", "MAX_POINTS", "plot_file", "sample_delays", "verdict_line",
           "write_report"]

#: The longest verdict line.
LINE_MAX = 160
#: Points per client and run brought to the driver for a plot.
MAX_POINTS = 20_000
_CELL_MAX = 400


# ---------------------------------------------------------------- verdict lines
def _plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else many or word + 's'}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _failures(availability: Iterable[Availability]) -> list[tuple[int, str]]:
    """The distinct failures of a run's availability rows (one row per client), in order."""
    return sorted({(a.began_us, a.failure) for a in availability})


def _delay_max(availability: Iterable[Availability]) -> float | None:
    return max((a.delays_ms[2] for a in availability if a.delays_ms is not None), default=None)


def verdict_line(result: RunResult) -> str:
    """``run LABEL: valid (...)`` or ``run LABEL: INVALID: property subject: evidence``
    (UNKNOWN when nothing is invalid but something is unknown), at most :data:`LINE_MAX`
    characters."""
    head = f"run {result.run}: "
    if result.valid:
        parts = [_plural(len(result.verdicts), "verdict"),
                 _plural(len(_failures(result.availability)), "failure")]
        worst = _delay_max(result.availability)
        if worst is not None:
            parts.append(f"Delay_new max {worst:.0f} ms")
        return _fit(f"{head}valid ({', '.join(parts)})", "")
    bad: list[Verdict] = [v for v in result.verdicts if v.status == "invalid"]
    status = "INVALID"
    if not bad:
        bad, status = [v for v in result.verdicts if v.status != "valid"], "UNKNOWN"
    if not bad:
        return _fit(f"{head}UNKNOWN: no verdict", "")
    first = bad[0]
    more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
    return _fit(f"{head}{status}: {first.property} {first.subject}: {_one_line(first.evidence)}",
                more)


def _fit(text: str, tail: str) -> str:
    """``text + tail`` cut to :data:`LINE_MAX`, the cut marked, the tail kept whole."""
    room = LINE_MAX - len(tail)
    if len(text) > room:
        text = text[:room - 3].rstrip() + "..."
    return text + tail


# ---------------------------------------------------------------- down-sampling
def sample_delays(delays: DataFrame, max_points: int = MAX_POINTS) -> DataFrame:
    """Each run's and client's new results (``run``, ``client``, ``arrival``, ``delay``)
    cut to at most ``max_points``: the run's arrivals from its first ``t0`` to its last
    ``t1`` fall into buckets of ``width = (t1 - t0) div max_points + 1`` µs; each bucket
    keeps its largest delay, at the arrival of a result that had it. Columns ``run``,
    ``client``, ``t0``, ``arrival``, ``delay``."""
    from pyspark.sql import functions as F

    if max_points < 1:
        raise ValueError(f"sample_delays: max_points must be positive, got {max_points}")
    bounds = delays.groupBy("run").agg(
        F.min("arrival").alias("t0"),
        (F.expr(f"(max(arrival) - min(arrival)) div {int(max_points)}") + 1).alias("width"))
    return (delays.join(F.broadcast(bounds), "run")
            .withColumn("bucket", F.expr("(arrival - t0) div width"))
            .groupBy("run", "client", "t0", "bucket")
            .agg(F.max_by("arrival", "delay").alias("arrival"), F.max("delay").alias("delay"))
            .select("run", "client", "t0", "arrival", "delay"))


# ---------------------------------------------------------------- plots
def plot_file(run: str) -> str:
    """The PNG's file name of run ``run``: ``run-<label>.png``, the label's characters
    other than letters, digits, '.', '_' and '-' replaced, plus a hash of the label if any
    was (so that labels "a/b" and "a_b" never share a file)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run)
    if safe != run:
        safe += "-" + hashlib.sha1(run.encode()).hexdigest()[:8]
    return f"run-{safe}.png"


Series = dict[str, tuple[list[float], list[float]]]  # client -> (seconds, delay in ms)


def _plot(path: Path, result: RunResult, t0: int | None, series: Series) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for client, (xs, ys) in sorted(series.items()):
        ax.plot(xs, ys, linewidth=0.8, marker=".", markersize=2, label=f"client {client}")
    end = max((xs[-1] for xs, _ in series.values() if xs), default=0.0)
    origin = t0 if t0 is not None else min((b for b, _ in _failures(result.availability)),
                                           default=0)
    for k, (began, _) in enumerate(_failures(result.availability)):
        healed = next(a.healed_us for a in result.availability if a.began_us == began)
        right = end if healed is None else (healed - origin) / 1e6
        ax.axvspan((began - origin) / 1e6, max(right, (began - origin) / 1e6), color="tab:red",
                   alpha=0.12, label="failure (fault to heal)" if k == 0 else None)
    if not series:
        ax.text(0.5, 0.5, "no new results", transform=ax.transAxes, ha="center")
    ax.set_title(f"run {result.run}: delay of new results")
    ax.set_xlabel("seconds since the run's first result")
    ax.set_ylabel("delay (ms)")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper right", fontsize="small")
    fig.savefig(path, format="png")


def _series_by_run(delays: DataFrame, max_points: int
                   ) -> Iterable[tuple[str, int, Series]]:
    """``(run, t0, series)`` per run of ``delays`` with at least one result, in run order,
    streamed from the sampled frame (one run's points on the driver at a time)."""
    rows = (sample_delays(delays, max_points).orderBy("run", "client", "arrival")
            .toLocalIterator())
    for run, group in itertools.groupby(rows, key=lambda r: r["run"]):
        series: Series = {}
        t0 = 0
        for r in group:
            t0 = r["t0"]
            xs, ys = series.setdefault(r["client"], ([], []))
            xs.append((r["arrival"] - t0) / 1e6)
            ys.append(r["delay"] / 1000)
        yield run, t0, series


# ---------------------------------------------------------------- the Markdown
def _cell(value: Any) -> str:
    text = _one_line("" if value is None else str(value)).replace("|", "\\|")
    return text if len(text) <= _CELL_MAX else text[:_CELL_MAX - 3] + "..."


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _availability_table(result: RunResult, origin: int, since: str) -> list[str]:
    if not result.availability:
        return ["No failure in the run's history (or no history): nothing to measure."]
    rows = []
    for a in result.availability:
        lasted = "-" if a.healed_us is None else f"{(a.healed_us - a.began_us) / 1e6:.2f}"
        delays = "-" if a.delays_ms is None else " / ".join(f"{d:.0f}" for d in a.delays_ms)
        rows.append((a.failure, a.client, f"{(a.began_us - origin) / 1e6:.2f}", lasted,
                     _ms(a.first_tentative_ms), _ms(a.undo_ms), _ms(a.rec_done_ms),
                     a.n_tentative, delays))
    return [f"Fault start in seconds since {since}; durations in ms from the fault's start "
            "('-': it did not happen); delays of the new results between the fault and its "
            "REC_DONE (else the next fault or the end).", "",
            *_table(("failure", "client", "at (s)", "healed after (s)", "first tentative (ms)",
                     "UNDO (ms)", "REC_DONE (ms)", "N_tentative",
                     "delay p50 / p99 / max (ms)"), rows)]


def _link(target: Path, out: Path) -> str:
    return quote(Path(os.path.relpath(target, out)).as_posix())


def _run_section(result: RunResult, out: Path, t0: int | None, plotted: bool,
                 differences_path: Path | None) -> list[str]:
    origin = t0 if t0 is not None else min((a.began_us for a in result.availability), default=0)
    since = "the run's first result" if t0 is not None else "the run's first fault"
    lines = [f"## Run `{result.run}`", "", f"`{verdict_line(result)}`", "", "### Verdicts", ""]
    lines += _table(("property", "subject", "status", "evidence"),
                    ((v.property, v.subject, v.status, v.evidence) for v in result.verdicts))
    lines += ["", "### Availability per failure", "",
              *_availability_table(result, origin, since), ""]
    if plotted:
        lines += [f"![delay of new results over time, run {result.run}]"
                  f"({quote(plot_file(result.run))})", ""]
    lines += ["### Differences", ""]
    if result.differences == 0:
        lines.append("None: every final stream equals the reference.")
    elif differences_path is not None:
        lines.append(f"{_plural(result.differences, 'row')} in "
                     f"[the differences table]({_link(differences_path, out)}) "
                     f"(Parquet; `run = '{result.run}'`).")
    else:
        lines.append(f"{_plural(result.differences, 'row')} (no differences table written).")
    return [*lines, ""]


def write_report(out: Path, results: Sequence[RunResult], delays: DataFrame | None, *,
                 master: str, differences_path: Path | None, tolerance_note: str,
                 max_points: int = MAX_POINTS) -> Path:
    """Write ``out/report.md`` and ``out/run-<label>.png`` per run (module docstring) and
    return the report's path. ``delays``: ``availability.new_results`` (columns ``run``,
    ``client``, ``arrival``, ``delay`` at least), None for no plots."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    by_run = {r.run: r for r in results}
    t0s: dict[str, int] = {}
    if delays is not None:
        for run, t0, series in _series_by_run(delays, max_points):
            if run in by_run:
                t0s[run] = t0
                _plot(out / plot_file(run), by_run[run], t0, series)
        for r in results:  # a run without any new result still gets its (empty) plot
            if r.run not in t0s:
                _plot(out / plot_file(r.run), r, None, {})
    n_valid = sum(1 for r in results if r.valid)
    lines = ["# `dpc reconcile` report", "",
             f"Spark master: `{master}`. {tolerance_note}".rstrip(), "",
             "## Summary", "",
             f"{_plural(len(results), 'run')}: {n_valid} valid, {len(results) - n_valid} not."
             , "", "```text", *(verdict_line(r) for r in results), "```", ""]
    for r in results:
        lines += _run_section(r, out, t0s.get(r.run), delays is not None, differences_path)
    path = out / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
