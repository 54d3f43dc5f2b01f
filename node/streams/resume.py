"""Resume ids: what an input link holds in force, as the two ids it resubscribes with. Pure.

With ``s`` = the last stable id and ``t`` = the last tentative id, what a link holds in
force (UNDOs applied) is the stable stream through ``s`` followed, if ``t > s``, by
tentative tuples through ``t``; ``t <= s`` means no tentative tuple is held. A STABLE
tuple sets ``s``, a TENTATIVE one sets ``t``. ``UNDO(u)`` deletes every data tuple after
``u``, so ``t`` becomes ``min(t, u)``, never below ``s`` (stable tuples are never undone).
That is exactly what ``OutputBuffer.replay(s, t)`` expects (state/buffer.py): no
tentatives (case 1) resumes after ``s``; a held tentative run that the producer still has
(case 2) resumes after ``t``; any other (case 3) starts with ``UNDO(s)``. Control tuples
carry no id and change neither.

:func:`advance` applies one batch; ``node/streams/link.py`` calls it after each batch its
``on_batch`` took (per batch, a few C-level scans: no Python loop per tuple).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter

from protocol.tuples import Kind, Tuple

__all__ = ["advance"]

STABLE = Kind.STABLE
TENTATIVE = Kind.TENTATIVE
UNDO = Kind.UNDO
_kind_of = itemgetter(0)


def _last_index(kinds: list[Kind], kind: Kind, start: int, stop: int) -> int:
    """Index of the last ``kind`` in ``kinds[start:stop]``, or -1 (a C-level scan)."""
    seg = kinds[start:stop]
    seg.reverse()
    try:
        return stop - 1 - seg.index(kind)
    except ValueError:
        return -1


def _index(kinds: list[Kind], kind: Kind, start: int, default: int) -> int:
    """Index of the first ``kind`` in ``kinds[start:]``, or ``default``."""
    try:
        return kinds.index(kind, start)
    except ValueError:
        return default


def advance(tuples: Sequence[Tuple], s: int, t: int) -> tuple[int, int, bool]:
    """The ids ``(s, t)`` after ``tuples`` (module docstring), and whether the batch held
    a TENTATIVE tuple (a new failure upstream)."""
    kinds = list(map(_kind_of, tuples))
    start, n = 0, len(kinds)
    tentative = False
    # Segments between UNDOs; without an UNDO (the common case) one C-level pass each.
    undo_at = _index(kinds, UNDO, 0, n)
    while True:
        i = _last_index(kinds, STABLE, start, undo_at)
        if i >= 0:
            s = tuples[i][1]
        i = _last_index(kinds, TENTATIVE, start, undo_at)
        if i >= 0:
            t = tuples[i][1]
            tentative = True
        if undo_at == n:
            break
        t = max(s, min(t, tuples[undo_at][1]))
        start = undo_at + 1
        undo_at = _index(kinds, UNDO, start, n)
    return s, t, tentative
