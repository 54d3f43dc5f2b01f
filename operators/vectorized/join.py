"""``join`` over flows: the band equi-join of operators/join.py, all of a step's waves at once.

The per-tuple join probes, for each arriving tuple, the other side's stored tuples with its
key in their arrival order, emits a match per stored tuple within the band, then stores it.
Over a step this is one hash join of the two sides (both the tuples the operator held
before the step and the step's own) on the key, kept where ``|dt| <= band`` and where one
of the pair arrived in the step: the later one is the probe. The matches, ordered by
(probe's arrival, stored tuple's arrival), are exactly the per-tuple outputs in order, with
``time`` / ``tmax`` the pair's max and the left values then the right.

Why eviction can be ignored: a stored tuple is evicted (or never stored) once the other
side's watermark is past its time plus the band, and no later tuple of that side can then
be within the band, *provided no tuple arrives behind its own port's watermark*. That
holds behind a SUnion, and is checked: a step with a late tuple falls back. Keys compare
as Python's dict does only for two columns of the same type, int, str or bool, without
None; any other key (a float, None, an int meeting a float) falls back.

The state afterwards is worked out, not replayed: each side keeps the tuples whose time is
at least the other side's final watermark minus the band (the ones eviction left), and the
undo log is rebuilt by :func:`~operators.vectorized.entries.settle_log`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from operators.errors import Fallback
from operators.join import Join
from protocol.tuples import boundary

from .entries import Entries, last_call, settle_log, walk_marks
from .flow import Flow, Mark, typed_column

__all__ = ["run_join"]

_KEY_TYPES = (pa.int64(), pa.string(), pa.bool_())


def run_join(op: Join, flows: Sequence[Flow], ports: Sequence[int]) -> Flow:
    """What ``op`` emits for ``flows`` (left, right) fed wave by wave, ports in ``ports``
    order in each wave; ``op``'s state and bookkeeping move on as if it had run.
    :class:`Fallback` (``op`` untouched) where the result could differ from the per-tuple
    join's."""
    if op._tainted:
        raise Fallback(f"{op.describe()} is tainted")
    seq0, band, last_id0 = op._seq, op.band, op.last_id
    e = Entries.order(flows, ports, seq0)
    marks = walk_marks(op, e)
    _check_not_late(op, flows, e)
    held = op.snapshot_state()
    sides = [_side(op, p, held[p], flows[p], e, seq0) for p in (0, 1)]
    lpos, rpos = _key_positions(op)
    li, ri = _matches(sides, lpos, rpos, band)
    lg, rg = sides[0]["g"].to_numpy()[li], sides[1]["g"].to_numpy()[ri]
    probe, built = np.maximum(lg, rg), np.minimum(lg, rg)
    order = np.lexsort((built, probe))
    li, ri, probe = li[order], ri[order], probe[order]
    n = len(order)
    lt, rt = sides[0]["time"].to_numpy()[li], sides[1]["time"].to_numpy()[ri]
    lm, rm = sides[0]["tmax"].to_numpy()[li], sides[1]["tmax"].to_numpy()[ri]
    columns = [pa.array(np.arange(last_id0 + 1, last_id0 + 1 + n, dtype=np.int64)),
               pa.array(np.maximum(lt, rt)), pa.array(np.maximum(lm, rm)),
               pa.array(e.wave[probe] if n else np.zeros(0, np.int64))]
    li_a, ri_a = pa.array(li, pa.int64()), pa.array(ri, pa.int64())
    columns += [c.take(li_a) for c in _values(sides[0], flows[0])]
    columns += [c.take(ri_a) for c in _values(sides[1], flows[1])]
    names = ["id", "time", "tmax", "wave", *(f"v{i}" for i in range(len(columns) - 4))]
    emitted_g = np.array([g for g, _ in marks.emitted], dtype=np.int64)
    rows_before = np.searchsorted(probe, emitted_g).tolist()
    out_marks = [Mark(int(e.wave[g]), at, boundary(b))
                 for (g, b), at in zip(marks.emitted, rows_before, strict=True)]
    out = Flow(op.output_schema, pa.table(columns, names=names), tuple(out_marks))
    # The state and bookkeeping the per-tuple join would have now.
    f = last_call(e) if e.n else 0
    before = marks.at(f)
    oldest = _oldest_seq(sides, before.watermarks, band, before.advanced, f, seq0)
    op.last_id = last_id0 + n
    op.watermarks, op.watermark = list(marks.final.watermarks), min(marks.final.watermarks)
    op._boundary_out = marks.final.sent
    op.restore_state(_state(sides, marks.final.watermarks, band, marks.final.advanced, seq0))
    settle_log(op, e, lambda g: int(n - np.searchsorted(probe, g)), before.watermarks,
               before.sent, oldest)
    return out


