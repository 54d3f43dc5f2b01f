"""``dpc status [CLUSTER.toml | RUN_DIR]``: every replica's state and streams, from the
control planes (``GET /status``). Unreachable replicas are listed as such."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path
from typing import Any, TextIO

from node.config.model import ClusterConfig
from node.net.tls import control_url, url_context

__all__ = ["fetch_status", "print_status", "resolve_config"]


def fetch_status(config: ClusterConfig, replica: str, timeout: float = 1.0) -> dict[str, Any] | None:
    r = config.replica(replica)
    try:
        with urllib.request.urlopen(control_url(config, r, "status"),
                                    timeout=timeout, context=url_context(config)) as f:
            data: dict[str, Any] = json.load(f)
            return data
    except OSError:
        return None


def resolve_config(target: Path | None) -> Path:
    """A config file, a run directory (its config), or the latest run under ./runs."""
    if target is None:
        runs = sorted(Path("runs").glob("*/config.toml"), key=lambda p: p.stat().st_mtime)
        if not runs:
            raise FileNotFoundError("no CLUSTER.toml given and no run under ./runs")
        return runs[-1]
    if target.is_dir():
        return target / "config.toml"
    return target


def print_status(config: ClusterConfig, out: TextIO = sys.stdout) -> int:
    rows = [("replica", "node", "state", "in state", "inputs (upstream: last stable id)",
             "tuples in", "out", "tentative", "undo", "buffered")]
    unreachable = 0
    for node in config.nodes.values():
        for r in node.replicas:
            st = fetch_status(config, r.name)
            if st is None:
                unreachable += 1
                rows.append((r.name, node.name, "unreachable", "", "", "", "", "", "", ""))
                continue
            c = st["counters"]
            inputs = ", ".join(
                f"{s}<-{i['upstream'] or 'none'}:{i['last_stable_id']}" for s, i in st["inputs"].items()
            )
            rows.append((
                r.name, node.name, st["state"], f"{st['time_in_state_s']:.1f}s", inputs,
                str(sum(c["tuples_in"].values())), str(sum(c["tuples_out"].values())),
                str(sum(c["tentative_out"].values())), str(sum(c["undo_out"].values())),
                str(sum(st["gauges"]["buffer_tuples"].values())),
            ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(), file=out)
    return 1 if unreachable else 0
