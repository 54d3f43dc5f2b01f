"""``aggregate`` over a flow: the windowed aggregate of operators/aggregate.py, a step at once.

The per-tuple aggregate folds each tuple into the accumulator of its (pane, group), in
arrival order, and when a boundary closes windows merges each window's pane accumulators
in pane order. Over a step this is two vectorized folds, exact:

* Rows (and the accumulators the operator already held, as pseudo-rows placed first) get
  one code per (pane, group), numbered in order of first appearance: the order the
  per-tuple operator created them in, so the order of its dicts. Counts, tmax, first seqs
  and int sums are order-free integer folds. A float sum is not: ``np.add.at`` adds one
  element at a time in array order (numpy's indexed inner loop, ``acc = acc + x``),
  which is the per-tuple loop's ``a += x`` exactly, where ``np.sum``/``reduceat`` sum
  pairwise and a cumsum difference rounds differently. It starts from -0.0, the one
  exact identity (``-0.0 + x`` is ``x``, signed zeros included), or from the held value.
  A float min/max keeps the first of equals (Python's ``x < a``: -0.0 and 0.0 tie), so it
  is the first element equal to the extreme, found after the extreme. avg divides as
  Python does (an int sum past 2**53 in Python: its int division is correctly rounded).
* Why pane accumulators can be taken whole, at their final value, for every window: a
  window ``[s, s + window)`` closes when the watermark reaches ``s + window``, so a later
  row of one of its panes would be behind its input's watermark. Behind a SUnion no row
  is; that is checked, and a step with one falls back. For the same reason no row is
  skipped (the per-tuple loop skips a row only when all of its windows closed), no pane
  is created after its windows closed and a pane dropped never comes back. So each
  window's (window, group) fold runs once, over its panes' accumulators sorted by pane,
  and its outputs go after the first boundary whose ``low`` passes the window start.

What falls back (:class:`Fallback`, before ``op`` is touched), where exactness would need
more than this: a tainted operator; a row behind the watermark; a group-by attribute not
of int, str or bool (a float key: dict equality of -0.0/0.0 and NaN) or holding None; an
aggregated attribute not int or float (Python sums bools to ints, compares strs, and
fails on None: the per-tuple operator says so), a NaN (its comparisons and payloads), or
a type other than the held accumulators'; an int sum that could leave int64 (bounded by
count times the largest value); more than :data:`MAX_PAIRS` (window, pane group) pairs;
codes past :data:`CODE_LIMIT` (billions of rows). The functions and their accumulator
slots are the operator's own (``Aggregate.aggregates``), as is its ``low_at``. The state afterwards is built from the folds, the
undo log by :func:`~operators.vectorized.entries.settle_log`. Python loops run over the
state held before and after the step only, never per row.

The float fold leans on how ``np.add.at`` is implemented (numpy documents it as unbuffered,
not its order); tests/operators/vectorized/test_equal.py holds it to Python's loop on sums
that pairwise or reordered summation would change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from operators.aggregate import Aggregate
from operators.base import NO_TIME
from operators.errors import Fallback
from protocol.tuples import boundary

from .entries import Entries, last_call, settle_log
from .flow import Flow, Mark, typed_column

__all__ = ["CODE_LIMIT", "MAX_PAIRS", "run_aggregate"]

_KEY_TYPES = (pa.int64(), pa.string(), pa.bool_())
_NUMBER_TYPES = (pa.int64(), pa.float64())
#: The most (window, pane group) pairs one step merges (a few arrays of int64 each): a
#: window of many slides over many groups is left to the per-tuple operator's memory.
MAX_PAIRS = 1 << 24
#: Pairs of codes (pane and group, ...) are combined as ``a * nb + b`` below this.
CODE_LIMIT = 1 << 62
# A closing boundary of the step: (entry index, wave, the operator's low after it, whether
# it emitted a boundary at that low).
_Close = tuple[int, int, int, bool]


def run_aggregate(op: Aggregate, flows: Sequence[Flow], ports: Sequence[int]) -> Flow:
    """What ``op`` emits for ``flows`` (its one input) fed wave by wave; its state and
    bookkeeping move on as if it had run. :class:`Fallback` (``op`` untouched) where the
    result could differ from the per-tuple aggregate's."""
    if op._tainted:
        raise Fallback(f"{op.describe()} is tainted")
    flow, seq0 = flows[0], op._seq
    aggs = list(op.aggregates)
    e = _entries(flow, seq0)
    _check_not_late(op, flow, e)
    closes, wm, closed, sent = _walk(op, e, e.n)
    accs = _Accumulators(op, flow, e, aggs)
    out, row_g = _windows(op, accs, aggs, closes)
    # Every Fallback is behind us: from here on ``op`` moves on.
    n = out.n
    keep = (accs.ps - accs.ps % op.slide >= closes[-1][2]) if closes else \
        np.ones(len(accs.ps), bool)
    f = last_call(e) if e.n else 0
    _, wm_before, _, sent_before = _walk(op, e, f)
    low_before = op.low_at(wm_before)
    alive = (accs.pane_first < seq0 + f) & (accs.ps - accs.ps % op.slide >= low_before)
    oldest = int(accs.pane_first[alive].min()) if alive.any() else None
    op.last_id += n
    op.watermarks, op.watermark = [wm], wm
    op._closed_below, op._boundary_out = closed, sent
    op._panes = accs.panes(op, aggs, np.flatnonzero(keep))
    settle_log(op, e, lambda g: int(n - np.searchsorted(row_g, g)), [wm_before],
               sent_before, oldest)
    return out


