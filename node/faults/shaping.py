"""Link shaping for fault injection: latency, bandwidth and a slow reader between one process
and a peer (used by :mod:`node.faults.rules`).

Role: the parts a :class:`~node.faults.connection.FaultyConnection` shapes its traffic
with. :class:`LinkShape` is the validated rule for one peer and says how long to wait between
two messages; :class:`Mailbox` holds the messages a connection's pumps carry under a delay
(read ahead of its user, or sent behind it); :func:`frame_size` is what a message weighs on
the wire.

Invariants:

* A :class:`LinkShape` is valid once built (:meth:`LinkShape.checked`): delay and slow are finite
  seconds >= 0, bandwidth is ``None`` or finite bytes/s > 0, and at least one of the three is
  in effect. A misuse raises :class:`~node.errors.NodeError` naming the key, what was expected
  and what arrived.
* Nothing here reads a clock or draws a random number: the connection paces on the event
  loop's clock, so that a simulation on a virtual clock replays exactly.
* A :class:`Mailbox` is a bounded FIFO (``put`` waits for room: back-pressure). ``end`` wakes
  every waiter; after it ``put`` raises, and ``get`` hands out what is left (nothing, if
  discarded), then ``None``, or raises the error it ended with.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from node.errors import NodeError
from protocol.codec import encode
from protocol.messages import Message

__all__ = ["LinkShape", "Mailbox", "frame_size"]

# Messages are weighed, not refused: the frame limit is the sending transport's business.
_NO_LIMIT = 2**32


def frame_size(message: Message) -> int:
    """Bytes ``message`` takes on the wire: its frame under :mod:`protocol.codec`."""
    return len(encode(message, max_frame_size=_NO_LIMIT))


def _number(value: Any) -> bool:
    # bool is an int to Python, never a duration to us (a JSON true is a mistake).
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True, slots=True)
class LinkShape:
    """The shaping of every link between this process and one peer.

    ``delay``: seconds of one-way latency added in both directions. ``bandwidth``: bytes/s
    at most in each direction (frame sizes). ``slow``: seconds between two reads of the
    peer's messages, at least (a slow reader).
    """

    delay: float = 0.0
    bandwidth: float | None = None
    slow: float = 0.0

    @classmethod
    def checked(cls, *, delay: Any, bandwidth: Any, slow: Any, action: str) -> LinkShape:
        """A shape from untrusted values; raises :class:`NodeError` ("cannot ``action``: ...")."""
        for key, value in (("delay", delay), ("slow", slow)):
            if not _number(value) or value < 0:
                raise NodeError(
                    f"cannot {action}: {key} must be a finite number of seconds >= 0, "
                    f"got {value!r}"
                )
        if bandwidth is not None and (not _number(bandwidth) or bandwidth <= 0):
            raise NodeError(
                f"cannot {action}: bandwidth must be a finite number of bytes per second > 0 "
                f"(or None: unlimited), got {bandwidth!r}"
            )
        if not delay and bandwidth is None and not slow:
            raise NodeError(
                f"cannot {action}: give a delay > 0, a bandwidth or a slow > 0 "
                "(to remove a shape, heal)"
            )
        return cls(float(delay), None if bandwidth is None else float(bandwidth), float(slow))

    @property
    def paces_reads(self) -> bool:
        return self.slow > 0 or self.bandwidth is not None

    def read_gap(self, message: Message) -> float:
        """Seconds from reading ``message`` to the next read of the peer's messages."""
        gap = self.slow
        if self.bandwidth is not None:
            gap = max(gap, frame_size(message) / self.bandwidth)
        return gap

    def send_gap(self, message: Message) -> float:
        """Seconds from the start of sending ``message`` to the start of the next send."""
        return 0.0 if self.bandwidth is None else frame_size(message) / self.bandwidth

    def as_dict(self) -> dict[str, float | None]:
        return {"delay": self.delay, "bandwidth": self.bandwidth, "slow": self.slow}


class Mailbox:
    """A bounded FIFO of ``(time, message)`` between a connection's pump and its user."""

    __slots__ = ("_capacity", "_changed", "_items", "ended", "error")

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._items: deque[tuple[float, Message]] = deque()
        self._changed = asyncio.Event()  # set, then replaced, by every change
        self.ended = False
        self.error: BaseException | None = None

    def __len__(self) -> int:
        return len(self._items)

    @property
    def last_time(self) -> float | None:
        return self._items[-1][0] if self._items else None

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def put(self, item: tuple[float, Message]) -> None:
        while not self.ended and len(self._items) >= self._capacity:
            await self._changed.wait()
        if self.ended:
            raise self.error or ConnectionResetError("connection closed")
        self._items.append(item)
        self._notify()

    async def get(self) -> tuple[float, Message] | None:
        while not self._items:
            if self.ended:
                if self.error is not None:
                    raise self.error
                return None
            await self._changed.wait()
        item = self._items.popleft()
        self._notify()
        return item

    def end(self, error: BaseException | None = None, *, discard: bool = False) -> None:
        """No more puts; ``get`` raises ``error`` (or returns ``None``) once empty."""
        if not self.ended:
            self.ended, self.error = True, error
        if discard:
            self._items.clear()
        self._notify()
