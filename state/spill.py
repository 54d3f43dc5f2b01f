"""Spill: tuples a replica holds for a replay, moved out of memory into Arrow IPC segments.

A long failure makes a replica hold everything its SUnions released since the checkpoint
(reconciliation replays it, DESIGN.md 4): an hour at 50,000 tuples/s is 180 M tuples, far
beyond memory. An owner (operators/sunion.py) keeps its newest tuples in memory and, past
its bound, hands its oldest *runs* (lists of data tuples in id order) to a
:class:`SpillStore`, which writes them as one *segment* (an Arrow IPC file, random access)
and gives back one :class:`Chunk` per run. The owner keeps the chunk in place of the run;
``read`` brings the tuples back (memory-mapped: only the rows read are paged in);
``cut`` shortens a chunk to the ids an UNDO keeps; ``release`` forgets a chunk, and a
segment is deleted once every chunk in it is released (a checkpoint or a replay made its
tuples unneeded).

Exactness (the replay must see the tuples that were spilled, bit for bit): kinds, ids,
times and tmax are int8/int64 columns; an attribute whose values in the segment are all
``int`` (bools excluded), all ``float``, all ``str`` or all ``bool`` (None allowed in each)
is an int64, float64, string or bool column; any other attribute (mixed types) is stored as
orjson text per cell, which is how the values crossed the wire (protocol/codec.py; an int
beyond 64 bits, which neither carries, is refused with a StateError). The wire refuses NaN and infinities, but an operator's state (an undo
log) may hold them, and orjson would write them as ``null``: in such a column a non-finite
float is stored as its 8 bytes behind a zero byte, which no JSON text starts with.

Not durable: a segment outlives no process (a crashed replica recovers from its partner,
node/replica/recovery.py), so nothing is fsynced, and a store deletes the segments a
previous process of the same name left behind when it opens.

pyarrow is imported at the first spill, not with this module: a replica that never spills
starts without it (tests/node/procs/test_startup.py).
"""

from __future__ import annotations

import glob
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from math import isfinite
from pathlib import Path
from struct import Struct
from typing import Any

import orjson

from protocol.tuples import KINDS, Kind, Tuple, columns_of, make_tuple

from .errors import StateError

__all__ = ["NO_SPILL", "Chunk", "ChunkReader", "SegmentReader", "SpillStats", "SpillStore", "estimate_tuple_bytes"]

_SUFFIX = ".arrow"
_LAST_DATA_KIND = int(Kind.TENTATIVE)  # kinds above it are control tuples
_JSON = b"json"  # field metadata value of an attribute stored as orjson text
_FLOAT_BITS = Struct("<xd")  # a non-finite float in an orjson column: a zero byte, its bits


def estimate_tuple_bytes(t: Tuple) -> int:
    """What one tuple like ``t`` costs in memory: the tuple, its values tuple and each
    value object (shared small ints and interned strings counted too: an overestimate is
    the safe side of a memory bound), plus a list slot."""
    values = t[4]
    return (sys.getsizeof(t) + sys.getsizeof(values) + sum(map(sys.getsizeof, values))
            + sys.getsizeof(t[1]) + sys.getsizeof(t[2]) + 8)


class _Segment:
    """One Arrow IPC file of spilled runs; deleted when its last chunk is released."""

    __slots__ = ("bytes", "json_cols", "path", "refs", "table")

    def __init__(self, path: Path, nbytes: int, refs: int, json_cols: frozenset[int]) -> None:
        self.path = path
        self.bytes = nbytes
        self.refs = refs
        self.json_cols = json_cols
        self.table: Any = None  # the memory-mapped table, opened at the first read


class Chunk:
    """A run of tuples in a segment: rows ``offset .. offset+length``, ids ``first_id ..
    last_id`` (in order), ``n_tent`` of them TENTATIVE."""

    __slots__ = ("first_id", "last_id", "length", "n_tent", "offset", "segment")

    def __init__(self, segment: _Segment, offset: int, length: int, first_id: int,
                 last_id: int, n_tent: int) -> None:
        self.segment = segment
        self.offset = offset
        self.length = length
        self.first_id = first_id
        self.last_id = last_id
        self.n_tent = n_tent

    def __repr__(self) -> str:
        return (f"Chunk({self.segment.path.name}[{self.offset}:+{self.length}], "
                f"ids {self.first_id}..{self.last_id}, {self.n_tent} tentative)")


@dataclass(frozen=True)
class SpillStats:
    """What a store holds on disk now, and what it wrote in all."""

    tuples: int  # tuples in chunks not released
    segments: int  # segment files on disk
    bytes: int  # their size
    written_tuples: int  # every tuple ever spilled
    deleted_segments: int

    def __add__(self, other: SpillStats) -> SpillStats:
        return SpillStats(self.tuples + other.tuples, self.segments + other.segments,
                          self.bytes + other.bytes, self.written_tuples + other.written_tuples,
                          self.deleted_segments + other.deleted_segments)


