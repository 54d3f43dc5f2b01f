"""What a run recorded, read for ``dpc check``: the logs (:class:`History`) and the history.

Role: the I/O half of the checker (``ops_scripts/check/compose.py`` is the other). It reads every
log the cluster config implies from a run directory (layout and formats:
``node/procs/rundir.py``) into plain data, and the run history (``ops_scripts/check/history.py``), so
that the checkers stay pure functions of what is read here: the sources' logs (every
incarnation) and end records (and, for a source whose record says its file ran out, the
file's row count), the clients' logs with arrival times, the replicas' output logs,
recoveries and state changes (``states.jsonl``).

Invariants: never raises for a missing or unreadable log or history: it records why in
``History.problems`` (the subject it concerns -> the reason), and the verdicts that need it
become ``unknown``; anything but a reading error (a bug of ours) propagates, and
``run_check`` makes the whole run ``unknown``; a client's tuples and their arrival times are read together, row by
row (row n of a log is element n-1 here).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from node.config.model import ClusterConfig, SourceConfig
from node.errors import RunLogError
from node.procs.generators import make_generator
from node.procs.rundir import RunDir, read_source_log
from node.procs.runlog import read_log, read_tuples
from ops_scripts.check.history import read_history
from ops_scripts.check.liveness import live_subject
from ops_scripts.check.properties import client_subject, replica_subject
from ops_scripts.check.sources import source_subject
from ops_scripts.errors import HistoryError
from protocol.errors import DPCError
from protocol.tuples import Tuple

__all__ = ["History", "load_events", "load_history", "not_gathered"]


@dataclass
class History:
    """What a run logged. ``problems``: subject ("source s1", "client c1 (n1.out)",
    "replica n1a (n1.out)", or "history" for ``history.jsonl``) -> why it is missing or
    unreadable."""

    sources: dict[str, list[Tuple]] = field(default_factory=dict)
    clients: dict[str, list[Tuple]] = field(default_factory=dict)
    #: client -> the arrival time (µs) of each tuple of ``clients[client]``, row by row.
    arrivals: dict[str, list[int]] = field(default_factory=dict)
    replicas: dict[tuple[str, str], list[Tuple]] = field(default_factory=dict)
    #: (replica, stream) -> the output logs of its earlier incarnations, oldest first.
    earlier: dict[tuple[str, str], list[list[Tuple]]] = field(default_factory=dict)
    #: (replica, stream) -> the id after which each earlier incarnation's log begins (0 for
    #: the first; for a later one, the id its recovery restored).
    earlier_after: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    #: (replica, stream) -> the id after which its current log begins (its last recovery).
    restored_after: dict[tuple[str, str], int] = field(default_factory=dict)
    #: replica -> its state changes ``(t, state)`` from its own log (``states.jsonl``).
    states: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    #: source -> its end record as parsed (``RUN_DIR/sources/NAME.end.json``); absent: none.
    source_ends: dict[str, Any] = field(default_factory=dict)
    #: source -> why its end record, or its file's row count, could not be read.
    end_problems: dict[str, str] = field(default_factory=dict)
    file_problems: dict[str, str] = field(default_factory=dict)
    #: file source whose end record says "file" -> its file's row count.
    file_rows: dict[str, int] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)


#: What reading a log can raise: the readers' own errors (``RunLogError``, ``StateError``:
#: missing, corrupt, truncated), OSError, and what garbage that gets past their checks
#: raises in decoding (``orjson.JSONDecodeError`` is a ValueError; Arrow's errors derive
#: from ``pyarrow.ArrowException``, most also from ValueError or TypeError). Anything else
#: is a bug of ours: it propagates, and ``run_check`` makes the run unknown.
_READ_ERRORS = (DPCError, OSError, ValueError, TypeError, pa.ArrowException)


def load_history(rd: RunDir, config: ClusterConfig) -> History:
    """Read every log the config implies; record what is missing or unreadable."""
    h = History()

    def read(subject: str, path: Path, reader: Callable[..., Any], *args: Any) -> Any:
        if not path.exists():
            h.problems[subject] = f"missing log {path}"
            return None
        try:
            return reader(*args)
        except _READ_ERRORS as e:
            h.problems[subject] = f"unreadable log {path}: {e}"
            return None

    for s in config.sources:
        if (got := read(source_subject(s), rd.source_log(s), read_source_log, rd, s)) is not None:
            h.sources[s] = got
        _read_source_end(h, rd, config.sources[s])
    for c in config.clients.values():
        path = rd.client_log(c.name)
        if (rows := read(client_subject(c), path, read_log, path)) is not None:
            h.clients[c.name] = [t for _, t in rows]
            h.arrivals[c.name] = [arrival for arrival, _ in rows]
    for node in config.nodes.values():
        for r in node.replicas:
            for stream in node.outputs:
                path = rd.replica_output(r.name, stream)
                subject = replica_subject(r.name, stream)
                if (got := read(subject, path, read_tuples, path)) is not None:
                    h.replicas[(r.name, stream)] = got
                _read_recoveries(h, rd, r.name, stream, subject)
            _read_states(h, rd, r.name)
    return h


def _read_source_end(h: History, rd: RunDir, src: SourceConfig) -> None:
    """The source's end record (none: it never ended) and, when it says its file ran out,
    the file's row count, by the generator the source reads it with."""
    path = rd.source_end(src.name)
    if not path.exists():
        return
    try:
        h.source_ends[src.name] = end = json.loads(path.read_bytes())
    except (OSError, ValueError) as e:
        h.end_problems[src.name] = f"{path}: {e}"
        return
    if src.generator == "file" and isinstance(end, dict) and end.get("reason") == "file":
        try:
            h.file_rows[src.name] = sum(1 for _ in make_generator(src))
        except _READ_ERRORS as e:
            h.file_problems[src.name] = f"cannot read {src.file}: {e}"


