"""The run directory: where the processes of one run record what happened, for ``dpc check``.

Role: one place that fixes the layout of a run directory and the formats of its logs. Source,
client and replica processes write them; the checker (``ops_scripts/check/compose.py``) reads them.
Layout of ``RUN_DIR``::

    config.toml                     copy of the cluster config the run used
    run.json                        what ``dpc launch`` started, and when
    logs/<process>.log              each process's text log
    status/<process>.ready          marker: the process is up (:meth:`RunDir.mark_ready`)
    status/<process>.done           marker: a client saw its stream's end (:meth:`RunDir.mark_done`)
    status/<process>.pid            the pid of the process's current incarnation (:meth:`RunDir.write_pid`)
    status/<process>.skew           the process's clock skew in seconds (:meth:`RunDir.write_skew`)
    history.jsonl                   faults, heals, state changes (ops_scripts/check/history.py)
    scenario.toml                   the scenario ``dpc run`` played (ops_scripts/harness/scenario.py)
    sources/<source>.arrow          every tuple a source produced (Arrow IPC stream file);
    sources/<source>.<k>.arrow        ... and after its k-th restart (k = 1, 2, ...)
    sources/<source>.end.json       the source's end record: it ended its stream, when and why
    sources/<source>.pace.json      an event-time source's clock (node/procs/pacing.py EventClock)
    sources/<source>.trim.json      how far the source's output buffer is trimmed (its restart)
    clients/<client>.jsonl          every tuple a client received, with its arrival time
    clients/<client>.parquet        the same, written at the client's shutdown
    replicas/<replica>/<stream>.jsonl   every tuple a replica emitted on an output stream
    check.json                      the verdicts of ``dpc check``

Formats and invariants:

* ``sources/<source>.arrow`` is written with :class:`state.tuplelog.TupleLogWriter` (columns
  ``kind, id, time, tmax`` then the stream's attributes). It holds the source's data tuples,
  and a source flushes a batch to it *before* it sends that batch: every tuple any consumer
  can ever see is in the log (a crash loses at most tuples nobody received). A restarted
  source (node/procs/source.py) never rewrites a log: its k-th restart writes
  ``sources/<source>.<k>.arrow`` (:meth:`RunDir.source_log_of`), its ids going on after the
  last logged one. Read the whole log, every incarnation in order, with
  :func:`read_source_log` (or batch by batch, streaming, with :func:`iter_source_log`),
  which keeps every complete batch of a log whose writer was killed (and which a source
  name cannot confuse: names have no dots).
* ``sources/<source>.end.json`` (:func:`write_source_end`, :func:`read_source_end`),
  written atomically just before the source publishes its end of stream:
  ``{"t": <µs>, "reason": "limit" | "file" | "request", "last_id": <int>}`` ("request":
  SIGUSR1, ``Source.end_stream()``, or the process stopped before its end by SIGTERM).
  No file: the source never ended. A restarted source that finds it produces nothing more.
* ``sources/<source>.pace.json``: an event-time source's mapping of data time onto the
  run's clock, ``{"t_start": <µs>, "event_first": <µs>, "speedup": <float>}``, written
  (atomically) before its first tuple, so that a restarted source resumes the same mapping.
* ``sources/<source>.trim.json`` (:func:`write_source_trim`, :func:`read_source_trim`):
  ``{"trimmed_up_to": <id>, "acks": {<consumer>: <id>, ...}}``, the source's output buffer's
  trim point and the acks of the consumers heard from, as they were at one instant, written
  atomically about once a second while they change (and at a clean stop). It may lag the
  buffer (a restart then holds a little more), never run ahead of it. A restarted source
  holds for replay only the logged tuples after ``trimmed_up_to``; no file (an older run
  directory, or a kill before the first write): it holds the whole log.
* ``*.jsonl`` (clients and replicas): one JSON object per tuple, one per line, in the order
  received (or emitted)::

      {"kind": "STABLE", "id": 7, "time": 1200000, "tmax": 1190000, "values": ["a", 3],
       "arrival": 1215000}

  ``kind`` is a :class:`protocol.tuples.Kind` name (STABLE, TENTATIVE, UNDO, BOUNDARY,
  REC_DONE, ...); ``time``, ``tmax`` and ``arrival`` are integer microseconds; ``values`` is
  the positional attribute list (``[]`` for control tuples). :class:`JsonlTupleWriter` writes
  and flushes each batch to the OS before :meth:`JsonlTupleWriter.write` returns, so a
  killed process loses at most the batch being written; that leaves at worst a torn last
  line, which :func:`read_jsonl_tuples` drops (and which a writer reopening the file cuts
  off before appending). Any other unreadable line is corruption and raises
  :class:`RunLogError` naming the file and the line number. Line ``n`` of a file is always
  element ``n-1`` of what is read back: the checker cites line numbers as evidence.
* ``clients/<client>.parquet`` (:func:`write_client_parquet`): the JSONL fields as
  columns, in order: ``kind`` (string, the Kind name), ``id``, ``time``, ``tmax`` (int64),
  ``values`` (string: the JSON array of the values, since attributes of one tuple may have
  different types, which an Arrow list column cannot hold; Spark reads it with
  ``from_json``) and ``arrival`` (int64).

Process, source, client, replica and stream names become file names: they must be
non-empty and contain no path separator and no leading dot (``n1.out`` is fine).
"""

