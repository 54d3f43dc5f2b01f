"""The report of ``dpc soak``: the table, the verdicts and the plot, from what the run left.

Role: reads ``RUN_DIR/soak.jsonl`` (the samples, ``growth.py``'s format) and the run's
``history.jsonl`` (when each fault was in force), judges every series by ``growth.py``'s
rule, prints one row per series and a verdict per kind (memory, live heap, buffers) and writes
``RUN_DIR/soak.svg``.

The plot is an SVG written here rather than a PNG drawn by matplotlib: a few polylines and
rectangles need no dependency (matplotlib would be an optional extra that ``make test``
does not install, so the plot would go untested and be missing for most users), the file is
text that a test can read, and any browser shows it, with each fault's description as a
tooltip.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO
from xml.sax.saxutils import escape

from node.procs.rundir import RunDir
from ops_scripts.check.history import read_history
from ops_scripts.harness.growth import (
    MIB,
    RULE,
    Judgement,
    SeriesKind,
    Verdict,
    judge_all,
    series_from_samples,
    soak_passes,
)

__all__ = ["fault_intervals", "print_report", "read_samples", "svg_plot"]

_WORDS = {Verdict.FLAT: "PASS", Verdict.GROWS: "FAIL", Verdict.RETAINED: "PASS (retained)",
          Verdict.SHORT: "short"}
_WHAT = {SeriesKind.RSS: "memory (RSS)", SeriesKind.HEAP: "live heap",
         SeriesKind.BUFFER: "buffers"}
_LABEL = {SeriesKind.RSS: "RSS", SeriesKind.HEAP: "heap", SeriesKind.BUFFER: "buffer"}


def read_samples(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``soak.jsonl``'s header (the soak's settings) and its samples, in order."""
    header: dict[str, Any] = {}
    samples: list[dict[str, Any]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            if "soak" in record:
                header = record["soak"]
            else:
                samples.append(record)
    return header, samples


def fault_intervals(rd: RunDir, t0_us: int, end: float) -> list[tuple[float, float, str]]:
    """Each fault of the run's history as ``(start, heal, description)`` in seconds of the
    soak (one never healed lasts until the next ``heal_all`` or ``end``)."""
    if not rd.history.exists():
        return []
    open_faults: dict[int, tuple[float, str]] = {}
    out: list[tuple[float, float, str]] = []
    for e in read_history(rd.history):
        t = (e["t"] - t0_us) / 1e6
        if e["event"] == "fault":
            open_faults[e["id"]] = (t, str(e.get("describe", "")))
        elif e["event"] == "heal" and e["id"] in open_faults:
            start, what = open_faults.pop(e["id"])
            out.append((start, t, what))
        elif e["event"] == "heal_all":
            out += [(start, t, what) for start, what in open_faults.values()]
            open_faults.clear()
    out += [(start, end, what) for start, what in open_faults.values()]
    return sorted(out)


# ---------------------------------------------------------------- the table
def _amount(kind: SeriesKind, v: float | None, signed: bool = False) -> str:
    if v is None:
        return "-"
    sign = "+" if signed else ""
    if kind is SeriesKind.RSS:
        return f"{v / MIB:{sign}.1f} MiB"
    if kind is SeriesKind.HEAP:
        return f"{v:{sign},.0f} blocks"
    return f"{v:{sign},.0f}"


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def _threshold(j: Judgement) -> str:
    """The threshold and the floor that sets it: ``515 (10 % of median)``."""
    k = j.series.kind
    if j.threshold is None or j.floor is None:
        return "-"
    if j.threshold > j.floor:
        why = "10 % of median"
    else:
        why = "the floor" if k is not SeriesKind.BUFFER else f"2 s at {j.rate or 0:,.0f}/s"
    return f"{_amount(k, j.threshold)} ({why})"


def _row(j: Judgement) -> tuple[str, ...]:
    s, k = j.series, j.series.kind
    threshold = _threshold(j)
    return (f"{_LABEL[k]} {s.label}", str(s.pid),
            _clock(j.judged_from), str(j.points), _amount(k, j.median),
            _amount(k, j.slope_per_minute, signed=True), _amount(k, j.growth, signed=True),
            threshold, _WORDS[j.verdict])


def _kind_verdict(kind: SeriesKind, judged: Sequence[Judgement]) -> str:
    mine = [j for j in judged if j.series.kind is kind]
    grows = [j for j in mine if j.verdict is Verdict.GROWS]
    kept = [j for j in mine if j.verdict is Verdict.RETAINED]
    flat = [j for j in mine if j.verdict is Verdict.FLAT] + kept
    short = len(mine) - len(grows) - len(flat)
    tail = f" ({short} too short to judge)" if short else ""
    if kept:
        tail += "; retained, not grown (the live heap flat): " + "; ".join(
            f"{j.series.label} {_amount(kind, j.growth, signed=True)}, {', '.join(j.notes)}"
            for j in kept)
    if grows:
        which = "; ".join(f"{j.series.label} {_amount(kind, j.growth, signed=True)} "
                          f"(threshold {_amount(kind, j.threshold)})" for j in grows)
        return f"{_WHAT[kind]}: FAIL: grows steadily: {which}{tail}"
    if not flat:
        return f"{_WHAT[kind]}: not judged: no series long enough{tail}"
    return f"{_WHAT[kind]}: PASS: {len(flat)} series judged, none grows steadily{tail}"


def print_report(rd: RunDir, warmup: float, out: TextIO, *, faults_injected: int) -> bool:
    """Print the report of the soak in ``rd`` (``warmup`` in seconds), write its plot;
    True iff the soak passes (``growth.soak_passes``)."""
    header, samples = read_samples(rd.path / "soak.jsonl")
    series = series_from_samples(samples)
    judged = judge_all(series, warmup)
    end = samples[-1]["t"] if samples else 0.0
    rows = [("series", "pid", "judged from", "points", "median", "growth/min",
             "growth", "threshold", "verdict"), *map(_row, judged)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print(f"\ndpc soak: {len(samples)} samples over {_clock(end)}, {faults_injected} faults "
          f"injected; growth of each series after its warm-up ({warmup / 60:.3g} min):",
          file=out)
    print(f"  the rule: {RULE.replace('WARMUP', f'{warmup / 60:.3g} min')}", file=out)
    for r in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip(),
              file=out)
    for kind in SeriesKind:
        print(f"dpc soak: {_kind_verdict(kind, judged)}", file=out)
    faults = fault_intervals(rd, int(header.get("t0_us", 0)), end) if header else []
    (rd.path / "soak.svg").write_text(svg_plot(judged, faults, warmup, end),
                                      encoding="utf-8")
    return soak_passes(judged)


# ---------------------------------------------------------------- the plot
def _ticks(top: float, n: int = 4, steps: Sequence[float] = (1, 2, 2.5, 5, 10)) -> list[float]:
    """Round tick values from 0 to at least ``top``, about ``n`` of them."""
    raw = max(top, 1e-9) / n
    base = 10 ** math.floor(math.log10(raw))
    step = next(m * base for m in steps if m * base >= raw)
    return [i * step for i in range(math.ceil(top / step - 1e-9) + 1)]


_TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)

