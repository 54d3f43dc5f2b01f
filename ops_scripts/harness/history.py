"""Writing a run's history (the format: ``ops_scripts/check/history.py``).

The nemesis side of Jepsen's split: ``dpc run``, ``dpc inject`` and ``dpc simulate`` append
events through :class:`HistoryWriter` (flushed one by one, so a crashed harness leaves a
readable prefix); a fault is recorded with its resolved effects (:func:`fault_effects`),
which is what the checkers' outage model reads; :func:`merge_states` folds the replicas'
own state logs into it at the end of a run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from node.config.model import ClusterConfig
from node.procs.rundir import RunDir
from ops_scripts.check.history import read_history
from ops_scripts.harness.schedule import Fault, cut_pairs, impaired_pairs

__all__ = ["HistoryWriter", "fault_effects", "merge_states", "next_fault_id", "open_faults"]


def fault_effects(fault: Fault, config: ClusterConfig) -> dict[str, Any]:
    """What ``fault`` does to the cluster, as the checkers need it (JSON-ready)."""
    down = [fault.params["process"]] if fault.kind in ("kill", "pause") else []
    return {
        "cut": [list(p) for p in sorted(cut_pairs(fault, config))],
        "down": down,
        "impaired": [list(p) for p in sorted(impaired_pairs(fault))],
    }


class HistoryWriter:
    """Appends events to ``path``; ``clock()`` gives ``t`` (microseconds)."""

    def __init__(self, path: str | os.PathLike[str], clock: Callable[[], int]) -> None:
        self.path = Path(path)
        self._clock = clock
        self._f = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed by close())

    def record(self, event: str, **fields: Any) -> dict[str, Any]:
        entry = {"t": self._clock(), "event": event, **fields}
        self._f.write(json.dumps(entry, sort_keys=False) + "\n")
        self._f.flush()
        return entry

    def fault(self, fid: int, fault: Fault, config: ClusterConfig, net: str | None = None) -> None:
        """Record fault ``fid``; ``net`` names how a partition is made ("kernel" or
        "process": ``Nemesis.net``)."""
        how = {"net": net} if net is not None and fault.kind == "partition" else {}
        self.record("fault", id=fid, fault=fault.table(), describe=fault.describe(),
                    **fault_effects(fault, config), **how)

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_faults(rd: RunDir) -> dict[int, dict[str, Any]]:
    """The fault events of the run's history not yet healed (by id): what ``dpc inject``
    heals by name, and what tells ``dpc launch`` that a dead process was killed on purpose."""
    found: dict[int, dict[str, Any]] = {}
    if rd.history.exists():
        for e in read_history(rd.history):
            if e["event"] == "fault":
                found[e["id"]] = e
            elif e["event"] == "heal":
                found.pop(int(e.get("id", -1)), None)
            elif e["event"] == "heal_all":
                found.clear()
    return found


def next_fault_id(rd: RunDir) -> int:
    """One more than the largest fault id of the run's history (0 for the first)."""
    events = read_history(rd.history) if rd.history.exists() else []
    return 1 + max((e["id"] for e in events if e["event"] == "fault"
                    and isinstance(e.get("id"), int)), default=-1)


def merge_states(rd: RunDir, config: ClusterConfig) -> int:
    """Merge every replica's state log into the history, sorted by time (stable: events of
    equal time keep their order); returns the number of state events merged."""
    events = read_history(rd.history) if rd.history.exists() else []
    events = [e for e in events if e["event"] != "state"]  # idempotent
    states = []
    for node in config.nodes.values():
        for r in node.replicas:
            path = rd.replica_states(r.name)
            if not path.exists():
                continue
            for line in path.read_text().splitlines():
                if line.strip():
                    s = json.loads(line)
                    states.append({"t": s["t"], "event": "state", "process": r.name,
                                   "state": s["state"]})
    merged = sorted([*events, *states], key=lambda e: e["t"])
    tmp = rd.history.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(e) + "\n" for e in merged))
    tmp.replace(rd.history)
    return len(states)
