"""Run directories -> the Parquet tables of ``dpc reconcile`` (docs/reconcile.md, "The tables").

Role: the I/O edge of the reconciliation. :func:`ingest` reads what each run logged and
writes the tables ``runs``, ``sources``, ``logs`` and ``history`` under ``OUT/tables``, one
Parquet dataset directory per table (Spark reads the directory); the Spark modules never
open a run directory's logs themselves.

Theory of operation: the logs read are exactly those ``dpc check`` reads
(``ops_scripts/check/recorded.py`` ``load_history``): every incarnation of each source's
Arrow log, each client's tuple log, each replica's output log per output stream and, for a
replica that recovered (it has a ``recoveries.jsonl``), the logs of its earlier
incarnations (the tuple logs: ``node/procs/runlog.py``). Each log is streamed, batch by
batch (a tuple log record by record), into rows buffered up to :data:`ROWS_PER_GROUP` and
written as one row group of that log's own Parquet file. So
memory holds one row group, never a log (per process: runs that hold enough to be worth it
are read by a pool of processes, one run each at a time, each writing its own files).

Invariants:

* A row's ``line`` is its position as the existing readers give it: the log's row,
  element ``line - 1`` of ``runlog.read_log`` for a client or replica log, of
  ``read_source_log`` (every incarnation, in order) for a source; the file's line for the
  history (``read_history`` skips blank lines; their numbers stay unused).
* ``values`` is ``orjson.dumps(list(values))`` of the tuple's values as the readers decode
  them, Arrow-typed or JSON alike: one tuple, one text, in every table.
* A log ``dpc check`` would report unreadable (corrupt, not a log, missing) raises
  :class:`IngestError` naming the file (and the record and rows, or the batch); ``dpc
  check``'s tolerance is kept: a torn last record, a truncated last Arrow batch, is dropped.
* The tables appear whole or not at all: they are written aside and then replace what a
  previous ingest left.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from node.config.load import load_config
from node.config.model import ClusterConfig
from node.errors import ConfigError, RunLogError
from node.procs.rundir import RunDir
from node.procs.runlog import iter_log
from ops_scripts.check.history import iter_history
from ops_scripts.check.recorded import not_gathered
from ops_scripts.errors import HistoryError, IngestError
from protocol.tuples import Kind
from state.errors import StateError
from state.tuplelog import iter_log_batches, tuples_of

__all__ = [
    "PARALLEL_MIN_BYTES",
    "ROWS_PER_GROUP",
    "SCHEMAS",
    "IngestError",
    "Tables",
    "ingest",
    "replica_logs",
    "run_bytes",
    "run_files",
    "run_labels",
]

#: Rows per Parquet row group: what one log's writer holds in memory at most.
ROWS_PER_GROUP = 65_536
#: Runs holding together at least this many bytes are read by a process per core (a
#: process costs about half a second to start: below this, one reads them sooner).
PARALLEL_MIN_BYTES = 16_000_000

_S, _I32, _I64 = pa.string(), pa.int32(), pa.int64()
_TUPLE = [("kind", _S), ("id", _I64), ("time", _I64), ("tmax", _I64), ("values", _S)]

#: The tables :func:`ingest` writes and their columns (docs/reconcile.md).
SCHEMAS: Mapping[str, pa.Schema] = {
    "runs": pa.schema([("run", _S), ("path", _S), ("config", _S)]),
    "sources": pa.schema(
        [("run", _S), ("stream", _S), ("incarnation", _I32), ("line", _I64), *_TUPLE]),
    "logs": pa.schema(
        [("run", _S), ("process", _S), ("role", _S), ("stream", _S), ("incarnation", _I32),
         ("after", _I64), ("line", _I64), ("arrival", _I64), *_TUPLE]),
    "history": pa.schema([("run", _S), ("line", _I64), ("t", _I64), ("event", _S), ("body", _S)]),
}

_KIND_NAMES = {k: k.name for k in Kind}


@dataclass(frozen=True, slots=True)
class Tables:
    """The tables of one ingest: ``root`` is ``OUT/tables``; ``runs``: each run's label ->
    its run directory (absolute), in the order given."""

    root: Path
    runs: Mapping[str, Path]

    def path(self, table: str) -> Path:
        """The Parquet dataset directory of ``table`` (``root / table``)."""
        if not table or "/" in table or table.startswith("."):
            raise IngestError(f"table name {table!r} is not a plain name")
        return self.root / table


def run_files(tables: Tables, table: str) -> dict[str, list[tuple[Path, int]]]:
    """Each run's files of ``table`` with their row counts, from the Parquet footers on the
    driver (no scan: every file :func:`ingest` writes holds one log of one run, so a file's
    run is its first row's); runs without a row are absent."""
    files: dict[str, list[tuple[Path, int]]] = {}
    for path in sorted(tables.path(table).glob("*.parquet")):
        f = pq.ParquetFile(path)
        if f.metadata.num_rows:
            run = f.read_row_group(0, columns=["run"]).column(0)[0].as_py()
            files.setdefault(run, []).append((path, f.metadata.num_rows))
    return files


def run_labels(run_dirs: Sequence[Path]) -> dict[str, Path]:
    """Each run directory's label -> the directory (absolute, symlinks resolved), in the order
    given: its path relative to the common parent of all of them (one run: its name).
    Raises :class:`IngestError` for a path that is not a run directory (no directory, no
    ``config.toml``) and for two directories that would get the same label."""
    if not run_dirs:
        raise IngestError("no run directory given")
    dirs = []
    for d in run_dirs:
        p = Path(d).resolve()
        if not p.is_dir():
            raise IngestError(f"{d} is not a run directory (not a directory)")
        if not (p / "config.toml").is_file():
            raise IngestError(f"{d} is not a run directory (no config.toml in it)")
        if (why := not_gathered(RunDir(p))) is not None:  # --hosts ssh: logs on their hosts
            raise IngestError(why)
        dirs.append((Path(d), p))
    # The parents' common path, not the directories': a run nested in another keeps a name.
    parent = Path(os.path.commonpath([p.parent for _, p in dirs]))
    labels: dict[str, Path] = {}
    given: dict[str, Path] = {}
    for d, p in dirs:
        label = p.relative_to(parent).as_posix()
        if label in labels:
            raise IngestError(f"run directories {given[label]} and {d} would both be labelled "
                              f"{label!r} (the same directory given twice?)")
        labels[label], given[label] = p, d
    return labels


def ingest(run_dirs: Sequence[Path], out: Path, *,
           progress: Callable[[str], None] | None = None, jobs: int | None = None) -> Tables:
    """Write the tables of ``run_dirs`` under ``out / "tables"`` (replacing what a previous
    ingest left there) and return them; ``progress`` gets a line per run, in the order
    given. ``jobs``: processes reading runs at once (default: one per core, when the runs
    together hold at least :data:`PARALLEL_MIN_BYTES`; one run is read by one process)."""
    labels = run_labels(run_dirs)
    root = Path(out).resolve() / "tables"
    partial = root.with_name("tables.partial")
    shutil.rmtree(partial, ignore_errors=True)
    for table in SCHEMAS:
        (partial / table).mkdir(parents=True)
    work = [(i, label, str(path)) for i, (label, path) in enumerate(labels.items())]
    try:
        if jobs is None:
            big = sum(run_bytes(p) for p in labels.values()) >= PARALLEL_MIN_BYTES
            jobs = min(os.cpu_count() or 1, len(work)) if big else 1
        if jobs > 1:
            # spawn, not fork: the caller may hold a Spark session's threads (a fork copies
            # their locks held); each worker writes its runs' own files, so none collide.
            with ProcessPoolExecutor(min(jobs, len(work)),
                                     mp_context=multiprocessing.get_context("spawn")) as pool:
                done = [pool.submit(_ingest_one, str(partial), *w) for w in work]
                try:
                    for f in done:
                        _say(progress, f.result())
                finally:  # after an error, start no other run (a finished one ignores it)
                    for f in done:
                        f.cancel()
        else:
            for w in work:
                _say(progress, _ingest_one(str(partial), *w))
        _finish(partial)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)  # no half-written tables left behind
        raise
    shutil.rmtree(root, ignore_errors=True)
    partial.rename(root)
    return Tables(root, labels)


