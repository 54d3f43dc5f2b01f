"""``union`` over flows: every input's tuples renumbered in the order the union sees them.

The per-tuple union (operators/union.py) forwards each data tuple with the next id, its
time, tmax and values unchanged, in arrival order; its boundaries are the min of its
inputs' watermarks. Over a step that order is the entries' processing order
(:class:`~operators.vectorized.entries.Entries`): the output is every port's rows taken in
that order and numbered; the union holds no state, so its undo log after the step is just
its last call's (:func:`~operators.vectorized.entries.settle_log`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from operators.errors import Fallback
from operators.union import Union
from protocol.tuples import boundary

from .entries import Entries, last_call, settle_log, walk_marks
from .flow import Flow, Mark

__all__ = ["run_union"]


def run_union(op: Union, flows: Sequence[Flow], ports: Sequence[int]) -> Flow:
    """What ``op`` emits for ``flows`` (by port) fed wave by wave, ports in ``ports`` order;
    its bookkeeping moves on as if it had run. :class:`Fallback` (``op`` untouched) when
    tainted or when the inputs' columns are of different types."""
    if op._tainted:
        raise Fallback(f"{op.describe()} is tainted")
    e = Entries.order(flows, ports, op._seq)
    marks = walk_marks(op, e)
    try:
        data = pa.concat_tables([f.data for f in flows], promote_options="default")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise Fallback(f"{op.describe()}: its inputs' columns differ: {err}") from None
    g = np.concatenate(e.data_g) if flows else np.zeros(0, np.int64)
    order = np.argsort(g, kind="stable")
    data = data.take(pa.array(order))
    g = g[order]
    n, last_id0 = len(g), op.last_id
    ids = pa.array(np.arange(last_id0 + 1, last_id0 + 1 + n, dtype=np.int64))
    data = data.set_column(0, "id", ids).set_column(3, "wave", pa.array(e.wave[g]
                                                                            if n else g))
    emitted = np.array([m for m, _ in marks.emitted], dtype=np.int64)
    at = np.searchsorted(g, emitted).tolist()
    out = Flow(op.output_schema, data,
               tuple(Mark(int(e.wave[m]), k, boundary(b))
                     for (m, b), k in zip(marks.emitted, at, strict=True)))
    f = last_call(e) if e.n else 0
    before = marks.at(f)
    op.last_id = last_id0 + n
    op.watermarks, op.watermark = list(marks.final.watermarks), min(marks.final.watermarks)
    op._boundary_out = marks.final.sent
    settle_log(op, e, lambda x: int(n - np.searchsorted(g, x)), before.watermarks,
               before.sent, None)
    return out
