"""When a source's tuples are due, their times, and what its boundaries may promise.

Role: the pure half of a source (``node/procs/source.py`` is the asyncio half). Given the
source's rows in order and ``now`` (passed in: no clock, no I/O here, STYLE.md 2), a
:class:`Schedule` says which tuples to emit now, numbered and stamped, when the next one is
due, and the time a boundary may carry. A test drives it on any clock.

Two paces:

* :class:`RatePace` (the wall clock): ``rate`` tuples/s from ``start`` (the incarnation's
  start); the n-th tuple of the incarnation is due at ``start + n / rate`` and is stamped
  with that due time (never before the last time). A tuple is *about* the instant it was
  due: after a stall (a paused process, back-pressure) the overdue tuples come late with
  their own times, like an event-time source's, and like a source's tuples held back by a
  partition. Stamping them with the instant they finally went out would squeeze seconds of
  data into one instant: a windowed join then matches them all with each other (a 5.8 s
  pause at 2,500 tuples/s once made 100,000 join results in 0.1 s, and the burst, not the
  runtime, broke the k*X bound).
* :class:`EventClock` (event time): each row carries its event time ``e``, rebased onto
  the run's clock, ``t = t_start + (e - event_first) / speedup`` (floored to the µs). The
  runtime's deadlines, Delay_new and the checker all assume tuple times on the run's
  clock, so the tuple time is that rebased time; the tuple is emitted once ``t <= now``
  (late after a stall, with its own ``t``). :meth:`EventClock.starting` picks ``t_start``:
  ``now``, or with ``align`` (µs of data time) the first instant from ``now`` on at which
  the data clock's multiples of ``align`` land on multiples of ``align / speedup`` on the
  run's clock, ``event_first`` then being the first row's time floored to a multiple of
  ``align``: with ``align`` = one day, a data day is one window of ``align / speedup``
  in a tumbling aggregate. A restarted source reuses its clock, so its tuples keep their
  times.

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
  of every tuple not taken yet, and at most ``now`` (or the last tuple's time): a boundary
  carrying it keeps its promise and never runs ahead of the run's clock.
* Rows of an event-time source are in event time order (checked at load,
  ``node/config/datafile.py``); a row that is not anyway is stamped no earlier than the
  one before it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

from node.errors import NodeError
from protocol.tuples import Kind, Tuple, Value, make_tuple

__all__ = ["CAP", "EndReason", "EventClock", "RatePace", "Row", "Schedule", "next_multiple"]

def next_multiple(t: int, step: int) -> int:
    """The first multiple of ``step`` after ``t`` (a source's next boundary: boundaries on
    the grid that SUnion's buckets are cut on, see node/procs/source.py)."""
    return (t // step + 1) * step


#: The most tuples one batch holds (one log flush, one publish).
CAP = 10_000
US = 1_000_000

#: One row: its event time (µs; None for a wall-clock source) and its values.
Row = tuple[int | None, tuple[Value, ...]]


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


@dataclass(frozen=True, slots=True)
class EventClock:
    """Event time on the run's clock: ``t_start + (event - event_first) / speedup``."""

    t_start: int
    event_first: int
    speedup: float

    def rebase(self, event: int) -> int:
        """The run's time (µs) of data time ``event`` (µs)."""
        return self.t_start + math.floor((event - self.event_first) / self.speedup)

    @classmethod
    def starting(cls, now: int, first_event: int, speedup: float,
                 align: int | None = None) -> EventClock:
        """The clock of a source whose first row is at ``first_event``, started at ``now``
        (module docstring: ``align``)."""
        if align is None:
            return cls(now, first_event, speedup)
        step = align / speedup  # µs of the run's clock per ``align`` of data time
        if step.is_integer():
            grid = int(step)
            t_start = -(-now // grid) * grid
        else:
            t_start = max(now, round(math.ceil(now / step) * step))
        return cls(t_start, first_event - first_event % align, speedup)

    def to_dict(self) -> dict[str, int | float]:
        return {"t_start": self.t_start, "event_first": self.event_first, "speedup": self.speedup}


class Schedule:
    """The tuples of one source incarnation, in order, each with its id and time.

    ``rows`` yields the rows still to emit (the caller skips what an earlier incarnation
    produced); ``produced`` is the last id already used, ``last_time`` the latest tuple
    time already used. See the module docstring for the invariants."""

    def __init__(self, rows: Iterator[Row], pace: RatePace | EventClock, *, produced: int = 0,
                 limit: int | None = None, last_time: int = 0) -> None:
        self._rows = rows
        self.pace = pace
        self.produced = produced
        self._base = produced  # a rate pace counts this incarnation's tuples
        self.limit = limit
        self.last_time = last_time
        self.ended: EndReason | None = None
        self._next: Row | None = None
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

    def _event_time(self, row: Row) -> int:
        """The tuple time of an event-time row: rebased, never before the last one."""
        event = row[0]
        if event is None or not isinstance(self.pace, EventClock):
            raise NodeError("an event-time schedule needs rows with event times")
        return max(self.pace.rebase(event), self.last_time)

    def take(self, now: int) -> list[Tuple]:
        """The tuples due by ``now``, at most :data:`CAP` of them (more may be due: call
        again), as STABLE tuples with the next ids."""
        out: list[Tuple] = []
        stable = Kind.STABLE
        if isinstance(self.pace, EventClock):
            while self._next is not None and len(out) < CAP:
                t = self._event_time(self._next)
                if t > now:
                    break
                self.produced += 1
                self.last_time = t
                out.append(make_tuple(stable, self.produced, t, t, self._next[1]))
                self._advance()
            return out
        pace, base = self.pace, self._base
        due = min(CAP, base + pace.due_by(now) - self.produced)
        while self._next is not None and len(out) < due:
            self.produced += 1
            t = max(min(pace.due_at(self.produced - base), now), self.last_time)
            self.last_time = t
            out.append(make_tuple(stable, self.produced, t, t, self._next[1]))
            self._advance()
        return out

    def next_due(self) -> int | None:
        """When the next tuple is due (µs); None once the source has ended."""
        if self._next is None:
            return None
        if isinstance(self.pace, EventClock):
            return self._event_time(self._next)
        return self.pace.due_at(self.produced - self._base + 1)

    def horizon(self, now: int) -> int:
        """The time a boundary may carry at ``now``: no tuple to come is older."""
        due = self.next_due()
        if due is None:
            return max(now, self.last_time)
        return max(min(due, now), self.last_time)
