"""The plots of ``dpc bench ha`` (ops_scripts/bench/ha.py), from its CSVs (matplotlib, Agg,
no display): ``bandwidth.png`` (overhead vs M per mode, log y, and recovery vs overhead:
the paper's Fig. 6), ``cpu.png`` (CPU overhead per mode and network), ``recovery.png``
(detection + the rest per mode and network at the client; upstream backup's re-processing
at the node vs the window: Table 7).

Rows whose mode does not use M (amnesia, active standby) are drawn flat across M."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ops_scripts.bench.plotting import figure, read_rows

__all__ = ["plot_all"]

MODES = ("amnesia", "passive_standby", "active_standby", "upstream_backup")
COLORS = {"amnesia": "#888888", "passive_standby": "#d08020", "active_standby": "#3060b0",
          "upstream_backup": "#30a050"}
DEFAULT_M = "100"  # the per-network bars: the M-modes at our default M


def plot_all(out: Path) -> list[Path]:
    """Every plot, from ``out/ha.csv`` and ``out/kills.csv``; returns the PNGs written."""
    rows = read_rows(out / "ha.csv")
    done = []
    for name, draw in (("bandwidth", _bandwidth), ("cpu", _cpu), ("recovery", _recovery)):
        png = out / f"{name}.png"
        draw(rows).savefig(png)
        done.append(png)
    return done


def _shape(r: dict[str, str]) -> str:
    return r["network"] + (f" W={r['window_s']} s" if r["window_s"] else "")


def _fig6_rows(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The paper's Fig. 6 network: the aggregate of W = 0.5 s (else the first measured)."""
    mine = [r for r in rows if r["network"] == "aggregate" and r["window_s"] == "0.5"]
    return mine or [r for r in rows if _shape(r) == _shape(rows[0])]


def _bandwidth(rows: list[dict[str, str]]) -> Any:
    fig = figure(11, 4.2)
    mine = _fig6_rows(rows)
    ms = sorted({int(r["m_ms"]) for r in mine if r["m_ms"]}) or [100]
    left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for mode in MODES:
        rs = sorted((r for r in mine if r["mode"] == mode), key=lambda r: int(r["m_ms"] or 0))
        if not rs:
            continue
        ys = [100 * float(r["bw_overhead"]) for r in rs]
        lo = [y - 100 * float(r["bw_min"]) for y, r in zip(ys, rs, strict=True)]
        hi = [100 * float(r["bw_max"]) - y for y, r in zip(ys, rs, strict=True)]
        if rs[0]["m_ms"]:
            xs = [int(r["m_ms"]) for r in rs]
            left.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, color=COLORS[mode],
                          label=mode)
        else:  # M plays no part: flat across
            left.errorbar(ms, ys * len(ms), yerr=[lo * len(ms), hi * len(ms)], ls="--",
                          capsize=3, color=COLORS[mode], label=f"{mode} (no M)")
        rec = [float(r["reprocess_ms"]) for r in rs]
        right.plot(ys, rec, marker="o", color=COLORS[mode], label=mode)
        for y, rv, r in zip(ys, rec, rs, strict=True):
            if r["m_ms"]:
                right.annotate(r["m_ms"], (y, rv), fontsize=7, xytext=(3, 3),
                               textcoords="offset points")
    left.set_yscale("log")
    left.set_xlabel("M, the pair's communication interval (ms)", fontsize=8)
    left.set_ylabel("HA bytes / data bytes (%)", fontsize=8)
    left.set_title("bandwidth overhead vs M (bars: spread over the window's slices)", fontsize=9)
    left.legend(fontsize=7)
    right.set_xscale("log")
    right.set_xlabel("bandwidth overhead (%), log", fontsize=8)
    right.set_ylabel("re-processing at the node (ms, median)", fontsize=8)
    right.set_title("recovery vs overhead, labels: M in ms (paper Fig. 6)", fontsize=9)
    right.legend(fontsize=7)
    fig.suptitle(f"{_shape(mine[0])}: two sources of 1,000 tuples/s", fontsize=10)
    fig.tight_layout()
    return fig


def _default_rows(rows: list[dict[str, str]]) -> dict[str, dict[str, dict[str, str]]]:
    """Per network shape, per mode: its row at no M or at the default M."""
    out: dict[str, dict[str, dict[str, str]]] = {}
    for r in rows:
        if r["m_ms"] in ("", DEFAULT_M):
            out.setdefault(_shape(r), {})[r["mode"]] = r
    return out