def run_bytes(run_dir: Path) -> int:
    """The bytes of every file under ``run_dir``: what decides whether a pool reads it."""
    return sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file())


def _say(progress: Callable[[str], None] | None, line: str) -> None:
    if progress is not None:
        progress(line)


def _ingest_one(partial: str, index: int, label: str, path: str) -> str:
    """One run's tables under ``partial`` (its files named by ``index``: no other run's
    collide); returns its progress line. A process pool's task: plain arguments."""
    rd = RunDir(Path(path))
    try:
        config = load_config(rd.config)
    except ConfigError as e:
        raise IngestError(f"run {label}: cannot load {rd.config}: {e}") from None
    sink = _Sink(Path(partial), f"part-{index:06d}")
    sink.write("runs", [(label, path, rd.config.read_text(encoding="utf-8"))])
    n_logs = _ingest_run(sink, label, rd, config)
    return (f"run {label}: {len(config.sources)} sources, {n_logs} logs, "
            f"{sink.rows:,} rows")


def _ingest_run(sink: _Sink, label: str, rd: RunDir, config: ClusterConfig) -> int:
    """Every log of one run into the sink; returns how many client and replica logs."""
    for s in config.sources:
        sink.write("sources", ((label, s, *row) for row in _source_rows(rd, s)))
    n_logs = 0
    for c in config.clients.values():
        rows = _log_rows(rd.client_log(c.name))
        sink.write("logs", ((label, c.name, "client", c.stream, 0, None, *r) for r in rows))
        n_logs += 1
    for node in config.nodes.values():
        for r in node.replicas:
            for stream in node.outputs:
                for k, after, path in replica_logs(rd, r.name, stream):
                    sink.write("logs", ((label, r.name, "replica", stream, k, after, *row)
                                        for row in _log_rows(path)))
                    n_logs += 1
    if rd.history.exists():
        sink.write("history", ((label, *row) for row in _history_rows(rd.history)))
    return n_logs