def _entries(flow: Flow, seq0: int) -> Entries:
    """:meth:`Entries.order` for one input: its entries in flow order (no sort needed)."""
    at = np.array([m.at for m in flow.marks], dtype=np.int64)
    row_g = np.arange(flow.n, dtype=np.int64) + np.searchsorted(at, np.arange(flow.n),
                                                                   side="right")
    mark_g = at + np.arange(len(at), dtype=np.int64)
    total = flow.n + len(at)
    is_mark = np.zeros(total, bool)
    is_mark[mark_g] = True
    wave = np.empty(total, np.int64)
    wave[row_g] = flow.data.column("wave").to_numpy()
    wave[mark_g] = [m.wave for m in flow.marks]
    mark_time = np.zeros(total, np.int64)
    mark_time[mark_g] = [m.tuple[2] for m in flow.marks]
    return Entries([flow], seq0, [row_g], [mark_g], np.zeros(total, np.int64), is_mark,
                   wave, mark_time)


def _check_not_late(op: Aggregate, flow: Flow, e: Entries) -> None:
    """Fallback if a row comes behind the watermark (see the module docstring)."""
    if not flow.n:
        return
    times = np.array([m.tuple[2] for m in flow.marks], dtype=np.int64)
    wm = np.maximum.accumulate(np.concatenate([[op.watermark], times]))
    before = e.data_g[0] - np.arange(flow.n, dtype=np.int64)  # marks before row i
    if np.any(flow.data.column("time").to_numpy() < wm[before]):
        raise Fallback(f"{op.describe()}: a tuple behind its input's watermark")


def _walk(op: Aggregate, e: Entries, upto: int) -> tuple[list[_Close], int, int, int]:
    """The boundaries among entries ``[0, upto)`` that advance the watermark (Operator.
    _boundary, Aggregate.on_boundary), and the watermark, closed-below and last boundary
    out after them."""
    wm, closed, sent = op.watermark, op._closed_below, op._boundary_out
    closes: list[_Close] = []
    for g in np.flatnonzero(e.is_mark[:upto]).tolist():
        time = int(e.mark_time[g])
        if time <= wm:
            continue
        wm = time
        low = op.low_at(wm)
        closed = max(closed, low)
        emit = low > sent and low > NO_TIME
        sent = low if emit else sent
        closes.append((g, int(e.wave[g]), low, emit))
    return closes, wm, closed, sent


