"""The tuple logs of clients and replicas: every tuple a client received, or a replica
emitted on an output stream, with when (issue 48; where they are: ``node/procs/rundir.py``).

Format: a file of concatenated Arrow IPC streams, one per write (a *record*). Each record
is a standard Arrow IPC stream, which ``pa.ipc.open_stream`` opens at its offset: a schema
message, one record batch in the layout of :class:`protocol.columns.Columns` (``kind``
int8, ``id``, ``time``, ``tmax`` int64, then ``v0 .. v{k-1}``, typed, or ``binary`` orjson
text for a column of mixed types; control tuples' cells null), and the end-of-stream
marker. The write's time in integer microseconds (a client's arrival, a replica's
emission) is the schema's metadata ``dpc.arrival`` (:data:`ARRIVAL_KEY`, decimal text):
every row of a record shares it.

Rows are numbered over the whole file, 1-based, in write order, and never renumbered (a
torn tail is only ever cut off the end): row n is element n-1 of :func:`read_log`, and
each :class:`LogBatch` says which row it begins at. The checker cites rows as evidence.

Writing: :class:`RunLogWriter` encodes a write's record whole and hands it to the OS
(flushed, and fsync-ed if asked) before :meth:`RunLogWriter.write` returns, so a killed
process loses at most the write in progress, which leaves at worst a torn last record. A
writer reopening a file cuts a torn last record off before appending: a torn record never
ends up in the middle.

Reading: every complete record is kept. A last record that the end of the file cuts short
(it begins as an Arrow message does, and its messages run past the end) is torn, and
dropped. Anything else unreadable (bytes that are not a record, a record of other
messages, a batch :func:`protocol.columns.decode_columns` refuses, no integer
``dpc.arrival``) raises :class:`RunLogError` naming the file, the record (1-based) and its
first row. A record whose lengths run past the end while a complete record follows it is
corrupt; a *last* record whose length field was corrupted that way reads as torn: the bytes
cannot tell the two apart. Record boundaries come from the messages' headers, without
decoding values (:func:`scan`): :func:`count_rows`, :func:`tail`, :func:`head` and
:class:`LogFollower` decode only the records they hand back.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import pyarrow as pa
import pyarrow.ipc as ipc

from node.errors import RunLogError
from protocol.columns import Columns, decode_columns, encode_columns
from protocol.errors import LocalProtocolError, RemoteProtocolError
from protocol.tuples import Tuple

__all__ = [
    "ARRIVAL_KEY",
    "LogBatch",
    "LogFollower",
    "Record",
    "RunLogWriter",
    "count_rows",
    "head",
    "iter_log",
    "read_log",
    "read_tuples",
    "scan",
    "tail",
]

#: The schema metadata key of a record's arrival (or emission) time, µs as decimal text.
ARRIVAL_KEY = b"dpc.arrival"
_CONTINUATION = b"\xff\xff\xff\xff"  # begins every Arrow IPC message
_EOS = _CONTINUATION + b"\x00\x00\x00\x00"  # ends every Arrow IPC stream
# What reading a message or a batch raises on bad bytes: Arrow's errors (ArrowInvalid is a
# ValueError, ArrowIOError an OSError) and EOFError for an end-of-stream marker met early.
_ARROW_ERRORS = (pa.ArrowException, OSError, ValueError, EOFError)


@dataclass(frozen=True, slots=True)
class Record:
    """Where one write lies in a log, read from its headers: bytes ``offset`` to ``end``,
    ``rows`` rows from row ``row`` on (1-based, over the file), all at ``arrival`` (µs);
    ``number``: its place among the file's records (1-based)."""

    number: int
    offset: int
    end: int
    row: int
    rows: int
    arrival: int


@dataclass(frozen=True, slots=True)
class LogBatch:
    """One record's rows read back (or a slice of them): all arrived at ``arrival`` (µs),
    the first is row ``row`` of the file (1-based)."""

    arrival: int
    row: int
    columns: Columns

    def tuples(self) -> list[Tuple]:
        return self.columns.to_tuples()

    def rows(self) -> list[tuple[int, Tuple]]:
        """``(arrival, tuple)`` of each row, in order."""
        a = self.arrival
        return [(a, t) for t in self.columns.to_tuples()]

    def slice(self, start: int, stop: int | None = None) -> LogBatch:
        return LogBatch(self.arrival, self.row + start, self.columns.slice(start, stop))