NO_SPILL = SpillStats(0, 0, 0, 0, 0)


class ChunkReader:
    """Reading chunks back: a store's own, or a :class:`SegmentReader`'s in another process."""

    name: str

    def gather(self, chunks: Sequence[Chunk]) -> Any:
        """Where the rows of ``chunks`` are: ``(table, rows)``, the concatenation of their
        segments (memory-mapped, not copied; columns kind, id, time, tmax, v0, v1, ...) and
        the indices of the chunks' rows in it, one chunk after the other; None when an
        attribute of one of their segments is orjson text (mixed types: only :meth:`read`
        decodes them). One ``take`` then gathers them (a long replay reads tens of
        thousands of chunks, one per bucket and port, and a slice per chunk, then their
        concatenation, cost more than the rest of the replay's input); a caller with more
        to gather composes its own indices first."""
        import numpy as np
        import pyarrow as pa

        firsts, which = segment_plan(chunks)
        tables = []
        for c in firsts:
            table = self._table(c)  # (raises for a released chunk)
            if c.segment.json_cols:
                return None
            tables.append(table)
        for c in chunks:
            if c.segment.refs <= 0 or c.length <= 0:
                raise StateError(f"spill {self.name}: {c!r} was released")
        if not tables:
            raise StateError(f"spill {self.name}: gather of no chunk")
        sizes = np.array([t.num_rows for t in tables], dtype=np.int64)
        bases = np.cumsum(sizes) - sizes  # each segment's first row in the concatenation
        starts = bases[np.array(which, dtype=np.int64)] + np.array([c.offset for c in chunks],
                                                                     dtype=np.int64)
        lengths = np.array([c.length for c in chunks], dtype=np.int64)
        before = np.cumsum(lengths) - lengths  # each chunk's first row in the result
        rows = np.repeat(starts - before, lengths) + np.arange(int(lengths.sum()))
        return pa.concat_tables(tables, promote_options="default"), rows

    def read(self, chunk: Chunk, start: int = 0, stop: int | None = None) -> list[Tuple]:
        """The chunk's tuples ``start .. stop`` (default: all), as they were written."""
        table = self._table(chunk)  # (raises for a released chunk)
        stop = chunk.length if stop is None else min(stop, chunk.length)
        if start >= stop:
            return []
        table = table.slice(chunk.offset + start, stop - start)
        kinds, ids, times, tmaxs = (table.column(c).to_pylist() for c in range(4))
        json_cols = chunk.segment.json_cols
        attrs = []
        for c in range(table.num_columns - 4):
            col = table.column(4 + c).to_pylist()
            attrs.append([_from_cell(v) for v in col] if c in json_cols else col)
        values = zip(*attrs, strict=True) if attrs else ((),) * len(ids)
        return [make_tuple(KINDS[k], i, tm, tx, tuple(v) if k <= _LAST_DATA_KIND else ())
                for k, i, tm, tx, v in zip(kinds, ids, times, tmaxs, values, strict=True)]

    def _table(self, chunk: Chunk) -> Any:
        segment = chunk.segment
        if segment.refs <= 0 or chunk.length <= 0:
            raise StateError(f"spill {self.name}: {chunk!r} was released")
        if segment.table is None:
            import pyarrow as pa

            segment.table = pa.ipc.open_file(pa.memory_map(str(segment.path))).read_all()
        return segment.table


def segment_plan(chunks: Sequence[Chunk]) -> tuple[list[Chunk], list[int]]:
    """How :meth:`ChunkReader.gather` gathers ``chunks``: one chunk per segment *file*
    (by path: chunks detached for another process each carry a segment object of their
    own, and a table per chunk made a Spark task's replay 60 times slower), in order of
    first use; and per chunk, the index of its segment among those."""
    firsts: list[Chunk] = []
    index: dict[Path, int] = {}
    which = []
    for c in chunks:
        k = index.setdefault(c.segment.path, len(firsts))
        if k == len(firsts):
            firsts.append(c)
        which.append(k)
    return firsts, which


class SpillStore(ChunkReader):
    """Segments named ``<name>-<seq>.arrow`` in ``directory`` (created if missing)."""

    def __init__(self, directory: str | os.PathLike[str], name: str) -> None:
        if not name or any(c in name for c in "/\\\0") or name.startswith("."):
            raise StateError(f"spill store name {name!r} cannot begin a file name")
        self.directory = Path(directory)
        self.name = name
        self.directory.mkdir(parents=True, exist_ok=True)
        for stale in self.directory.glob(f"{glob.escape(name)}-*{_SUFFIX}"):
            stale.unlink()  # a previous process of this name: its tuples are gone with it
        self._segments: dict[Path, _Segment] = {}
        self._seq = 0
        self._tuples = 0
        self._written = 0
        self._deleted = 0

    def stats(self) -> SpillStats:
        return SpillStats(self._tuples, len(self._segments),
                          sum(s.bytes for s in self._segments.values()), self._written,
                          self._deleted)

    def write(self, runs: Sequence[Sequence[Tuple]]) -> list[Chunk]:
        """Spill ``runs`` (non-empty lists of data tuples, each in id order, every tuple
        with the same number of values) into one new segment: one chunk per run."""
        import pyarrow as pa

        if not runs or not all(runs):
            raise StateError(f"spill {self.name}: every run to spill must hold tuples")
        rows = [t for run in runs for t in run]
        # Transposed a column at a time in C (protocol.tuples.columns_of).
        kinds, ids, times, tmaxs, values = columns_of(rows, 5)
        lengths = set(map(len, values))
        arity = max(lengths)  # control tuples carry no values: null cells
        columns: list[Any] = [pa.array(kinds, pa.int8()),
                              *(pa.array(c, pa.int64()) for c in (ids, times, tmaxs))]
        fields = [pa.field(n, a.type) for n, a in zip(("kind", "id", "time", "tmax"), columns,
                                                       strict=True)]
        json_cols: set[int] = set()
        if len(lengths) == 1:
            attrs: list[list[Any]] = columns_of(values, arity) if arity else []
        else:
            short = [t for t in rows if len(t[4]) != arity and (t[4] or t[0] <= _LAST_DATA_KIND)]
            if short:
                raise StateError(f"spill {self.name}: tuple id {short[0][1]} has "
                                 f"{len(short[0][4])} values where others have {arity}")
            attrs = [[v[c] if v else None for v in values] for c in range(arity)]
        for c, column in enumerate(attrs):
            array, is_json = _column(list(column), f"spill {self.name}: value {c}")
            columns.append(array)
            fields.append(pa.field(f"v{c}", array.type,
                                   metadata={b"dpc": _JSON} if is_json else None))
            if is_json:
                json_cols.add(c)
        self._seq += 1
        path = self.directory / f"{self.name}-{self._seq:06d}{_SUFFIX}"
        batch = pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, batch.schema) as w:
            w.write_batch(batch)
        segment = _Segment(path, path.stat().st_size, len(runs), frozenset(json_cols))
        self._segments[path] = segment
        chunks, offset = [], 0
        for run in runs:
            n_tent = kinds[offset:offset + len(run)].count(Kind.TENTATIVE)  # (C, not a loop)
            chunks.append(Chunk(segment, offset, len(run), run[0][1], run[-1][1], n_tent))
            offset += len(run)
        self._tuples += len(rows)
        self._written += len(rows)
        return chunks

    def keep_first(self, chunk: Chunk, k: int) -> None:
        """Shorten ``chunk`` to its first ``k`` tuples (a positional cut; 0: released)."""
        if k >= chunk.length:
            return
        if k <= 0:
            self.release(chunk)
            return
        kinds, ids = self._kinds_ids(chunk, 0, k)
        self._tuples -= chunk.length - k
        chunk.length = k
        chunk.last_id = ids[-1]
        chunk.n_tent = kinds.count(int(Kind.TENTATIVE))

    def drop_first(self, chunk: Chunk, k: int) -> None:
        """Forget the first ``k`` tuples of ``chunk`` (a trimmed prefix; all: released)."""
        if k <= 0:
            return
        if k >= chunk.length:
            self.release(chunk)
            return
        kinds, ids = self._kinds_ids(chunk, k, chunk.length)
        self._tuples -= k
        chunk.offset += k
        chunk.length -= k
        chunk.first_id = ids[0]
        chunk.n_tent = kinds.count(int(Kind.TENTATIVE))

    def split(self, chunk: Chunk, k: int) -> Chunk:
        """Shorten ``chunk`` to its first ``k`` tuples and return the rest as a new chunk
        of the same segment (0 < k < length)."""
        if not 0 < k < chunk.length:
            raise StateError(f"spill {self.name}: cannot split {chunk!r} at {k}")
        kinds, ids = self._kinds_ids(chunk, 0, chunk.length)
        tentative = int(Kind.TENTATIVE)
        rest = Chunk(chunk.segment, chunk.offset + k, chunk.length - k, ids[k], ids[-1],
                     kinds[k:].count(tentative))
        chunk.segment.refs += 1
        chunk.length = k
        chunk.last_id = ids[k - 1]
        chunk.n_tent = kinds[:k].count(tentative)
        return rest

    def detached(self, chunk: Chunk) -> Chunk:
        """A copy of ``chunk`` for a reader in another process (a Spark task replaying it,
        node/spark/): its segment by path, not mapped here, pickled small; read it with a
        :class:`SegmentReader`. The store still owns the file: the copy must be read before
        the chunk is released."""
        seg = chunk.segment
        if seg.refs <= 0 or chunk.length <= 0:
            raise StateError(f"spill {self.name}: {chunk!r} was released")
        return Chunk(_Segment(seg.path, seg.bytes, 1, seg.json_cols), chunk.offset,
                     chunk.length, chunk.first_id, chunk.last_id, chunk.n_tent)

    def share(self, chunk: Chunk, skip: int = 0) -> Chunk:
        """A reader's own handle on ``chunk``'s tuples after its first ``skip``: the
        segment stays on disk until this handle is released too (``release(handle,
        counted=False)``: a handle is not counted among the tuples held)."""
        if not 0 <= skip < chunk.length:
            raise StateError(f"spill {self.name}: cannot share {chunk!r} after {skip}")
        chunk.segment.refs += 1
        return Chunk(chunk.segment, chunk.offset + skip, chunk.length - skip, chunk.first_id,
                     chunk.last_id, 0)

    def _kinds_ids(self, chunk: Chunk, start: int, stop: int) -> tuple[list[int], list[int]]:
        table = self._table(chunk).slice(chunk.offset + start, stop - start)
        return table.column(0).to_pylist(), table.column(1).to_pylist()

    def cut(self, chunk: Chunk, last_kept_id: int) -> int:
        """Shorten ``chunk`` to its tuples with id <= ``last_kept_id`` (an UNDO); return how
        many TENTATIVE tuples that removed. A chunk cut to nothing is released."""
        if chunk.last_id <= last_kept_id:
            return 0
        kinds, ids = self._kinds_ids(chunk, 0, chunk.length)
        k = len(ids)
        while k and ids[k - 1] > last_kept_id:
            k -= 1
        tentative = int(Kind.TENTATIVE)
        removed = sum(1 for x in kinds[k:] if x == tentative)
        self._tuples -= chunk.length - k
        chunk.length = k
        chunk.n_tent -= removed
        if k:
            chunk.last_id = ids[k - 1]
        else:
            self.release(chunk, counted=False)
        return removed

    def release(self, chunk: Chunk, *, counted: bool = True) -> None:
        """Forget ``chunk``; delete its segment once no chunk of it is held."""
        if counted:
            self._tuples -= chunk.length
        chunk.length = 0
        segment = chunk.segment
        segment.refs -= 1
        if segment.refs == 0:
            segment.table = None  # unmap before deleting
            segment.path.unlink()
            del self._segments[segment.path]
            self._deleted += 1

    def close(self) -> None:
        """Delete every segment (the owner is done with all of them)."""
        for segment in list(self._segments.values()):
            segment.table = None
            segment.path.unlink(missing_ok=True)
            self._deleted += 1
        self._segments.clear()
        self._tuples = 0


