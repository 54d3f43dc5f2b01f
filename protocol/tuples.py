"""The stream data model of DESIGN.md section 2: tuples and their kinds.

A stream is an ordered sequence of :class:`Tuple` ``(kind, id, time, tmax, values)``.

* ``kind`` -- a :class:`Kind`. STABLE and TENTATIVE carry data; the others are control
  tuples that travel *with* the data (STYLE.md 4).
* ``id`` -- per stream, unique and increasing among the tuples that are in force. After an
  ``UNDO(u)`` the corrections reuse ids ``u+1, u+2, ...``: ids are a deterministic function
  of the processing, which is what lets SOutput recognise replayed duplicates. For an UNDO
  the id is the last tuple *not* undone (0 means "undo everything"); for other control
  tuples it is 0 and carries no meaning. Data ids start at 1.
* ``time`` -- the integer tuple time (microseconds by default) that SUnion buckets are cut
  on. For a BOUNDARY it is the promise "no later tuple on this stream has a smaller time".
  A BOUNDARY whose ``id`` is :data:`TENTATIVE_BOUNDARY_ID` was computed from tentative input:
  it orders a node's internal processing of tentative data (windows close on it, tentatively)
  but promises nothing about the corrected stream, so SUnion ignores it and SOutput never
  lets it leave the node (the paper: a node produces boundaries only when stable).
* ``tmax`` -- the time of the newest input tuple that affected this one (a source sets
  ``tmax = time``); used to avoid duplicates when a downstream switches to an upstream
  replica that is in UP_FAILURE.
* ``values`` -- the attribute values, positional, in the order of the stream's
  :data:`Schema`. Always a Python ``tuple`` so that tuples compare and hash by value.

Tuples are ``NamedTuple``\\ s: positional (cheap to build from the wire, cheap to compare),
readable by name, immutable. Hot paths build them with :func:`make_tuple` (``tuple.__new__``
directly, about 3x cheaper than the keyword constructor) and read fields by position
(``t[0]`` is the kind, ``t[4]`` the values) where a profiler says it matters.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from operator import itemgetter
from typing import Any, NamedTuple

__all__ = [
    "DATA_KINDS",
    "END_OF_STREAM",
    "KINDS",
    "TENTATIVE_BOUNDARY_ID",
    "Kind",
    "Schema",
    "Tuple",
    "Value",
    "boundary",
    "columns_of",
    "make_tuple",
    "rec_done",
    "tentative_boundary",
    "undo",
]


class Kind(IntEnum):
    """Tuple kinds (the paper's Table 1). The integer values are the wire encoding."""

    STABLE = 0
    TENTATIVE = 1
    UNDO = 2
    BOUNDARY = 3
    UNDO_START = 4
    REC_DONE = 5
    UP_FAILURE = 6
    REC_REQUEST = 7


#: Wire integer -> Kind, by list index (faster than ``Kind(i)`` on the hot path).
KINDS: tuple[Kind, ...] = tuple(Kind)
DATA_KINDS = frozenset({Kind.STABLE, Kind.TENTATIVE})

#: An attribute value: what orjson can carry (and Arrow can store).
Value = Any
#: Attribute names of a stream, in positional order.
Schema = tuple[str, ...]


class Tuple(NamedTuple):
    """One tuple of a stream. See the module docstring for the meaning of each field."""

    kind: Kind
    id: int
    time: int
    tmax: int
    values: tuple[Value, ...] = ()


_new = tuple.__new__


def make_tuple(kind: Kind, id: int, time: int, tmax: int, values: tuple[Value, ...]) -> Tuple:
    """Build a :class:`Tuple` without the keyword-argument machinery (hot path)."""
    return _new(Tuple, (kind, id, time, tmax, values))


def boundary(time: int) -> Tuple:
    """A BOUNDARY punctuation: no later tuple on the stream has a smaller ``time``."""
    return _new(Tuple, (Kind.BOUNDARY, 0, time, time, ()))


#: The time of the boundary a source sends when it will never send again (every window
#: can close), and of the one that ends every stream of the checker's reference run.
END_OF_STREAM = 2**62

#: The ``id`` that marks a BOUNDARY computed from tentative input (see the module docstring).
TENTATIVE_BOUNDARY_ID = 1


def tentative_boundary(time: int) -> Tuple:
    """A BOUNDARY derived from tentative input: no promise about the corrected stream."""
    return _new(Tuple, (Kind.BOUNDARY, TENTATIVE_BOUNDARY_ID, time, time, ()))


def undo(last_kept_id: int) -> Tuple:
    """An UNDO: delete every tuple after ``last_kept_id`` (0 = the whole stream)."""
    return _new(Tuple, (Kind.UNDO, last_kept_id, 0, 0, ()))


def rec_done(time: int = 0) -> Tuple:
    """REC_DONE: the end of a reconciliation on this stream."""
    return _new(Tuple, (Kind.REC_DONE, 0, time, time, ()))


def columns_of(rows: Sequence[Sequence[Any]], width: int) -> list[list[Any]]:
    """``rows`` transposed: ``width`` lists, the k-th holding every row's field k (a row
    shorter than ``width`` raises IndexError). One C loop per column (``map`` of an
    ``itemgetter``): ``zip(*rows)`` over a million rows took 6 times as long (it makes an
    iterator per row), which was most of a vectorized replay's time."""
    return [list(map(itemgetter(k), rows)) for k in range(width)]