def _encode(values: np.ndarray) -> tuple[np.ndarray, int, np.ndarray]:
    """Dense codes of ``values`` numbered in order of first appearance, how many, and the
    position of each code's first appearance."""
    size = len(values)
    span = int(values.max()) - int(values.min()) + 1 if size else 0
    if 0 < span <= 4 * size:  # values close together (panes x groups): a table, no hashing
        offset = values - values.min()
        at = np.full(span, size, np.int64)
        np.minimum.at(at, offset, np.arange(size, dtype=np.int64))
        met = np.flatnonzero(at < size)
        met = met[np.argsort(at[met])]
        rank = np.empty(span, np.int64)
        rank[met] = np.arange(len(met), dtype=np.int64)
        return rank[offset], len(met), at[met]
    enc = pa.array(values).dictionary_encode()  # (its numbering: not promised, so ranked)
    idx = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    n = len(enc.dictionary)
    first = np.full(n, len(idx), np.int64)
    np.minimum.at(first, idx, np.arange(len(idx), dtype=np.int64))
    order = np.argsort(first)
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n, dtype=np.int64)
    return rank[idx], n, first[order]


def _pairs(op: Aggregate, a: np.ndarray, na: int, b: np.ndarray, nb: int
           ) -> tuple[np.ndarray, int, np.ndarray]:
    """:func:`_encode` of the pairs of codes ``(a, b)`` (``a < na``, ``b < nb``), as one
    int64 each: Fallback where that product does not fit (past 2**31 rows a step)."""
    if na * nb >= CODE_LIMIT:
        raise Fallback(f"{op.describe()}: {na} x {nb} codes do not fit one int64")
    return _encode(a * nb + b)


def _column(op: Aggregate, old: list[Any], new: Any, name: str, types: tuple[Any, ...]
            ) -> pa.Array:
    """The held values then the step's, as one column of one of ``types``, no None."""
    held, step = typed_column(old, name), new.combine_chunks()
    if len(held) and len(step) and held.type != step.type:
        raise Fallback(f"{op.describe()}: attribute {name!r} held {held.type} values, "
                       f"the step brings {step.type}")
    col = held if not len(step) else step if not len(held) else \
        pa.concat_arrays([held, step])
    if len(col) and (col.type not in types or col.null_count):
        raise Fallback(f"{op.describe()}: attribute {name!r} holds {col.type}"
                       f"{' and None' if col.null_count else ''}, not only "
                       f"{' or '.join(map(str, types))}")
    return col


def _fold_sum(codes: np.ndarray, x: np.ndarray, n: int) -> np.ndarray:
    """Each code's values added one by one in array order (see the module docstring)."""
    acc = np.full(n, -0.0) if x.dtype.kind == "f" else np.zeros(n, np.int64)
    np.add.at(acc, codes, x)
    return acc


def _extreme(fn: str, codes: np.ndarray, x: np.ndarray, n: int) -> np.ndarray:
    """Each code's min or max, the first of equals in array order."""
    ufunc = np.minimum if fn == "min" else np.maximum
    if x.dtype.kind == "f":
        init = np.inf if fn == "min" else -np.inf
    else:
        init = np.iinfo(np.int64).max if fn == "min" else np.iinfo(np.int64).min
    best = np.full(n, init, x.dtype)
    ufunc.at(best, codes, x)
    if x.dtype.kind != "f":
        return best
    hit = np.flatnonzero(x == best[codes])
    first = np.full(n, len(x), np.int64)
    np.minimum.at(first, codes[hit], hit)
    return x[first]


