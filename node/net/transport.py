"""The transport interface: message connections between processes (STYLE.md 7).

One interface, two implementations:

* :class:`~node.net.tcp.TcpTransport`: asyncio streams on loopback or a real network, frames
  of the core codec, back-pressure through ``drain``;
* :class:`~node.net.memory.MemoryTransport`: in-process pairs of bounded queues with
  partition controls, for fast deterministic tests and the simulation.

A connection carries :mod:`protocol.messages` both ways. ``receive`` returns ``None`` at a
clean end of stream, raises :class:`~protocol.errors.RemoteProtocolError` on garbage
(after handing over, one by one, the messages decoded before it, see ``FrameDecoder``) and
:class:`ConnectionError` (an ``OSError``) when the connection breaks; the caller logs it
with ``peer`` and closes the connection. ``send`` awaits until the transport has room (a
slow reader slows its writer; nothing is dropped silently) and raises
``ConnectionError`` once the connection is closed or broken.

Both implementations' connections also have ``abort()`` (not part of the interface: only
fault injection's reset cuts use it, and fall back to ``close`` without it): drop what is
unsent and unread and reset the connection at once, so that the peer sees it end.

Ownership (STYLE.md 8): a :class:`Server` owns the task that runs its handler for each
accepted connection; ``Server.close`` cancels those that still run and waits for them, so
that nothing outlives the server. A handler that raises what a dead or garbage-sending peer
raises (``OSError``, ``RemoteProtocolError``) ends its own connection, logged with the
peer's name. Anything else is a bug of ours: it is logged with the traceback, ends its
connection, and :meth:`Server.failed` raises it, so that the owner (a replica's or a
source's TaskGroup) ends loudly instead of serving on beside a broken handler
(:class:`HandlerRunner` is that rule, shared by both implementations).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import NoReturn, Protocol

from protocol.errors import RemoteProtocolError
from protocol.messages import Message

__all__ = ["PEER_ERRORS", "Connection", "Handler", "HandlerRunner", "Server", "Transport"]

#: What a dead peer (OSError: ConnectionError, TimeoutError) or a garbage-sending one raises.
PEER_ERRORS = (OSError, RemoteProtocolError)


class Connection(Protocol):
    """One bidirectional message connection.

    At most one task receives at a time; sends from several tasks are allowed and are
    delivered whole, each message after the other.
    """

    @property
    def peer(self) -> str:
        """A printable name of the other end (``host:port``, or a logical name)."""
        ...

    async def send(self, message: Message) -> None:
        """Send one message; returns once the transport accepted it (back-pressure)."""
        ...

    async def receive(self) -> Message | None:
        """The next message; ``None`` once the peer closed cleanly (or this end closed)."""
        ...

    async def close(self) -> None:
        """Close both directions; idempotent."""
        ...


#: Called once per accepted connection; the connection is closed when it returns.
Handler = Callable[[Connection], Awaitable[None]]


class HandlerRunner:
    """Runs a server's handler on each connection by the module's rule: a peer's error ends
    that connection; any other error also ends it and is kept for :meth:`failed`."""

    def __init__(self, handler: Handler, log: logging.Logger) -> None:
        self._handler = handler
        self._log = log
        self._failure: BaseException | None = None
        self._failed = asyncio.Event()

    async def run(self, conn: Connection) -> None:
        try:
            await self._handler(conn)
        except PEER_ERRORS as exc:
            self._log.info("connection from %s ended: %r", conn.peer, exc)
        except Exception as exc:  # noqa: BLE001  a bug of ours: not swallowed, failed() raises it
            self._log.exception("handler for peer %s failed; connection closed", conn.peer)
            if self._failure is None:
                self._failure = exc
                self._failed.set()
        finally:
            await conn.close()

    async def failed(self) -> NoReturn:
        await self._failed.wait()
        if self._failure is None:  # set only together with the failure
            raise RuntimeError("handler failure event without a failure")
        raise self._failure


class Server(Protocol):
    """A listening endpoint, returned by :meth:`Transport.serve`."""

    @property
    def host(self) -> str:
        """The host it listens on."""
        ...

    @property
    def port(self) -> int:
        """The port it listens on: the bound one when ``serve`` was given port 0."""
        ...

    async def close(self) -> None:
        """Stop accepting, cancel the handlers still running and wait for them (their
        connections are closed); idempotent."""
        ...

    async def failed(self) -> NoReturn:
        """Wait until a handler fails with an error that is not a peer's, and raise it (the
        owner runs this in its TaskGroup, so a handler bug ends the process, loudly)."""
        ...


class Transport(Protocol):
    async def serve(self, host: str, port: int, handler: Handler) -> Server:
        """Accept connections on ``host:port`` (port 0: any free port, see
        ``Server.port``) and run ``handler`` for each."""
        ...

    async def connect(self, host: str, port: int) -> Connection:
        """Open a connection; raises ``OSError`` (``ConnectionRefusedError`` when nothing
        listens there, ``TimeoutError`` when it cannot be reached in time)."""
        ...
