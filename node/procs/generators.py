"""What sources produce: attribute values from a seeded synthetic distribution or a file.

Pure and deterministic: a generator is an iterator of rows, ``(event time, values)``, the
values positional, in the source's schema order; the same config and seed give the same
rows. The event time (integer µs) is the file's ``time_column`` for an event-time source,
else None; a schema attribute named like the time column holds it too. ``constants`` fix
attributes. Reading the file (paths, column types, event-time formats) is
``node/config/datafile.py``'s; tuple ids, times and boundaries are the source's business
(``node/procs/pacing.py``, ``node/procs/source.py``).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from node.config.datafile import column_types, read_rows
from node.config.model import AttributeGen, SourceConfig
from node.errors import NodeError
from protocol.tuples import Value

__all__ = ["Row", "arrow_types", "make_generator", "make_rows"]

#: One row of a source: its event time (µs; None without a time column) and its values.
Row = tuple[int | None, tuple[Value, ...]]


def _attribute(gen: AttributeGen, rng: random.Random) -> Callable[[int], Value]:
    if gen.kind == "seq":
        return lambda i: i
    if gen.kind == "key":
        keys = range(gen.n)
        if gen.dist == "zipf":
            weights = list(itertools.accumulate(1.0 / (k + 1) ** gen.s for k in keys))
            return lambda _i: rng.choices(keys, cum_weights=weights)[0]
        return lambda _i: rng.randrange(gen.n)
    if gen.kind == "int":
        lo, hi = int(gen.min), int(gen.max)
        return lambda _i: rng.randint(lo, hi)
    if gen.kind == "float":
        lo_f, hi_f = float(gen.min), float(gen.max)
        return lambda _i: rng.uniform(lo_f, hi_f)
    raise NodeError(f"unknown attribute generator kind {gen.kind!r}")


def _constant(v: Value) -> Callable[[int], Value]:
    return lambda _i: v


def _synthetic(src: SourceConfig) -> Iterator[Row]:
    rng = random.Random(src.seed)
    default = AttributeGen(kind="int", min=0, max=100)
    draws = [_constant(src.constants[a]) if a in src.constants
             else _attribute(src.attributes.get(a, default), rng) for a in src.schema]
    for i in itertools.count(1):
        yield None, tuple(d(i) for d in draws)


def _file_columns(src: SourceConfig) -> list[str]:
    """The file columns a source reads: its non-constant attributes, then its time column."""
    columns = [a for a in src.schema if a not in src.constants]
    if src.time_column is not None and src.time_column not in columns:
        columns.append(src.time_column)
    return columns


def _from_file(src: SourceConfig) -> Iterator[Row]:
    path = src.file
    if path is None:
        raise NodeError(f"source {src.name!r}: generator 'file' needs a file")
    columns = _file_columns(src)
    at = {c: i for i, c in enumerate(columns)}
    time_at = None if src.time_column is None else at[src.time_column]
    # Each schema attribute: a constant, or the cell of its column.
    picks: list[tuple[bool, Any]] = [(True, src.constants[a]) if a in src.constants
                                     else (False, at[a]) for a in src.schema]
    for cells in read_rows(path, columns, src.time_column):
        values = tuple(v if fixed else cells[v] for fixed, v in picks)
        yield (None if time_at is None else cells[time_at]), values


def make_rows(src: SourceConfig) -> Iterator[Row]:
    """The rows of a source, in order (finite for a file, else endless)."""
    return _from_file(src) if src.generator == "file" else _synthetic(src)


def make_generator(src: SourceConfig) -> Iterator[tuple[Value, ...]]:
    """The value tuples of a source, in order (its rows without their event times)."""
    return (values for _, values in make_rows(src))


def _constant_type(v: Value) -> pa.DataType:
    if isinstance(v, bool):
        return pa.bool_()
    return pa.int64() if isinstance(v, int) else pa.float64() if isinstance(v, float) else pa.string()


def arrow_types(src: SourceConfig) -> list[Any]:
    """Column types for the source's log: fixed up front, so that every incarnation of the
    source logs the same types whatever its first batch holds."""
    if src.generator == "file":
        if src.file is None:
            raise NodeError(f"source {src.name!r}: generator 'file' needs a file")
        columns = _file_columns(src)
        found = dict(zip(columns, column_types(src.file, columns, src.time_column), strict=True))
        return [_constant_type(src.constants[a]) if a in src.constants else found[a]
                for a in src.schema]
    default = AttributeGen(kind="int")
    types = []
    for a in src.schema:
        if a in src.constants:
            types.append(_constant_type(src.constants[a]))
        else:
            kind = src.attributes.get(a, default).kind
            types.append(pa.float64() if kind == "float" else pa.int64())
    return types