from __future__ import annotations

import contextlib
import math
import os
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import orjson

from node.errors import RunLogError
from protocol.tuples import Kind, Tuple, make_tuple

if TYPE_CHECKING:
    import pyarrow as pa

# pyarrow (and state.tuplelog, which needs it) is imported by the functions that read or
# write Arrow and Parquet: every process imports this module, and a replica writes JSONL
# only (start-up time: tests/node/procs/test_startup.py).

__all__ = [
    "END_REASONS",
    "JsonlTupleWriter",
    "RunDir",
    "SourceTrim",
    "decode_row",
    "iter_jsonl_tuples",
    "iter_source_batches",
    "iter_source_log",
    "read_client_parquet",
    "read_jsonl_tuples",
    "read_source_end",
    "read_source_log",
    "read_source_trim",
    "tail_jsonl_tuples",
    "write_client_parquet",
    "write_source_end",
    "write_source_trim",
]

#: The reasons a source ends its stream (``node/procs/pacing.py``'s EndReason values).
END_REASONS = ("limit", "file", "request")

_KIND_NAMES: tuple[str, ...] = tuple(k.name for k in Kind)
_KIND_BY_NAME: dict[str, Kind] = {k.name: k for k in Kind}
_FIELDS = ("kind", "id", "time", "tmax", "values", "arrival")
_INT_FIELDS = ("id", "time", "tmax", "arrival")
_PARQUET_COLUMNS = list(_FIELDS)


def _parquet_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([(f, pa.string() if f in ("kind", "values") else pa.int64())
                      for f in _FIELDS])


def _safe_name(what: str, name: str) -> str:
    if not name or "/" in name or "\\" in name or name.startswith(".") or "\0" in name:
        raise RunLogError(f"run directory: {what} name {name!r} cannot be a file name")
    return name


