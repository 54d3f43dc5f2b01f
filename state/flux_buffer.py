"""Flux's producer buffer (Shah, Hellerstein, Brewer, "Highly-Available, Fault-Tolerant,
Parallel Dataflows", sections 3.2, 3.3 and 5): the accounting that keeps a partition pair's
input loss-free and duplicate-free through a failure.

A producer (the paper's ingress, S-Prod or F-Prod) keeps one buffer per consumer partition
pair. An *entry* is a sequence number (SN) with, once produced, its tuple, and *marks*: PROD
(produced here), PRIM and SEC (acknowledged by the primary or the secondary consumer). An
entry without its tuple is *dangling*: an ack that outran production (the consumer got the
tuple from this producer's partner first); when the tuple is produced it is marked at once,
and dropped if that completes it: the buffer is the duplicate filter. An entry is evicted
once its marks hold every mark of the *delete set* (``{PROD, PRIM, SEC}`` in normal
processing; take-over and catch-up change it). Each destination has a *cursor*: the next SN
to send it.

Operations (the paper's names): ``put`` (produced), ``ack`` (acknowledged by a destination;
with ``through=True`` every SN up to it, the paper's amortized acks over in-order
connections: an SN acked through before it is produced is marked when it is), ``peek`` /
``advance`` (the next tuple to send a destination, and past it), ``ack_all`` (take-over: the
destination failed; everything counts as acknowledged by it, the entries only it had marked
go, and it leaves the delete set), ``reset`` (catch-up: a new replica of the destination
holds its partner's state, so it has exactly what the partner acknowledged; it is sent the
rest and enters the delete set again: the paper's ``csync`` with ``reset``), ``reversed``
(catch-up of the producer itself: the buffer as its new replica holds it, PRIM and SEC
swapped).

Invariants (tests/state/test_flux_buffer.py, against a model): an entry is evicted exactly
when its marks cover the delete set; an SN at or below the evicted floor is never taken
again (a late ``put`` of it is a duplicate, ignored); a destination is sent each produced
SN at most once between resets, in SN order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Flag, auto
from typing import Any

__all__ = ["FluxBuffer", "Mark"]


class Mark(Flag):
    """Who has seen an entry: produced here, acknowledged by the primary or the secondary."""

    PROD = auto()
    PRIM = auto()
    SEC = auto()


NORMAL = Mark.PROD | Mark.PRIM | Mark.SEC
NO_MARK = Mark(0)


@dataclass
class _Entry:
    tup: Any = None
    produced: bool = False
    marks: Mark = NO_MARK


@dataclass
class FluxBuffer:
    """One producer's buffer towards one consumer partition pair."""

    delete: Mark = NORMAL
    _entries: dict[int, _Entry] = field(default_factory=dict)  # by SN, in SN order
    _floor: int = 0  # every SN <= _floor is evicted
    _gone: set[int] = field(default_factory=set)  # evicted SNs above the floor
    _cursor: dict[Mark, int] = field(default_factory=lambda: {Mark.PRIM: 1, Mark.SEC: 1})
    _through: dict[Mark, int] = field(default_factory=lambda: {Mark.PRIM: 0, Mark.SEC: 0})

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def floor(self) -> int:
        """Every SN at or below this one was evicted."""
        return self._floor

    def sns(self) -> list[int]:
        """The SNs held (produced or dangling), in order."""
        return sorted(self._entries)

    def marks(self, sn: int) -> Mark | None:
        """``sn``'s marks, or None when it is not held."""
        e = self._entries.get(sn)
        return None if e is None else e.marks

    def put(self, sn: int, tup: Any) -> bool:
        """``sn`` was produced with ``tup``; False when it is a duplicate (evicted already,
        or produced before)."""
        if sn <= self._floor or sn in self._gone:
            return False
        e = self._entries.setdefault(sn, _Entry())
        if e.produced:
            return False
        e.tup, e.produced = tup, True
        e.marks |= Mark.PROD
        for dest, through in self._through.items():
            if sn <= through:
                e.marks |= dest
        self._evict([sn])
        return True

    def ack(self, sn: int, dest: Mark, *, through: bool = False) -> None:
        """``dest`` acknowledged ``sn`` (``through``: every SN up to it; a dangling entry
        is made only for ``sn`` itself, the others it covers are those held)."""
        if through:
            self._through[dest] = max(self._through[dest], sn)
            covered = [s for s in self._entries if s <= sn]
            for s in covered:
                self._entries[s].marks |= dest
            self._evict(covered)
        if sn > self._floor and sn not in self._gone:
            self._entries.setdefault(sn, _Entry()).marks |= dest
            self._evict([sn])

    def peek(self, dest: Mark) -> tuple[int, Any] | None:
        """The next produced entry ``dest`` was not sent, or None (none yet: the one at the
        cursor, if any, is dangling or not made). Entries ``dest`` acknowledged are
        skipped: it has them."""
        cursor = self._cursor[dest]
        for sn in sorted(s for s in self._entries if s >= cursor):
            e = self._entries[sn]
            if dest in e.marks:
                continue
            return (sn, e.tup) if e.produced else None
        return None

    def advance(self, dest: Mark) -> None:
        """``dest`` was sent what :meth:`peek` returned."""
        nxt = self.peek(dest)
        if nxt is None:
            raise ValueError(f"nothing to advance past for {dest.name}")
        self._cursor[dest] = nxt[0] + 1

    def ack_all(self, dest: Mark) -> None:
        """``dest`` failed (take-over): every entry counts as acknowledged by it; the entries
        only it had marked (its dangling acks) go, not evicted: their SNs are still to be
        produced, for the other destination; it leaves the delete set."""
        for sn in [s for s, e in self._entries.items() if e.marks == dest]:
            del self._entries[sn]
        for e in self._entries.values():
            e.marks |= dest
        self._through[dest] = 2**63  # (and whatever is produced from now on)
        self.delete &= ~dest
        self._evict(list(self._entries))

    def reset(self, dest: Mark) -> None:
        """A new replica of ``dest`` caught up from its partner's state: it holds what the
        partner acknowledged (evicted entries, and the partner's marks on held ones) and
        nothing else; its cursor goes to the first held entry, and entries wait for its
        ack again."""
        partner = Mark.SEC if dest is Mark.PRIM else Mark.PRIM
        for e in self._entries.values():
            e.marks = e.marks & ~dest | (dest if partner in e.marks else NO_MARK)
        self._through[dest] = self._through[partner]
        self._cursor[dest] = min(self._entries, default=self._floor + 1)
        self.delete |= dest

    def reversed(self) -> FluxBuffer:
        """A copy with PRIM and SEC swapped (marks, cursors, delete set): the buffer as the
        producer's new replica holds it after a state move (the paper's section 5.3)."""
        def swap(m: Mark) -> Mark:
            out = m & Mark.PROD
            if Mark.PRIM in m:
                out |= Mark.SEC
            if Mark.SEC in m:
                out |= Mark.PRIM
            return out

        return FluxBuffer(
            delete=swap(self.delete),
            _entries={s: _Entry(e.tup, e.produced, swap(e.marks))
                      for s, e in self._entries.items()},
            _floor=self._floor, _gone=set(self._gone),
            _cursor={Mark.PRIM: self._cursor[Mark.SEC], Mark.SEC: self._cursor[Mark.PRIM]},
            _through={Mark.PRIM: self._through[Mark.SEC], Mark.SEC: self._through[Mark.PRIM]})

    def _evict(self, sns: Iterable[int]) -> None:
        for sn in sns:
            e = self._entries.get(sn)
            if e is not None and e.marks & self.delete == self.delete:
                del self._entries[sn]
                self._gone.add(sn)
        while self._floor + 1 in self._gone:  # (every SN is produced, and so evicted, once)
            self._floor += 1
            self._gone.remove(self._floor)
