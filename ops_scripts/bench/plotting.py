"""What the benches' plot modules share (cec_plots.py, ha_plots.py): a CSV read back as rows,
and a matplotlib figure drawn off screen (matplotlib imported only when a plot is made)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

__all__ = ["figure", "read_rows"]


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of the CSV at ``path``, as dicts of strings."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def figure(width: float, height: float) -> Any:
    """An off-screen figure of ``width`` x ``height`` inches."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig
