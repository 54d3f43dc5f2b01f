"""When a source's tuples are due, their times, and what its boundaries may promise.

Role: the pure half of a source (``node/procs/source.py`` is the asyncio half). Given the
source's rows in order and ``now`` (passed in: no clock, no I/O here, STYLE.md 2), a
:class:`Schedule` says which tuples to emit now, numbered and stamped, when the next one is
due, and the time a boundary may carry. A test drives it on any clock.

Pacing, :class:`RatePace`: ``rate`` tuples/s from ``start`` (the incarnation's start); the
n-th tuple of the incarnation is due at ``start + n / rate`` and is stamped with the time
it is produced (``max(now, last time)``).

Invariants:

* A batch holds at most :data:`CAP` tuples: the cap bounds one log flush and one publish,
  nothing else. Whether the source has *ended* is decided only by its rows running out (the
  row iterator is exhausted: :attr:`EndReason.FILE`) or its ``limit`` being reached
  (:attr:`EndReason.LIMIT`), never by a batch being short or empty. After a stall (a paused
  process, back-pressure, a slow disk) everything due comes out in successive capped
  batches, and the source goes on.
* Ids count on from ``produced`` (the ids an earlier incarnation logged); tuple times never
  decrease.
* :meth:`Schedule.horizon` is at least the time of every tuple taken and at most the time
  of every tuple not taken yet: a boundary carrying it keeps its promise.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

from protocol.tuples import Kind, Tuple, Value, make_tuple

__all__ = ["CAP", "EndReason", "RatePace", "Schedule"]

#: The most tuples one batch holds (one log flush, one publish).
CAP = 10_000
US = 1_000_000


class EndReason(Enum):
    """Why a source ended its stream (the ``reason`` of its end record, contract point 1)."""

    LIMIT = "limit"  # its ``limit`` reached
    FILE = "file"  # its rows ran out
    REQUEST = "request"  # SIGUSR1, Source.end_stream(), or stopped before its end


@dataclass(frozen=True, slots=True)
class RatePace:
    """Wall-clock pacing: ``rate`` tuples/s from ``start`` (µs)."""

    start: int
    rate: float

    def due_by(self, now: int) -> int:
        """How many tuples are due by ``now`` since ``start``."""
        return max(0, math.floor((now - self.start) * self.rate / US))

    def due_at(self, n: int) -> int:
        """When the ``n``-th tuple since ``start`` is due (µs)."""
        return self.start + math.ceil(n * US / self.rate)


class Schedule:
    """The tuples of one source incarnation, in order, each with its id and time.

    ``rows`` yields the value tuples still to emit (the caller skips what an earlier
    incarnation produced); ``produced`` is the last id already used, ``last_time`` the
    latest tuple time already used. See the module docstring for the invariants."""

    def __init__(self, rows: Iterator[tuple[Value, ...]], pace: RatePace, *, produced: int = 0,
                 limit: int | None = None, last_time: int = 0) -> None:
        self._rows = rows
        self.pace = pace
        self.produced = produced
        self._base = produced  # the pace counts this incarnation's tuples
        self.limit = limit
        self.last_time = last_time
        self.ended: EndReason | None = None
        self._next: tuple[Value, ...] | None = None
        self._advance()

    def _advance(self) -> None:
        """Look at the next row: the end is known as soon as there is none."""
        if self.limit is not None and self.produced >= self.limit:
            self._next, self.ended = None, EndReason.LIMIT
            return
        try:
            self._next = next(self._rows)
        except StopIteration:
            self._next, self.ended = None, EndReason.FILE

    def take(self, now: int) -> list[Tuple]:
        """The tuples due by ``now``, at most :data:`CAP` of them (more may be due: call
        again), as STABLE tuples with the next ids."""
        due = min(CAP, self._base + self.pace.due_by(now) - self.produced)
        out: list[Tuple] = []
        if due <= 0 or self._next is None:
            return out
        t = max(now, self.last_time)
        self.last_time = t
        stable = Kind.STABLE
        while self._next is not None and len(out) < due:
            self.produced += 1
            out.append(make_tuple(stable, self.produced, t, t, self._next))
            self._advance()
        return out

    def next_due(self) -> int | None:
        """When the next tuple is due (µs); None once the source has ended."""
        if self._next is None:
            return None
        return self.pace.due_at(self.produced - self._base + 1)

    def horizon(self, now: int) -> int:
        """The time a boundary may carry at ``now``: no tuple to come is older."""
        return max(now, self.last_time)