class RunDir:
    """Paths of one run directory (see the module docstring). Creates nothing but in
    :meth:`ensure`; every helper validates the name it turns into a file name."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.config = self.path / "config.toml"
        self.check_json = self.path / "check.json"
        self.logs = self.path / "logs"
        self.status = self.path / "status"
        self.sources = self.path / "sources"
        self.clients = self.path / "clients"
        self.replicas = self.path / "replicas"

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def record_config(self, text: str) -> bool:
        """Write ``config.toml`` (``text``: node/config/text.py) unless the run directory
        has one; False if it has one whose tables differ (processes of one run directory
        ran different configs: the caller says so). Atomic: processes starting together
        each write a whole file or none."""
        if self.config.exists():
            return self._same_tables(text)
        tmp = self.path / f".config.{os.getpid()}.tmp"
        tmp.write_text(text, encoding="utf-8")
        try:
            os.link(tmp, self.config)  # fails if another process's copy got there first
        except FileExistsError:
            return self._same_tables(text)
        finally:
            tmp.unlink()
        return True

    def _same_tables(self, text: str) -> bool:
        try:
            return tomllib.loads(self.config.read_text(encoding="utf-8")) == tomllib.loads(text)
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            return False

    def process_log(self, process: str) -> Path:
        return self.logs / f"{_safe_name('process', process)}.log"

    def source_log(self, source: str) -> Path:
        """The log of the source's first incarnation (:meth:`source_logs`: all of them)."""
        return self.source_log_of(source, 0)

    def source_log_of(self, source: str, incarnation: int) -> Path:
        """The log of one incarnation of a source: 0 the first, k after its k-th restart."""
        name = _safe_name("source", source)
        return self.sources / (f"{name}.arrow" if incarnation == 0 else f"{name}.{incarnation}.arrow")

    def source_logs(self, source: str) -> list[Path]:
        """The logs of every incarnation of a source so far, in order (none: it never ran)."""
        out: list[Path] = []
        while (p := self.source_log_of(source, len(out))).exists():
            out.append(p)
        return out

    def source_pace(self, source: str) -> Path:
        """An event-time source's clock (the module docstring)."""
        return self.sources / f"{_safe_name('source', source)}.pace.json"

    def source_trim(self, source: str) -> Path:
        """How far the source's output buffer is trimmed (the module docstring)."""
        return self.sources / f"{_safe_name('source', source)}.trim.json"

    def source_end(self, source: str) -> Path:
        """The source's end record (the module docstring); no file: it never ended."""
        return self.sources / f"{_safe_name('source', source)}.end.json"

    def source_spill(self, source: str) -> Path:
        """Where the source's output buffer spills past ``buffer_memory``
        (state/spill_list.py); emptied when the source starts and when it stops."""
        return self.sources / f"{_safe_name('source', source)}.spill"

    def client_log(self, client: str) -> Path:
        return self.clients / f"{_safe_name('client', client)}.jsonl"

    def client_parquet(self, client: str) -> Path:
        return self.clients / f"{_safe_name('client', client)}.parquet"

    def replica_output(self, replica: str, stream: str) -> Path:
        return (
            self.replicas / _safe_name("replica", replica) / f"{_safe_name('stream', stream)}.jsonl"
        )

    def replica_output_before(self, replica: str, stream: str, incarnation: int) -> Path:
        """The output log of an earlier incarnation (``1``: the first) of a replica that was
        restarted with ``--recover``; the current one is :meth:`replica_output`."""
        return self.replica_output(replica, stream).with_suffix(f".incarnation-{incarnation}.jsonl")

    def replica_spill(self, replica: str) -> Path:
        """Where the replica's SUnions spill what a replay needs beyond ``buffer_memory``
        (state/spill.py); emptied when the replica starts."""
        return self.replicas / _safe_name("replica", replica) / "spill"

    def replica_cec(self, replica: str) -> Path:
        """The replica's persistent CEC log (``checkpointing = "cec"``, node/replica/cec.py):
        kept across its restarts, read by ``--recover``."""
        return self.replicas / _safe_name("replica", replica) / "cec"

    def replica_recoveries(self, replica: str) -> Path:
        """JSONL: one line per recovery of ``replica`` (node/replica/recovery.py)."""
        return self.replicas / _safe_name("replica", replica) / "recoveries.jsonl"

    def replica_states(self, replica: str) -> Path:
        """JSONL: one line per consistency-state change of ``replica``, ``{"t", "state"}``
        (``t`` in microseconds of the cluster's clock); the run's history merges them."""
        return self.replicas / _safe_name("replica", replica) / "states.jsonl"

    @property
    def history(self) -> Path:
        """JSONL: the run's history (``ops_scripts/check/history.py``): faults, heals, state
        changes, final digests."""
        return self.path / "history.jsonl"

    def ensure(self) -> RunDir:
        """Create the directory and its ``logs``, ``status``, ``sources``, ``clients`` and
        ``replicas`` subdirectories (existing ones are kept). Returns ``self``."""
        for d in (self.path, self.logs, self.status, self.sources, self.clients, self.replicas):
            d.mkdir(parents=True, exist_ok=True)
        return self

    # Markers: empty files whose existence is the signal (cheap to poll from a launcher).
    def _marker(self, process: str, what: str) -> Path:
        return self.status / f"{_safe_name('process', process)}.{what}"

    def mark_ready(self, process: str) -> None:
        self.status.mkdir(parents=True, exist_ok=True)
        self._marker(process, "ready").touch()

    def clear_ready(self, process: str) -> None:
        """Forget ``process`` was ready (before restarting it)."""
        self._marker(process, "ready").unlink(missing_ok=True)

    def is_ready(self, process: str) -> bool:
        return self._marker(process, "ready").exists()

    def mark_done(self, process: str) -> None:
        self.status.mkdir(parents=True, exist_ok=True)
        self._marker(process, "done").touch()

    def is_done(self, process: str) -> bool:
        return self._marker(process, "done").exists()

    def pid_file(self, process: str) -> Path:
        """``status/<process>.pid``: the pid of the process's current incarnation, written by
        whoever started it (``ops_scripts/cluster/launch.py``), read by ``dpc inject RUN_DIR``."""
        return self._marker(process, "pid")

    def write_pid(self, process: str, pid: int) -> None:
        """Record ``pid`` as ``process``'s (replacing an earlier incarnation's)."""
        self.status.mkdir(parents=True, exist_ok=True)
        path = self.pid_file(process)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(f"{pid}\n")
        tmp.replace(path)  # a reader never sees a half-written pid

    def read_pid(self, process: str) -> int | None:
        """``process``'s recorded pid, or None if none was recorded; :class:`RunLogError`
        naming the file if it holds anything but a pid."""
        path = self.pid_file(process)
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise RunLogError(f"pid file {path}: cannot read: {e}") from None
        if not text.isdigit() or int(text) <= 0:
            raise RunLogError(f"pid file {path}: expected a pid, found {text[:40]!r}")
        return int(text)

    def skew_file(self, process: str) -> Path:
        """``status/<process>.skew``: the offset of ``process``'s clock (the clock fault, issue
        47), in seconds, written by the launcher (``ops_scripts/harness/nemesis.py``) before it
        sends the process SIGUSR2; read by the process at start and on SIGUSR2
        (``node/procs/entry.py``). No file: no skew."""
        return self._marker(process, "skew")

    def write_skew(self, process: str, seconds: float) -> None:
        """Record ``seconds`` (finite; 0: none) as ``process``'s clock offset, atomically."""
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
            raise RunLogError(f"skew of {process!r}: expected a finite number of seconds, "
                              f"got {seconds!r}")
        self.status.mkdir(parents=True, exist_ok=True)
        path = self.skew_file(process)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(f"{float(seconds)!r}\n")
        tmp.replace(path)  # a process woken by SIGUSR2 never reads half a number

    def read_skew(self, process: str) -> float:
        """``process``'s clock offset in seconds (0.0 without a file); :class:`RunLogError`
        naming the file if it holds anything but a finite number."""
        path = self.skew_file(process)
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            return 0.0
        except OSError as e:
            raise RunLogError(f"skew file {path}: cannot read: {e}") from None
        try:
            seconds = float(text)
        except ValueError:
            seconds = math.nan
        if not math.isfinite(seconds):
            raise RunLogError(f"skew file {path}: expected seconds, found {text[:40]!r}")
        return seconds

    @staticmethod
    def count_lines(path: str | os.PathLike[str]) -> int:
        """Complete lines in ``path`` (0 if it does not exist): tuples in a JSONL log."""
        n = 0
        try:
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    n += chunk.count(b"\n")
        except FileNotFoundError:
            return 0
        return n