_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf")
_W, _PANEL, _LEFT, _RIGHT, _TOP, _GAP = 980, 260, 70, 260, 56, 64


def _panel(kind: SeriesKind, judged: Sequence[Judgement],
           faults: Sequence[tuple[float, float, str]], warmup: float, end: float,
           top: float) -> list[str]:
    """One panel: the faults, the warm-up, a line per series of ``kind``, a legend."""
    mine = [j for j in judged if j.series.kind is kind]
    scale, title = {
        SeriesKind.RSS: (MIB, "memory: each process's RSS, MiB"),
        SeriesKind.HEAP: (1000.0, "live heap: each replica's Python heap, thousands of blocks"),
        SeriesKind.BUFFER: (1.0, "buffers: tuples in each replica's output buffer"),
    }[kind]
    yticks = _ticks(max((v for j in mine for _, v in j.series.points), default=1.0) / scale)
    peak = yticks[-1] or 1.0
    span = max(end, 1e-9)
    tstep = next((s for s in _TIME_STEPS if span / s <= 8), _TIME_STEPS[-1])
    width = _W - _LEFT - _RIGHT

    def x(t: float) -> float:
        return _LEFT + width * min(max(t, 0.0), span) / span

    def y(v: float) -> float:
        return top + _PANEL * (1 - v / scale / peak)

    el = [f'<text x="{_LEFT}" y="{top - 8}" font-size="13">{title}</text>',
          f'<rect x="{_LEFT}" y="{top}" width="{width}" height="{_PANEL}" fill="none" '
          'stroke="#999"/>',
          f'<rect x="{_LEFT}" y="{top}" width="{x(warmup) - _LEFT:.1f}" height="{_PANEL}" '
          'fill="#eee"><title>warm-up: not judged</title></rect>']
    for start, heal, what in faults:
        el.append(f'<rect x="{x(start):.1f}" y="{top}" width="{max(x(heal) - x(start), 1):.1f}" '
                  f'height="{_PANEL}" fill="#f4cccc"><title>{escape(what)}</title></rect>')
    for v in yticks:
        el.append(f'<text x="{_LEFT - 6}" y="{y(v * scale) + 4:.1f}" font-size="10" '
                  f'text-anchor="end">{v:,.{0 if v == int(v) else 1}f}</text>')
    for i in range(int(span // tstep) + 1):
        el.append(f'<text x="{x(i * tstep):.1f}" y="{top + _PANEL + 14}" font-size="10" '
                  f'text-anchor="middle">{_clock(i * tstep)}</text>')
    for n, j in enumerate(mine):
        s = j.series
        color = _PALETTE[n % len(_PALETTE)]
        bold = j.verdict is Verdict.GROWS
        # Its own warm-up faint, the judged rest solid (sharing the point between them).
        early = [p for p in s.points if p[0] <= j.judged_from]
        late = [p for p in s.points if p[0] >= j.judged_from]
        if late and early and early[-1][0] < late[0][0]:
            early.append(late[0])
        for part, opacity in ((early, 0.35), (late, 1.0)):
            if len(part) < 2:
                continue
            pts = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in part)
            el.append(f'<polyline points="{pts}" fill="none" stroke="{color}" '
                      f'stroke-opacity="{opacity}" stroke-width="{2.5 if bold else 1.2}">'
                      f'<title>{escape(s.label)}</title></polyline>')
        ly = top + 12 + 14 * n
        el.append(f'<text x="{_W - _RIGHT + 12}" y="{ly}" font-size="11" fill="{color}">'
                  f'{escape(s.label)}: {_WORDS[j.verdict]}</text>')
    return el


def svg_plot(judged: Sequence[Judgement],
             faults: Sequence[tuple[float, float, str]], warmup: float, end: float) -> str:
    """The soak's plot as an SVG document: one panel each for RSS, live heap and buffers; the warm-up
    shaded grey, each fault's interval red (its description as a tooltip), a series that
    grows steadily drawn bold, each series' verdict in the legend; time in m:ss."""
    height = _TOP + len(SeriesKind) * (_PANEL + _GAP) - _GAP + 40
    el = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{height}" '
          'font-family="sans-serif">',
          f'<rect width="{_W}" height="{height}" fill="white"/>',
          f'<text x="{_LEFT}" y="18" font-size="14">dpc soak: grey, the warm-up (faint: a '
          "restarted series' own); red, a fault in force; bold, a series that grows</text>"]
    for i, kind in enumerate(SeriesKind):
        el += _panel(kind, judged, faults, warmup, end, _TOP + i * (_PANEL + _GAP))
    el.append("</svg>")
    return "\n".join(el) + "\n"
