"""SOutput: the guard on every stream that leaves a node (paper sections 3.5.2 and 4).

Theory of operation
-------------------
SOutput passes STABLE and TENTATIVE tuples through unchanged (ids preserved) and remembers,
of what it actually emitted, the id of the last STABLE tuple and whether TENTATIVE tuples
followed it. That memory is what lets it correct the stream after a checkpoint restore
without ever taking back a stable tuple (property 4). Its modes:

* NORMAL -- pass through.
* DROP_DUPLICATES -- entered by :meth:`SOutput.rewind` (checkpoint/redo: the node restored
  the network from a checkpoint and replays). The replay reproduces the ids the stream
  already carries, so tuples with ``id <=`` the remembered last stable id are dropped until
  that id reappears; then ``UNDO(remembered id)`` goes out if tentative tuples had been
  emitted after it, and the corrections pass. If the checkpoint already is at the
  remembered id, the UNDO goes out at once. A second rewind meanwhile keeps waiting for
  the same id (its memory is of what was emitted, not of the checkpoint).
* RECONCILING -- after an UNDO (its own, or one forwarded from its input on the undo/redo
  path), until REC_DONE: :meth:`SOutput.end_reconciliation` when the node's stabilization
  completes, or forced right before the first TENTATIVE tuple of a new failure, so that
  REC_DONE always sits between the last stable and the first tentative tuple.

BOUNDARY tuples pass only when they raise the stream's last boundary: replays re-send old
ones. SOutput keeps no undo log; its own state is in :meth:`SOutput.snapshot_state`.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import ClassVar

from protocol.tuples import Kind, Schema, Tuple, rec_done, undo

from .base import Operator, Plain
from .errors import OperatorError
from .reconciliation import OutputGuard
from .registry import register
from .spec import Params
from .taxonomy import RecoveryClass

__all__ = ["SOutput", "SOutputMode"]

STABLE = Kind.STABLE


class SOutputMode(Enum):
    NORMAL = "normal"
    DROP_DUPLICATES = "drop_duplicates"
    RECONCILING = "reconciling"


@register
class SOutput(Operator, OutputGuard):
    """Pass-through that drops replayed duplicates and emits UNDO / REC_DONE.
    See the module docstring; the node ends its reconciliations through
    :class:`~operators.reconciliation.OutputGuard`."""

    type_name: ClassVar[str] = "soutput"
    #: Passes tuples; ids are positions (operators/taxonomy.py).
    recovery_class = RecoveryClass.REPEATABLE
    n_inputs: ClassVar[int | None] = 1
    uses_undo_log: ClassVar[bool] = False
    #: A tentative boundary must not leave the node (a node sends boundaries only when stable).
    tentative_boundaries: ClassVar[str] = "ignore"

    def __init__(self, name: str, input_schemas: Sequence[Schema], params: Params) -> None:
        super().__init__(name, input_schemas, params)
        self.clear()

    def clear(self) -> None:
        self._last_stable = 0  # id of the last STABLE tuple emitted
        self._tent_after = False  # TENTATIVE tuples emitted after it
        self._dropping = False  # DROP_DUPLICATES
        self._wait_id = 0  # while dropping: the id whose reappearance ends the drop
        self._rec_pending = False  # an UNDO went out and its REC_DONE did not yet

    # ------------------------------------------------------------------ read-only views
    @property
    def mode(self) -> SOutputMode:
        if self._dropping:
            return SOutputMode.DROP_DUPLICATES
        if self._rec_pending:
            return SOutputMode.RECONCILING
        return SOutputMode.NORMAL

    @property
    def last_stable_id(self) -> int:
        """Id of the last STABLE tuple this stream carried (0: none yet)."""
        return self._last_stable

    @property
    def tentative_after(self) -> bool:
        """Whether TENTATIVE tuples were emitted after the last stable one."""
        return self._tent_after

    @property
    def dropping_duplicates(self) -> bool:
        """In DROP_DUPLICATES: the replay has not yet passed what the stream carried."""
        return self._dropping

    @property
    def waiting_for(self) -> int | None:
        """In DROP_DUPLICATES: the id whose reappearance ends the drop."""
        return self._wait_id if self._dropping else None

    # ------------------------------------------------------------------ node API
    def rewind(self, snap: Plain) -> list[Tuple]:
        """Checkpoint/redo: called instead of ``restore``. Keeps the memory of what was
        emitted and drops the replay's duplicates; returns the UNDO when it is due now."""
        if not isinstance(snap, dict) or snap.get("type") != self.type_name:
            got = snap.get("type") if isinstance(snap, dict) else type(snap).__name__
            raise OperatorError(f"{self.describe()}: cannot rewind to a snapshot of {got!r}")
        wait_id = self._wait_id if self._dropping else self._last_stable
        out: list[Tuple] = []
        if snap["state"]["last_stable_id"] >= wait_id:
            self._wait_id = wait_id
            self._finish_drop(out)  # the replay starts after it: nothing to drop
        else:
            self._dropping = True
            self._wait_id = wait_id
        return out

    def rewind_point(self) -> Plain:
        return self.snapshot()  # small: SOutput keeps no log and no tuples

    def end_reconciliation(self, now: int | None = None) -> list[Tuple]:
        """The node's stabilization completed: [REC_DONE] if this stream is reconciling."""
        if not self._rec_pending or self._dropping:
            return []
        self._rec_pending = False
        return [rec_done(self.now if now is None else now)]

    def after_recovery(self, now: int) -> list[Tuple]:
        """Restored from a CEC log (operators/cec.py): what the stream needs at once. If the
        crashed incarnation had sent TENTATIVE tuples after the last stable one, their UNDO;
        then REC_DONE if a reconciliation was open (the corrections, if any, came before
        the crash; what follows is the stable stream)."""
        out: list[Tuple] = []
        self._dropping = False
        self._wait_id = 0
        if self._tent_after:
            out.append(undo(self._last_stable))
            self._tent_after = False
            self._rec_pending = True
        if self._rec_pending:
            out.append(rec_done(now))
            self._rec_pending = False
        return out

    # ------------------------------------------------------------------ data path
    def on_data(self, port: int, tuples: Sequence[Tuple], out: list[Tuple]) -> None:
        # Keep the base untainted: it then cuts a run at every first TENTATIVE tuple, so a
        # run that starts STABLE is all STABLE (the fast path below).
        if self._tainted:
            self._set_taint(False, 0)
        run = tuples
        if self._dropping:
            run = self._drop(run, out)
            if not run:
                return
        elif run[0][0] is STABLE:
            out.extend(run)
            self._last_stable = run[-1][1]
            self._tent_after = False
            return
        for t in run:
            if t[0] is STABLE:
                self._last_stable = t[1]
                self._tent_after = False
            else:
                if self._rec_pending:
                    # A new failure began before stabilization finished: close it here,
                    # between the last stable and the first tentative tuple.
                    out.append(rec_done(self.now))
                    self._rec_pending = False
                self._tent_after = True
            out.append(t)

    def _drop(self, run: Sequence[Tuple], out: list[Tuple]) -> Sequence[Tuple]:
        """Drop the replayed duplicates at the head of ``run``; return what is left."""
        wait_id = self._wait_id
        for k, t in enumerate(run):
            if t[1] < wait_id:
                continue
            self._finish_drop(out)
            # The awaited tuple itself is a duplicate; a larger id means it was skipped.
            return run[k + 1 :] if t[1] == wait_id else run[k:]
        return ()

    def _finish_drop(self, out: list[Tuple]) -> None:
        self._dropping = False
        if self._tent_after:
            out.append(undo(self._wait_id))
            self._last_stable = self._wait_id
            self._tent_after = False
            self._rec_pending = True

    def on_undo(self, port: int, last_kept_id: int, out: list[Tuple]) -> None:
        if self._dropping:
            raise OperatorError(
                f"{self.describe()}: UNDO({last_kept_id}) arrived while dropping replayed "
                f"duplicates up to id {self._wait_id}; undo/redo and a checkpoint replay "
                "cannot overlap on one stream"
            )
        out.append(undo(last_kept_id))
        if last_kept_id < self._last_stable:
            # A stable tuple was undone upstream (it never should be): forget it.
            self._last_stable = last_kept_id
        self._tent_after = self._tent_after and last_kept_id > self._last_stable
        self._rec_pending = True

    def on_control(self, port: int, t: Tuple, out: list[Tuple]) -> None:
        if t[0] is Kind.REC_DONE:
            if self._dropping:
                return  # part of the replayed prefix
            self._rec_pending = False
            out.append(t)
            return
        super().on_control(port, t, out)

    # ------------------------------------------------------------------ snapshots
    def snapshot_state(self) -> Plain:
        return {
            "last_stable_id": self._last_stable,
            "tentative_after": self._tent_after,
            "dropping": self._dropping,
            # Meaningless once the drop is over: left out, so that replicas with different
            # reconciliation histories but the same stream have the same snapshot.
            "wait_id": self._wait_id if self._dropping else 0,
            "rec_pending": self._rec_pending,
        }

    def restore_state(self, state: Plain) -> None:
        self._last_stable = state["last_stable_id"]
        self._tent_after = state["tentative_after"]
        self._dropping = state["dropping"]
        self._wait_id = state["wait_id"]
        self._rec_pending = state["rec_pending"]
