"""What sources produce: attribute values from a seeded synthetic distribution or a file.

Pure and deterministic: a generator is an iterator of value tuples (positional, in the
source's schema order); the same config and seed give the same values. Tuple ids, times
and boundaries are the source process's business (node/procs/source.py).
"""

from __future__ import annotations

import csv
import itertools
import random
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from node.config.model import AttributeGen, SourceConfig
from node.errors import NodeError
from protocol.tuples import Value

__all__ = ["arrow_types", "make_generator"]


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


def _synthetic(src: SourceConfig) -> Iterator[tuple[Value, ...]]:
    rng = random.Random(src.seed)
    default = AttributeGen(kind="int", min=0, max=100)
    draws = [_attribute(src.attributes.get(a, default), rng) for a in src.schema]
    for i in itertools.count(1):
        yield tuple(d(i) for d in draws)


def _typed(cell: str) -> Value:
    for conv in (int, float):
        try:
            return conv(cell)
        except ValueError:
            pass
    return cell


def _from_file(src: SourceConfig) -> Iterator[tuple[Value, ...]]:
    path = src.file
    if path is None:
        raise NodeError(f"source {src.name!r}: generator 'file' needs a file")
    if path.suffix.lower() == ".parquet":
        table = pq.read_table(path, columns=list(src.schema))
        for batch in table.to_batches():
            cols = [batch.column(a).to_pylist() for a in src.schema]
            yield from zip(*cols, strict=True)
        return
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [a for a in src.schema if a not in (reader.fieldnames or [])]
        if missing:
            raise NodeError(f"source {src.name!r}: {path} has no column(s) {', '.join(missing)}")
        for row in reader:
            yield tuple(_typed(row[a]) for a in src.schema)


def make_generator(src: SourceConfig) -> Iterator[tuple[Value, ...]]:
    """The value tuples of a source, in order (finite for a file, else endless)."""
    return _from_file(src) if src.generator == "file" else _synthetic(src)


def arrow_types(src: SourceConfig) -> list[Any] | None:
    """Column types for the source's log (None: let Arrow infer, for files)."""
    if src.generator == "file":
        return None
    default = AttributeGen(kind="int")
    kinds = [src.attributes.get(a, default).kind for a in src.schema]
    return [pa.float64() if k == "float" else pa.int64() for k in kinds]