def replica_logs(rd: RunDir, replica: str, stream: str) -> list[tuple[int, int | None, Path]]:
    """``(incarnation, after, path)`` of each output log of a replica on ``stream``, the
    current one last. A replica without ``recoveries.jsonl`` never recovered: its current
    log alone, incarnation 1, ``after`` None. Else, as ``dpc check`` reads them, the earlier
    incarnations' logs too; ``after`` is the id after which each log begins (0: the start;
    None for a current incarnation that restored nothing)."""
    current = rd.replica_output(replica, stream)
    path = rd.replica_recoveries(replica)
    if not path.exists():
        return [(1, None, current)]
    try:
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        restored = int(records[-1]["outputs"][stream])
        began = {int(r["incarnation"]): int(r["outputs"][stream]) for r in records
                 if "incarnation" in r}
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        raise IngestError(f"unreadable recovery log {path} (stream {stream}): {e!r}") from None
    logs: list[tuple[int, int | None, Path]] = []
    while (p := rd.replica_output_before(replica, stream, len(logs) + 1)).exists():
        logs.append((len(logs) + 1, began.get(len(logs) + 1, 0), p))
    # The current log begins after the last restore if the current incarnation made it (a
    # process pair's secondary restores only when it takes over; dpc check's reading).
    mine = int(records[-1].get("incarnation", len(logs) + 1)) == len(logs) + 1
    logs.append((len(logs) + 1, restored if mine else None, current))
    return logs


# ---------------------------------------------------------------- readers (streaming)
def _values_text(values: Iterable[Any]) -> str:
    return orjson.dumps(list(values)).decode()


