"""Tuple builders and the reference model of a stream in force, shared by the state tests."""

from __future__ import annotations

from protocol.tuples import (
    DATA_KINDS,
    Kind,
    Tuple,
    boundary,
    make_tuple,
    rec_done,
    tentative_boundary,
    undo,
)
from protocol.undo_rule import apply_undo

__all__ = ["RD", "TB", "B", "S", "T", "U", "apply", "data_of", "last_ids"]


def S(i: int) -> Tuple:
    return make_tuple(Kind.STABLE, i, 10 * i, 10 * i, (i, "s"))


def T(i: int) -> Tuple:
    return make_tuple(Kind.TENTATIVE, i, 10 * i, 10 * i, (i, "t"))


def B(time: int) -> Tuple:
    return boundary(time)


def TB(time: int) -> Tuple:
    return tentative_boundary(time)


RD = rec_done()
U = undo


def apply(stream: list[Tuple], tuples: list[Tuple]) -> None:
    """What a subscriber does: append, and apply each UNDO by the one UNDO rule
    (``protocol.undo_rule``: a plain scan, independent of the buffer's binary search)."""
    for t in tuples:
        if t.kind is Kind.UNDO:
            apply_undo(stream, t.id)
        else:
            stream.append(t)


def data_of(stream: list[Tuple]) -> list[Tuple]:
    return [t for t in stream if t.kind in DATA_KINDS]


def last_ids(stream: list[Tuple]) -> tuple[int, int]:
    """(last stable id, last tentative id) of a stream in force; 0 when there is none."""
    s = max((t.id for t in stream if t.kind is Kind.STABLE), default=0)
    t = max((t.id for t in stream if t.kind is Kind.TENTATIVE), default=0)
    return s, t
