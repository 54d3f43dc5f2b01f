"""The corrections reader's data: what a link's background subscription at a reconciling
producer holds, and the connection it hands over to the link's main loop.

``node/streams/link.py`` (its module docstring, "The corrections reader") says how they are
used: :class:`Corrections` buffers one producer's in-force stream after data tuple ``base``
(its UNDOs applied by an :class:`~state.buffer.OutputBuffer`, never handed on before its
REC_DONE); :class:`Handover` is that connection once the REC_DONE came, waiting for the
main loop to adopt it as the data source.
"""

from __future__ import annotations

from node.net.transport import Connection
from protocol.tuples import Tuple, undo
from state.buffer import OutputBuffer

__all__ = ["Address", "Corrections", "Handover"]

Address = tuple[str, int]


class Corrections:
    """What the corrections reader received from one producer, subscribed with
    ``(base, base)``: that producer's in-force stream after data tuple ``base``."""

    __slots__ = ("base", "buffer")

    def __init__(self, stream: str, base: int) -> None:
        self.base = base
        self.buffer = OutputBuffer(stream)  # applies the producer's UNDOs; never trimmed

    @property
    def settled(self) -> bool:
        """No tentative tuple in force: the producer's corrections are complete."""
        return self.buffer.last_id == self.buffer.last_stable_id

    def resume_after(self, s: int, t: int) -> list[Tuple] | None:
        """What turns a consumer holding ``(s, t)`` into one holding this stream (module
        docstring); None if its stable tuples do not reach ``s`` yet."""
        buffer = self.buffer
        if s > max(self.base, buffer.last_stable_id):
            return None
        # Every id buffered is above base, so at s == base the whole buffer follows. Its
        # REC_DONE goes too: it ended the reconciliation that corrects what the link holds.
        items = buffer.after(s)
        return [undo(s), *items] if t > s else items


class Handover:
    """A corrections connection that delivered REC_DONE, waiting for the main loop."""

    __slots__ = ("address", "conn", "fix")

    def __init__(self, conn: Connection, address: Address, fix: Corrections) -> None:
        self.conn = conn
        self.address = address
        self.fix = fix
