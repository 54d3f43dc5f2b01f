"""``dpc log RUN_DIR NAME``: a client's or a replica's tuple log, one tuple per line.

Role: the human view of the logs of ``node/procs/runlog.py`` (Arrow IPC, which no text tool
reads). NAME is a client (``clients/NAME.arrow``) or a replica (``replicas/NAME/STREAM.arrow``,
and its earlier incarnations' ``STREAM.incarnation-K.arrow``). Which names and streams
there are comes from the files present, not the config, so that a run in progress or one
host's part of an ``--hosts ssh`` run reads alike. A replica with several logs (output
streams, incarnations) prints each under a heading, its earlier incarnations first;
``--stream`` picks one stream.

Each line is one row: its number (what the checker's evidence cites), the kind, id, time,
tmax, values (JSON) and arrival (µs); with ``--json`` one JSON object per line, ``{"log",
"row", "kind", "id", "time", "tmax", "values", "arrival"}`` (``log``: the file, relative
to RUN_DIR). ``--head N`` / ``--tail N``: the first / last N rows of each log (the tail
decodes only the records that hold them); ``--count``: the rows of each log, none decoded.

Exit codes: 0; 1 a log that cannot be read (what precedes the bad record is printed, then
the error); 2 no such run directory, name or stream (:class:`LogViewError`, listing the
known ones).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import orjson

from node.errors import RunLogError
from node.procs.rundir import RunDir
from node.procs.runlog import LogBatch, count_rows, head, iter_log, tail
from ops_scripts.errors import LogViewError

__all__ = ["LogFile", "logs_of", "run_log"]

_SUFFIX = ".arrow"
_INCARNATION = re.compile(r"^(?P<stream>.+)\.incarnation-(?P<k>[1-9][0-9]*)$")


@dataclass(frozen=True, slots=True)
class LogFile:
    """One log to show: ``title`` for its heading, ``path`` the file."""

    title: str
    path: Path


def _clients(rd: RunDir) -> list[str]:
    return sorted(p.name.removesuffix(_SUFFIX) for p in rd.clients.glob(f"*{_SUFFIX}"))


def _replica_logs(rd: RunDir, replica: str) -> dict[str, list[tuple[int, Path]]]:
    """Stream -> its logs as ``(incarnation, path)``, earlier incarnations first, the
    current one (incarnation 0 here) last."""
    logs: dict[str, list[tuple[int, Path]]] = {}
    for p in (rd.replicas / replica).glob(f"*{_SUFFIX}"):
        stem = p.name.removesuffix(_SUFFIX)
        m = _INCARNATION.match(stem)
        stream, k = (m["stream"], int(m["k"])) if m else (stem, 0)
        logs.setdefault(stream, []).append((k, p))
    return {s: sorted(ps, key=lambda kp: kp[0] or 1 << 62) for s, ps in sorted(logs.items())}


def _replicas(rd: RunDir) -> list[str]:
    if not rd.replicas.is_dir():
        return []
    return sorted(d.name for d in rd.replicas.iterdir()
                  if d.is_dir() and any(d.glob(f"*{_SUFFIX}")))


def logs_of(rd: RunDir, name: str, stream: str | None = None) -> list[LogFile]:
    """The logs ``dpc log`` shows for ``name`` (and ``stream``), in order;
    :class:`LogViewError` naming the known ones if there are none."""
    if not rd.path.is_dir():
        raise LogViewError(f"no run directory {rd.path}")
    if name in _clients(rd):
        if stream is not None:
            raise LogViewError(f"{name} is a client: it has one log, {rd.client_log(name)} "
                               "(--stream picks one of a replica's)")
        return [LogFile(name, rd.client_log(name))]
    replicas = _replicas(rd)
    if name not in replicas:
        raise LogViewError(
            f"no client or replica named {name!r} logged in {rd.path}; clients: "
            f"{', '.join(_clients(rd)) or 'none'}; replicas: {', '.join(replicas) or 'none'}")
    logs = _replica_logs(rd, name)
    if stream is not None:
        if stream not in logs:
            raise LogViewError(f"replica {name} logged no stream {stream!r}; its streams: "
                               f"{', '.join(logs)}")
        logs = {stream: logs[stream]}
    return [LogFile(f"{name} {s}" + (f" (incarnation {k}, before a restart)" if k else ""), p)
            for s, ps in logs.items() for k, p in ps]


def run_log(run_dir: Path, name: str, *, stream: str | None = None, first: int | None = None,
            last: int | None = None, count: bool = False, as_json: bool = False,
            out: TextIO | None = None, err: TextIO | None = None) -> int:
    """``dpc log``: print ``name``'s logs (module docstring) to ``out`` (default: stdout);
    ``first`` / ``last``: only that many rows of each (``--head`` / ``--tail``). Returns the
    exit code; :class:`LogViewError` for an unknown run directory, name or stream."""
    out = out or sys.stdout
    err = err or sys.stderr
    rd = RunDir(run_dir)
    files = logs_of(rd, name, stream)
    several = len(files) > 1
    try:
        for i, log in enumerate(files):
            rel = log.path.relative_to(rd.path).as_posix()
            if count:
                n = count_rows(log.path)
                if as_json:
                    out.write(orjson.dumps({"log": rel, "rows": n}).decode() + "\n")
                else:
                    out.write(f"{log.title}: {n}\n" if several else f"{n}\n")
                continue
            if several and not as_json:
                out.write(("\n" if i else "") + f"== {log.title}: {rel} ==\n")
            batches: Iterable[LogBatch]
            if last is not None:
                batches = tail(log.path, last)
            elif first is not None:
                batches = head(log.path, first)
            else:
                batches = iter_log(log.path)
            for batch in batches:
                out.write("".join(_json_lines(rel, batch) if as_json else _lines(batch)))
    except RunLogError as e:
        out.flush()
        print(f"dpc log: error: {e}", file=err)
        return 1
    return 0


def _lines(batch: LogBatch) -> list[str]:
    a, row = batch.arrival, batch.row
    return [f"row {row + i}  {t[0].name:<10} id={t[1]} time={t[2]} tmax={t[3]} "
            f"values={orjson.dumps(list(t[4])).decode()} arrival={a}\n"
            for i, t in enumerate(batch.tuples())]


def _json_lines(rel: str, batch: LogBatch) -> list[str]:
    a, row = batch.arrival, batch.row
    return [orjson.dumps({"log": rel, "row": row + i, "kind": t[0].name, "id": t[1],
                          "time": t[2], "tmax": t[3], "values": list(t[4]),
                          "arrival": a}).decode() + "\n"
            for i, t in enumerate(batch.tuples())]
