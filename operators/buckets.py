"""SUnion's buckets, and the memory bound on the ones it keeps for a replay.

A :class:`Bucket` holds one list per input port, in id order. A port's STABLE input that
arrived as columns (a Batch off the wire: protocol/columns.py) is kept as such, runs of
:class:`~protocol.columns.Columns` before the port's list (``cols``): a bucket whose ports
hold only runs is released by one stable sort of their concatenation
(:func:`release_columns`), no tuple built. Whatever else needs a port's tuples one by one
(an UNDO's cut, a spill, a snapshot, a replay) first turns its runs into tuples, in
front of its list (:meth:`Bucket.materialize`): the order of a port's sequence is spilled
chunks, runs, then the list, and a run never follows a tuple of the list (SUnion appends
such a run to the list as tuples). Once SUnion released it, a
bucket is *kept* while a reconciliation may replay it (operators/sunion.py, "Keeping for
replay"); during a long failure the kept buckets are the whole failure's input. With a
:class:`Spiller` (the runtime's ``buffer_memory``), SUnion moves the oldest kept tuples
held in memory to disk (state/spill.py) whenever they exceed the bound: a port's sequence
is then its spilled chunks, in order, followed by its in-memory list. Late tuples for a
kept bucket (corrections) are appended to the in-memory list, so the order holds; an UNDO
cuts the in-memory list first, then the chunks from the last one back. Pending buckets are
never spilled: they hold at most alpha*X of input, and the hot path appends to them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count, repeat
from operator import itemgetter
from typing import TypeVar

import numpy as np
import pyarrow as pa

from protocol.columns import Columns
from protocol.tuples import Kind, Tuple
from state.spill import Chunk, ChunkReader, SpillStats, SpillStore, estimate_tuple_bytes

from .errors import OperatorError

R = TypeVar("R", bound=ChunkReader)

__all__ = ["Bucket", "Released", "Spiller", "release_columns", "release_order"]

_TIME = itemgetter(2)
_TMAX = itemgetter(3)
_VALUES = itemgetter(4)
_new = tuple.__new__

TENTATIVE = Kind.TENTATIVE


class Bucket:
    """One bucket: per-port lists in id order (after the port's spilled chunks, if any),
    arrival ``now`` of its first tuple, and how many TENTATIVE tuples it holds (a bucket
    with any is never stable-ready)."""

    __slots__ = ("cols", "first_now", "n_tent", "ports", "spilled")

    def __init__(self, n_ports: int, first_now: int) -> None:
        self.ports: list[list[Tuple]] = [[] for _ in range(n_ports)]
        self.first_now = first_now
        self.n_tent = 0
        self.spilled: list[list[Chunk]] | None = None  # per port, once anything spilled
        #: Per port, its STABLE runs of columns (before ``ports[p]``), once one arrived.
        self.cols: list[list[Columns]] | None = None

    def add_columns(self, port: int, run: Columns) -> bool:
        """Keep a STABLE run as columns; False (nothing done) when the port's list holds
        tuples already: a run must not follow them (the caller appends it as tuples)."""
        if self.ports[port]:
            return False
        if self.cols is None:
            self.cols = [[] for _ in self.ports]
        self.cols[port].append(run)
        return True

    def columnar(self) -> bool:
        """Whether the bucket holds runs of columns and nothing else (what
        :func:`release_columns` releases)."""
        return self.cols is not None and self.spilled is None and not any(self.ports)

    def materialize(self) -> None:
        """Every port's runs of columns as tuples, in front of its list."""
        if self.cols is not None:
            for p, runs in enumerate(self.cols):
                if runs:
                    items = [t for run in runs for t in run.to_tuples()]
                    self.ports[p] = items + self.ports[p]
            self.cols = None

    def in_memory(self) -> int:
        n = sum(map(len, self.ports))
        if self.cols is not None:
            n += sum(len(run) for runs in self.cols for run in runs)
        return n

    def size(self) -> int:
        n = self.in_memory()
        if self.spilled:
            n += sum(c.length for cs in self.spilled for c in cs)
        return n

    def port_items(self, port: int, store: SpillStore | None) -> list[Tuple]:
        """Port ``port``'s tuples, in id order, read back from disk where spilled (its
        runs of columns made tuples without changing the bucket: a snapshot reads this)."""
        if self.cols is not None and self.cols[port]:
            runs = [t for run in self.cols[port] for t in run.to_tuples()]
            if not self.spilled or not self.spilled[port]:
                return runs + self.ports[port]
            chunks = [t for c in self.spilled[port] for t in _needed(store).read(c)]
            return chunks + runs + self.ports[port]
        if not self.spilled or not self.spilled[port]:
            return self.ports[port]
        store = _needed(store)
        items: list[Tuple] = []
        for c in self.spilled[port]:
            items += store.read(c)
        return items + self.ports[port]

    def port_sources(self, port: int) -> list[Chunk | list[Tuple]]:
        """Where port ``port``'s tuples are, in id order: its spilled chunks, then its
        in-memory list (not read: see :class:`Released`)."""
        self.materialize()
        return [*(self.spilled[port] if self.spilled else ()), self.ports[port]]

    def port_tentative(self, port: int) -> bool:
        """Whether port ``port`` holds a TENTATIVE tuple."""
        if self.spilled and any(c.n_tent for c in self.spilled[port]):
            return True
        return any(t[0] is TENTATIVE for t in self.ports[port])

    def cut(self, port: int, last_kept_id: int, store: SpillStore | None) -> int:
        """Remove port ``port``'s tuples with id > ``last_kept_id`` (an UNDO); return how
        many of them were TENTATIVE (``n_tent`` is updated)."""
        self.materialize()
        lst = self.ports[port]
        removed = 0
        if lst and lst[-1][1] > last_kept_id:
            k = len(lst)
            while k and lst[k - 1][1] > last_kept_id:  # lists are in id order
                k -= 1
            removed = sum(1 for t in lst[k:] if t[0] is TENTATIVE)
            del lst[k:]
        chunks = self.spilled[port] if self.spilled else None
        if chunks and not lst:  # the cut may reach into what was spilled
            store = _needed(store)
            while chunks and chunks[-1].last_id > last_kept_id:
                c = chunks[-1]
                if c.first_id > last_kept_id:
                    removed += c.n_tent
                    store.release(c)
                    chunks.pop()
                else:
                    removed += store.cut(c, last_kept_id)
                    break
        self.n_tent -= removed
        return removed

    def release(self, store: SpillStore | None) -> None:
        """Forget the spilled chunks (the bucket is dropped)."""
        if self.spilled:
            store = _needed(store)
            for cs in self.spilled:
                for c in cs:
                    store.release(c)
            self.spilled = None


def release_order(items: list[Tuple], kind: Kind, first_id: int) -> Iterator[Tuple]:
    """A bucket's tuples (its ports' lists one after the other) as SUnion releases them:
    in time order (a stable sort: ties keep port, then id, order), renumbered from
    ``first_id``, of kind ``kind``. Built by map and zip in C: a third cheaper than a
    comprehension, and this runs for every tuple of the node."""
    items.sort(key=_TIME)
    return map(_new, repeat(Tuple), zip(repeat(kind), count(first_id), map(_TIME, items),
                                        map(_TMAX, items), map(_VALUES, items)))


def release_columns(bucket: Bucket, kind: Kind, first_id: int) -> Columns | None:
    """:func:`release_order` of a :meth:`Bucket.columnar` bucket, as columns: its runs in
    port order concatenated, stably sorted on time, renumbered from ``first_id``, of kind
    ``kind``. None when the ports' columns do not agree in type (one input's attribute an
    int, another's a float): the caller materializes the bucket and releases tuples."""
    runs = [run for runs in bucket.cols or () for run in runs]
    try:
        whole = Columns.concat(runs)
    except pa.ArrowException:
        return None
    batch = whole.batch
    n = batch.num_rows
    order = np.argsort(batch.column(2).to_numpy(), kind="stable")
    batch = batch.take(pa.array(order))
    arrays = [pa.array(np.full(n, int(kind), dtype=np.int8)),
              pa.array(np.arange(first_id, first_id + n, dtype=np.int64)),
              *batch.columns[2:]]
    return Columns(pa.RecordBatch.from_arrays(arrays, schema=batch.schema))


@dataclass(frozen=True)
class Released:
    """A bucket SUnion released stable without building its tuples (a vectorized replay,
    operators/vectorized/release.py builds it as columns): it belongs at index ``at`` of
    that call's output, its ids start at ``first_id``, and ``ports`` says per port where
    its tuples are (``Bucket.port_sources``), read from ``store`` where spilled."""

    at: int
    first_id: int
    ports: list[list[Chunk | list[Tuple]]]
    store: ChunkReader | None

    def tuples(self) -> list[Tuple]:
        """The bucket's tuples, as the per-tuple release builds them."""
        items: list[Tuple] = []
        for sources in self.ports:
            for src in sources:
                items += src if isinstance(src, list) else _needed(self.store).read(src)
        return list(release_order(items, Kind.STABLE, self.first_id))


def _needed(store: R | None) -> R:
    """The store a spilled bucket's chunks are in (SUnion passes its spiller's)."""
    if store is None:
        raise OperatorError("a bucket holds spilled tuples but no spill store was given")
    return store


class Spiller:
    """The bound on one SUnion's kept tuples in memory, and its store on disk.

    ``mem`` counts the kept buckets' in-memory tuples (SUnion reports each bucket that
    becomes kept and each late tuple appended to a kept bucket; after a rare operation that
    drops or rewinds many buckets it recounts). ``order`` holds the kept buckets with tuples
    in memory, oldest reported first: they are spilled in that order, ``step`` tuples at
    most per call (one segment), so that one call never stalls the node for long."""

    #: Tuples spilled per call at most: ~20-40 ms of work on this machine.
    STEP = 20_000

    def __init__(self, store: SpillStore, limit_bytes: int) -> None:
        self.store = store
        self.limit_bytes = limit_bytes
        self.limit: int | None = None  # in tuples, from the first kept tuple's size
        self.mem = 0
        self.order: dict[int, None] = {}

    def kept(self, b: int, n: int) -> None:
        if n:
            self.mem += n
            self.order[b] = None

    def recount(self, buckets: dict[int, Bucket], below: int) -> None:
        self.order = {}
        self.mem = 0
        for b in sorted(buckets):
            if b < below:
                self.kept(b, buckets[b].in_memory())

    def over(self) -> bool:
        # Before the first spill the limit is not known yet: spill() works it out.
        return self.mem > (0 if self.limit is None else self.limit)

    def spill(self, buckets: dict[int, Bucket], below: int) -> None:
        """Spill the oldest kept in-memory tuples until ``mem`` is below 3/4 of the bound
        (or one ``STEP`` was written)."""
        if self.limit is None:
            for b in self.order:
                if b in buckets:
                    buckets[b].materialize()
            sample = next(t for b in self.order if b in buckets for p in buckets[b].ports
                          for t in p)
            self.limit = max(1, self.limit_bytes // estimate_tuple_bytes(sample))
            if self.mem <= self.limit:
                return
        target = min(self.mem - self.limit * 3 // 4, self.STEP)
        runs: list[list[Tuple]] = []
        where: list[tuple[Bucket, int]] = []
        taken = 0
        for b in list(self.order):
            if taken >= target:
                break
            del self.order[b]
            bk = buckets.get(b)
            if bk is None or b >= below:
                continue  # dropped or pending again since: recounted then
            bk.materialize()
            for p, lst in enumerate(bk.ports):
                if lst:
                    runs.append(lst)
                    where.append((bk, p))
                    taken += len(lst)
        if not runs:
            return
        for (bk, p), chunk in zip(where, self.store.write(runs), strict=True):
            if bk.spilled is None:
                bk.spilled = [[] for _ in bk.ports]
            bk.spilled[p].append(chunk)
            bk.ports[p] = []
        self.mem -= taken

    def stats(self) -> SpillStats:
        return self.store.stats()