def _encode(t: Tuple, arrival: int) -> dict[str, Any]:
    return {
        "kind": _KIND_NAMES[t[0]],
        "id": t[1],
        "time": t[2],
        "tmax": t[3],
        "values": t[4],
        "arrival": arrival,
    }


# Every line starts with this, and inside a JSON string its quotes would be escaped (\"): so
# in orjson's encoding of a list of lines, ``},{"kind":"`` occurs only between two lines.
_LINE_JOIN = b'},{"kind":"'
_LINE_BREAK = b'}\n{"kind":"'


def _encode_lines(tuples: Iterable[Tuple], arrival: int) -> bytes:
    """The JSONL lines of ``tuples`` (each ending in a newline), from one orjson call for
    the whole batch: a call per line cost more than the line (the replica's output log is
    on its data path)."""
    names = _KIND_NAMES
    rows = [
        {"kind": names[t[0]], "id": t[1], "time": t[2], "tmax": t[3], "values": t[4],
         "arrival": arrival}
        for t in tuples
    ]
    if not rows:
        return b""
    body = orjson.dumps(rows)
    return body[1:-1].replace(_LINE_JOIN, _LINE_BREAK) + b"\n"


def _cut_torn_tail(path: Path) -> None:
    """If ``path`` ends in a partial line (its writer was killed mid-write), cut it off."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if size == 0:
        return
    with open(path, "rb") as f:
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        end = size - 1
        chunk = 65536
        while end > 0:
            start = max(0, end - chunk)
            f.seek(start)
            k = f.read(end - start).rfind(b"\n")
            if k >= 0:
                end = start + k + 1
                break
            end = start
    os.truncate(path, end)


class JsonlTupleWriter:
    """Append tuples to a JSONL log (created with its parent directories if missing).

    Each :meth:`write` encodes the whole batch and hands it to the OS before returning, so a
    process killed afterwards loses nothing of it. Reopening a file whose last line was torn
    cuts that line off first, so that a restarted process never leaves a corrupt line in the
    middle. Not thread-safe; one writer per file.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.path = Path(path)
        self._fsync = fsync
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _cut_torn_tail(self.path)
            self._file = open(self.path, "ab")  # noqa: SIM115 (closed in close())
        except OSError as e:
            raise RunLogError(f"tuple log {self.path}: cannot open for appending: {e}") from None
        self._closed = False

    def write(self, tuples: Iterable[Tuple], arrival: int) -> None:
        """Append one line per tuple, all with ``arrival`` (microseconds), and flush."""
        if self._closed:
            raise RunLogError(f"tuple log {self.path}: write after close")
        try:
            body = _encode_lines(tuples, arrival)
        except (TypeError, IndexError, orjson.JSONEncodeError):
            raise self._encode_error(tuples, arrival) from None
        if not body:
            return
        try:
            self._file.write(body)
            self.flush()
        except OSError as e:
            raise RunLogError(f"tuple log {self.path}: write failed: {e}") from None

    def _encode_error(self, tuples: Iterable[Tuple], arrival: int) -> RunLogError:
        """Which tuple could not be encoded, found by encoding them one at a time."""
        for t in tuples:
            try:
                orjson.dumps(_encode(t, arrival))
            except (TypeError, IndexError, orjson.JSONEncodeError) as e:
                return RunLogError(f"tuple log {self.path}: cannot encode tuple {t!r} as JSON: {e}")
        return RunLogError(f"tuple log {self.path}: cannot encode a batch as JSON")

    def flush(self) -> None:
        """Hand buffered bytes to the OS (and fsync if asked). :meth:`write` already does."""
        if self._closed:
            return
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        """Flush and close. Idempotent."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            self._file.close()

    def __enter__(self) -> JsonlTupleWriter:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def decode_row(obj: Any) -> tuple[int, Tuple]:
    """One parsed line of a JSONL tuple log -> (arrival, tuple); ValueError saying what is
    wrong (what every reader of these logs accepts: this one function decides)."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, found {type(obj).__name__}")
    missing = [f for f in _FIELDS if f not in obj]
    if missing:
        raise ValueError(f"missing field(s) {', '.join(missing)}")
    kind = _KIND_BY_NAME.get(obj["kind"]) if isinstance(obj["kind"], str) else None
    if kind is None:
        raise ValueError(f"'kind' must be one of {', '.join(_KIND_NAMES)}, found {obj['kind']!r}")
    for f in _INT_FIELDS:
        v = obj[f]
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"{f!r} must be an integer, found {v!r}")
    values = obj["values"]
    if not isinstance(values, list):
        raise ValueError(f"'values' must be a list, found {values!r}")
    return obj["arrival"], make_tuple(kind, obj["id"], obj["time"], obj["tmax"], tuple(values))