def _check_not_late(op: Join, flows: Sequence[Flow], e: Entries) -> None:
    """Fallback if a data tuple comes behind its port's watermark."""
    for p, f in enumerate(flows):
        if not f.n:
            continue
        times = np.array([m.tuple[2] for m in f.marks], dtype=np.int64)
        wm = np.maximum.accumulate(np.concatenate([[op.watermarks[p]], times]))
        at = np.array([m.at for m in f.marks], dtype=np.int64)
        before = np.searchsorted(at, np.arange(f.n), side="right")  # marks before row i
        if np.any(f.data.column("time").to_numpy() < wm[before]):
            raise Fallback(f"{op.describe()}: a tuple behind its input's watermark")


def _side(op: Join, p: int, stored: list[list[Any]], flow: Flow, e: Entries,
          seq0: int) -> dict[str, Any]:
    """One side's candidates: the tuples stored before the step (``stored``, the side's
    snapshot_state: g < 0, by their log seq) then the step's, as arrays ``g``, ``time``,
    ``tmax`` and value columns ``v*``."""
    schema = op.input_schemas[p]
    old_values = [typed_column([s[2][i] for s in stored], schema[i])
                  for i in range(len(schema))]
    side: dict[str, Any] = {
        "g": pa.chunked_array([pa.array([s[3] - seq0 for s in stored], pa.int64()),
                               pa.array(e.data_g[p], pa.int64())]),
        "time": pa.chunked_array([pa.array([s[0] for s in stored], pa.int64()),
                                  flow.data.column("time").combine_chunks()]),
        "tmax": pa.chunked_array([pa.array([s[1] for s in stored], pa.int64()),
                                  flow.data.column("tmax").combine_chunks()]),
    }
    for i, (old, new) in enumerate(zip(old_values, flow.attributes(), strict=True)):
        side[f"v{i}"] = _concat(op, old, new.combine_chunks(), schema[i])
    side["arity"] = len(schema)
    for k in ("g", "time", "tmax"):
        side[k] = side[k].combine_chunks()
    return side


def _concat(op: Join, old: pa.Array, new: pa.Array, name: str) -> pa.Array:
    """The stored values then the step's, as one column of their one type (or Fallback)."""
    if pa.types.is_null(old.type):
        old = pa.nulls(len(old), new.type)
    elif pa.types.is_null(new.type):
        new = pa.nulls(len(new), old.type)
    elif old.type != new.type:
        raise Fallback(f"{op.describe()}: attribute {name!r} is of two types")
    return pa.concat_arrays([old, new])


def _values(side: dict[str, Any], flow: Flow) -> list[pa.Array]:
    return [side[f"v{i}"] for i in range(len(flow.schema))]


def _key_positions(op: Join) -> tuple[list[int], list[int]]:
    left, right = op.input_schemas
    return [left.index(a) for a, _ in op.on], [right.index(b) for _, b in op.on]


def _matches(sides: list[dict[str, Any]], lpos: list[int], rpos: list[int],
             band: int) -> tuple[np.ndarray, np.ndarray]:
    """(left row, right row) of every pair with equal keys, within the band, one of
    them arrived in the step."""
    nl, nr = len(sides[0]["g"]), len(sides[1]["g"])
    empty = np.zeros(0, np.int64)
    if nl == 0 or nr == 0:
        return empty, empty
    lk = [sides[0][f"v{i}"] for i in lpos]
    rk = [sides[1][f"v{i}"] for i in rpos]
    for a, b in zip(lk, rk, strict=True):
        if a.type != b.type or a.type not in _KEY_TYPES or a.null_count or b.null_count:
            raise Fallback(f"join keys of Arrow types {a.type} and {b.type} (or None)")
    codes, n_codes = _codes(lk, rk)
    lt, rt = sides[0]["time"].to_numpy(), sides[1]["time"].to_numpy()
    li, ri = _band_pairs(codes[:nl], lt, codes[nl:], rt, n_codes, band)
    new = (sides[0]["g"].to_numpy()[li] >= 0) | (sides[1]["g"].to_numpy()[ri] >= 0)
    return li[new], ri[new].astype(np.int64)


