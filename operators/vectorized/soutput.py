"""``soutput`` over a flow: the node's output guard (operators/soutput.py), vectorized.

Over a stable flow SOutput passes every data row (ids kept) except, after a checkpoint
rewind (DROP_DUPLICATES), the replayed ones up to the id it waits for: rows before the
first whose id reaches that id are dropped, that row too if it is the awaited one, and the
drop ends there, with ``UNDO(id)`` at that place if tentative tuples followed the last
stable one. Boundaries pass when they raise the stream's last boundary (the base
operator's bookkeeping, not an id-preserving operator's). Vectorized, it keeps a replay's
output one table to its end, where the per-tuple SOutput needed the join's rows as tuples.
"""

from __future__ import annotations

import numpy as np

from operators.errors import Fallback
from operators.soutput import SOutput
from protocol.tuples import boundary, undo

from .flow import Flow, Mark
from .stateless import passing_marks, raise_watermark

__all__ = ["run_soutput"]


def run_soutput(op: SOutput, flow: Flow) -> Flow:
    """What ``op`` emits for ``flow``; its state moves on as if it had run. :class:`Fallback`
    (``op`` untouched) if it is tainted."""
    if op._tainted:
        raise Fallback(f"{op.describe()} is tainted")
    keep = np.ones(flow.n, dtype=bool)
    end = None  # the row at which the drop ends
    if op._dropping and flow.n:
        ids = flow.data.column("id").to_numpy()
        reached = ids >= op._wait_id
        if reached.any():
            end = int(np.argmax(reached))
            keep[:end] = False
            keep[end] = int(ids[end]) != op._wait_id
        else:
            keep[:] = False
    kept = np.cumsum(keep, dtype=np.int64)
    marks: list[Mark] = []
    undo_at = None  # where the UNDO goes among the marks
    sent = op._boundary_out
    for k in passing_marks(op, flow):
        m = flow.marks[k]
        if undo_at is None and end is not None and m.at > end:
            undo_at = len(marks)
        sent = m.tuple[2]
        marks.append(Mark(m.wave, 0 if m.at == 0 else int(kept[m.at - 1]), boundary(sent)))
    data = flow.data if bool(keep.all()) else flow.data.filter(keep)
    # The state, as the per-tuple operator leaves it.
    if end is not None:
        op._dropping = False
        if op._tent_after:
            wave = int(flow.data.column("wave")[end].as_py())
            marks.insert(len(marks) if undo_at is None else undo_at,
                         Mark(wave, 0, undo(op._wait_id)))
            op._last_stable = op._wait_id
            op._tent_after = False
            op._rec_pending = True
    if data.num_rows:
        op._last_stable = int(data.column("id")[-1].as_py())
        op._tent_after = False
    raise_watermark(op, flow)
    op._boundary_out = sent
    return flow.with_data(data, marks)
