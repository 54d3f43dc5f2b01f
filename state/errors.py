"""Errors of the ``state`` package (checkpoints, output buffers, tuple logs).

All derive from :class:`StateError`, itself a :class:`protocol.errors.DPCError`. Every
message names the stream, part or file concerned, what was requested and what exists, so
that a log line is enough to see what went wrong.

* :class:`ReplayError` -- a replay request the output buffer cannot serve: the tuples it
  needs were trimmed (permanent: ask another replica), or, as :class:`ReplayAheadError`,
  the subscriber already holds stable tuples this buffer has not produced yet (transient:
  wait until it has, or pick another replica).
* :class:`CheckpointError` -- a corrupt, incompatible or mismatched checkpoint.
"""

from __future__ import annotations

from protocol.errors import DPCError

__all__ = ["CheckpointError", "ReplayAheadError", "ReplayError", "StateError"]


class StateError(DPCError):
    """Misuse of, or bad data in, a checkpoint, output buffer or tuple log."""


class ReplayError(StateError):
    """An output buffer cannot serve a replay request (or apply an UNDO) because the
    tuples it needs were trimmed after every consumer acknowledged them."""


class ReplayAheadError(ReplayError):
    """The subscriber holds stable tuples that this buffer has not produced (yet)."""


class CheckpointError(StateError):
    """A checkpoint is corrupt, of an unknown version, or does not match the parts that
    are restored from it."""
