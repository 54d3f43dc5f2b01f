"""Tuple builders and the reference model of a stream in force, shared by the state tests."""

from __future__ import annotations

from protocol.tuples import DATA_KINDS, Kind, Tuple, boundary, make_tuple, rec_done, undo

__all__ = ["RD", "B", "S", "T", "U", "apply", "data_of", "last_ids"]


def S(i: int) -> Tuple:
    return make_tuple(Kind.STABLE, i, 10 * i, 10 * i, (i, "s"))


def T(i: int) -> Tuple:
    return make_tuple(Kind.TENTATIVE, i, 10 * i, 10 * i, (i, "t"))


def B(time: int) -> Tuple:
    return boundary(time)


RD = rec_done()
U = undo


def apply(stream: list[Tuple], tuples: list[Tuple]) -> None:
    """What a subscriber does: append, and on UNDO(u) delete from the first data tuple with
    id > u on (by a plain scan, independent of the buffer's binary search)."""
    for t in tuples:
        if t.kind is Kind.UNDO:
            cut = len(stream)
            for i, x in enumerate(stream):
                if x.kind in DATA_KINDS and x.id > t.id:
                    cut = i
                    break
            del stream[cut:]
        else:
            stream.append(t)


def data_of(stream: list[Tuple]) -> list[Tuple]:
    return [t for t in stream if t.kind in DATA_KINDS]


def last_ids(stream: list[Tuple]) -> tuple[int, int]:
    """(last stable id, last tentative id) of a stream in force; 0 when there is none."""
    s = max((t.id for t in stream if t.kind is Kind.STABLE), default=0)
    t = max((t.id for t in stream if t.kind is Kind.TENTATIVE), default=0)
    return s, t