class _Accumulators:
    """The (pane, group) accumulators after the step's rows: those ``op`` held, in its
    order, then new ones in order of their first row; per accumulator its pane start,
    group, tmax, count, first seq, its pane's first seq and one array per slot."""

    def __init__(self, op: Aggregate, flow: Flow, e: Entries,
                 aggs: list[tuple[str, int, int]]) -> None:
        old = [(ps, p[0], k, a) for ps, p in op._panes.items() for k, a in p[1].items()]
        n_old, schema, data = len(old), op.input_schemas[0], flow.data
        col = np.int64
        seq = np.concatenate([np.array([a[2] for *_, a in old], col), e.seq0 + e.data_g[0]])
        time = data.column("time").to_numpy()
        ps = np.concatenate([np.array([o[0] for o in old], col), time - time % op._pane])
        # Groups: one code per distinct key (each attribute dictionary-encoded, combined),
        # and ``keys``: each key attribute's value by group code.
        key_pos = [schema.index(g) for g in op.group_by]
        group, n_groups = np.zeros(len(ps), np.int64), 1  # no group-by: one group
        self.keys: list[pa.Array] = []
        columns = []
        for j, p in enumerate(key_pos):
            held = [k if len(key_pos) == 1 else k[j] for _, _, k, _ in old]
            columns.append(_column(op, held, data.column(4 + p), schema[p], _KEY_TYPES))
            enc = columns[-1].dictionary_encode()
            codes = enc.indices.to_numpy().astype(np.int64)
            if j == 0:  # the dictionary's codes are the groups
                group, n_groups, self.keys = codes, len(enc.dictionary), [enc.dictionary]
            else:  # pairs of codes, and each attribute at a pair's first row
                group, n_groups, at = _pairs(op, group, n_groups, codes, len(enc.dictionary))
                self.keys = [c.take(pa.array(at)) for c in columns]
        # (Pane, group) accumulators; panes in order of creation: of their first accumulator.
        base = int(ps.min()) if len(ps) else 0
        acc, n, acc_at = _pairs(op, (ps - base) // op._pane,
                                (int(ps.max()) - base) // op._pane + 1 if len(ps) else 0,
                                group, n_groups)
        self.ps, self.group, self.first = ps[acc_at], group[acc_at], seq[acc_at]
        _, pane = np.unique(self.ps, return_inverse=True)
        lead = np.full(n, n, np.int64)
        np.minimum.at(lead, pane, np.arange(n, dtype=np.int64))
        self.pane_rank = lead[pane]  # a pane's first accumulator met its first row
        pane_first = np.concatenate([np.array([o[1] for o in old], col), seq[n_old:]])
        self.pane_first = pane_first[acc_at][self.pane_rank]
        self.count = np.bincount(acc[n_old:], minlength=n).astype(np.int64)
        np.add.at(self.count, acc[:n_old], np.array([a[1] for *_, a in old], col))
        self.tmax = np.full(n, np.iinfo(np.int64).min, np.int64)
        np.maximum.at(self.tmax, acc, np.concatenate([np.array([a[0] for *_, a in old], col),
                                                      data.column("tmax").to_numpy()]))
        self.slots: dict[int, np.ndarray] = {}
        for fn, p, s in aggs:
            if fn == "count":
                continue
            x = _numbers(op, _column(op, [a[s] for *_, a in old], data.column(4 + p),
                                     schema[p], _NUMBER_TYPES), fn, schema[p])
            self.slots[s] = _fold_sum(acc, x, n) if fn in ("sum", "avg") else \
                _extreme(fn, acc, x, n)

    def panes(self, op: Aggregate, aggs: list[tuple[str, int, int]], keep: np.ndarray
              ) -> dict[int, list[Any]]:
        """Aggregate._panes holding the accumulators ``keep``: panes in order of creation,
        in each its groups in order of creation, accumulators as the loop builds them."""
        keep = keep[np.lexsort((keep, self.pane_rank[keep]))]
        at = pa.array(self.group[keep])
        parts = [c.take(at).to_pylist() for c in self.keys]
        n_key = len(parts)
        keys = parts[0] if n_key == 1 else list(zip(*parts, strict=True)) if n_key else \
            [None] * len(keep)
        slots = sorted(self.slots)
        columns = [self.tmax[keep].tolist(), self.count[keep].tolist(),
                   self.first[keep].tolist(), *(self.slots[s][keep].tolist() for s in slots)]
        panes: dict[int, list[Any]] = {}
        for ps, pf, k, *a in zip(self.ps[keep].tolist(), self.pane_first[keep].tolist(),
                                 keys, *columns, strict=True):
            pane = panes.get(ps)
            if pane is None:
                pane = panes[ps] = [pf, {}]
            pane[1][k] = a
        return panes


def _numbers(op: Aggregate, col: pa.Array, fn: str, name: str) -> np.ndarray:
    """An aggregated column as numpy; Fallback on a NaN or an int sum past int64."""
    x: np.ndarray = col.to_numpy(zero_copy_only=False)
    if x.dtype.kind == "f" and np.isnan(x).any():
        raise Fallback(f"{op.describe()}: attribute {name!r} holds a NaN")
    # Every partial sum (pane or window) adds a subset of these values: bound them all.
    if x.dtype.kind == "i" and fn in ("sum", "avg") and len(x) \
            and max(int(x.max()), -int(x.min())) * len(x) >= 2**63:
        raise Fallback(f"{op.describe()}: a sum of {name!r} could leave int64")
    return x


