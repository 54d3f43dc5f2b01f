"""One connection under fault injection: the data path of :mod:`node.faults.rules`.

A :class:`FaultyConnection` wraps an inner :class:`~node.net.transport.Connection` and obeys the
cut rule and the shape its :class:`~node.faults.rules.Faults` holds for its peer, looked up per
message. The two modules are one unit: this one reads the rules, counters and registry of
``Faults`` directly; ``Faults`` ends connections through :meth:`FaultyConnection._end`.

Data path. ``receive`` waits for the read pacing (the shape's ``slow`` and ``bandwidth``),
reads a message, learns the peer's name from it if still unknown (:func:`_sender`), holds
it as the *head* until the shape's ``delay`` after it was read, then hands it over, or
discards it under a blackhole cut of direction ``in`` / ``both``. ``send`` drops the
message under a blackhole of direction ``out`` / ``both``, else waits for the send pacing
(``bandwidth``) and sends it. Under a delay the connection starts its pumps: one task reads
ahead into a bounded :class:`~node.faults.shaping.Mailbox` (so that messages keep arriving while
the head waits), one sends behind ``send`` (so that ``send`` returns before the message is
due). Once started, a pump carries every later message: order is kept.

Invariants:

* Once healed or reset, nothing more is handed over or sent, even while the inner
  connection is still closing, and every wait (a delay, pacing) ends at once; a reset makes
  ``receive`` and ``send`` raise ``ConnectionResetError`` naming the fault, a heal makes
  ``receive`` return ``None``. Once closed by its user, ``receive`` returns ``None`` (one
  pending on the read-ahead pump too), and only the delayed sends already queued still
  leave, on time.
* A cancelled ``receive`` loses nothing: the head stays for the next call.
* Its tasks belong to it: ``close`` cancels and awaits the pumps (after letting queued
  delayed sends leave, for at most ``_FLUSH_GRACE`` past the last one's due time) and awaits
  the close of ``inner`` that a heal or reset started.
"""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING

from node.faults.shaping import LinkShape, Mailbox
from node.net.transport import Connection
from protocol.messages import Message, sender_of

if TYPE_CHECKING:
    from node.faults.rules import Faults

__all__ = ["FaultyConnection"]

# While a flood is discarded, let other tasks run every so many messages: an inner receive
# may hand out buffered messages without ever suspending.
_YIELD_EVERY = 64
# Messages a pump holds under a delay, per direction: the link's bandwidth-delay product
# (at most _IN_FLIGHT / delay messages per second); beyond it the sender waits.
_IN_FLIGHT = 1024
# How long close() lets delayed sends leave after the last one is due (as TCP's close).
_FLUSH_GRACE = 1.0


