"""The UNDO rule (DESIGN.md section 2): what ``UNDO(u)`` removes from a stream. Its one home.

``UNDO(u)`` removes, on its stream, everything from the **cut** on. The cut is the first
tuple after data tuple ``u`` that is a data tuple (STABLE or TENTATIVE: its id is > u) or a
*tentative* boundary; if there is none, nothing is removed. Kind by kind:

* STABLE, TENTATIVE -- removed from the cut on: in a stream in force, exactly the data
  tuples with id > u. ``UNDO(0)`` removes every data tuple. Whether an UNDO may take back a
  STABLE tuple (never, DESIGN.md 6.4) is the caller's judgement, not the rule's: the output
  buffer raises, the checkers report it with the log line, the tests assert it;
  :func:`apply_undo` returns what it removed so that each can.
* BOUNDARY, stable (id 0) -- kept before the cut: a stable boundary between data tuple u and
  the first undone tuple was a promise about stable data (the boundary that closed the last
  stable bucket); one after the cut goes with the suffix.
* BOUNDARY, tentative (id :data:`~protocol.tuples.TENTATIVE_BOUNDARY_ID`) -- derived from
  the tentative suffix: the first one after data tuple u starts the cut, even when no data
  tuple follows it.
* REC_DONE, and any other control tuple -- kept before the cut, removed after it, like a
  stable boundary: a REC_DONE before the cut ended a reconciliation whose stable results
  stay. (UNDO_START, UP_FAILURE and REC_REQUEST never travel on a stream that is undone.)
* UNDO -- applied, never kept: :func:`apply_undos` returns the stream *in force*.

"After data tuple u" means after the last data tuple with id <= u (the tuple ``u`` itself
may be absent: a filter dropped it, or a buffer trimmed it), from the start if there is
none. In a stream in force data ids increase, so that is right before the first data tuple
with id > u. On a log whose ids do not increase (a faulty run read by a checker) the cut is
still after the last data tuple with id <= u, which is what a client that pops its stream
from the end does; the checkers report the disorder themselves.

Who applies it: the checker (``ops_scripts/check``: the client's view, the checked
application with line numbers, stable-never-undone) and the tests' stream models call these
functions. The output buffer (``state/buffer.py``) finds "after data tuple u" by a binary
search over its indexed list (the live system's fast path), then calls :func:`undone_from`;
a property test holds its content equal to :func:`apply_undos`. The operators' rebuild
(``operators/base.py``, ``_undo_by_rebuild``) applies the same rule to one port's entries
of a multi-port input log, written inline.

Invariants: pure and sans-IO; each function reads only the tuples' kind and id; the cost of
one UNDO is the length of the suffix after data tuple u (the stream is walked from its end),
so applying every UNDO of a stream is linear in the tuples removed plus those walked over.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .tuples import TENTATIVE_BOUNDARY_ID, Kind, Tuple

__all__ = ["apply_undo", "apply_undos", "kept_end", "undo_cut", "undone_from"]

_STABLE, _TENTATIVE, _BOUNDARY, _UNDO = Kind.STABLE, Kind.TENTATIVE, Kind.BOUNDARY, Kind.UNDO


def kept_end(stream: Sequence[Tuple], u: int) -> int:
    """Index right after the last data tuple of ``stream`` with id <= ``u``; 0 if none.
    (Everything before it survives ``UNDO(u)``.)"""
    i = len(stream)
    while i:
        kind, ident = stream[i - 1][0], stream[i - 1][1]
        if (kind is _STABLE or kind is _TENTATIVE) and ident <= u:
            return i
        i -= 1
    return 0


def undone_from(stream: Sequence[Tuple], start: int) -> int:
    """Index of the first data tuple or tentative boundary at or after ``start``;
    ``len(stream)`` if none. With ``start = kept_end(stream, u)`` this is the cut of
    ``UNDO(u)``: the control tuples between ``start`` and it stay."""
    for i in range(start, len(stream)):
        kind = stream[i][0]
        if kind is _STABLE or kind is _TENTATIVE:
            return i
        if kind is _BOUNDARY and stream[i][1] == TENTATIVE_BOUNDARY_ID:
            return i
    return len(stream)


def undo_cut(stream: Sequence[Tuple], u: int) -> int:
    """Where ``UNDO(u)`` starts to remove: ``stream[undo_cut(stream, u):]`` is undone,
    ``stream[:undo_cut(stream, u)]`` stays (``len(stream)``: nothing is undone)."""
    return undone_from(stream, kept_end(stream, u))


def apply_undo(stream: list[Tuple], u: int) -> list[Tuple]:
    """Apply ``UNDO(u)`` to ``stream`` in place; return the tuples it removed, in order."""
    cut = undo_cut(stream, u)
    removed = stream[cut:]
    del stream[cut:]
    return removed


def apply_undos(stream: Iterable[Tuple]) -> list[Tuple]:
    """The stream in force: ``stream`` with every UNDO applied in order, UNDOs left out,
    every other tuple kept unless an UNDO after it removed it."""
    out: list[Tuple] = []
    for t in stream:
        if t[0] is _UNDO:
            del out[undo_cut(out, t[1]) :]
        else:
            out.append(t)
    return out