def _band_pairs(lcode: np.ndarray, lt: np.ndarray, rcode: np.ndarray, rt: np.ndarray,
                n_codes: int, band: int, grid: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(left row, right row) of every pair with equal codes and ``|lt - rt| <= band``, in
    no particular order (the caller sorts the matches).

    A grid: time in cells of ``band`` (a pair is then at most one cell apart), cells
    numbered ``code * width + cell`` with an empty cell either side of each code's run, the
    right rows counted into them and sorted by cell (a counting sort: no comparison); a
    left row's candidates are the right rows of its own cell and its two neighbours, one
    contiguous range, kept when within the band. Where the grid would be much larger than
    the rows (a narrow band over a long step, many keys), a sort-merge instead: key and
    time as one int64 and two binary searches per left row (twice the time on the basic
    example's join). ``grid=False``: the sort-merge always (for the tests)."""
    t0 = min(int(lt.min()), int(rt.min()))
    t1 = max(int(lt.max()), int(rt.max()))
    if band > 0 and grid:
        width = (t1 - t0) // band + 3  # cells 1 .. width - 2 hold times; 0 and the last stay empty
        n_cells = n_codes * width
        if n_cells <= 4 * (len(lt) + len(rt)) + 4096:
            rcell = rcode * width + (rt - t0) // band + 1
            counts = np.bincount(rcell, minlength=n_cells)
            ends = np.cumsum(counts)
            r_order = np.argsort(rcell, kind="stable")
            lcell = lcode * width + (lt - t0) // band + 1
            lo, hi = ends[lcell - 1] - counts[lcell - 1], ends[lcell + 1]
            li, ri = _expand(lo, hi, r_order)
            near = np.abs(lt[li] - rt[ri]) <= band
            return li[near], ri[near]
    # Sort-merge: ``code * span + time``, with room of a band on either side of every time;
    # a left tuple's partners are the right tuples between (code, time - band) and (code,
    # time + band) in that order.
    base = t0 - band - 1
    span = t1 - base + band + 1
    if n_codes * span >= 2**62:
        raise Fallback("join keys and times too wide for one int64")
    rkey = rcode * span + (rt - base)
    r_order = np.argsort(rkey, kind="stable")
    rkey = rkey[r_order]
    lkey = lcode * span + (lt - base)
    lo = np.searchsorted(rkey, lkey - band, side="left")
    hi = np.searchsorted(rkey, lkey + band, side="right")
    return _expand(lo, hi, r_order)


def _expand(lo: np.ndarray, hi: np.ndarray, r_order: np.ndarray) -> tuple[np.ndarray,
                                                                          np.ndarray]:
    """Left row i paired with right rows ``r_order[lo[i]:hi[i]]``, for every i."""
    counts = hi - lo
    total = int(counts.sum())
    li = np.repeat(np.arange(len(lo), dtype=np.int64), counts)
    first = np.repeat(lo - (np.cumsum(counts) - counts), counts)
    return li, r_order[first + np.arange(total, dtype=np.int64)].astype(np.int64)


def _codes(lk: list[pa.Array], rk: list[pa.Array]) -> tuple[np.ndarray, int]:
    """One int64 code per row of the left then the right side: equal iff every key
    attribute is equal (a dictionary per attribute over both sides)."""
    codes = np.zeros(len(lk[0]) + len(rk[0]), dtype=np.int64)
    n = 1
    for a, b in zip(lk, rk, strict=True):
        enc = pa.concat_arrays([a, b]).dictionary_encode()
        size = len(enc.dictionary)
        if n * size >= 2**62:
            raise Fallback("too many distinct join keys for one int64")
        codes = codes * size + enc.indices.to_numpy().astype(np.int64)
        n *= size
    return codes, n


def _kept(side: dict[str, Any], floor: int, advanced: bool, upto: int | None) -> np.ndarray:
    """Which of a side's candidates the join holds: arrived (before entry ``upto``), at
    or above ``floor`` (the old ones only if a boundary moved since the step began)."""
    g, time = side["g"].to_numpy(), side["time"].to_numpy()
    keep: np.ndarray = time >= floor
    if not advanced:
        keep |= g < 0
    if upto is not None:
        keep &= g < upto
    return keep


def _oldest_seq(sides: list[dict[str, Any]], wm: list[int], band: int, advanced: bool,
                upto: int, seq0: int) -> int | None:
    gs = [side["g"].to_numpy()[_kept(side, wm[1 - p] - band, advanced, upto)]
          for p, side in enumerate(sides)]
    lows = [int(g.min()) for g in gs if len(g)]
    return seq0 + min(lows) if lows else None


def _state(sides: list[dict[str, Any]], wm: list[int], band: int, advanced: bool,
           seq0: int) -> list[list[list[Any]]]:
    """The join's snapshot_state after the step: per side, [time, tmax, values, seq] of
    the tuples it holds, in arrival order."""
    state = []
    for p, side in enumerate(sides):
        idx = np.flatnonzero(_kept(side, wm[1 - p] - band, advanced, None))
        idx = idx[np.argsort(side["g"].to_numpy()[idx], kind="stable")]
        take = pa.array(idx, pa.int64())
        cols = [side[k].take(take).to_pylist() for k in ("time", "tmax", "g")]
        values = [side[f"v{i}"].take(take).to_pylist() for i in range(side["arity"])]
        rows = list(zip(*values, strict=True)) if values else [()] * len(idx)
        state.append([[t, m, list(v), g + seq0]
                      for t, m, v, g in zip(cols[0], cols[1], rows, cols[2], strict=True)])
    return state