# ---------------------------------------------------------------------- writing
class RunLogWriter:
    """Append records to a tuple log (created with its parent directories if missing; a
    torn last record of an existing one cut off first). Not thread-safe; one writer per
    file."""

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.path = Path(path)
        self._where = f"tuple log {self.path}"
        self._fsync = fsync
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _cut_torn_tail(self.path)
            self._file = open(self.path, "ab")  # noqa: SIM115 (closed in close())
        except OSError as e:
            raise RunLogError(f"{self._where}: cannot open for appending: {e}") from None
        self._closed = False

    def write(self, batch: Columns | Sequence[Tuple], arrival: int) -> None:
        """Append ``batch`` as one record, all its rows at ``arrival`` (µs), and hand it to
        the OS. Nothing for an empty batch; :class:`RunLogError` (nothing written) for
        tuples that :meth:`Columns.from_tuples` refuses."""
        if self._closed:
            raise RunLogError(f"{self._where}: write after close")
        if type(arrival) is not int:
            raise RunLogError(f"{self._where}: arrival must be integer µs, got {arrival!r}")
        if not isinstance(batch, Columns):
            if not batch:
                return
            try:
                batch = Columns.from_tuples(batch)
            except LocalProtocolError as e:
                raise RunLogError(f"{self._where}: cannot log these tuples: {e}") from None
        if not batch.n:
            return
        stamped = batch.batch.replace_schema_metadata({ARRIVAL_KEY: b"%d" % arrival})
        body = encode_columns(Columns(stamped))
        try:
            self._file.write(body)
            self.flush()
        except OSError as e:
            raise RunLogError(f"{self._where}: write failed: {e}") from None

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

    def __enter__(self) -> RunLogWriter:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _cut_torn_tail(path: Path) -> None:
    """If ``path`` ends in a torn record (its writer was killed mid-write), cut it off."""
    try:
        f = pa.OSFile(str(path))
    except FileNotFoundError:
        return
    with f:
        size = f.size()
        end = 0
        for rec, _ in _records(f, size, f"tuple log {path}"):
            end = rec.end
    if end < size:
        os.truncate(path, end)


# ---------------------------------------------------------------------- record boundaries
def scan(path: str | os.PathLike[str]) -> Iterator[Record]:
    """Every complete record of a log, in order, from the headers alone (no value decoded);
    a torn last record is left out. :class:`RunLogError` if the file cannot be read, or
    at the first record that is not one."""
    where = f"tuple log {os.fspath(path)}"
    with _open(path, where) as f:
        for rec, _ in _records(f, f.size(), where):
            yield rec


def _open(path: str | os.PathLike[str], where: str) -> pa.NativeFile:
    try:
        return pa.OSFile(os.fspath(path))
    except OSError as e:  # (pyarrow's FileNotFoundError is an OSError too)
        raise RunLogError(f"{where}: cannot read: {e}") from None


def _records(f: pa.NativeFile, size: int, where: str, offset: int = 0, row: int = 1,
             number: int = 1, *, decode_after: int | None = None
             ) -> Iterator[tuple[Record, LogBatch | None]]:
    """The complete records from byte ``offset`` (a record's start: the ``number``-th, its
    first row ``row``) of the open file ``f`` of ``size`` bytes, each with its rows decoded
    if it holds rows after row ``decode_after`` (None: none decoded); ends before a torn
    record. A record to decode whole is not parsed twice: its decoding gives its rows."""
    f.seek(offset)
    while offset < size:
        whole = decode_after is not None and row > decode_after
        got = _record(f, size, where, offset, row, number, decode=whole)
        if got is None:
            return
        rec, batch = got
        if batch is None and decode_after is not None and rec.row + rec.rows - 1 > decode_after:
            batch = _decode(f, rec, where)  # it holds row decode_after and rows after it
        yield rec, batch
        offset, row, number = rec.end, row + rec.rows, number + 1
        f.seek(offset)  # (the caller may have read elsewhere in between)