class FaultyConnection:
    """A :class:`~node.net.transport.Connection` under the cut rules and shapes of its peer."""

    __slots__ = ("_closer", "_ended", "_ending", "_faults", "_gappy", "_head", "_in_ready",
                 "_inbox", "_inner", "_key", "_out_ready", "_outbox", "_reader", "_reset",
                 "_send_lock", "_sender", "_torn", "peer_name")

    def __init__(self, inner: Connection, faults: Faults, peer_name: str | None, key: int) -> None:
        self._inner = inner
        self._faults = faults
        self.peer_name = peer_name
        self._key = key
        self._ended: str | None = None  # why its users see the end (closed, healed, reset)
        self._torn = False  # ended by a heal or a reset: nothing more goes through
        self._reset = False  # ended by a reset: receive raises, as on a broken connection
        self._gappy = False  # open while a blackhole rule applied to its peer
        self._ending: asyncio.Future[None] | None = None  # resolved when torn: wakes waits
        self._closer: asyncio.Task[None] | None = None  # a heal's or reset's close of inner
        self._head: tuple[float, Message] | None = None  # read, not handed over yet
        # Pacing: the earliest loop time of the next read of the peer's messages / next send.
        self._in_ready = -math.inf
        self._out_ready = -math.inf
        self._send_lock: asyncio.Lock | None = None  # keeps concurrent paced sends spaced
        # Under a delay: the pumps and what they carry (read ahead / sent behind).
        self._inbox: Mailbox | None = None
        self._outbox: Mailbox | None = None
        self._reader: asyncio.Task[None] | None = None
        self._sender: asyncio.Task[None] | None = None

    @property
    def peer(self) -> str:
        return self._inner.peer

    def _shape(self) -> LinkShape | None:
        return self._faults._shapes.get(self.peer_name) if self.peer_name else None

    def _gone(self) -> ConnectionResetError:
        return ConnectionResetError(f"connection to {self.peer_name or self.peer} is {self._ended}")

    async def _hold(self, deadline: float) -> None:
        """Wait until the loop's clock reaches ``deadline``, or a heal or reset tears the
        connection down (a user's close does not: delayed sends still leave on time)."""
        loop = asyncio.get_running_loop()
        while not self._torn and (left := deadline - loop.time()) > 0:
            if self._ending is None:
                self._ending = loop.create_future()
            await asyncio.wait([self._ending], timeout=left)  # never cancels the future

    # ------------------------------------------------------------------ receiving
    async def receive(self) -> Message | None:
        faults = self._faults
        if (
            self._head is None
            and self._inbox is None
            and self._ended is None
            and not faults._rules
            and not faults._shapes
        ):
            # No fault at all, the common case: straight through, checked again after the
            # read (a rule may have come meanwhile: then the general path decides).
            try:
                message = await self._inner.receive()
            except Exception:
                if self._ended is None:
                    raise
                message = None
            if message is None:
                if self._ended is None:
                    return None  # the peer ended the stream
            else:
                if self.peer_name is None and (name := sender_of(message)) is not None:
                    self.peer_name = name
                    faults._learned(self)
                if self._ended is None and not faults._rules and not faults._shapes:
                    return message
                self._head = (asyncio.get_running_loop().time(), message)
        return await self._receive_faulty()

    async def _receive_faulty(self) -> Message | None:
        faults, loop = self._faults, asyncio.get_running_loop()
        while True:
            if self._ended is not None:
                if self._reset:
                    raise self._gone()
                return None
            if self._head is None:
                try:
                    self._head = await self._read()
                except Exception:
                    if self._ended is None:
                        raise
                    continue  # our own heal or reset broke it: say so above
                if self._head is None and self._ended is None:
                    return None  # the peer ended the stream
                continue
            read_at, message = self._head
            shape = self._shape()
            if shape is not None and shape.delay:
                if self._inbox is None:
                    self._start_reader()  # what follows is read while this one waits
                if read_at + shape.delay > loop.time():
                    # Wait, re-check: a cancelled receive loses nothing (the head stays).
                    await self._hold(read_at + shape.delay)
                    continue
            self._head = None
            rule = faults.rule(self.peer_name)
            if rule is None or not rule.drops_in:
                return message
            faults._counts["dropped_in"] += 1
            if faults._counts["dropped_in"] % _YIELD_EVERY == 0:
                await asyncio.sleep(0)

    async def _read(self) -> tuple[float, Message] | None:
        """The next message of the inner connection and when it was read."""
        if self._inbox is not None:
            return await self._inbox.get()
        shape = self._shape()
        if shape is not None and shape.paces_reads:
            await self._hold(self._in_ready)
            if self._ended is not None:
                return None
        message = await self._inner.receive()
        return None if message is None else self._after_read(message)

    def _after_read(self, message: Message) -> tuple[float, Message]:
        now = asyncio.get_running_loop().time()
        if self.peer_name is None and (name := sender_of(message)) is not None:
            self.peer_name = name
            self._faults._learned(self)
        shape = self._shape()
        if shape is not None and shape.paces_reads:
            self._in_ready = now + shape.read_gap(message)
        return now, message

    def _start_reader(self) -> None:
        self._inbox = inbox = Mailbox(_IN_FLIGHT)
        self._reader = asyncio.get_running_loop().create_task(
            self._read_ahead(inbox), name=f"faults: read ahead from {self.peer_name}"
        )

    async def _read_ahead(self, inbox: Mailbox) -> None:
        """Read the peer's messages into ``inbox`` (paced, bounded) until the end."""
        try:
            while self._ended is None:
                shape = self._shape()
                if shape is not None and shape.paces_reads:
                    await self._hold(self._in_ready)
                    if self._ended is not None:
                        break
                message = await self._inner.receive()
                if message is None:
                    break
                await inbox.put(self._after_read(message))
        except Exception as exc:  # noqa: BLE001  whatever ends the pump is the user's
            # Their receive raises it, after what was read. Narrowed to what the inner
            # connection raises (OSError, DPCError), anything else (a bug) would end the
            # inbox cleanly in the finally below and read as the peer's end of stream.
            inbox.end(exc)
        finally:
            inbox.end()  # cancelled too (close): a receive waiting on the inbox must wake

    # ------------------------------------------------------------------ sending
    async def send(self, message: Message) -> None:
        if self._ended is not None:
            raise self._gone()
        faults = self._faults
        if self._outbox is None and not faults._rules and not faults._shapes:
            try:  # no fault at all, the common case: straight through
                await self._inner.send(message)
            except OSError as exc:
                if self._torn:  # broken by our own reset: name the fault, not its symptom
                    raise self._gone() from exc
                raise
            return
        shape = self._shape()
        if self._outbox is None and shape is not None and shape.delay:
            self._start_sender()
        if self._outbox is None:
            await self._send_now(message)
            return
        # Once a pump sends, every message goes through it: order is kept.
        due = asyncio.get_running_loop().time() + (shape.delay if shape is not None else 0.0)
        await self._outbox.put((due, message))

    async def _send_now(self, message: Message) -> None:
        faults = self._faults
        rule = faults.rule(self.peer_name)
        if rule is not None and rule.drops_out:
            faults._counts["dropped_out"] += 1
            await asyncio.sleep(0)  # vanished; still yield, as a real send would
            return
        shape = self._shape()
        try:
            if shape is None or shape.bandwidth is None:
                if self._torn:  # healed or reset while it waited: a later message has a gap
                    raise self._gone()
                await self._inner.send(message)
                return
            if self._send_lock is None:
                self._send_lock = asyncio.Lock()
            async with self._send_lock:
                await self._hold(self._out_ready)
                if self._torn:
                    raise self._gone()
                loop = asyncio.get_running_loop()
                self._out_ready = loop.time() + shape.send_gap(message)
                await self._inner.send(message)
        except OSError as exc:
            if self._torn:  # broken by our own reset: name the fault, not its symptom
                raise self._gone() from exc
            raise

    def _start_sender(self) -> None:
        self._outbox = outbox = Mailbox(_IN_FLIGHT)
        self._sender = asyncio.get_running_loop().create_task(
            self._send_behind(outbox), name=f"faults: send behind to {self.peer_name}"
        )

    async def _send_behind(self, outbox: Mailbox) -> None:
        """Send what ``outbox`` holds, each message once due, until it ends."""
        try:
            while (item := await outbox.get()) is not None:
                await self._hold(item[0])
                await self._send_now(item[1])
        except Exception as exc:  # noqa: BLE001  whatever breaks the pump is the user's
            # Their next send raises it. Narrowed to what the inner connection raises
            # (OSError, DPCError), anything else (a bug) would end this task unseen, and
            # later sends would pile up in a mailbox nobody empties.
            outbox.end(exc, discard=True)

    # ------------------------------------------------------------------ ending
    async def close(self) -> None:
        if self._ended is None:
            self._ended = "closed"
        try:
            outbox, sender = self._outbox, self._sender
            if outbox is not None and sender is not None and not outbox.ended:
                # What is queued still leaves, as TCP flushes on close; registered meanwhile,
                # so that a heal or reset still ends it.
                loop = asyncio.get_running_loop()
                last = outbox.last_time
                outbox.end()
                left = 0.0 if last is None else max(0.0, last - loop.time())
                await asyncio.wait([sender], timeout=left + _FLUSH_GRACE)
        finally:
            self._faults._conns.pop(self._key, None)
            pumps = [t for t in (self._reader, self._sender) if t is not None]
            for task in pumps:
                task.cancel()
            # A receive waiting on the read-ahead pump would wait forever once it is gone
            # (a task cancelled before it ran never reaches its finally): end it here.
            if self._inbox is not None:
                self._inbox.end(discard=True)
            await asyncio.gather(*pumps, return_exceptions=True)
            if self._closer is not None:
                await asyncio.shield(self._closer)  # the heal's or reset's close is this close
            else:
                await self._inner.close()

    def _end(self, why: str, *, reset: bool) -> None:
        """End it at once for its users (heal and cut are sync); close ``inner`` in a task
        that ``close`` awaits. ``reset``: abort the inner connection where it can."""
        if self._torn:
            return
        self._ended, self._torn, self._reset = why, True, reset
        self._faults._conns.pop(self._key, None)
        if self._ending is not None:
            self._ending.set_result(None)
        for box in (self._inbox, self._outbox):
            if box is not None:
                box.end(self._gone(), discard=True)
        if reset and callable(abort := getattr(self._inner, "abort", None)):
            abort()  # optional in the transport interface: TCP and memory have it
        # If closing fails, the user's close() raises it (or asyncio logs it, unawaited).
        self._closer = asyncio.get_running_loop().create_task(self._inner.close())
