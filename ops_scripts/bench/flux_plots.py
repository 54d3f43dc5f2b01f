"""The plot of ``dpc bench flux`` (ops_scripts/bench/flux.py), from its CSVs (matplotlib, Agg,
no display): ``fig8.png``, each g1 replica's output rate over time, the paper's Fig. 8.

Top: the primary dataflow, the paper's lines (dead, standby, loaded, replicated); bottom: the
secondary dataflow, which the paper does not draw. Each rate is a centred moving mean over a
tenth of a phase (a second at the full size); the kill and the two catch-ups are marked where the run made them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ops_scripts.bench.flux import PHASES
from ops_scripts.bench.plotting import figure, read_rows

__all__ = ["plot_fig8"]

PAPER = ("dead", "standby", "loaded", "replicated")
COLORS = {"dead": "#c03030", "standby": "#30a050", "loaded": "#d08020", "replicated": "#3060b0",
          "took over": "#d08020", "dead (b)": "#c03030", "standby (b)": "#30a050",
          "replicated (b)": "#3060b0"}
SMOOTH = 0.1  # of a phase: the moving mean's width (1 s at the full size)
START = -0.2  # the plot starts this many phases before the schedule's time 0


def _smooth(ts: list[float], ys: list[float], width: float) -> list[float]:
    """At each point, the mean of the rates within ``width`` / 2 of it."""
    out = []
    for t in ts:
        window = [y for s, y in zip(ts, ys, strict=True) if abs(s - t) <= width / 2]
        out.append(sum(window) / len(window))
    return out


def _marks(ax: Any, events: list[dict[str, str]], phase_s: float) -> None:
    kills = [float(e["t"]) for e in events if e["event"] == "kill"]
    marks = [("kill", kills)]
    for node, what in (("g1", "g1 catch-up"), ("g2", "g2 catch-up")):
        marks.append((what, [float(e["t"]) for e in events
                             if e["event"] == "restart" and e["process"].startswith(node)]))
    for what, ts in marks:
        if ts:
            ax.axvline(min(ts), color="k", lw=0.7, ls="--")
            ax.annotate(what, (min(ts), 1), xycoords=("data", "axes fraction"), fontsize=7,
                        xytext=(3, -10), textcoords="offset points")
    ax.set_xlim(START * phase_s, PHASES * phase_s)
    ax.set_ylim(bottom=0)


def plot_fig8(out: Path, phase_s: float) -> Path:
    """``out/fig8.png`` from ``out/rates.csv`` and ``out/events.csv``; returns its path."""
    rates = read_rows(out / "rates.csv")
    events = [e for e in read_rows(out / "events.csv") if e["event"]]
    fig = figure(10, 7)
    top, bottom = fig.add_subplot(2, 1, 1), fig.add_subplot(2, 1, 2)
    lines: dict[tuple[str, str], list[dict[str, str]]] = {}
    for r in rates:
        lines.setdefault((r["label"], r["replica"]), []).append(r)
    for (label, replica), rows in sorted(lines.items(), key=lambda kv: kv[0][1]):
        ts = [float(r["t"]) for r in rows]
        ys = _smooth(ts, [float(r["rate"]) for r in rows], SMOOTH * phase_s)
        shown = [i for i, t in enumerate(ts) if START * phase_s <= t <= PHASES * phase_s]
        ts, ys = [ts[i] for i in shown], [ys[i] for i in shown]
        ax = top if label in PAPER else bottom
        style = "-" if label in PAPER or label == "took over" else ":"
        ax.plot(ts, ys, style, color=COLORS[label], lw=1.2,
                label=f"{label} ({replica}, machine {rows[0]['machine']})")
    for ax, title in ((top, "primary dataflow: the F-Prod instances of the paper's Fig. 8"),
                      (bottom, "secondary dataflow (not in the paper's figure)")):
        _marks(ax, events, phase_s)
        ax.set_ylabel("tuples/s sent to g2", fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7, loc="lower left")
    bottom.set_xlabel(f"time (s) from the schedule's start; rates: centred mean over "
                      f"{SMOOTH * phase_s:g} s",
                      fontsize=8)
    fig.suptitle("F-Prod (g1 replica) output rate during a machine's failure and recovery",
                 fontsize=10)
    fig.tight_layout()
    png = out / "fig8.png"
    fig.savefig(png)
    return png
