"""Persistent tuple logs: what sources record, in a format Spark and pyarrow read.

Columns: ``kind`` (int8, the :class:`protocol.tuples.Kind` wire value), ``id``, ``time``,
``tmax`` (int64), then one column per attribute of the stream, named after it. The stream
schema is also stored in the Arrow schema metadata (``dpc.schema``), so a reader gets the
attribute names back even for a log without rows.

:class:`TupleLogWriter` / :func:`read_tuple_log` (or :func:`iter_tuple_log`, batch by
batch, or :func:`iter_log_batches`, the batches undecoded): an append-only Arrow IPC *stream* file, one record batch per flush (every
``flush_every`` tuples, and at close). Each flush goes straight to the OS, so a crashed
process loses at most the tuples not flushed yet; the reader keeps every complete batch and
drops a truncated last one.

Limitations (the price of inferring types): attribute types are inferred by Arrow from the
values unless ``types`` are given. A column mixing ints and floats comes back as floats;
a column mixing, say, ints and strings is refused with a :class:`StateError` naming it. In
a :class:`TupleLogWriter` the first flush fixes each column's type, so a column that is
all None in the first batch would be typed null and refuse later values: pass ``types``
when that can happen. Control tuples carry no values; their attribute cells are null and
read back as ``()``. Attributes may not be named like the four header columns.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from itertools import repeat
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson
import pyarrow as pa

from protocol.tuples import KINDS, Kind, Schema, Tuple, make_tuple

from .errors import StateError

__all__ = [
    "HEADER_COLUMNS",
    "TupleLogWriter",
    "iter_log_batches",
    "iter_tuple_log",
    "read_tuple_log",
    "tuples_of",
]

HEADER_COLUMNS = ("kind", "id", "time", "tmax")
_HEADER_TYPES = (pa.int8(), pa.int64(), pa.int64(), pa.int64())
_SCHEMA_KEY = b"dpc.schema"
_LAST_DATA_KIND = int(Kind.TENTATIVE)
_CONTINUATION = b"\xff\xff\xff\xff"  # starts every Arrow IPC message
_EOS = _CONTINUATION + b"\x00\x00\x00\x00"  # what a cleanly closed IPC stream ends with


class TupleLogWriter:
    """Append tuples to an Arrow IPC stream file (created, or truncated, on open)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        stream_schema: Sequence[str],
        *,
        flush_every: int = 1000,
        types: Sequence[pa.DataType] | None = None,
        fsync: bool = False,
    ) -> None:
        self.path = Path(path)
        self._where = f"tuple log {self.path}"
        self.schema = _check_schema(self._where, stream_schema, types)
        if flush_every < 1:
            raise StateError(f"{self._where}: flush_every must be >= 1, got {flush_every}")
        self._flush_every = flush_every
        self._types = types
        self._fsync = fsync
        self._pending: list[Tuple] = []
        # Unbuffered: each write of the Arrow writer reaches the OS at once.
        self._file = open(self.path, "wb", buffering=0)  # noqa: SIM115 (closed in close())
        # The Arrow stream writer and schema, made at the first flush.
        self._writer: Any = None
        self._arrow_schema: pa.Schema | None = None
        self._closed = False

    def append(self, tuples: Iterable[Tuple]) -> None:
        """Queue tuples; flush once ``flush_every`` of them are queued."""
        if self._closed:
            raise StateError(f"{self._where}: append after close")
        self._pending.extend(tuples)
        if len(self._pending) >= self._flush_every:
            self.flush()

    def flush(self) -> None:
        """Write the queued tuples as one record batch. If they cannot be encoded, raise
        :class:`StateError` and keep them queued (nothing is dropped silently)."""
        if not self._pending:
            return
        arrays = _arrays(self._where, self.schema, self._pending, self._types)
        self._write(arrays)
        self._pending = []

    def close(self) -> None:
        """Flush, end the stream, close the file. Idempotent."""
        if self._closed:
            return
        try:
            self.flush()
            if self._writer is None:  # nothing logged: still record the schema
                self._write(_arrays(self._where, self.schema, [], self._types))
            self._writer.close()
        finally:
            self._closed = True
            self._file.close()

    def __enter__(self) -> TupleLogWriter:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _write(self, arrays: list[pa.Array]) -> None:
        if self._writer is None:
            self._arrow_schema = _arrow_schema(self.schema, arrays)
            self._writer = pa.ipc.new_stream(self._file, self._arrow_schema)
            # The first batch fixes the column types for every later one.
            self._types = [a.type for a in arrays[len(HEADER_COLUMNS) :]]
        self._writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=self._arrow_schema))
        if self._fsync:
            os.fsync(self._file.fileno())