def _source_rows(rd: RunDir, source: str) -> Iterator[tuple[Any, ...]]:
    """``(incarnation, line, kind, id, time, tmax, values)`` of every tuple ``source``
    logged, as ``read_source_log`` reads them, batch by batch."""
    paths = rd.source_logs(source)
    if not paths:
        raise IngestError(f"missing log {rd.source_log(source)} (source {source!r} logged "
                          "nothing; dpc check calls its verdicts unknown)")
    line = 0
    for k, path in enumerate(paths):
        n = 0
        try:
            for n, batch in enumerate(iter_log_batches(path), start=1):  # noqa: B007 (n: error)
                for t in tuples_of(batch, f"tuple log {path}"):
                    line += 1
                    yield (k, line, _KIND_NAMES[t[0]], t[1], t[2], t[3], _values_text(t[4]))
        except (StateError, OSError, ValueError, TypeError, pa.ArrowException) as e:
            raise IngestError(f"unreadable log {path} (batch {n + 1}): {e}") from None


def _log_rows(path: Path) -> Iterator[tuple[Any, ...]]:
    """``(line, arrival, kind, id, time, tmax, values)`` of a client's or replica's tuple
    log, record by record, as ``runlog.read_log`` reads it (``line``: the row): a torn last
    record dropped, anything else unreadable raised naming the file and the record."""
    try:
        for batch in iter_log(path):
            arrival, row = batch.arrival, batch.row
            for t in batch.tuples():
                yield (row, arrival, t[0].name, t[1], t[2], t[3], _values_text(t[4]))
                row += 1
    except RunLogError as e:
        raise IngestError(f"missing or unreadable log: {e}") from None


def _history_rows(path: Path) -> Iterator[tuple[Any, ...]]:
    """``(line, t, event, body)`` of each event of a history, as ``read_history`` reads it
    (``iter_history``: blank lines skipped, any bad line refused with its number)."""
    try:
        for n, line, e in iter_history(path):
            event = e["event"] if isinstance(e["event"], str) else json.dumps(e["event"])
            yield (n, e["t"], event, line)
    except HistoryError as e:
        raise IngestError(str(e)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise IngestError(f"unreadable history {path}: {e}") from None


# ---------------------------------------------------------------- the writer
class _Sink:
    """One Parquet file per log in each table's directory (named ``PREFIX-K``), written a
    row group at a time."""

    def __init__(self, root: Path, prefix: str) -> None:
        self.root, self.prefix = root, prefix
        self.rows = 0
        self._files = 0

    def write(self, table: str, rows: Iterable[tuple[Any, ...]]) -> None:
        """The rows (in ``SCHEMAS[table]``'s column order) as a new file of ``table``."""
        schema = SCHEMAS[table]
        self._files += 1
        path = self.root / table / f"{self.prefix}-{self._files:05d}.parquet"
        with pq.ParquetWriter(path, schema) as writer:
            pending: list[tuple[Any, ...]] = []
            for row in rows:
                pending.append(row)
                if len(pending) >= ROWS_PER_GROUP:
                    self._flush(writer, schema, pending)
            self._flush(writer, schema, pending)

    def _flush(self, writer: pq.ParquetWriter, schema: pa.Schema,
               pending: list[tuple[Any, ...]]) -> None:
        if not pending:
            return
        columns = [pa.array(col, f.type) for col, f in zip(zip(*pending, strict=True), schema,
                                                                strict=True)]
        # One row group per flush (the writer's default limit is far above ROWS_PER_GROUP).
        writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=schema))
        self.rows += len(pending)
        pending.clear()


def _finish(root: Path) -> None:
    """Every table already has a file (``_Sink.write`` writes one even for an empty log),
    except ``history`` when no run has one: give it an empty file, so that Spark still finds
    the table's schema."""
    d = root / "history"
    if not any(d.iterdir()):
        pq.write_table(SCHEMAS["history"].empty_table(), d / "part-empty.parquet")
