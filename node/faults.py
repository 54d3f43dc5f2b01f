"""Fault injection for one process: network partitions between it and named peers.

A replica process owns one :class:`Faults`; its control plane calls ``cut`` and ``heal``.
Its :class:`FaultyTransport` wraps each connection in a :class:`FaultyConnection`.

Theory of operation. A cut models a partition, not a crash: silence both ways on a
connection that stays open. While cut from ``p``, a send to ``p`` is dropped and returns;
what ``p`` sends is read and discarded, and reading goes on (else TCP back-pressure would
stall ``p``'s writer and its other readers). A connect to ``p`` gets no answer, like a SYN:
``TimeoutError`` after ``connect_timeout``, unless ``p`` is healed first. An accepting end
learns its peer's name from the first message that carries one (:func:`_sender`); an
unknown peer is never blocked.

Invariants:

* A stream never skips, and a dropped message leaves a gap: ``heal`` closes every open
  connection to a healed peer (wrapped before the heal, it was open during the cut), whose
  users reconnect and resubscribe from their ids. From the heal on it delivers nothing,
  even before its inner connection has finished closing. Other connections are untouched.
* The registry of connections is weak and pruned on close. No task outlives its
  connection: a heal closes the inner connection in a task that ``close`` awaits.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from protocol.messages import (
    Ack,
    HeartbeatRequest,
    Message,
    ReconcileRequest,
    Subscribe,
    Unsubscribe,
)

from .errors import NodeError
from .transport import Connection, Handler, Server, Transport

__all__ = ["Faults", "FaultyConnection", "FaultyTransport"]

# While a flood is discarded, let other tasks run every so many messages: an inner receive
# may hand out buffered messages without ever suspending.
_YIELD_EVERY = 64


def _sender(message: Message) -> str | None:
    """The name of the process that sent ``message``, if the message says it."""
    match message:
        case Subscribe() | Unsubscribe() | Ack():
            return message.subscriber
        case HeartbeatRequest():
            return message.sender
        case ReconcileRequest():
            return message.replica
    return None


class Faults:
    """The peers this process is cut from, and every connection it wrapped."""

    def __init__(self, owner: str, *, log: logging.Logger) -> None:
        self.owner = owner
        self._log = log
        self._cut: set[str] = set()
        self._conns: weakref.WeakSet[FaultyConnection] = weakref.WeakSet()
        self._healed = asyncio.Event()  # set, then replaced, by each heal that heals someone
        self._counts = dict.fromkeys(("dropped_in", "dropped_out", "closed_on_heal"), 0)

    def _names(self, peers: Iterable[str], action: str) -> list[str]:
        if isinstance(peers, str):  # iterable too: cut("n1a") would cut "n", "1" and "a"
            raise NodeError(f"cannot {action}: expected a list of names, got the string {peers!r}")
        names = list(peers)
        for bad in (name for name in names if not isinstance(name, str)):
            kind = type(bad).__name__
            raise NodeError(f"cannot {action}: a process name must be a str, got {bad!r} ({kind})")
        return names

    def cut(self, peers: Iterable[str]) -> None:
        """Cut this process from ``peers`` (idempotent) until they are healed."""
        names = self._names(peers, f"cut {self.owner!r}")
        if self.owner in names:
            raise NodeError(f"cannot cut process {self.owner!r} from itself")
        self._cut.update(names)
        self._log.warning("fault injection: %s is cut from %s", self.owner, self.cut_peers)

    def heal(self, peers: Iterable[str] | None = None) -> list[str]:
        """Heal ``peers`` (``None``: all) and close the connections to them that may have
        gaps; return the names that were cut."""
        wanted = self._cut if peers is None else set(self._names(peers, f"heal {self.owner!r}"))
        healed = self._cut & wanted
        if not healed:
            return []
        self._cut -= healed
        closing = [conn for conn in list(self._conns) if conn.peer_name in healed]
        for conn in closing:
            conn._sever()
        self._counts["closed_on_heal"] += len(closing)
        self._healed.set()  # wakes the connects waiting for these peers
        self._healed = asyncio.Event()
        msg = "fault injection: %s healed from %s; closed %d connection(s) that may have gaps"
        self._log.warning(msg, self.owner, sorted(healed), len(closing))
        return sorted(healed)

    def blocks(self, peer: str | None) -> bool:
        return peer is not None and peer in self._cut

    @property
    def cut_peers(self) -> list[str]:
        return sorted(self._cut)

    def wrap(self, conn: Connection, peer: str | None = None) -> FaultyConnection:
        """``conn`` under these faults; ``peer`` is its process name, if already known."""
        faulty = FaultyConnection(conn, self, peer)
        self._conns.add(faulty)
        return faulty

    def status(self) -> dict[str, Any]:
        return {"cut": self.cut_peers, **self._counts}


class FaultyConnection:
    """A :class:`~node.transport.Connection` that goes silent while its peer is cut."""

    __slots__ = ("__weakref__", "_closed", "_closer", "_faults", "_inner", "peer_name")

    def __init__(self, inner: Connection, faults: Faults, peer_name: str | None) -> None:
        self._inner = inner
        self._faults = faults
        self.peer_name = peer_name
        self._closed = False  # closed by its user, or severed by a heal
        self._closer: asyncio.Task[None] | None = None  # a heal's close of ``inner``

    @property
    def peer(self) -> str:
        return self._inner.peer

    async def receive(self) -> Message | None:
        counts = self._faults._counts
        while not self._closed:
            message = await self._inner.receive()
            if message is None or self._closed:  # severed meanwhile: what follows has a gap
                return None
            if self.peer_name is None:
                self.peer_name = _sender(message)
            if not self._faults.blocks(self.peer_name):
                return message
            counts["dropped_in"] += 1
            if counts["dropped_in"] % _YIELD_EVERY == 0:
                await asyncio.sleep(0)
        return None

    async def send(self, message: Message) -> None:
        if self._closed:
            why = "closed on heal of a cut" if self._closer is not None else "closed"
            raise ConnectionResetError(f"connection to {self.peer_name or self.peer} is {why}")
        if self._faults.blocks(self.peer_name):
            self._faults._counts["dropped_out"] += 1
            await asyncio.sleep(0)  # vanished; still yield, as a real send would
            return
        await self._inner.send(message)

    async def close(self) -> None:
        self._closed = True
        self._faults._conns.discard(self)
        if self._closer is not None:
            await asyncio.shield(self._closer)  # the heal's close is this close
        else:
            await self._inner.close()

    def _sever(self) -> None:
        """Close on heal: at once for the users, in a task for ``inner`` (heal is sync)."""
        self._closed = True
        self._faults._conns.discard(self)
        # If closing fails, the user's close() raises it (or asyncio logs it, unawaited).
        self._closer = asyncio.get_running_loop().create_task(self._inner.close())


class FaultyTransport:
    """A :class:`~node.transport.Transport` whose connections obey ``faults``; ``names``
    maps the ``(host, port)`` each process listens on to its name."""

    def __init__(
        self,
        inner: Transport,
        faults: Faults,
        names: Mapping[tuple[str, int], str],
        *,
        connect_timeout: float = 1.0,
    ) -> None:
        self._inner = inner
        self._faults = faults
        self._names = names
        self._connect_timeout = connect_timeout

    async def serve(self, host: str, port: int, handler: Handler) -> Server:
        faults = self._faults

        async def wrapped(conn: Connection) -> None:
            faulty = faults.wrap(conn)
            try:
                await handler(faulty)
            finally:
                await faulty.close()  # prunes the registry and awaits a heal's close

        return await self._inner.serve(host, port, wrapped)

    async def connect(self, host: str, port: int) -> FaultyConnection:
        faults, peer = self._faults, self._names.get((host, port))
        deadline = asyncio.get_running_loop().time() + self._connect_timeout
        while faults.blocks(peer):
            try:
                async with asyncio.timeout_at(deadline):
                    await faults._healed.wait()
            except TimeoutError:
                raise TimeoutError(
                    f"connect to {peer} at {host}:{port} timed out: "
                    f"{faults.owner} and {peer} are cut by fault injection"
                ) from None
        return faults.wrap(await self._inner.connect(host, port), peer)
