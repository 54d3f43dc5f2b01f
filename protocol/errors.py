"""Errors of the whole project, rooted here because `protocol` is the bottom package.

Every package keeps its own errors in its own ``errors.py``; all of them derive from
:class:`DPCError` so that an operator of the system can catch "anything of ours".

* :class:`RemoteProtocolError` -- a *peer* sent something we cannot accept (a malformed,
  truncated, oversized or unknown frame). The receiving process logs it with the peer's
  name and treats it as a link failure; it never crashes the process.
* :class:`LocalProtocolError` -- *we* tried to build or send something invalid (a local
  misuse). It fails fast.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DPCError", "LocalProtocolError", "ProtocolError", "RemoteProtocolError"]


class DPCError(Exception):
    """Root of every error raised by this project."""


class ProtocolError(DPCError):
    """Something about messages or frames is wrong."""


class RemoteProtocolError(ProtocolError):
    """A peer sent bytes that are not a valid frame or message. The message says what.

    ``messages`` holds the valid messages that a decoder completed from the same chunk
    before the bad frame: they were accepted, and the caller must not lose them.
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.messages: list[Any] = []


class LocalProtocolError(ProtocolError):
    """This process tried to encode or send something invalid."""
