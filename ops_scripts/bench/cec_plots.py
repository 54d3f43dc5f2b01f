"""The plots of ``dpc bench cec`` (ops_scripts/bench/cec.py), from its CSVs: one PNG per
experiment, laid out like the CEC paper's figures 5-9 (matplotlib, Agg, no display)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ops_scripts.bench.plotting import figure, read_rows

__all__ = ["plot_all"]


def plot_all(out: Path) -> list[Path]:
    """Every plot whose CSV is in ``out``; returns the PNGs written."""
    done = []
    for name, draw in (("throughput", _throughput), ("targets", _targets), ("periods", _periods)):
        csv_path = out / f"{name}.csv"
        if csv_path.exists():
            fig = draw(read_rows(csv_path))
            png = out / f"{name}.png"
            fig.savefig(png)
            done.append(png)
    return done


def _throughput(rows: list[dict[str, str]]) -> Any:
    fig = figure(9, 3.6)
    loads = sorted({r["workload"] for r in rows})
    modes = ["none", "frames", "disk"]
    for i, wl in enumerate(loads):
        ax = fig.add_subplot(1, len(loads), i + 1)
        mine = {r["mode"]: r for r in rows if r["workload"] == wl}
        ax.bar(modes, [float(mine[m]["ratio_to_none"]) for m in modes], color=["#888", "#5a8", "#36a"])
        ax.axhline(0.9, ls="--", color="k", lw=0.8)
        ax.set_ylim(0, 1.15)
        ax.set_title(f"{wl} windows: results/s vs no CEC\n(records per result with CEC: "
                     f"{float(mine['disk']['records_per_result']):.2f})", fontsize=9)
        ax.set_ylabel("throughput / no CEC")
    fig.suptitle("CEC baseline cost, G_open only (paper Fig. 5; dashed: -10%)", fontsize=10)
    fig.tight_layout()
    return fig


def _targets(rows: list[dict[str, str]]) -> Any:
    fig = figure(12, 8)
    metrics = [("g_check", "G_checks written"), ("extent_records", "extent (records)"),
               ("ec_load_s", "EC-load time (s)"), ("replay_tuples", "tuples to replay")]
    base = next(r for r in rows if r["experiment"] == "open-only")
    series = (("Q", "target_rel", "Q (x open parts)"), ("U", "target_rel", "U (x a window's input)"),
              ("state", "keys", "groups (state size), G_open only"))
    for j, (exp, xkey, xlabel) in enumerate(series):
        mine = sorted((r for r in rows if r["experiment"] == exp), key=lambda r: float(r[xkey]))
        xs = [float(r[xkey]) for r in mine]
        for i, (key, label) in enumerate(metrics):
            ax = fig.add_subplot(3, 4, 4 * j + i + 1)
            ax.plot(xs, [float(r[key]) for r in mine], marker="o")
            if exp != "state":
                ax.axhline(float(base[key]), ls="--", color="k", lw=0.8)
            ax.set_xscale("log", base=2)
            ax.set_xlabel(xlabel, fontsize=8)
            ax.set_title(label, fontsize=9)
    fig.suptitle("Q, U and state size, crash in a window (paper Figs. 6-7; dashed: G_open "
                 "only)", fontsize=10)
    fig.tight_layout()
    return fig


def _periods(rows: list[dict[str, str]]) -> Any:
    fig = figure(9, 3.6)
    cec = sorted((r for r in rows if r["cec"] == "True"), key=lambda r: int(r["cp_ms"]))
    base = next(r for r in rows if r["cec"] == "False")
    xs = [int(r["cp_ms"]) for r in cec]
    ax = fig.add_subplot(1, 2, 1)
    ax.plot(xs, [float(r["response_mean_ms"]) for r in cec], marker="o", label="mean, CEC")
    ax.plot(xs, [float(r["response_p99_ms"]) for r in cec], marker="s", label="p99, CEC")
    ax.axhline(float(base["response_mean_ms"]), ls="--", color="k", lw=0.8, label="mean, no CEC")
    ax.set_xlabel("CP (ms), CI = 10 ms", fontsize=8)
    ax.set_title("response time of a closing step (ms)", fontsize=9)
    ax.legend(fontsize=7)
    ax = fig.add_subplot(1, 2, 2)
    ax.plot(xs, [int(r["extent_frames"]) for r in cec], marker="o")
    ax.set_xlabel("CP (ms)", fontsize=8)
    ax.set_title("extent at the end (frames)", fontsize=9)
    fig.suptitle("Checkpoint period (paper Figs. 8-9; Q = the open windows)", fontsize=10)
    fig.tight_layout()
    return fig
