"""SUnion's release of a replay step, built as a flow: from spilled Arrow segments as they are.

Role: the head of a vectorized replay. ``SUnion.replay_released`` does a replay step's
bookkeeping but leaves each bucket released stable as a :class:`~operators.buckets.Released`
(where its tuples are: spilled chunks, an in-memory list). :func:`released_stream` builds
the step's output from them: the chunks' rows straight from their memory-mapped segments
(no Python object per tuple), the in-memory tuples converted, all of a bucket in time order
(a stable sort: ties keep port, then id, order, as ``release_order`` does) and numbered from
its first id; the boundaries as marks, a wave ending at each. Anything a flow cannot hold
(a tentative release, an attribute of mixed types, columns of two types) makes the step
plain tuples, built exactly as the per-tuple release builds them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from operators.buckets import Released
from operators.errors import Fallback
from protocol.tuples import Kind, Schema, Tuple
from state.spill import Chunk

from .engine import Stream
from .flow import Flow, Mark, transpose

__all__ = ["released_stream", "released_streams"]


def released_streams(schema: Schema, out: list[Tuple], runs: Sequence[Released]
                     ) -> list[Stream]:
    """The step's output as streams to run one after the other: its stable head as a
    flow, and the rest (from the first tentative tuple on, after the last stable boundary
    before it) as plain tuples. A long step, a Spark job's, ends with the failure's
    newest buckets, still tentative: without the cut, the step's every bucket would go
    per tuple for them. (Running the two in turn is running the step: operators carry
    their state from one to the next, as from step to step.)"""
    first = next((k for k, t in enumerate(out) if t[0] is not Kind.BOUNDARY or t[1] != 0),
                 None)
    if first is None or first == 0:
        return [released_stream(schema, out, runs)]
    cut = first  # after boundary out[first - 1]: that wave is whole
    head = [r for r in runs if r.at < cut]
    tail = [Released(r.at - cut, r.first_id, r.ports, r.store) for r in runs if r.at >= cut]
    return [released_stream(schema, out[:cut], head),
            released_stream(schema, out[cut:], tail)]


def released_stream(schema: Schema, out: list[Tuple], runs: Sequence[Released]) -> Stream:
    """The step's output (``out``, with ``runs`` at their places) as a stream."""
    try:
        stream = Stream(schema, flow=_flow(schema, out, runs))
        stream.vectorized = True
        return stream
    except Fallback:
        return Stream(schema, batches=_waves(_tuples(out, runs)))


def _flow(schema: Schema, out: list[Tuple], runs: Sequence[Released]) -> Flow:
    if any(t[0] is not Kind.BOUNDARY or t[1] != 0 for t in out):
        raise Fallback("a tentative release in the replay step")
    names = ["time", "tmax", *(f"v{i}" for i in range(len(schema)))]
    # Every source (a spilled chunk, an in-memory list) in release order: per bucket, its
    # ports' sources one after the other. The chunks' rows are gathered from their
    # segments, the lists' converted, each kind in one go: the concatenation ("all")
    # holds the spilled rows, then the in-memory ones.
    chunks: list[Chunk] = []
    rows: list[Tuple] = []
    spilled: list[bool] = []
    bucket_of: list[int] = []
    lengths: list[int] = []
    for k, r in enumerate(runs):
        for sources in r.ports:
            for src in sources:
                if isinstance(src, list):
                    rows += src
                    lengths.append(len(src))
                else:
                    chunks.append(src)
                    lengths.append(src.length)
                spilled.append(not isinstance(src, list))
                bucket_of.append(k)
    sizes = np.bincount(np.array(bucket_of, dtype=np.int64),
                        weights=np.array(lengths, dtype=np.int64),
                        minlength=len(runs)).astype(np.int64)
    parts = []
    gathered = np.zeros(0, np.int64)  # the spilled rows' places in their segments
    if chunks:
        segments, gathered = _gather(chunks, runs)
        parts.append(segments)
    if rows:
        parts.append(_rows_table(schema, rows, names))
    if not parts:
        return Flow(tuple(schema), _empty(schema), tuple(_marks(out, runs, sizes)))
    try:
        data = pa.concat_tables([t.select(names) for t in parts], promote_options="default")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise Fallback(f"the replay's columns do not agree: {e}") from None
    # Row k of the release (sources in release order) is row index[k] of "all": the spilled
    # rows in read order, then the in-memory ones; and row k of "all" is row place[k] of
    # ``data`` (the segments, then the in-memory rows): one take gathers the step at the end.
    in_segments = parts[0].num_rows if chunks else 0
    place = np.concatenate([gathered, np.arange(in_segments, data.num_rows, dtype=np.int64)])
    length = np.array(lengths, dtype=np.int64)
    is_spilled = np.array(spilled, dtype=bool)
    at = np.empty(len(length), dtype=np.int64)  # each source's first row in "all"
    at[is_spilled] = np.cumsum(length[is_spilled]) - length[is_spilled]
    at[~is_spilled] = (int(length[is_spilled].sum()) + np.cumsum(length[~is_spilled])
                       - length[~is_spilled])
    index = place[np.repeat(at - (np.cumsum(length) - length), length)
                  + np.arange(int(length.sum()))]
    bucket = np.repeat(np.array(bucket_of, dtype=np.int64), length)
    # A stable sort by time within a bucket, ties in release order (port, then id). A
    # bucket's tuples are older than the next bucket's, so a stable sort by time alone is
    # that order; checked, and sorted by (bucket, time) where it does not hold.
    times = data.column("time").to_numpy()[index]
    order = np.argsort(times, kind="stable")
    if np.any(np.diff(bucket[order]) < 0):
        order = np.lexsort((times, bucket))
    data = data.take(pa.array(index[order]))
    bucket = bucket[order]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    first = np.array([r.first_id for r in runs], dtype=np.int64)
    ids = first[bucket] + (np.arange(len(bucket), dtype=np.int64) - starts[bucket])
    run_wave = np.array([r.at for r in runs], dtype=np.int64)  # boundaries before it
    columns = [pa.array(ids), data.column("time"), data.column("tmax"),
               pa.array(run_wave[bucket]), *(data.column(n) for n in names[2:])]
    table = pa.table(columns, names=["id", "time", "tmax", "wave", *names[2:]])
    return Flow(tuple(schema), table, tuple(_marks(out, runs, sizes)))


