"""The exchange: which partition of a partitioned node each data tuple of a stream goes to.

A node declared with ``partitions = P`` and ``partition_by = [attributes]`` runs as P
partition nodes (node/config/partitions.py); every producer of one of its input streams
sends partition ``i``'s replicas only the data tuples whose key hashes to ``i``, and every
control tuple (boundaries, UNDO, REC_DONE, ...): each partition sees the whole stream's
progress and corrections, and its share of the data. The producer does the split, once
per subscriber, in its publisher (node/streams/publisher.py); the checker's reference run
does the same one (ops_scripts/check/reference.py).

Ids stay the producer's: a partition's stream is a subsequence of the producer's, with gaps,
as a filter leaves (an UNDO(u) still cuts at the first data tuple with id > u; resubscribing
after the last id held replays exactly what was missed).

Invariants: the partition of a tuple depends only on its key values and P (a CRC-32 of
their orjson encoding: stable across processes, runs and machines, unlike Python's salted
``hash``), so replicas of a partition receive the same subsequence; the P partitions of a
stream's data are disjoint and cover it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from zlib import crc32

import orjson

from protocol.tuples import Kind, Tuple, Value

__all__ = ["Split", "partition_of", "shares"]

_STABLE, _TENTATIVE = Kind.STABLE, Kind.TENTATIVE


def partition_of(key: Sequence[Value], count: int) -> int:
    """The partition (0 .. count-1) of the data tuples whose key values are ``key``."""
    return crc32(orjson.dumps(list(key))) % count


@dataclass(frozen=True, slots=True)
class Split:
    """One partition's share of a stream: partition ``index`` of ``count``, keyed on the
    attributes at ``positions`` of the stream's schema."""

    index: int
    count: int
    positions: tuple[int, ...]

    def __post_init__(self) -> None:
        if not (0 <= self.index < self.count) or not self.positions:
            raise ValueError(f"a split needs 0 <= index < count and key positions, got {self}")

    def keeps(self, t: Tuple) -> bool:
        """Whether this partition receives ``t`` (every control tuple: yes)."""
        kind = t[0]
        if kind is not _STABLE and kind is not _TENTATIVE:
            return True
        values = t[4]
        key = [values[p] for p in self.positions]
        return crc32(orjson.dumps(key)) % self.count == self.index

    def select(self, tuples: Iterable[Tuple]) -> list[Tuple]:
        """The tuples of ``tuples`` this partition receives, in order."""
        keeps = self.keeps
        return [t for t in tuples if keeps(t)]

    @property
    def scheme(self) -> tuple[int, tuple[int, ...]]:
        """What the split of a stream depends on besides the partition: its shares of one
        batch are one :func:`shares` call for every partition (and every replica)."""
        return self.count, self.positions


def shares(tuples: Iterable[Tuple], count: int, positions: tuple[int, ...]) -> list[list[Tuple]]:
    """Every partition's share of ``tuples`` (``Split(i, count, positions).select`` for
    each i), each data tuple's key hashed once: what a producer with many partition
    subscribers computes per batch."""
    out: list[list[Tuple]] = [[] for _ in range(count)]
    dumps = orjson.dumps
    for t in tuples:
        kind = t[0]
        if kind is not _STABLE and kind is not _TENTATIVE:
            for share in out:
                share.append(t)
        else:
            values = t[4]
            out[crc32(dumps([values[p] for p in positions])) % count].append(t)
    return out
