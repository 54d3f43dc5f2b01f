"""A stream's tuples as columns: the unit of data on the wire and, step by step, on the
live path (issue 48). :class:`Columns` is an Arrow record batch of fixed layout::

    kind  int8    the Kind's wire value           never null
    id    int64                                   never null
    time  int64                                   never null
    tmax  int64                                   never null
    v0 .. v{k-1}  one column per attribute, positional

An attribute column is ``int64``, ``float64``, ``string`` or ``bool`` when its data values
all have that one Python type (None allowed: a null), ``null`` when they are all None, and
otherwise ``binary`` holding each value as orjson text (the field's metadata says
``dpc: json``): a column mixing ints and floats, or ints and strings, comes back with each
value's own type, which is what the per-tuple wire carried. Control tuples (kinds above
TENTATIVE) carry no values: their cells are null, and they read back as ``()``.

Exactness: :meth:`Columns.to_tuples` of :meth:`Columns.from_tuples` is the same list,
kinds, ids, times, values and their Python types. What the wire could not carry before
cannot be carried now, with the same :class:`LocalProtocolError`: values other than
str / int / float / bool / None, non-finite floats, ints beyond 64 bits, lone surrogates,
ids, times and tmax beyond int64 (they were unsigned 64-bit before: no stream
comes near), and now also data tuples of different arities in one batch (a stream has one schema) and
control tuples with values.

On the wire a batch is one Arrow IPC stream (its schema message, its record batch, and
the end-of-stream marker). :func:`decode_columns` validates before anything uses it: the
two messages and nothing else, the layout above exactly, no compression (a compressed
buffer would be decompressed to a size the sender chose: memory a hostile peer could
claim), Arrow's full validation (offsets, UTF-8), kinds, null cells, finite floats, and
every orjson cell; anything wrong is a :class:`RemoteProtocolError` saying what, and the
memory used is the frame's own (the arrays are views of it).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from itertools import repeat
from math import isfinite
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.ipc as ipc

from .errors import LocalProtocolError, RemoteProtocolError
from .tuples import KINDS, Kind, Tuple, columns_of

__all__ = ["KEY_COLUMNS", "Columns", "decode_columns", "encode_columns"]

KEY_COLUMNS = ("kind", "id", "time", "tmax")
_KEY_TYPES = (pa.int8(), pa.int64(), pa.int64(), pa.int64())
_EXACT = {int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_()}
_FLOAT64 = pa.float64()
_BINARY = pa.binary()
_NUMPY = {int: np.int64, float: np.float64, bool: np.bool_}
_VALUE_TYPES = frozenset({pa.int64(), pa.float64(), pa.string(), pa.bool_(), pa.null()})
_JSON_META = {b"dpc": b"json"}
_LAST_DATA_KIND = int(Kind.TENTATIVE)
_N_KINDS = len(KINDS)
_SCALARS = frozenset({str, int, float, bool, type(None)})
_INT64 = (-(2**63), 2**63 - 1)
_JSON_INTS = (-(2**63), 2**64 - 1)  # what orjson carries: an int column beyond int64 is json
_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
_new = tuple.__new__


def _column_name(i: int) -> str:
    return f"v{i}"


class Columns:
    """Consecutive tuples of one stream as one Arrow record batch (the module docstring)."""

    __slots__ = ("batch",)

    def __init__(self, batch: pa.RecordBatch) -> None:
        """Wrap ``batch``, which must have the layout of the module docstring (what
        :meth:`from_tuples` and :func:`decode_columns` make; not checked here)."""
        self.batch = batch

    # ------------------------------------------------------------------ building
    @classmethod
    def from_tuples(cls, tuples: Sequence[Tuple]) -> Columns:
        """``tuples`` as columns; :class:`LocalProtocolError` naming the tuple or the
        attribute if they cannot be carried exactly (the module docstring)."""
        # Every step is a C-level map over the rows (columns_of, set(map(type, ...))): a
        # Python loop per tuple cost twice as much as the whole rest.
        try:
            kinds, ids, times, tmaxs, values = columns_of(tuples, 5)
        except (IndexError, TypeError, KeyError):
            raise _tuples_error(tuples) from None
        if tuples and not (set(map(type, tuples)) == {Tuple} and set(map(type, kinds)) == {Kind}
                           and set(map(type, values)) == {tuple}
                           and set(map(type, ids)) | set(map(type, times))
                           | set(map(type, tmaxs)) == {int}):
            # (Arrow would take a bool, or truncate a float, silently)
            raise _tuples_error(tuples)
        try:
            # (through numpy: pa.array of a list of ints was 15 times slower here)
            arrays = [pa.array(np.array(kinds, dtype=np.int8)),
                      *(pa.array(np.array(x, dtype=np.int64)) for x in (ids, times, tmaxs))]
        except (OverflowError, TypeError, ValueError, pa.ArrowException):
            raise _tuples_error(tuples) from None
        fields = [pa.field(name, typ, nullable=False)
                  for name, typ in zip(KEY_COLUMNS, _KEY_TYPES, strict=True)]
        control: list[int] = []
        if tuples and max(kinds) > _LAST_DATA_KIND:
            control = np.flatnonzero(arrays[0].to_numpy() > _LAST_DATA_KIND).tolist()
            for n in control:
                if values[n]:
                    raise LocalProtocolError(f"tuple {n}: a {kinds[n].name} carries no values, "
                                             f"got {len(values[n])}")
        arities = set(map(len, values))
        if control:
            arities.discard(0)
            if len(arities) > 1 or (arities and 0 in set(map(len, (
                    v for n, v in enumerate(values) if kinds[n] <= _LAST_DATA_KIND)))):
                arities.add(-1)
        if len(arities) > 1:
            raise _arity_error(tuples)
        arity = arities.pop() if arities else 0
        if arity:
            if control:
                null = _null_row(arity)
                values = [v if v else null for v in values]
            for c, column in enumerate(columns_of(values, arity)):
                array, is_json = _value_column(column, c, control)
                arrays.append(array)
                fields.append(pa.field(_column_name(c), array.type,
                                       metadata=_JSON_META if is_json else None))
        return cls(pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields)))

    @classmethod
    def from_arrays(cls, arrays: Sequence[pa.Array]) -> Columns:
        """The four key arrays (int8 kinds, int64 ids, times, tmax; no nulls) and typed
        attribute arrays as columns (not checked: what an operator computed)."""
        fields = [pa.field(name, typ, nullable=False)
                  for name, typ in zip(KEY_COLUMNS, _KEY_TYPES, strict=True)]
        fields += [pa.field(_column_name(c), a.type) for c, a in enumerate(arrays[4:])]
        return cls(pa.RecordBatch.from_arrays(list(arrays), schema=pa.schema(fields)))

    @classmethod
    def concat(cls, parts: Sequence[Columns]) -> Columns:
        """One batch of ``parts``' rows in order (their columns must agree in type)."""
        if len(parts) == 1:
            return parts[0]
        table = pa.Table.from_batches([p.batch for p in parts if p.n] or [parts[0].batch])
        return cls(table.combine_chunks().to_batches()[0] if table.num_rows else parts[0].batch)

    # ------------------------------------------------------------------ reading
    @property
    def n(self) -> int:
        return int(self.batch.num_rows)

    def __len__(self) -> int:
        return int(self.batch.num_rows)

    @property
    def arity(self) -> int:
        return int(self.batch.num_columns) - 4

    def kinds(self) -> np.ndarray:
        return np.asarray(self.batch.column(0).to_numpy())

    def ids(self) -> np.ndarray:
        return np.asarray(self.batch.column(1).to_numpy())

    def times(self) -> np.ndarray:
        return np.asarray(self.batch.column(2).to_numpy())

    def slice(self, start: int, stop: int | None = None) -> Columns:
        stop = self.n if stop is None else stop
        return Columns(self.batch.slice(start, max(0, stop - start)))

    def to_tuples(self) -> list[Tuple]:
        """The tuples, exactly as :meth:`from_tuples` took them."""
        b = self.batch
        if not b.num_rows:
            return []
        kinds = list(map(KINDS.__getitem__, b.column(0).to_pylist()))
        ids, times, tmaxs = (b.column(k).to_pylist() for k in (1, 2, 3))
        attrs = [_cells(b.schema.field(c), b.column(c)) for c in range(4, b.num_columns)]
        values: Iterable[tuple[Any, ...]]
        if not attrs:
            values = repeat((), len(ids))
        else:
            values = zip(*attrs, strict=True)
            if max(kinds) > _LAST_DATA_KIND:
                values = [v if k <= _LAST_DATA_KIND else ()
                          for k, v in zip(kinds, values, strict=True)]
        return list(map(_new, repeat(Tuple), zip(kinds, ids, times, tmaxs, values, strict=True)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Columns) and self.batch.equals(other.batch, check_metadata=True)

    def __hash__(self) -> int:
        return hash((self.n, self.arity))

    def __repr__(self) -> str:
        return f"Columns({self.n} rows, {self.arity} attributes)"


def _null_row(arity: int) -> tuple[None, ...]:
    return (None,) * arity


def _value_column(values: list[Any], c: int, control: Sequence[int]) -> tuple[pa.Array, bool]:
    """Attribute ``c``'s column: typed where every data value has one Python type, else
    orjson text per cell (control rows null either way)."""
    types = set(map(type, values))
    if not types <= _SCALARS:
        bad = next(v for v in values if type(v) not in _SCALARS)
        raise LocalProtocolError(f"value {c} must be a str, int, float, bool or None, got "
                                 f"{type(bad).__name__} {bad!r:.60}")
    nulls = type(None) in types
    types.discard(type(None))
    if len(types) == 1 and not nulls and (t := next(iter(types))) in _NUMPY:
        # The common case, through numpy: pa.array of a list of ints was 15 times slower.
        try:
            array: np.ndarray = np.array(values, dtype=_NUMPY[t])
        except OverflowError:
            pass  # ints beyond int64: orjson text below
        else:
            if t is float and not np.isfinite(array).all():
                raise LocalProtocolError(f"value {c} must be a finite float (the wire carries "
                                         "no NaN or infinity)")
            return pa.array(array), False
    elif float in types and not all(isfinite(v) for v in values if type(v) is float):
        raise LocalProtocolError(f"value {c} must be a finite float (the wire carries no NaN "
                                 "or infinity)")
    if len(types) <= 1:
        one = types.pop() if types else None
        try:
            return (pa.array(values, _EXACT[one]) if one is not None
                    else pa.nulls(len(values))), False
        except OverflowError:
            pass  # ints beyond int64: orjson text up to 2**64 - 1, as the wire carried them
        except (pa.ArrowException, UnicodeEncodeError) as e:  # a lone surrogate in a str
            raise LocalProtocolError(f"value {c}: {e}") from None
    if control:
        is_control = set(control)
        cells = [None if n in is_control else _dumps(v, c) for n, v in enumerate(values)]
    else:
        cells = [_dumps(v, c) for v in values]
    return pa.array(cells, pa.binary()), True


def _dumps(v: Any, c: int) -> bytes:
    if type(v) is int and not _JSON_INTS[0] <= v <= _JSON_INTS[1]:
        raise LocalProtocolError(f"value {c}: an int beyond 64 bits")
    try:
        return orjson.dumps(v)
    except orjson.JSONEncodeError as e:
        raise LocalProtocolError(f"value {c}: {e}") from None


def _cells(field: pa.Field, column: pa.Array) -> list[Any]:
    values: list[Any] = column.to_pylist()
    if field.metadata == _JSON_META:
        return [None if v is None else orjson.loads(v) for v in values]
    return values


def _arity_error(tuples: Sequence[Tuple]) -> LocalProtocolError:
    arity = -1
    for n, t in enumerate(tuples):
        if t[0] <= _LAST_DATA_KIND:
            if arity >= 0 and len(t[4]) != arity:
                return LocalProtocolError(f"tuple {n} has {len(t[4])} values, the batch's data "
                                          f"tuples before it {arity}: one stream, one schema")
            arity = len(t[4])
    return LocalProtocolError("tuples of different arities: one stream, one schema")


def _tuple_error(n: int, t: Any) -> LocalProtocolError:
    return LocalProtocolError(f"tuple {n} must be a Tuple (Kind, int, int, int, tuple), "
                              f"got {t!r:.80}")


def _tuples_error(tuples: Sequence[Any]) -> LocalProtocolError:
    for n, t in enumerate(tuples):
        if not (type(t) is Tuple and type(t[0]) is Kind and type(t[4]) is tuple
                and all(type(x) is int and _INT64[0] <= x <= _INT64[1] for x in t[1:4])):
            return _tuple_error(n, t)
    return LocalProtocolError("invalid tuples")


# ---------------------------------------------------------------------- the wire
def encode_columns(columns: Columns) -> bytes:
    """``columns`` as one Arrow IPC stream (no compression)."""
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, columns.batch.schema) as writer:
        writer.write_batch(columns.batch)
    return bytes(sink.getvalue().to_pybytes())


