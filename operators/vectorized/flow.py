"""A stream's tuples over several waves of a replay, as one Arrow table and its marks.

Role: what the vectorized operators take and give. A replay releases buckets one *wave*
after another (operators/network.py: a bucket's tuples and its boundary go through every
operator before the next bucket's); the per-tuple operators see one wave at a time, the
vectorized ones see many at once and must produce what the waves, one by one, would have.

A :class:`Flow` is one stream's entries over those waves, in the order an operator
processes them: its data tuples as a table (``id``, ``time``, ``tmax``, ``wave``, then one
column per attribute, every row STABLE: a replay is of corrected input) and its control
tuples (boundaries, in practice) as :class:`Mark` s saying after how many data rows, in
which wave, each one comes. The table is built from tuples only when every attribute has
one Python type over its rows (int, float, str or bool; None allowed): what the vectorized
operators can compute with Python's result. Anything else (a tentative tuple, mixed
types, an int beyond 64 bits) raises :class:`Fallback`, and the caller runs the per-tuple
operators.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise, repeat
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from operators.errors import Fallback
from protocol.columns import Columns
from protocol.tuples import Kind, Schema, Tuple, columns_of

__all__ = ["Flow", "Mark", "transpose", "typed_column"]

_KEYS = ("id", "time", "tmax", "wave")
_TYPES = {int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_()}
_WIRE_TYPES = frozenset({*_TYPES.values(), pa.null()})  # what a run of columns may hold
_STABLE = int(Kind.STABLE)
_new = tuple.__new__


class Mark(NamedTuple):
    """A control tuple of a flow: it comes after ``at`` data rows, in wave ``wave``. (A
    named tuple: a step makes one per boundary per operator, and a frozen dataclass's
    construction cost three times as much.)"""

    wave: int
    at: int
    tuple: Tuple


@dataclass(frozen=True)
class Flow:
    """One stream's entries over a run of waves (see the module docstring)."""

    schema: Schema
    data: pa.Table
    marks: tuple[Mark, ...] = ()

    @property
    def n(self) -> int:
        return int(self.data.num_rows)

    def attributes(self) -> list[Any]:
        """The attribute columns, in schema order."""
        return [self.data.column(4 + i) for i in range(len(self.schema))]

    @classmethod
    def from_waves(cls, schema: Schema, waves: Sequence[tuple[int, Sequence[Tuple]]]) -> Flow:
        """The flow of ``(wave, tuples)`` batches, in order; :class:`Fallback` when the
        tuples are not all STABLE data and stable controls, or a column is not typed."""
        rows: list[Tuple] = []
        wave_of: list[int] = []
        marks: list[Mark] = []
        for wave, batch in waves:
            for t in batch:
                kind = t[0]
                if kind is Kind.STABLE:
                    rows.append(t)
                    wave_of.append(wave)
                elif kind is Kind.BOUNDARY and t[1] == 0:
                    marks.append(Mark(wave, len(rows), t))
                else:
                    raise Fallback(f"a {kind.name} tuple (id {t[1]}) in the replay")
        return cls.from_rows(schema, rows, wave_of, marks)

    @classmethod
    def from_rows(cls, schema: Schema, rows: Sequence[Tuple], waves: Sequence[int],
                  marks: Sequence[Mark] = ()) -> Flow:
        """The flow of STABLE data ``rows`` (each in the wave of the same index) and
        ``marks``; :class:`Fallback` if a column is not of one Python type."""
        _, ids, times, tmaxs, attrs = transpose(schema, rows)
        cols: list[Any] = [pa.array(ids, pa.int64()), pa.array(times, pa.int64()),
                           pa.array(tmaxs, pa.int64()), pa.array(waves, pa.int64()), *attrs]
        names = [*_KEYS, *(f"v{i}" for i in range(len(schema)))]
        return cls(tuple(schema), pa.table(cols, names=names), tuple(marks))

    @classmethod
    def from_items(cls, schema: Schema, items: Sequence[Tuple | Columns]) -> Flow:
        """The flow of one live wave's batch (operators/network.py): runs of STABLE
        columns and control tuples in order, each a stable boundary (a mark) or
        :class:`Fallback`, as is a run that is not STABLE, not of the schema's arity or
        whose attributes are not typed alike (orjson text, one input's ints and another's
        floats)."""
        parts: list[pa.RecordBatch] = []
        marks: list[Mark] = []
        rows = 0
        for item in items:
            if isinstance(item, Columns):
                if not len(item):
                    continue
                if item.arity != len(schema) or (item.kinds() != _STABLE).any():
                    raise Fallback("a run of columns that is not STABLE data of the schema")
                parts.append(item.batch)
                rows += len(item)
            elif item[0] is Kind.BOUNDARY and item[1] == 0:
                marks.append(Mark(0, rows, item))
            else:
                raise Fallback(f"a {item[0].name} tuple in the wave")
        if not parts:
            return cls.from_rows(schema, [], [], marks)
        try:
            table = pa.Table.from_batches(parts).combine_chunks()
        except pa.ArrowException:
            raise Fallback("runs of columns typed apart") from None
        if any(f.metadata for f in table.schema):
            raise Fallback("an attribute of mixed types (orjson text)")
        cols = [table.column(1), table.column(2), table.column(3),
                pa.array(np.zeros(rows, dtype=np.int64)), *table.columns[4:]]
        names = [*_KEYS, *(f"v{i}" for i in range(len(schema)))]
        return cls(tuple(schema), pa.table(cols, names=names), tuple(marks))

    def to_items(self) -> list[Tuple | Columns]:
        """The flow as a live wave's batch: its rows as one run of STABLE columns, cut at
        the marks, which come as tuples at their places; tuples (:meth:`to_tuples`) when
        an attribute has a type the wire does not carry."""
        d = self.data
        n = d.num_rows
        if n and any(d.column(4 + i).type not in _WIRE_TYPES for i in range(len(self.schema))):
            return list(self.to_tuples())
        whole = None
        if n:
            arrays = [pa.array(np.full(n, int(Kind.STABLE), dtype=np.int8)),
                      *(d.column(k).combine_chunks() for k in _KEYS[:3]),
                      *(d.column(4 + i).combine_chunks() for i in range(len(self.schema)))]
            whole = Columns.from_arrays(arrays)
        out: list[Tuple | Columns] = []
        k = 0
        for m in self.marks:
            at = min(m.at, n)
            if at > k and whole is not None:
                out.append(whole.slice(k, at))
                k = at
            out.append(m.tuple)
        if k < n and whole is not None:
            out.append(whole.slice(k, n) if k else whole)
        return out

    def with_data(self, data: pa.Table, marks: Sequence[Mark] | None = None,
                  schema: Schema | None = None) -> Flow:
        return Flow(self.schema if schema is None else tuple(schema), data,
                    self.marks if marks is None else tuple(marks))

    def rows(self) -> list[Tuple]:
        """The data rows as tuples (STABLE), in order."""
        d = self.data
        ids, times, tmaxs = (d.column(k).to_pylist() for k in _KEYS[:3])
        attrs = [c.to_pylist() for c in self.attributes()]
        values = zip(*attrs, strict=True) if attrs else repeat((), len(ids))
        return list(map(_new, repeat(Tuple), zip(repeat(Kind.STABLE), ids, times, tmaxs,
                                                 values)))

    def to_tuples(self) -> list[Tuple]:
        """The flow as one list of tuples: the rows with the marks at their places (what
        a network output takes; :meth:`to_waves` cut into waves)."""
        rows = self.rows()
        if not self.marks:
            return rows
        out: list[Tuple] = []
        k = 0
        for m in self.marks:
            at = min(m.at, len(rows))
            if at > k:
                out += rows[k:at]
                k = at
            out.append(m.tuple)
        out += rows[k:]
        return out

    def to_waves(self) -> list[tuple[int, list[Tuple]]]:
        """The flow as ``(wave, tuples)`` batches, in order (a wave with no entry is absent)."""
        tuples = self.rows()
        # Cut where the wave changes and at the marks: slices, not a loop per tuple.
        waves = self.data.column("wave").to_numpy()
        cuts = sorted({0, len(tuples), *(int(k) for k in np.flatnonzero(np.diff(waves)) + 1),
                       *(min(m.at, len(tuples)) for m in self.marks)})
        out: list[tuple[int, list[Tuple]]] = []
        marks, m = self.marks, 0

        def add(wave: int, items: list[Tuple]) -> None:
            if out and out[-1][0] == wave:
                out[-1][1].extend(items)
            else:
                out.append((wave, items))

        for lo, hi in pairwise(cuts):
            while m < len(marks) and marks[m].at <= lo:
                add(marks[m].wave, [marks[m].tuple])
                m += 1
            if hi > lo:
                add(int(waves[lo]), tuples[lo:hi])
        for mark in marks[m:]:
            add(mark.wave, [mark.tuple])
        return out


