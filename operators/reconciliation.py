"""The reconciliation surface: what the fault-tolerance operators offer the query network.

Role: SUnion and SOutput do more than process tuples; a node's runtime also sets SUnion's
release mode, truncates what it keeps, rewinds both to a checkpoint, replays SUnion's kept
buckets in steps and ends a reconciliation at SOutput. These classes declare that surface,
so that :class:`~operators.network.QueryNetwork` finds the operators that implement it by
type (``isinstance``, once, when the network is built), never by probing for attributes,
and so that the network is the only door into the operators from the runtime.

Contract (on top of :class:`~operators.base.Operator`'s):

* :meth:`Rewindable.rewind` is called *instead of* ``restore`` when the network goes back
  to a checkpoint for checkpoint/redo: the operator takes from the snapshot what it must
  and keeps what recovery needs (SUnion its corrected input, SOutput its memory of what it
  emitted). It returns what must be emitted at once (SOutput's UNDO, if due now).
* A :class:`Serializer` (SUnion) re-releases what it kept in :meth:`Serializer.replay`
  steps of at most ``replay_step`` buckets (None: all at once) while
  :attr:`Serializer.replaying`; its modes are :data:`RELEASE_MODES`.
* An :class:`OutputGuard` (SOutput) answers :meth:`OutputGuard.end_reconciliation` with the
  REC_DONE that closes a reconciliation on its stream, and says while it still drops the
  duplicates of a replay (:attr:`OutputGuard.dropping_duplicates`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from protocol.tuples import Tuple

from .base import Plain
from .buckets import Released, Spiller

__all__ = ["RELEASE_MODES", "OutputGuard", "Rewindable", "Serializer"]

#: SUnion's release modes during a failure episode: ``process`` releases a ready bucket at
#: once (tentative), ``delay`` holds every bucket its full wait.
RELEASE_MODES = ("process", "delay")


class Rewindable(ABC):
    """An operator that keeps what recovery needs across a checkpoint restore."""

    @abstractmethod
    def rewind(self, snap: Plain) -> list[Tuple]:
        """Checkpoint/redo: go back to ``snap`` (this operator's snapshot in the checkpoint)
        keeping what recovery needs; return what must be emitted at once."""


    @abstractmethod
    def rewind_point(self) -> Plain:
        """What :meth:`rewind` reads of a snapshot, and all a checkpoint keeps of this
        operator: plain data, sharing nothing with the live operator. (SUnion's leaves out
        its buffered input, which a rewind keeps: a checkpoint costs what its bookkeeping
        does, not what the buffers hold.)"""


class Serializer(Rewindable):
    """SUnion's side of reconciliation (operators/sunion.py)."""

    #: Buckets re-released per call during a replay (None: all at once). A runtime
    #: setting, not state: a restore keeps it.
    replay_step: int | None
    #: When the batch of the current call reached the node, if the node held it (set by
    #: the query network around one ``process`` call; None: at ``now``).
    arrived: int | None

    @abstractmethod
    def set_mode(self, mode: str) -> None:
        """Release mode during a failure episode, one of :data:`RELEASE_MODES`."""

    #: The bound on what it keeps in memory for a replay, and its disk (None: no bound).
    spiller: Spiller | None

    @abstractmethod
    def set_spill(self, spiller: Spiller | None) -> None:
        """Keep at most ``spiller``'s bound in memory, the rest on its disk (None: all in
        memory). A runtime setting: output and snapshots are the same either way."""

    @abstractmethod
    def truncate(self) -> None:
        """Drop what no replay can need any more (right after the node took a checkpoint)."""

    @abstractmethod
    def may_begin_episode(self, now: int, data: bool, arrived: int | None = None) -> bool:
        """Whether a call at ``now`` (``data``: ``process`` of a batch that reached the node
        at ``arrived``, None: ``now``; else ``on_timer``) may release the first tentative
        bucket of a failure episode. False positives cost
        a checkpoint; a false negative would break checkpoint/redo (ON_FAILURE)."""

    @abstractmethod
    def replay(self, now: int) -> list[Tuple]:
        """One step of a reconciliation's replay: re-release what this call may."""

    @abstractmethod
    def replay_released(self, now: int) -> tuple[list[Tuple], list[Released]]:
        """:meth:`replay`, with the buckets released stable left as :class:`Released`
        records at their places in the output (a vectorized replay builds them as columns)."""

    @property
    @abstractmethod
    def replaying(self) -> bool:
        """True while a reconciliation's replay has not reached its end."""

    @property
    @abstractmethod
    def replay_progress(self) -> tuple[int, int]:
        """(tuples re-released, tuples to re-release) of the current or last replay."""

    @property
    @abstractmethod
    def in_failure(self) -> bool:
        """True from the first tentative release until reconciliation."""

    @property
    @abstractmethod
    def released_to(self) -> int:
        """The tuple time before which every bucket was released."""

    @property
    @abstractmethod
    def buffered(self) -> int:
        """Tuples held, pending or kept for a replay."""

    @property
    @abstractmethod
    def late_dropped(self) -> int:
        """Tuples dropped because they came behind a boundary already promised."""


class OutputGuard(Rewindable):
    """SOutput's side of reconciliation (operators/soutput.py)."""

    @abstractmethod
    def end_reconciliation(self, now: int | None = None) -> list[Tuple]:
        """The node's reconciliation completed: [REC_DONE] if this stream is reconciling."""

    @property
    @abstractmethod
    def dropping_duplicates(self) -> bool:
        """True while the replay after a rewind has not yet passed what was emitted."""