class SegmentReader(ChunkReader):
    """Reads :meth:`SpillStore.detached` chunks in a process that does not own their
    segments: it maps each segment once (by path: detached chunks of one segment do not
    share their segment object once pickled), never deletes them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._tables: dict[Path, Any] = {}

    def _table(self, chunk: Chunk) -> Any:
        path = chunk.segment.path
        table = self._tables.get(path)
        if table is None:
            table = self._tables[path] = super()._table(chunk)
            chunk.segment.table = None  # (the map is this reader's, not the chunk's)
        return table


def _column(values: list[Any], where: str) -> tuple[Any, bool]:
    """An exact Arrow array for one attribute's values, and whether it is orjson text."""
    import pyarrow as pa

    types = set(map(type, values)) - {type(None)}
    exact = {int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_()}
    if len(types) == 1 and (t := types.pop()) in exact:
        try:
            return pa.array(values, exact[t]), False
        except OverflowError:
            pass  # an int beyond 64 bits: orjson refuses it below, with the reason
    try:
        return pa.array([_to_cell(v) for v in values], pa.binary()), True
    except orjson.JSONEncodeError as e:  # nothing the wire would have carried either
        raise StateError(f"{where}: cannot store {e}") from None


def _to_cell(v: Any) -> bytes:
    if type(v) is float and not isfinite(v):
        return _FLOAT_BITS.pack(v)
    return orjson.dumps(v)


def _from_cell(cell: bytes) -> Any:
    return _FLOAT_BITS.unpack(cell)[0] if cell[:1] == b"\0" else orjson.loads(cell)