def _windows(op: Aggregate, accs: _Accumulators, aggs: list[tuple[str, int, int]],
             closes: list[_Close]) -> tuple[Flow, np.ndarray]:
    """The outputs of the windows the step closes, with their boundaries, and per output
    row the entry index of the boundary that emitted it."""
    window, slide = op.window, op.slide
    ps = accs.ps
    if closes:  # windows over each pane: starts in (ps - window, ps], in [closed, low)
        lo = np.maximum(ps - window + 1, op._closed_below)
        s_min = -(-lo // slide) * slide
        s_max = np.minimum(ps - ps % slide, closes[-1][2] - slide)
        k = np.maximum(0, (s_max - s_min) // slide + 1)
    else:
        k = np.zeros(len(ps), np.int64)
    total = int(k.sum())
    if total > MAX_PAIRS:
        raise Fallback(f"{op.describe()}: {total} (window, pane group) pairs in one step")
    pair_acc = np.repeat(np.arange(len(ps), dtype=np.int64), k)
    j = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(k) - k, k)
    start = (s_min[pair_acc] + j * slide) if total else j
    order = np.lexsort((ps[pair_acc], start))  # by window, then pane: the merge order
    pair_acc, start = pair_acc[order], start[order]
    window_rank, n_windows, _ = _encode(start)
    n_groups = int(accs.group.max()) + 1 if len(accs.group) else 1
    wg, n, wg_at = _pairs(op, window_rank, n_windows, accs.group[pair_acc], n_groups)
    count = np.zeros(n, np.int64)
    np.add.at(count, wg, accs.count[pair_acc])
    tmax = np.full(n, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(tmax, wg, accs.tmax[pair_acc])
    first = np.full(n, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first, wg, accs.first[pair_acc])
    values: list[pa.Array] = []
    for fn, _, s in aggs:
        if fn == "count":
            values.append(pa.array(count))
            continue
        x = accs.slots[s][pair_acc]
        v = _fold_sum(wg, x, n) if fn in ("sum", "avg") else _extreme(fn, wg, x, n)
        values.append(pa.array(_avg(v, count) if fn == "avg" else v))
    # Outputs by window, in each by first appearance; a window's after its closing boundary.
    w_start = start[wg_at]
    out = np.lexsort((first, w_start))
    lows = np.array([c[2] for c in closes], np.int64)
    close_of = np.searchsorted(lows, w_start[out], side="right")
    take = pa.array(out)
    group_at = pa.array(accs.group[pair_acc[wg_at]][out])
    waves = np.array([c[1] for c in closes], np.int64)
    columns = [pa.array(np.arange(op.last_id + 1, op.last_id + 1 + n, dtype=np.int64)),
               pa.array(w_start[out]), pa.array(tmax[out]),
               pa.array(waves[close_of] if n else np.zeros(0, np.int64)),
               *(c.take(group_at) for c in accs.keys), *(v.take(take) for v in values)]
    if not n:  # as a flow of no tuples is typed (flow.transpose)
        columns[4:] = [pa.nulls(0) for _ in columns[4:]]
    names = ["id", "time", "tmax", "wave", *(f"v{i}" for i in range(len(columns) - 4))]
    marks = [Mark(wave, int(np.searchsorted(close_of, i, side="right")), boundary(low))
             for i, (_, wave, low, emit) in enumerate(closes) if emit]
    row_g = np.array([c[0] for c in closes], np.int64)[close_of] if n else close_of
    return Flow(op.output_schema, pa.table(columns, names=names), tuple(marks)), row_g


def _avg(sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``sum / count`` as Python divides: an int sum past 2**53 is not exact as a double,
    but Python's int division is correctly rounded, so those few divide in Python."""
    out: np.ndarray = sums / counts
    if sums.dtype.kind == "i":
        big = np.flatnonzero(np.abs(sums) > 2**53)
        out[big] = [a / b for a, b in zip(sums[big].tolist(), counts[big].tolist(),
                                          strict=True)]
    return out