def read_jsonl_tuples(path: str | os.PathLike[str]) -> list[tuple[int, Tuple]]:
    """Read a JSONL tuple log: ``[(arrival, tuple), ...]`` in file order.

    A last line without its newline that does not parse (a torn write) is dropped. Any other
    bad line raises :class:`RunLogError` naming the file and the 1-based line number.
    """
    return [row for rows in iter_jsonl_tuples(path) for row in rows]


def iter_jsonl_tuples(path: str | os.PathLike[str], batch: int = 65_536
                      ) -> Iterator[list[tuple[int, Tuple]]]:
    """:func:`read_jsonl_tuples` ``batch`` rows at a time, streaming from the file: what it
    holds at once is one batch, not the log (a client's log of a long run is millions of
    rows)."""
    p = Path(path)
    out: list[tuple[int, Tuple]] = []
    try:
        f = p.open("rb")
    except OSError as e:
        raise RunLogError(f"tuple log {p}: cannot read: {e}") from None
    with f:
        for n, line in enumerate(f, start=1):
            if not line.endswith(b"\n"):
                # The last line, torn: the writer was killed mid-line; that batch never fully
                # reached the OS. Unparsable, it is dropped.
                with contextlib.suppress(orjson.JSONDecodeError, ValueError):
                    out.append(decode_row(orjson.loads(line)))
                break
            try:
                out.append(decode_row(orjson.loads(line)))
            except (orjson.JSONDecodeError, ValueError) as e:
                text = line[:120].decode("utf-8", "replace")
                raise RunLogError(f"tuple log {p}, line {n}: corrupt line ({e}): {text!r}") from None
            if len(out) >= batch:
                yield out
                out = []
    if out:
        yield out