def _bars(ax: Any, table: dict[str, dict[str, dict[str, str]]], value: Any,
          spread: Any = None) -> None:
    shapes = list(table)
    width = 0.8 / len(MODES)
    for j, mode in enumerate(MODES):
        xs = [i + (j - 1.5) * width for i, s in enumerate(shapes) if mode in table[s]]
        rs = [table[s][mode] for s in shapes if mode in table[s]]
        if not rs:
            continue
        ys = [value(r) for r in rs]
        err = None
        if spread is not None:
            err = [[y - spread(r)[0] for y, r in zip(ys, rs, strict=True)],
                   [spread(r)[1] - y for y, r in zip(ys, rs, strict=True)]]
        ax.bar(xs, ys, width, yerr=err, capsize=2, color=COLORS[mode], label=mode)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels([s.replace(" W=", "\nW=") for s in shapes], fontsize=8)
    ax.legend(fontsize=7)


def _cpu(rows: list[dict[str, str]]) -> Any:
    fig = figure(9, 3.8)
    ax = fig.add_subplot(1, 1, 1)
    table = _default_rows([r for r in rows if r["cpu_overhead"]])

    def pct(key: str) -> Any:
        return lambda r: 100 * float(r[key])

    _bars(ax, table, pct("cpu_overhead"),
          lambda r: (pct("cpu_overhead_min")(r), pct("cpu_overhead_max")(r)))
    ax.axhline(0, color="k", lw=0.6)
    ax.set_ylabel("CPU of the pair / amnesia's primary - 1 (%)", fontsize=8)
    ax.set_title(f"failure-free CPU overhead (M = {DEFAULT_M} ms where used; bars: spread "
                 "over slices; a shared machine)", fontsize=9)
    fig.tight_layout()
    return fig


def _recovery(rows: list[dict[str, str]]) -> Any:
    fig = figure(12, 4.2)
    ax = fig.add_subplot(1, 2, 1)
    table = _default_rows(rows)
    _bars(ax, table, lambda r: float(r["recovery_ms"]),
          lambda r: (float(r["recovery_min_ms"]), float(r["recovery_max_ms"])))
    for i, s in enumerate(table):  # the detection inside each bar
        for j, mode in enumerate(MODES):
            if mode in table[s]:
                ax.plot([i + (j - 1.5) * 0.2 - 0.1, i + (j - 1.5) * 0.2 + 0.1],
                        [float(table[s][mode]["detection_ms"])] * 2, color="k", lw=1)
    ax.set_ylabel("ms", fontsize=8)
    ax.set_title("kill -> new result at the client (median, min-max)\nblack: the detection; "
                 "above it: redirect + re-processing + path", fontsize=9)
    ax = fig.add_subplot(1, 2, 2)
    for mode, ls in (("upstream_backup", "-"), ("passive_standby", ":")):
        by_m: dict[str, list[dict[str, str]]] = {}
        for r in rows:
            if r["mode"] == mode and r["network"] == "aggregate":
                by_m.setdefault(r["m_ms"], []).append(r)
        for m, rs in sorted(by_m.items(), key=lambda kv: int(kv[0] or 0)):
            rs.sort(key=lambda r: float(r["window_s"]))
            if len(rs) < 2:
                continue
            ys = [float(r["reprocess_ms"]) for r in rs]
            ax.errorbar([float(r["window_s"]) for r in rs], ys,
                        yerr=[[y - float(r["reprocess_min_ms"]) for y, r in zip(ys, rs, strict=True)],
                              [float(r["reprocess_max_ms"]) - y for y, r in zip(ys, rs, strict=True)]],
                        ls=ls, marker="o", capsize=2, label=f"{mode} M={m} ms")
    ax.set_xlabel("aggregate window W (s): the state's span", fontsize=8)
    ax.set_ylabel("re-processing at the node: first new result - detection (ms)", fontsize=8)
    ax.set_title("re-processing vs state size (paper Table 7)", fontsize=9)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "measured at the full size only\n(W = 0.5, 1, 2 s)", ha="center",
                va="center", transform=ax.transAxes, fontsize=9)
    fig.tight_layout()
    return fig