def decode_columns(data: bytes | bytearray | memoryview) -> Columns:
    """The batch of one Arrow IPC stream from a peer, validated (the module docstring):
    :class:`RemoteProtocolError` for anything else, nothing else raised."""
    try:
        reader = pa.BufferReader(pa.py_buffer(data))
        first = ipc.read_message(reader)
        if first.type != "schema":
            raise RemoteProtocolError(f"columns: expected the schema message first, got a {first.type}")
        schema = _schema_of(first)
        second = ipc.read_message(reader)
        if second.type != "record batch":
            raise RemoteProtocolError(f"columns: expected a record batch after the schema, "
                                      f"got a {second.type}")
        if _compressed(second.metadata.to_pybytes()):
            raise RemoteProtocolError("columns: a compressed record batch (refused: its "
                                      "size after decompression is the sender's word)")
        batch = ipc.read_record_batch(second, schema)
        rest = reader.read()
        if rest and rest != _EOS:
            raise RemoteProtocolError(f"columns: {len(rest)} bytes after the record batch")
        batch.validate(full=True)
    except RemoteProtocolError:
        raise
    except (pa.ArrowException, OSError, ValueError, EOFError) as e:
        raise RemoteProtocolError(f"columns: not a valid Arrow IPC stream: {_short(e)}") from None
    _check_batch(batch)
    return Columns(batch)