def tail_jsonl_tuples(path: str | os.PathLike[str], n: int) -> list[tuple[int, Tuple]]:
    """The last ``n`` complete rows of a JSONL tuple log (fewer if it has fewer), reading only
    the file's end: what a live log's reader polls (how fresh is what a client receives).
    A torn last line is left out; a bad complete line raises :class:`RunLogError`."""
    p = Path(path)
    size = 1024
    while True:
        try:
            with p.open("rb") as f:
                f.seek(0, os.SEEK_END)
                end = f.tell()
                f.seek(max(0, end - size))
                data = f.read()
        except OSError as e:
            raise RunLogError(f"tuple log {p}: cannot read: {e}") from None
        lines = data.split(b"\n")[:-1]  # the last piece is torn or empty
        whole = len(data) == end  # the window holds the file's start: every line is whole
        if not whole:
            lines = lines[1:]  # the first piece may start mid-line
        if len(lines) >= n or whole:
            break
        size *= 4
    out: list[tuple[int, Tuple]] = []
    for line in lines[-n:] if n else []:
        try:
            out.append(decode_row(orjson.loads(line)))
        except (orjson.JSONDecodeError, ValueError) as e:
            raise RunLogError(f"tuple log {p}, near its end: corrupt line ({e}): "
                              f"{line[:120].decode('utf-8', 'replace')!r}") from None
    return out


def write_client_parquet(
    jsonl_path: str | os.PathLike[str], parquet_path: str | os.PathLike[str]
) -> int:
    """Convert a client's JSONL log to Parquet (columns in the module docstring); returns the
    number of rows. The file appears atomically (written aside, then renamed)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = Path(parquet_path)
    tmp = target.with_name(target.name + ".tmp")
    schema = _parquet_schema()
    written = 0
    try:
        # One row group per batch read: a long run's log is never held whole (session 20: a
        # 10-minute run's client peaked at 823 MiB converting a million rows at once).
        with pq.ParquetWriter(tmp, schema) as writer:
            for rows in iter_jsonl_tuples(jsonl_path):
                columns: dict[str, list[Any]] = {name: [] for name in _PARQUET_COLUMNS}
                for arrival, t in rows:
                    columns["kind"].append(t.kind.name)
                    columns["id"].append(t.id)
                    columns["time"].append(t.time)
                    columns["tmax"].append(t.tmax)
                    columns["values"].append(orjson.dumps(t.values).decode())
                    columns["arrival"].append(arrival)
                writer.write_table(pa.Table.from_pydict(columns, schema=schema))
                written += len(rows)
        os.replace(tmp, target)
    except RunLogError:  # a corrupt line of the JSONL log: no half-written file is left
        tmp.unlink(missing_ok=True)
        raise
    except (OSError, pa.ArrowException) as e:
        tmp.unlink(missing_ok=True)
        raise RunLogError(f"client parquet {target}: cannot write: {e}") from None
    return written


def read_client_parquet(path: str | os.PathLike[str]) -> list[tuple[int, Tuple]]:
    """Read :func:`write_client_parquet` output back: ``[(arrival, tuple), ...]``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as e:
        raise RunLogError(f"client parquet {os.fspath(path)}: cannot read: {e}") from None
    if table.column_names != _PARQUET_COLUMNS:
        raise RunLogError(
            f"client parquet {os.fspath(path)}: expected columns {_PARQUET_COLUMNS}, "
            f"found {table.column_names}"
        )
    cols = [table.column(n).to_pylist() for n in _PARQUET_COLUMNS]
    out: list[tuple[int, Tuple]] = []
    for row, (kind, ident, time, tmax, values, arrival) in enumerate(zip(*cols, strict=True)):
        k = _KIND_BY_NAME.get(kind)
        if k is None:
            raise RunLogError(f"client parquet {os.fspath(path)}, row {row}: unknown kind {kind!r}")
        out.append((arrival, make_tuple(k, ident, time, tmax, tuple(orjson.loads(values)))))
    return out


