"""The history of a run: every fault and heal with its time, every replica's state
changes, the final state digests (Jepsen's history, STYLE.md 12).

Role: the nemesis side writes it (``runner.py`` for real processes, ``simulate.py`` in the
deterministic simulation) through :class:`HistoryWriter`; the checkers read it with
:func:`read_history` and analyse it with pure functions (:func:`final_digests`,
:func:`count_events` here, the outage model in ``ops_scripts/check/paths.py``). It lives in
``RUN_DIR/history.jsonl``, one JSON object per line, each with ``t`` (microseconds on the
cluster's clock: the wall clock for real processes, the virtual clock in simulation; the
clock of tuple times and client arrival times) and ``event``:

=========  ==================================================================================
event      fields
=========  ==================================================================================
start      ``config`` (path), ``name`` (scenario), ``seed`` (if random)
ready      the cluster is up and every client received a first tuple (before: start-up)
fault      ``id``, ``fault`` (the TOML table, ``schedule.Fault``), ``describe``, and its
           resolved effects: ``cut`` (directed pairs ``[a, b]``: messages from a to b
           vanish), ``down`` (processes killed or paused), ``impaired`` (directed pairs
           slowed: delay, bandwidth, slow reader)
heal       ``id`` of the fault it ends
heal_all   every fault still in force ends; the quiet period starts
state      ``process`` (a replica), ``state`` (STABLE, UP_FAILURE, STABILIZATION,
           RECOVERING): merged from the replicas' own logs by :func:`merge_states`
digest     ``process``, ``node``, ``state``, ``hashes`` (operator -> state digest) at the end
note       ``text``: something the harness could not do (e.g. a refused injection)
end        the cluster is stopped
=========  ==================================================================================

The client logs stay where they are (``RUN_DIR/clients``); the history and they share the
clock. Invariants: a writer flushes every event (a crashed harness leaves a readable
prefix); :func:`read_history` refuses a malformed line with its line number.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from node.config.model import ClusterConfig
from node.procs.rundir import RunDir
from ops_scripts.errors import HistoryError
from ops_scripts.harness.schedule import Fault, cut_pairs, impaired_pairs

__all__ = [
    "HistoryWriter",
    "count_events",
    "fault_effects",
    "final_digests",
    "merge_states",
    "read_history",
]


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

    def fault(self, fid: int, fault: Fault, config: ClusterConfig) -> None:
        self.record("fault", id=fid, fault=fault.table(), describe=fault.describe(),
                    **fault_effects(fault, config))

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_history(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The events of a history file, in file order."""
    events: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                e = json.loads(line)
            except ValueError as exc:
                raise HistoryError(f"{path}:{n}: not JSON: {exc}") from None
            if not isinstance(e, dict) or not isinstance(e.get("t"), int) or "event" not in e:
                raise HistoryError(f"{path}:{n}: expected an object with int t and event")
            events.append(e)
    return events


def final_digests(events: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Reading side (pure): each process's last ``digest`` event, ``process -> hashes``
    (operator -> state digest), for the replica-convergence verdict."""
    out: dict[str, dict[str, Any]] = {}
    for e in events:
        if e["event"] == "digest":
            out[str(e["process"])] = dict(e["hashes"])
    return out


def count_events(events: Iterable[Mapping[str, Any]], event: str) -> int:
    """Reading side (pure): how many events of kind ``event`` (e.g. ``"fault"``)."""
    return sum(1 for e in events if e["event"] == event)


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
