"""Operator state in independent parts: what continuous eventual checkpointing needs (CEC).

Role: Sebeou & Magoutis checkpoint a stateful operator window by window, not whole: each
*part* of its state (a window of an aggregate and one of its groups; a time slice of one
side of a join) is written to the replica's persistent log when it opens (``G_open``) and
now and then while it stays open (``G_check``), and its closing is noted. Recovery loads the
newest footprint of every part that was open at the end of the log, then replays the input
from the oldest footprint on; each part takes only the replayed tuples that came after its
own footprint (operators/cec.py runs it; the log's frames are built there too).

An operator implements :class:`Partitioned`; the query network finds it by type.

Contract:

* Parts are independent: a tuple changes exactly one part (:meth:`Partitioned.rebuild`
  routes it), and a part's state depends only on the tuples routed to it. That is what makes
  parts restored from different moments consistent once each has taken the input after its
  own footprint.
* Keys are hashable while live (:meth:`Partitioned.part_keys`) and plain data in the log
  (:meth:`Partitioned.key_to_plain` / :meth:`Partitioned.key_from_plain`, inverse of each
  other). A key is never reused for another part while the old one is open.
* :meth:`Partitioned.load_parts` replaces the operator's whole state by the given parts and
  its state outside them (:meth:`Partitioned.global_state`); the base bookkeeping
  (watermarks, output ids) is restored beforehand by the caller. It drops what the restored
  watermarks say is gone (a join slice's evicted tuples): a part's footprint may be older
  than the watermarks.
* :meth:`Partitioned.rebuild` applies a run of replayed input tuples, in order, each to its
  part only if ``accept(key, id)`` says so (the part was loaded and its footprint on this
  port is below the id), and emits nothing: what the operator emitted for that input is in
  the log already.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from typing import Any

from protocol.tuples import Tuple

from .base import Plain

__all__ = ["Accept", "PartKey", "Partitioned"]

#: A live part key: any hashable value (typed Any: each operator has its own shape).
PartKey = Any
#: ``accept(part key, tuple id) -> bool``: whether a replayed tuple still goes into the part.
Accept = Callable[[Any, int], bool]


class Partitioned(ABC):
    """An operator whose state is a set of independent parts (see the module docstring)."""

    @abstractmethod
    def part_keys(self) -> Collection[PartKey]:
        """The keys of the parts open now (a fresh collection or a live view; not kept)."""

    @abstractmethod
    def part_state(self, key: PartKey) -> Plain:
        """One open part's state as plain data."""

    @abstractmethod
    def key_to_plain(self, key: PartKey) -> Plain:
        """A live key as plain data (what the log holds)."""

    @abstractmethod
    def key_from_plain(self, plain: Plain) -> PartKey:
        """Inverse of :meth:`key_to_plain`."""

    @abstractmethod
    def global_state(self) -> Plain:
        """The operator's state outside its parts, as plain data (small)."""

    @abstractmethod
    def load_parts(self, global_state: Plain, parts: Sequence[tuple[PartKey, Plain]]) -> None:
        """Replace the state by these parts (live keys) and ``global_state``."""

    @abstractmethod
    def rebuild(self, port: int, tuples: Sequence[Tuple], accept: Accept) -> None:
        """Apply replayed data tuples of ``port`` to the parts ``accept`` lets them into,
        emitting nothing."""

    def keys_to_plain(self, keys: Sequence[PartKey]) -> list[Plain]:
        """Many keys as plain data (:meth:`key_to_plain` of each, or cheaper)."""
        return [self.key_to_plain(k) for k in keys]

    def part_states(self, keys: Sequence[PartKey]) -> list[Plain]:
        """Many open parts' states (:meth:`part_state` of each, or cheaper: they may share
        the live state, for a frame encoded before the operator runs again)."""
        return [self.part_state(k) for k in keys]

    def part_delta(self, memo: dict[Any, Any]) -> tuple[list[PartKey], list[PartKey]]:
        """The parts opened and closed since the last call with ``memo`` (the caller's
        dict, empty at first; the operator keeps in it what it needs). This default
        compares :meth:`part_keys` with the last call's: it costs the number of parts; an
        operator that can tell its changes cheaper overrides it."""
        known: set[PartKey] = memo.get("keys", set())
        cur = set(self.part_keys())
        memo["keys"] = cur
        return [k for k in cur if k not in known], [k for k in known if k not in cur]