def _short(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text[:200]


# Schemas already checked, by their message's bytes: a stream sends the same schema in
# every frame, and reading and checking it again was a tenth of a replica's decoding.
_SCHEMAS: dict[bytes, pa.Schema] = {}
_SCHEMAS_KEPT = 256


def _schema_of(message: ipc.Message) -> pa.Schema:
    key = message.metadata.to_pybytes()
    schema = _SCHEMAS.get(key)
    if schema is None:
        schema = ipc.read_schema(message)
        _check_schema(schema)
        if len(_SCHEMAS) >= _SCHEMAS_KEPT:  # (a hostile peer's many schemas: start over)
            _SCHEMAS.clear()
        _SCHEMAS[key] = schema
    return schema


def _check_schema(schema: pa.Schema) -> None:
    names = schema.names
    if len(names) < 4 or tuple(names[:4]) != KEY_COLUMNS:
        raise RemoteProtocolError(f"columns: expected the columns {', '.join(KEY_COLUMNS)} "
                                  f"first, got {', '.join(names[:6])[:120]}")
    for i, (name, typ) in enumerate(zip(KEY_COLUMNS, _KEY_TYPES, strict=True)):
        if schema.field(i).type != typ:
            raise RemoteProtocolError(f"columns: column {name!r} must be {typ}, got "
                                      f"{schema.field(i).type}")
    for c in range(4, len(names)):
        f = schema.field(c)
        if f.name != _column_name(c - 4):
            raise RemoteProtocolError(f"columns: column {c} must be named "
                                      f"{_column_name(c - 4)!r}, got {f.name[:40]!r}")
        if f.metadata:
            if f.metadata != _JSON_META or f.type != pa.binary():
                raise RemoteProtocolError(f"columns: column {f.name!r}: unknown metadata or a "
                                          "json column not of binary type")
        elif f.type not in _VALUE_TYPES:
            raise RemoteProtocolError(f"columns: column {f.name!r} has type {f.type}; "
                                      "expected int64, float64, string, bool, null or json")


def _check_batch(batch: pa.RecordBatch) -> None:
    # Every frame comes through here: few pyarrow calls (about a microsecond each) and
    # numpy reductions rather than temporary masks; the masks only on the rare paths.
    columns, fields = batch.columns, batch.schema
    for i, name in enumerate(KEY_COLUMNS):
        if columns[i].null_count:
            raise RemoteProtocolError(f"columns: column {name!r} has nulls")
    if not batch.num_rows:
        return
    kinds = columns[0].to_numpy()
    lo, hi = int(kinds.min()), int(kinds.max())
    if lo < 0 or hi >= _N_KINDS:
        row = int(np.flatnonzero((kinds < 0) | (kinds >= _N_KINDS))[0])
        raise RemoteProtocolError(f"columns: row {row}: unknown tuple kind {int(kinds[row])}")
    # The control rows (a boundary or two per frame, mostly): their cells must be null,
    # read bit by bit from each column's validity bitmap.
    control = np.flatnonzero(kinds > _LAST_DATA_KIND).tolist() if hi > _LAST_DATA_KIND else []
    for c in range(4, len(columns)):
        col = columns[c]
        typ = col.type
        nulls = col.null_count
        if control and nulls != len(col):
            carrier = control[0] if not nulls else _first_valid(col, control)
            if carrier is not None:
                raise RemoteProtocolError(f"columns: row {carrier}: a "
                                          f"{KINDS[int(kinds[carrier])].name} carries values")
        if typ == _FLOAT64:
            values = col.to_numpy(zero_copy_only=False)  # (a null reads as NaN)
            if nulls:
                ok = (np.isfinite(values) | ~_valid(col)).all()
            else:  # NaN or an infinity makes the sum NaN or infinite: one reduction
                ok = not len(values) or np.isfinite(values.sum()) or np.isfinite(values).all()
            if not ok:
                name = fields.field(c).name
                raise RemoteProtocolError(f"columns: column {name!r} holds a NaN or an "
                                          "infinity")
        elif typ == _BINARY and fields.field(c).metadata:
            name = fields.field(c).name
            for row, cell in enumerate(col.to_pylist()):
                if cell is not None:
                    _check_cell(cell, name, row)


def _first_valid(col: pa.Array, rows: list[int]) -> int | None:
    """The first of ``rows`` at which ``col`` holds a value (its validity bit is set)."""
    bitmap = col.buffers()[0]
    if bitmap is None:
        return rows[0] if col.type != pa.null() else None
    bits, off = memoryview(bitmap), col.offset
    for row in rows:
        at = off + row
        if bits[at >> 3] >> (at & 7) & 1:
            return row
    return None


def _valid(col: pa.Array) -> np.ndarray:
    """Which rows of ``col`` hold a value, from its validity bitmap (no compute kernel:
    dispatching one cost more than the whole check of a frame)."""
    bitmap = col.buffers()[0]
    if bitmap is None:
        return np.ones(len(col), dtype=bool) if col.type != pa.null() else np.zeros(len(col), bool)
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")
    return bits[col.offset: col.offset + len(col)].astype(bool)


def _check_cell(cell: bytes, name: str, row: int) -> None:
    try:
        v = orjson.loads(cell)
    except orjson.JSONDecodeError:
        raise RemoteProtocolError(f"columns: column {name!r}, row {row}: not JSON text") from None
    if type(v) not in _SCALARS:
        raise RemoteProtocolError(f"columns: column {name!r}, row {row}: a {type(v).__name__}, "
                                  "not a scalar")
    if type(v) is int and not _JSON_INTS[0] <= v <= _JSON_INTS[1]:
        raise RemoteProtocolError(f"columns: column {name!r}, row {row}: an int beyond 64 bits")


# The flatbuffer of a record batch's message (format/Message.fbs): the one field read here
# is RecordBatch.compression; Arrow's reader checks the rest against the body.
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U16 = struct.Struct("<H")
_RECORD_BATCH = 3  # MessageHeader union: Schema 1, DictionaryBatch 2, RecordBatch 3


def _field(buf: bytes, table: int, index: int) -> int:
    """Where field ``index`` of the flatbuffer table at ``table`` is, or 0 if absent."""
    vtable = table - _I32.unpack_from(buf, table)[0]
    if not 0 <= vtable <= len(buf) - 4:
        raise RemoteProtocolError("columns: a malformed message header")
    size = _U16.unpack_from(buf, vtable)[0]
    slot = 4 + 2 * index
    if slot + 2 > size or vtable + slot + 2 > len(buf):
        return 0
    off = _U16.unpack_from(buf, vtable + slot)[0]
    if off and table + off >= len(buf):
        raise RemoteProtocolError("columns: a malformed message header")
    return table + off if off else 0


def _compressed(meta: bytes) -> bool:
    """Whether a record batch message's metadata names a body compression."""
    try:
        root = _U32.unpack_from(meta, 0)[0]
        kind_at = _field(meta, root, 1)
        header_at = _field(meta, root, 2)
        if not kind_at or meta[kind_at] != _RECORD_BATCH or not header_at:
            raise RemoteProtocolError("columns: the record batch message has no record batch")
        batch = header_at + _U32.unpack_from(meta, header_at)[0]
        if batch >= len(meta):
            raise RemoteProtocolError("columns: a malformed message header")
        return _field(meta, batch, 3) != 0
    except struct.error:
        raise RemoteProtocolError("columns: a malformed message header") from None