def _marks(out: list[Tuple], runs: Sequence[Released], sizes: np.ndarray) -> list[Mark]:
    """Each boundary of ``out`` (all boundaries: wave w ends with the w-th) as a mark
    after the rows of the runs before it."""
    at = np.array([r.at for r in runs], dtype=np.int64)
    runs_before = np.searchsorted(at, np.arange(len(out)), side="right")
    rows_before = np.concatenate([[0], np.cumsum(sizes)])[runs_before]
    return [Mark(w, int(rows_before[w]), t) for w, t in enumerate(out)]


def _empty(schema: Schema) -> pa.Table:
    return pa.table([pa.array([], pa.int64())] * 4 + [pa.nulls(0)] * len(schema),
                    names=["id", "time", "tmax", "wave", *(f"v{i}" for i in range(len(schema)))])


def _gather(chunks: list[Chunk], runs: Sequence[Released]) -> tuple[pa.Table, np.ndarray]:
    """The spilled chunks' segments and their rows' places in them, one chunk after the
    other (``ChunkReader.gather``); checked to be all stable data. (A chunk's segment knows
    its file: any of the runs' readers reads every chunk.)"""
    store = next((r.store for r in runs if r.store is not None), None)
    if store is None:
        raise Fallback("spilled chunks without a store")
    gathered = store.gather(chunks)
    if gathered is None:
        raise Fallback("a spilled attribute of mixed types")
    table, rows = gathered
    if np.any(table.column("kind").to_numpy()[rows] != 0):
        raise Fallback("a spilled chunk that is not all stable data")
    return table, rows


def _rows_table(schema: Schema, rows: list[Tuple], names: list[str]) -> pa.Table:
    """In-memory tuples as (time, tmax, v0, ...)."""
    kinds, _, times, tmaxs, attrs = transpose(schema, rows)
    if set(kinds) != {Kind.STABLE}:
        raise Fallback("a tentative tuple in a stable release")
    return pa.table([pa.array(times, pa.int64()), pa.array(tmaxs, pa.int64()), *attrs],
                    names=names)


def _tuples(out: list[Tuple], runs: Sequence[Released]) -> list[Tuple]:
    """The step's output as tuples: each run's tuples inserted at its place."""
    result: list[Tuple] = []
    k = 0
    for r in runs:
        result += out[k:r.at]
        result += r.tuples()
        k = r.at
    return result + out[k:]


def _waves(released: list[Tuple]) -> list[tuple[int, list[Tuple]]]:
    """Cut after each boundary, as QueryNetwork._emit does."""
    waves: list[tuple[int, list[Tuple]]] = []
    start = 0
    for k, t in enumerate(released):
        if t[0] is Kind.BOUNDARY:
            waves.append((len(waves), released[start:k + 1]))
            start = k + 1
    if start < len(released):
        waves.append((len(waves), released[start:]))
    return waves