def transpose(schema: Schema, rows: Sequence[Tuple]) -> tuple[Sequence[Any], Sequence[int],
                                                              Sequence[int], Sequence[int],
                                                              list[pa.Array]]:
    """``rows``' kinds, ids, times and tmaxs (``protocol.tuples.columns_of``), and their
    attributes as typed columns; :class:`Fallback` if a tuple's arity is not the schema's
    or a column is not of one Python type."""
    if not rows:
        return (), (), (), (), [pa.nulls(0) for _ in schema]
    kinds, ids, times, tmaxs, values = columns_of(rows, 5)
    if set(map(len, values)) != {len(schema)}:
        raise Fallback("a tuple whose arity is not its schema's")
    return kinds, ids, times, tmaxs, [typed_column(v, schema[i])
                                      for i, v in enumerate(columns_of(values, len(schema)))]


def typed_column(values: list[Any], name: str) -> pa.Array:
    """``values`` as an Arrow array of their one Python type (None allowed), or Fallback."""
    types = set(map(type, values)) - {type(None)}  # (map: no Python loop per value)
    if not types:
        return pa.nulls(len(values), pa.null())
    if len(types) > 1:
        raise Fallback(f"attribute {name!r} holds values of types "
                       f"{', '.join(sorted(t.__name__ for t in types))}")
    t = types.pop()
    if t not in _TYPES:
        raise Fallback(f"attribute {name!r} holds {t.__name__} values")
    try:
        return pa.array(values, _TYPES[t])
    except OverflowError:
        raise Fallback(f"attribute {name!r} holds an int beyond 64 bits") from None
