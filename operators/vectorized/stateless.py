"""``filter`` and ``map`` over a flow: the id-preserving operators, vectorized.

Both keep a passing tuple's id, time and tmax (operators/filter.py, operators/map.py), so a
flow's columns ``id``, ``time``, ``tmax`` and ``wave`` go through (filtered, for a filter)
and only the attributes are computed, by :mod:`operators.vectorized.expr` (exact or
:class:`Fallback`). Their only state is the base bookkeeping of an id-preserving operator
(operators/base.py): the last input id and the watermark, which a boundary moves forward
(a boundary that does not is dropped) and which each boundary that moves it re-emits.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa

from operators.base import NO_TIME, Operator
from operators.errors import Fallback
from operators.filter import Filter
from operators.map import Map
from protocol.tuples import boundary

from .expr import VectorFilter, VectorMap
from .flow import Flow, Mark

__all__ = ["passing_marks", "raise_watermark", "run_filter", "run_map"]


def run_filter(op: Filter, flow: Flow) -> Flow:
    """What ``op`` emits for ``flow``; ``op``'s bookkeeping moves on as if it had run.
    :class:`Fallback` (``op`` untouched) where the predicate cannot be computed exactly."""
    _check_untainted(op)
    if not flow.n:  # only boundaries (an empty column has no type to compute with)
        return _finish(op, flow, flow.with_data(flow.data, _boundaries(op, flow, None)))
    mask = _predicate(op.describe(), op.where, tuple(flow.schema)).mask(flow.attributes(), flow.n)
    data = flow.data.filter(mask)
    kept = np.cumsum(np.asarray(mask.to_numpy(zero_copy_only=False), dtype=np.int64))
    return _finish(op, flow, flow.with_data(data, _boundaries(op, flow, kept)))


def run_map(op: Map, flow: Flow) -> Flow:
    """What ``op`` emits for ``flow`` (see :func:`run_filter`)."""
    _check_untainted(op)
    if flow.n:
        fields = _fields(op.describe(), tuple(op._sources), tuple(flow.schema)).columns(
            flow.attributes(), flow.n)
    else:  # only boundaries
        fields = [pa.nulls(0) for _ in op._sources]
    d = flow.data
    columns = [d.column(k) for k in range(4)] + [_full(c, flow.n) for c in fields]
    names = [*d.column_names[:4], *(f"v{i}" for i in range(len(fields)))]
    data = d.from_arrays(columns, names=names)
    return _finish(op, flow, Flow(op.output_schema, data, tuple(_boundaries(op, flow, None))))


# An expression is parsed and checked once, not at every replay step (of every replay).
@lru_cache(maxsize=256)
def _predicate(owner: str, source: str, schema: tuple[str, ...]) -> VectorFilter:
    return VectorFilter(owner, source, schema)


@lru_cache(maxsize=256)
def _fields(owner: str, sources: tuple[str, ...], schema: tuple[str, ...]) -> VectorMap:
    return VectorMap(owner, sources, schema)


def _check_untainted(op: Operator) -> None:
    if op._tainted or op._boundary_history:
        raise Fallback(f"{op.describe()} is tainted")


def _full(column: Any, n: int) -> Any:
    """A constant field (a Scalar) as a column of ``n`` rows."""
    if isinstance(column, pa.Scalar):
        return pa.array([column.as_py()] * n, column.type)
    return column


def _boundaries(op: Operator, flow: Flow, kept: Any) -> list[Mark]:
    """The boundaries ``op`` emits: each input boundary past its watermark, after the
    output rows of the input rows before it (``kept``: cumulative count of passing rows,
    None: every row passes)."""
    out: list[Mark] = []
    for k in passing_marks(op, flow):
        m = flow.marks[k]
        at = m.at if kept is None or m.at == 0 else int(kept[m.at - 1])
        out.append(Mark(m.wave, at, boundary(m.tuple[2])))
    return out


def passing_marks(op: Operator, flow: Flow) -> list[int]:
    """Which of ``flow``'s boundaries ``op`` passes on (by index). A boundary passes iff its
    time is above both the watermark before it and the last boundary sent (which never
    exceeds that watermark or the one sent before the step): one comparison over the
    marks' running maximum."""
    if not flow.marks:
        return []
    times = np.fromiter((m.tuple[2] for m in flow.marks), np.int64, len(flow.marks))
    before = np.maximum.accumulate(np.concatenate([[op.watermarks[0]], times[:-1]]))
    floor = max(op._boundary_out, NO_TIME)
    passing: list[int] = np.flatnonzero((times > before) & (times > floor)).tolist()
    return passing


def raise_watermark(op: Operator, flow: Flow) -> None:
    """A one-input operator's watermark after ``flow``'s boundaries (a lower one leaves it)."""
    if flow.marks:
        top = max(m.tuple[2] for m in flow.marks)
        if top > op.watermarks[0]:
            op.watermarks = [top]
            op.watermark = top


def _finish(op: Operator, flow: Flow, out: Flow) -> Flow:
    """Move ``op``'s bookkeeping to where running ``flow`` would have left it."""
    if flow.n:
        op._last_in_id = flow.data.column("id")[-1].as_py()
    raise_watermark(op, flow)
    if out.marks:
        op._boundary_out = op._boundary_floor = out.marks[-1].tuple[2]
    return out