def _read_states(h: History, rd: RunDir, replica: str) -> None:
    """A replica's state changes; a torn last line (killed mid-write) is dropped."""
    path = rd.replica_states(replica)
    if not path.exists():
        return  # the history's state events stand in (compose.py)
    try:
        lines = path.read_bytes().split(b"\n")
        rows = []
        for n, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                e = json.loads(line)
                rows.append((int(e["t"]), str(e["state"])))
            except (ValueError, KeyError, TypeError):
                if n == len(lines):  # no newline after it: torn by a kill
                    break
                raise RunLogError(f"{path}:{n}: not a state change: {line[:80]!r}") from None
    except (OSError, RunLogError) as e:
        h.problems[live_subject(replica)] = f"unreadable state log: {e}"
        return
    h.states[replica] = rows


def _read_recoveries(h: History, rd: RunDir, replica: str, stream: str, subject: str) -> None:
    """A replica's recoveries (``recoveries.jsonl``) and the logs of its earlier
    incarnations (``replica_output_before``), for replica-convergence."""
    path = rd.replica_recoveries(replica)
    records: list[dict[str, Any]] = []
    began: dict[int, int] = {}
    try:
        if path.exists():
            records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            restored = int(records[-1]["outputs"][stream])
            # Incarnation k began after the id its own recovery restored (a record per
            # restore; an incarnation killed before restoring emitted nothing, and has none).
            began = {int(r["incarnation"]): int(r["outputs"][stream]) for r in records
                     if "incarnation" in r}
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        h.problems[subject] = f"unreadable recovery log {path}: {e!r}"
        return
    logs, k = [], 1
    while (p := rd.replica_output_before(replica, stream, k)).exists():
        try:
            logs.append(read_tuples(p))
        except _READ_ERRORS as e:
            h.problems[subject] = f"unreadable log {p}: {e}"
            return
        k += 1
    if not records and not logs:
        return
    h.earlier[(replica, stream)] = logs
    h.earlier_after[(replica, stream)] = [began.get(j, 0) for j in range(1, len(logs) + 1)]
    # The current log begins after the last restore if the current incarnation made it: a
    # process pair's secondary that does not process (passive standby) restores only when
    # it takes over, so a later incarnation may have restored nothing (yet).
    if records and int(records[-1].get("incarnation", len(logs) + 1)) == len(logs) + 1:
        h.restored_after[(replica, stream)] = restored


def load_events(rd: RunDir, h: History) -> list[dict[str, Any]] | None:
    """The run's history events; None if the run has no ``history.jsonl`` (availability is
    then a report). An unreadable history is recorded in ``h.problems["history"]`` and
    gives ``[]``: the verdicts that need it become unknown, never valid."""
    if not rd.history.exists():
        return None
    try:
        return read_history(rd.history)
    except (HistoryError, OSError, ValueError) as e:  # malformed; unreadable; not UTF-8
        h.problems["history"] = f"unreadable history {rd.history}: {e}"
        return []


def not_gathered(rd: RunDir) -> str | None:
    """Why an ``--hosts ssh`` run cannot be judged yet (``dpc check`` and ``dpc reconcile``
    both ask; None: it can): a host's files are not in the run directory (``dpc collect RUN_DIR`` copies them and lists the host in ``gathered.json``).
    Plain JSON here: the checker imports no harness (tests/test_layers.py); the formats are
    ops_scripts/cluster/hosts/placement.py's (``hosts.json``) and ssh.py's."""
    try:
        placement = json.loads((rd.path / "hosts.json").read_text())
    except (OSError, ValueError):
        return None  # no placement (a run of before --hosts): its files are all here
    if not isinstance(placement, dict) or placement.get("mode") != "ssh":
        return None
    try:
        gathered = json.loads((rd.path / "gathered.json").read_text())["hosts"]
    except (OSError, ValueError, KeyError, TypeError):
        gathered = {}
    missing: dict[str, list[str]] = {}
    for process, host in sorted(dict(placement.get("where", {})).items()):
        if host not in gathered:
            missing.setdefault(host, []).append(process)
    if not missing:
        return None
    processes = ", ".join(p for ps in missing.values() for p in ps)
    return (f"hosts.json says ssh and the logs of {processes} (on {', '.join(missing)}) are "
            f"not gathered: run dpc collect {rd.path}")
