"""A list of tuples whose oldest part waits on disk: an output buffer's held stream.

During a long failure downstream, an output buffer (state/buffer.py) holds everything its
consumers did not acknowledge: a producer's whole output since the failure began, and at a
replica in UP_FAILURE every tentative tuple it emitted (tentative tuples are never trimmed).
:class:`SpillList` is the list the buffer keeps them in when it has a memory bound: the
newest ``limit_bytes`` of tuples stay in memory (the *tail*), and past that bound the oldest of them
move to :class:`~state.spill.SpillStore` chunks, in order, ahead of the tail.

It offers what the buffer does to a list, with a list's semantics: ``len``, indexing and
slicing (read back from disk where spilled: one row for an index, which the buffer's binary
searches need), iteration, ``extend``, and deleting a suffix (an UNDO: ``del xs[p:]``) or a
prefix (trimming: ``del xs[:p]``). Spilling happens in ``extend``, at most
``SpillStore``-friendly ``STEP`` tuples at a time, so that one append never stalls the
process for long.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from typing import overload

from protocol.tuples import Tuple

from .spill import Chunk, SpillStats, SpillStore, estimate_tuple_bytes

__all__ = ["SpillList", "SpillReader"]


class SpillList(Sequence[Tuple]):
    """Tuples: chunks on disk (oldest first), then the in-memory tail."""

    #: Tuples written per spill at most (one segment).
    STEP = 20_000

    def __init__(self, store: SpillStore, limit_bytes: int) -> None:
        self.store = store
        self.limit_bytes = limit_bytes
        #: The bound in tuples, from the first data tuple's size (None: none seen yet).
        self.limit: int | None = None
        self._chunks: list[Chunk] = []
        self._starts: list[int] = []  # index of each chunk's first tuple
        self._spilled = 0  # tuples in chunks
        self._tail: list[Tuple] = []

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return self._spilled + len(self._tail)

    @overload
    def __getitem__(self, i: int) -> Tuple: ...

    @overload
    def __getitem__(self, i: slice) -> list[Tuple]: ...

    def __getitem__(self, i: int | slice) -> Tuple | list[Tuple]:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1:
                raise ValueError("a spill list is sliced with step 1 only")
            return self._range(start, stop)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {i} out of a spill list of {n}")
        if i >= self._spilled:
            return self._tail[i - self._spilled]
        c = bisect_right(self._starts, i) - 1
        return self.store.read(self._chunks[c], i - self._starts[c], i - self._starts[c] + 1)[0]

    def __iter__(self) -> Iterator[Tuple]:
        for c in list(self._chunks):
            yield from self.store.read(c)
        yield from list(self._tail)

    def _range(self, start: int, stop: int) -> list[Tuple]:
        out: list[Tuple] = []
        if start < self._spilled:
            c = bisect_right(self._starts, start) - 1
            while c < len(self._chunks) and self._starts[c] < stop:
                base = self._starts[c]
                out += self.store.read(self._chunks[c], max(0, start - base), stop - base)
                c += 1
        if stop > self._spilled:
            out += self._tail[max(0, start - self._spilled): stop - self._spilled]
        return out

    # ------------------------------------------------------------------ writing
    def append(self, t: Tuple) -> None:
        self.extend((t,))

    def extend(self, tuples: Iterable[Tuple]) -> None:
        tail = self._tail
        tail.extend(tuples)
        if self.limit is None:
            sample = next((t for t in tail if t[4]), None)
            if sample is None:
                return  # control tuples only so far: nothing worth a bound
            self.limit = max(1, self.limit_bytes // estimate_tuple_bytes(sample))
        if len(tail) > self.limit:
            self._spill(self.limit)

    def __delitem__(self, i: slice) -> None:
        if not isinstance(i, slice) or i.step not in (None, 1):
            raise TypeError("a spill list deletes a prefix (del xs[:p]) or a suffix (del xs[p:])")
        start, stop, _ = i.indices(len(self))
        if stop >= len(self):
            self._keep_first(start)
        elif start == 0:
            self._drop_first(stop)
        else:
            raise TypeError("a spill list deletes a prefix (del xs[:p]) or a suffix (del xs[p:])")

    def _keep_first(self, p: int) -> None:
        if p >= self._spilled:
            del self._tail[p - self._spilled:]
            return
        self._tail.clear()
        c = bisect_right(self._starts, p) - 1
        for chunk in self._chunks[c + 1:]:
            self.store.release(chunk)
        chunk = self._chunks[c]
        keep = p - self._starts[c]
        self.store.keep_first(chunk, keep)
        del self._chunks[c + (keep > 0):]
        del self._starts[c + (keep > 0):]
        self._spilled = p

    def _drop_first(self, p: int) -> None:
        if p <= 0:
            return
        if p >= self._spilled:
            for chunk in self._chunks:
                self.store.release(chunk)
            del self._tail[: p - self._spilled]
            self._chunks, self._starts, self._spilled = [], [], 0
            return
        c = bisect_right(self._starts, p) - 1
        for chunk in self._chunks[:c]:
            self.store.release(chunk)
        self.store.drop_first(self._chunks[c], p - self._starts[c])
        self._chunks = self._chunks[c:]
        self._spilled -= p
        self._starts = []
        at = 0
        for chunk in self._chunks:
            self._starts.append(at)
            at += chunk.length

    def _spill(self, limit: int) -> None:
        n = min(len(self._tail) - limit * 3 // 4, self.STEP)
        [chunk] = self.store.write([self._tail[:n]])
        del self._tail[:n]
        self._chunks.append(chunk)
        self._starts.append(self._spilled)
        self._spilled += n

    def reader(self, start: int) -> SpillReader:
        """``self[start:]`` as it is now, read lazily: later changes to the list (appends,
        cuts, trims) do not reach the reader, and the segments it reads from stay on disk
        until it is closed or read to the end."""
        chunks: list[Chunk] = []
        if start < self._spilled:
            c = bisect_right(self._starts, start) - 1
            chunks.append(self.store.share(self._chunks[c], start - self._starts[c]))
            chunks += [self.store.share(chunk) for chunk in self._chunks[c + 1:]]
        return SpillReader(self.store, chunks, self._tail[max(0, start - self._spilled):])

    def split_off(self, p: int) -> SpillList:
        """Move ``self[p:]`` into a new spill list of the same store (its chunks go with
        it: nothing is read back) and keep ``self[:p]``."""
        rest = SpillList(self.store, self.limit_bytes)
        rest.limit, rest.STEP = self.limit, self.STEP
        if p >= self._spilled:
            rest._tail = self._tail[p - self._spilled:]
            del self._tail[p - self._spilled:]
            return rest
        c = bisect_right(self._starts, p) - 1
        moved = self._chunks[c + 1:]
        k = p - self._starts[c]
        if k == 0:
            moved.insert(0, self._chunks[c])
            del self._chunks[c:]
            del self._starts[c:]
        else:
            moved.insert(0, self.store.split(self._chunks[c], k))
            del self._chunks[c + 1:]
            del self._starts[c + 1:]
        rest._chunks = moved
        at = 0
        for chunk in moved:
            rest._starts.append(at)
            at += chunk.length
        rest._spilled = at
        rest._tail, self._tail = self._tail, []
        self._spilled = p
        return rest

    def clear(self) -> None:
        """Forget every tuple (this list's chunks are released; the store stays open)."""
        for chunk in self._chunks:
            self.store.release(chunk)
        self._chunks, self._starts, self._spilled, self._tail = [], [], 0, []

    # ------------------------------------------------------------------ inspection
    @property
    def in_memory(self) -> int:
        """Tuples held in memory (the tail)."""
        return len(self._tail)

    def stats(self) -> SpillStats:
        return self.store.stats()

    def close(self) -> None:
        """Delete the segments; the list is empty after."""
        self.store.close()
        self._chunks, self._starts, self._spilled, self._tail = [], [], 0, []


class SpillReader:
    """A snapshot of a spill list's suffix, read front to back (:meth:`SpillList.reader`):
    what a resubscriber is sent after a long failure, a batch at a time, without reading
    the whole suffix back into memory."""

    def __init__(self, store: SpillStore, chunks: list[Chunk], tail: list[Tuple]) -> None:
        self._store = store
        self._chunks = chunks  # shared handles (SpillStore.share), first to read first
        self._tail = tail
        self._left = sum(c.length for c in chunks) + len(tail)

    def __len__(self) -> int:
        """Tuples not read yet."""
        return self._left

    def take(self, n: int) -> list[Tuple]:
        """The next ``n`` tuples (fewer at the end)."""
        out: list[Tuple] = []
        while len(out) < n and self._chunks:
            chunk = self._chunks[0]
            k = min(n - len(out), chunk.length)
            out += self._store.read(chunk, 0, k)
            if k == chunk.length:
                self._store.release(self._chunks.pop(0), counted=False)
            else:
                chunk.offset += k
                chunk.length -= k
        if len(out) < n and self._tail:
            k = n - len(out)
            out += self._tail[:k]
            del self._tail[:k]
        self._left -= len(out)
        return out

    def close(self) -> None:
        """Stop reading: the segments are released."""
        for chunk in self._chunks:
            self._store.release(chunk, counted=False)
        self._chunks, self._tail, self._left = [], [], 0