def read_tuple_log(
    path: str | os.PathLike[str], *, strict: bool = False
) -> tuple[Schema, list[Tuple]]:
    """Read a :class:`TupleLogWriter` file: every complete batch, oldest first.

    A truncated last batch (a crash mid-flush) is dropped, and a file cut before its first
    batch is complete reads as an empty log with schema ``()``. With ``strict=True`` any
    sign of a crash (truncation, no end-of-stream marker) raises :class:`StateError`.
    Bytes that are not an Arrow IPC stream always raise.
    """
    where = f"tuple log {os.fspath(path)}"
    data = Path(path).read_bytes()
    if strict and not data.endswith(_EOS):
        raise StateError(f"{where}: the writer did not close it (no end-of-stream marker)")
    reader = _open_stream(where, pa.BufferReader(data), data[:4], strict)
    if reader is None:
        return (), []
    batches = list(_record_batches(where, reader, strict))
    return _from_table(where, pa.Table.from_batches(batches, schema=reader.schema))


def iter_tuple_log(path: str | os.PathLike[str]) -> Iterator[list[Tuple]]:
    """:func:`read_tuple_log` (not strict) one record batch at a time, streaming from the
    file: what it holds at once is one batch, not the log (a long-running source's log can
    be far larger than what its restart keeps)."""
    where = f"tuple log {os.fspath(path)}"
    return (tuples_of(batch, where) for batch in iter_log_batches(path))


def iter_log_batches(path: str | os.PathLike[str]) -> Iterator[pa.RecordBatch]:
    """The log's record batches as Arrow holds them, streaming, not decoded (as
    :func:`iter_tuple_log` reads them: a truncated last batch ends the log): for a reader
    that needs only some columns or some rows, and decodes those with :func:`tuples_of`
    (a restarted source checks a long log's ids column by column, ``node/procs/source.py``).
    Columns that are not a tuple log's raise :class:`StateError` before the first batch."""
    where = f"tuple log {os.fspath(path)}"
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(0)
        reader = _open_stream(where, f, head, strict=False)
        if reader is None:
            return
        _stream_schema(where, reader.schema)
        yield from _record_batches(where, reader, strict=False)


def tuples_of(batch: pa.RecordBatch, where: str = "tuple log") -> list[Tuple]:
    """The tuples of one record batch of a tuple log (of :func:`iter_log_batches`)."""
    return _from_table(where, pa.Table.from_batches([batch]))[1]


def _open_stream(where: str, source: Any, head: bytes, strict: bool) -> Any:
    """An IPC stream reader over ``source`` (whose first bytes are ``head``), or None for a
    file cut inside its first message (the crash hit the first flush: an empty log)."""
    try:
        return pa.ipc.open_stream(source)
    except (pa.ArrowInvalid, OSError) as e:
        # Other bytes do not even begin like an IPC message (empty data counts as such a
        # prefix).
        if not strict and _CONTINUATION.startswith(head):
            return None
        raise StateError(f"{where}: not an Arrow IPC stream of tuples: {e}") from None


def _record_batches(where: str, reader: Any, strict: bool) -> Iterator[pa.RecordBatch]:
    """Every complete record batch; a truncated last one ends the log (raises if strict)."""
    n = 0
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            return
        except (pa.ArrowInvalid, OSError) as e:
            if strict:
                raise StateError(f"{where}: truncated after {n} batches: {e}") from None
            return
        n += 1
        yield batch