def iter_source_log(run_dir: RunDir | str | os.PathLike[str], source: str) -> Iterator[list[Tuple]]:
    """Every tuple source ``source`` logged, batch by batch as it was flushed, oldest first,
    every incarnation in order, streaming (tolerates a killed writer: a truncated last batch
    of an incarnation is dropped). Raises :class:`RunLogError` at once if the log is missing."""
    from state.tuplelog import tuples_of

    return (tuples_of(batch) for batch in iter_source_batches(run_dir, source))


def iter_source_batches(run_dir: RunDir | str | os.PathLike[str], source: str) -> Iterator[pa.RecordBatch]:
    """:func:`iter_source_log` as Arrow record batches, undecoded (a restarted source reads
    only the columns it needs of a long log)."""
    from state.tuplelog import iter_log_batches

    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    paths = rd.source_logs(source)
    if not paths:
        raise RunLogError(f"source log {rd.source_log(source)}: missing (source {source!r} "
                          "logged nothing)")
    return (batch for path in paths for batch in iter_log_batches(path))


def read_source_log(run_dir: RunDir | str | os.PathLike[str], source: str) -> list[Tuple]:
    """The whole of :func:`iter_source_log` in one list (the checker's and the tests' read)."""
    return [t for batch in iter_source_log(run_dir, source) for t in batch]


@dataclass(frozen=True, slots=True)
class SourceTrim:
    """A source's persisted trim point (``sources/<source>.trim.json``): its buffer was
    trimmed up to data tuple ``trimmed_up_to``, and each consumer heard from had acked the
    id in ``acks``."""

    trimmed_up_to: int
    acks: dict[str, int]


def write_source_trim(run_dir: RunDir, source: str, trim: SourceTrim) -> None:
    """Record ``source``'s trim point (atomically: written aside, then renamed)."""
    path = run_dir.source_trim(source)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(orjson.dumps({"trimmed_up_to": trim.trimmed_up_to, "acks": trim.acks}))
        os.replace(tmp, path)
    except OSError as e:
        raise RunLogError(f"source trim record {path}: cannot write: {e}") from None


def read_source_trim(run_dir: RunDir | str | os.PathLike[str], source: str) -> SourceTrim | None:
    """``source``'s trim point, or None if it never recorded one; :class:`RunLogError`
    naming the file if it is not one."""
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    path = rd.source_trim(source)
    try:
        record = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as e:
        raise RunLogError(f"source trim record {path}: unreadable: {e}") from None

    def count(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    if (not isinstance(record, dict) or set(record) != {"trimmed_up_to", "acks"}
            or not count(record["trimmed_up_to"]) or not isinstance(record["acks"], dict)
            or not all(count(a) for a in record["acks"].values())):
        raise RunLogError(f"source trim record {path}: expected {{\"trimmed_up_to\": <id >= 0>, "
                          f"\"acks\": {{<consumer>: <id >= 0>, ...}}}}, found {record!r}")
    return SourceTrim(record["trimmed_up_to"], dict(record["acks"]))


def write_source_end(run_dir: RunDir, source: str, *, t: int, reason: str, last_id: int) -> None:
    """Record that ``source`` ended its stream (atomically: written aside, then renamed)."""
    if reason not in END_REASONS:
        raise RunLogError(f"source {source!r}: end reason {reason!r} is not one of {END_REASONS}")
    path = run_dir.source_end(source)
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(orjson.dumps({"t": t, "reason": reason, "last_id": last_id}))
        os.replace(tmp, path)
    except OSError as e:
        raise RunLogError(f"source end record {path}: cannot write: {e}") from None


def read_source_end(run_dir: RunDir | str | os.PathLike[str], source: str) -> dict[str, Any] | None:
    """``source``'s end record (``{"t", "reason", "last_id"}``), or None if it never ended;
    :class:`RunLogError` naming the file if it is not one."""
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    path = rd.source_end(source)
    try:
        record = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as e:
        raise RunLogError(f"source end record {path}: unreadable: {e}") from None
    ints = ("t", "last_id")
    if (not isinstance(record, dict) or set(record) != {"t", "reason", "last_id"}
            or record["reason"] not in END_REASONS
            or not all(isinstance(record[k], int) and not isinstance(record[k], bool) for k in ints)):
        raise RunLogError(f"source end record {path}: expected {{\"t\": <int>, \"reason\": "
                          f"one of {', '.join(END_REASONS)}, \"last_id\": <int>}}, found {record!r}")
    return record