def _record(f: pa.NativeFile, size: int, where: str, offset: int, row: int, number: int,
            *, decode: bool = False) -> tuple[Record, LogBatch | None] | None:
    """The record at ``offset`` (``f`` positioned there), read from its headers or, with
    ``decode``, decoded; None if the file's end cuts it short; :class:`RunLogError` if the
    bytes there are not a record."""
    what = f"{where}, record {number} (from row {row})"
    try:
        schema_msg = ipc.read_message(f)
        if schema_msg.type != "schema":
            raise RunLogError(f"{what}: expected a schema message first, got a {schema_msg.type}")
        batch_msg = ipc.read_message(f)
        if batch_msg.type != "record batch":
            raise RunLogError(f"{what}: expected a record batch after the schema, got a "
                              f"{batch_msg.type}")
        eos = f.read(len(_EOS))
    except _ARROW_ERRORS as e:
        if f.tell() >= size and _CONTINUATION.startswith(bytes(f.read_at(4, offset))):
            _check_torn(f, size, where, offset, what)  # the file ends inside its messages
            return None
        raise RunLogError(f"{what}: not an Arrow IPC stream: {_short(e)}") from None
    if eos != _EOS:
        if len(eos) < len(_EOS) and _EOS.startswith(eos):
            return None  # torn inside its end-of-stream marker
        raise RunLogError(f"{what}: expected the end-of-stream marker after the record batch "
                          "(one batch per record)")
    end = f.tell()
    if decode:
        batch = _decode_at(f, offset, end, where, number, row)
        return Record(number, offset, end, row, batch.columns.n, batch.arrival), batch
    try:
        schema = ipc.read_schema(schema_msg)
        rows = ipc.read_record_batch(batch_msg, schema).num_rows
    except _ARROW_ERRORS as e:
        raise RunLogError(f"{what}: unreadable record batch: {_short(e)}") from None
    return Record(number, offset, end, row, rows, _arrival(schema.metadata, what)), None


def _check_torn(f: pa.NativeFile, size: int, where: str, offset: int, what: str) -> None:
    """Of a record the file's end cuts short: :class:`RunLogError` if a complete record
    follows it (then a length of its was corrupted to run past the end, and the records
    after it would be dropped with it: a torn write is the last thing in a file)."""
    rest = bytes(f.read_at(size - offset, offset))
    k = rest.find(_EOS + _CONTINUATION, 1)
    while k >= 0:
        start = offset + k + len(_EOS)
        try:
            f.seek(start)
            later = _record(f, size, where, start, 0, 0)
        except RunLogError:  # the marker's bytes were values inside the record: no record
            later = None
        if later is not None:
            raise RunLogError(f"{what}: its lengths run past the end of the file, yet a "
                              f"complete record follows at byte {start}: corrupt")
        k = rest.find(_EOS + _CONTINUATION, k + 1)


def _arrival(meta: dict[bytes, bytes] | None, what: str) -> int:
    text = (meta or {}).get(ARRIVAL_KEY)
    if text is None or not text.removeprefix(b"-").isdigit():
        raise RunLogError(f"{what}: no integer {ARRIVAL_KEY.decode()} in its schema metadata "
                          f"(found {text!r:.40})")
    return int(text)