# ---------------------------------------------------------------------- helpers
def _check_schema(where: str, names: Sequence[str], types: Sequence[pa.DataType] | None) -> Schema:
    schema = tuple(names)
    clash = sorted(set(schema) & set(HEADER_COLUMNS))
    if clash or len(set(schema)) != len(schema):
        raise StateError(
            f"{where}: attribute names {schema} must be unique and differ from the header "
            f"columns {HEADER_COLUMNS}" + (f" (clash: {clash})" if clash else "")
        )
    if types is not None and len(types) != len(schema):
        raise StateError(f"{where}: {len(types)} types given for {len(schema)} attributes")
    return schema


def _arrays(
    where: str, schema: Schema, tuples: list[Tuple], types: Sequence[pa.DataType] | None
) -> list[pa.Array]:
    n = len(schema)
    pad = (None,) * n
    rows: list[tuple[Any, ...]] = []
    for t in tuples:
        v = t[4]
        if len(v) != n:
            if v or t[0] <= _LAST_DATA_KIND:
                raise StateError(
                    f"{where}: tuple id {t[1]} has {len(v)} values; the stream {schema} has {n}"
                )
            v = pad  # a control tuple: no values
        rows.append(v)
    arrays = [
        pa.array([int(t[0]) for t in tuples], _HEADER_TYPES[0]),
        *(pa.array([t[c] for t in tuples], _HEADER_TYPES[c]) for c in (1, 2, 3)),
    ]
    columns = list(zip(*rows, strict=True)) if rows else [()] * n
    for c, name in enumerate(schema):
        try:
            arrays.append(pa.array(columns[c], None if types is None else types[c]))
        except (pa.ArrowException, OverflowError) as e:
            fixed = "" if types is None else f" (the log's type for it is {types[c]})"
            raise StateError(f"{where}: cannot store column {name!r}{fixed}: {e}") from None
    return arrays


def _arrow_schema(schema: Schema, arrays: list[pa.Array]) -> pa.Schema:
    names = (*HEADER_COLUMNS, *schema)
    return pa.schema(
        [pa.field(name, a.type) for name, a in zip(names, arrays, strict=True)],
        metadata={_SCHEMA_KEY: orjson.dumps(list(schema))},
    )


def _stream_schema(where: str, arrow_schema: pa.Schema) -> Schema:
    """The stream schema of a tuple log's Arrow schema (header columns first, then one per
    attribute, as recorded in its metadata), or :class:`StateError`."""
    names = arrow_schema.names
    h = len(HEADER_COLUMNS)
    if tuple(names[:h]) != HEADER_COLUMNS:
        raise StateError(f"{where}: expected columns {HEADER_COLUMNS} first, found {names[:h]}")
    meta = arrow_schema.metadata or {}
    schema: Schema = tuple(names[h:])
    if _SCHEMA_KEY in meta and tuple(orjson.loads(meta[_SCHEMA_KEY])) != schema:
        raise StateError(f"{where}: columns {schema} differ from the recorded stream schema")
    return schema


def _from_table(where: str, table: pa.Table) -> tuple[Schema, list[Tuple]]:
    schema = _stream_schema(where, table.schema)
    h = len(HEADER_COLUMNS)
    for c in range(h):
        if table.column(c).null_count:
            raise StateError(f"{where}: column {HEADER_COLUMNS[c]!r} has null cells")
    kinds, ids, times, tmaxs = (table.column(c).to_pylist() for c in range(h))
    attrs = [table.column(c).to_pylist() for c in range(h, table.num_columns)]
    values: Iterable[tuple[Any, ...]] = zip(*attrs, strict=True) if attrs else repeat(())
    bad = [k for k in set(kinds) if not 0 <= k < len(KINDS)]
    if bad:
        raise StateError(f"{where}: unknown kind value(s) {sorted(bad)} in column 'kind'")
    out = [
        make_tuple(KINDS[k], i, tm, tx, v if k <= _LAST_DATA_KIND else ())
        for k, i, tm, tx, v in zip(kinds, ids, times, tmaxs, values, strict=False)
    ]
    return schema, out