def _short(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text[:200]


def _decode(f: pa.NativeFile, rec: Record, where: str) -> LogBatch:
    return _decode_at(f, rec.offset, rec.end, where, rec.number, rec.row)


def _decode_at(f: pa.NativeFile, offset: int, end: int, where: str, number: int,
               row: int) -> LogBatch:
    """The rows of record ``number``, from byte ``offset`` to ``end``, validated
    (:func:`protocol.columns.decode_columns`), the first of them row ``row``."""
    try:
        columns = decode_columns(memoryview(f.read_at(end - offset, offset)))
    except RemoteProtocolError as e:
        # (decode_columns counts a batch's rows from 0.)
        raise RunLogError(f"{where}, record {number} (from row {row}; its batch's row k is "
                          f"row {row} + k): {e}") from None
    what = f"{where}, record {number} (from row {row})"
    return LogBatch(_arrival(columns.batch.schema.metadata, what), row, columns)


# ---------------------------------------------------------------------- reading
def iter_log(path: str | os.PathLike[str], *, after: int = 0) -> Iterator[LogBatch]:
    """Every complete record of a log, decoded, in order, streaming from the file (what it
    holds at once is one record, not the log); with ``after``, only the rows after row
    ``after`` (the records before them skipped undecoded, the first one sliced)."""
    where = f"tuple log {os.fspath(path)}"
    with _open(path, where) as f:
        for rec, batch in _records(f, f.size(), where, decode_after=after):
            if batch is not None:
                yield batch.slice(after + 1 - rec.row) if rec.row <= after else batch


def read_log(path: str | os.PathLike[str]) -> list[tuple[int, Tuple]]:
    """The whole log: ``(arrival, tuple)`` per row, in row order (row n is element n-1)."""
    return [row for batch in iter_log(path) for row in batch.rows()]


def read_tuples(path: str | os.PathLike[str]) -> list[Tuple]:
    """The log's tuples, in row order, without their arrivals."""
    return [t for batch in iter_log(path) for t in batch.tuples()]


def count_rows(path: str | os.PathLike[str]) -> int:
    """The rows of a log's complete records (0 if there is no file), from its headers."""
    if not os.path.exists(path):
        return 0
    return sum(rec.rows for rec in scan(path))


def head(path: str | os.PathLike[str], n: int) -> list[LogBatch]:
    """The first ``n`` rows of a log (fewer if it has fewer), decoding only their records."""
    out: list[LogBatch] = []
    left = n
    for batch in iter_log(path) if n > 0 else ():
        out.append(batch.slice(0, left) if batch.columns.n > left else batch)
        left -= out[-1].columns.n
        if left <= 0:
            break
    return out


def tail(path: str | os.PathLike[str], n: int) -> list[LogBatch]:
    """The last ``n`` rows of a log's complete records (fewer if it has fewer): the record
    boundaries read from the headers, only the records holding those rows decoded."""
    where = f"tuple log {os.fspath(path)}"
    if n <= 0:
        return []
    kept: deque[Record] = deque()
    held = 0
    with _open(path, where) as f:
        for rec, _ in _records(f, f.size(), where):
            kept.append(rec)
            held += rec.rows
            while held - kept[0].rows >= n:
                held -= kept.popleft().rows
        out = [_decode(f, rec, where) for rec in kept]
    if held > n:
        out[0] = out[0].slice(held - n)
    return out


class LogFollower:
    """A live log read as it grows: each :meth:`poll` returns the records completed since
    the last one (a record still being written, like a torn one, waits for the next poll).
    ``rows``: the rows read so far. For a file that only grows: one whose writer reopened it
    meanwhile (cutting a torn record) may be misread."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._where = f"tuple log {self.path}"
        self.offset = 0
        self.rows = 0
        self._next = 1  # the number of the next record

    def poll(self) -> list[LogBatch]:
        """The records completed since the last poll, decoded (none while there is no file)."""
        return self._read(decode=True)

    def skip(self) -> int:
        """Read past the records completed since the last poll without decoding them;
        returns :attr:`rows`."""
        self._read(decode=False)
        return self.rows

    def _read(self, *, decode: bool) -> list[LogBatch]:
        try:
            f = pa.OSFile(str(self.path))
        except FileNotFoundError:
            return []
        except OSError as e:
            raise RunLogError(f"{self._where}: cannot read: {e}") from None
        out: list[LogBatch] = []
        with f:
            size = f.size()
            if size < self.offset:
                raise RunLogError(f"{self._where}: shrank to {size} bytes after {self.offset} "
                                  "were read (rewritten while followed)")
            for rec, batch in _records(f, size, self._where, self.offset, self.rows + 1,
                                       self._next, decode_after=self.rows if decode else None):
                if batch is not None:
                    out.append(batch)
                self.offset, self.rows, self._next = rec.end, self.rows + rec.rows, rec.number + 1
        return out
