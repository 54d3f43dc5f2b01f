"""The TCP transport: :class:`~node.net.transport.Transport` on asyncio streams (DESIGN.md 4).

Each message travels as one frame of :mod:`protocol.codec`. Invariants:

* ``send`` writes one whole frame and awaits ``drain()``: once the kernel and asyncio
  buffers of a connection are full, the sender waits for the reader (back-pressure);
  nothing is dropped. A message the codec refuses raises ``LocalProtocolError`` before
  any byte is written (a local misuse), and the connection stays usable.
* ``receive`` feeds whatever arrived into one :class:`~protocol.codec.FrameDecoder` and
  hands the messages out one by one. When the decoder refuses the bytes, the messages it
  completed before the bad frame are returned first and the
  :class:`~protocol.errors.RemoteProtocolError` is raised after them, and again on every
  later call: the caller logs it with ``peer`` and closes. Memory per connection stays
  bounded by the decoder's limit plus one read chunk.
* ``close`` flushes what is buffered when the peer reads it within a short grace period
  and otherwise aborts (a peer that stopped reading must not hold us); it is idempotent.
  ``abort`` resets at once (fault injection's reset cuts, node/faults/rules.py).
* A server owns the task that runs its handler on each accepted connection (it creates
  them itself, as the memory transport does); ``close`` cancels the running ones and waits
  for them. A handler that raises is logged with its peer; the others go on.

TCP_NODELAY is set on every connection: frames are already batched by the publisher, and
Nagle's delay would only add latency to small frames at low rates.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import struct
from typing import Any, NoReturn

from node.config.model import TlsFiles
from node.net.tls import client_context, server_context
from node.net.traffic import TRAFFIC
from node.net.transport import Handler, HandlerRunner
from protocol.codec import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode
from protocol.errors import RemoteProtocolError
from protocol.messages import Message

__all__ = ["TcpConnection", "TcpServer", "TcpTransport"]

_log = logging.getLogger(__name__)
# Bytes asked of the socket per read: large enough for ~20 full batches per wake-up.
_READ_CHUNK = 64 * 1024
# How long close() lets buffered frames drain before aborting the connection.
_CLOSE_GRACE = 1.0


def _address(info: Any) -> str:
    """``host:port`` of a socket address (IPv4 pair or IPv6 4-tuple), else its repr."""
    if isinstance(info, tuple) and len(info) >= 2:
        return f"{info[0]}:{info[1]}"
    return str(info)


class TcpConnection:
    """One framed message connection over an asyncio stream pair."""

    __slots__ = ("_closed", "_decoder", "_error", "_limit", "_peer", "_reader", "_ready", "_writer")

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_frame_size: int
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._limit = max_frame_size
        self._decoder = FrameDecoder(max_frame_size)
        self._ready: list[Message] = []  # decoded, not yet handed out (in reverse order)
        self._error: RemoteProtocolError | None = None  # raised once _ready is empty
        self._closed = False
        self._peer = _address(writer.get_extra_info("peername"))
        sock = writer.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    @property
    def peer(self) -> str:
        return self._peer

    async def send(self, message: Message) -> None:
        frame = encode(message, max_frame_size=self._limit)
        if self._closed or self._writer.is_closing():
            raise ConnectionResetError(f"connection to {self._peer} is closed")
        TRAFFIC.sent[type(message).__name__] += len(frame)
        self._writer.write(frame)
        await self._writer.drain()

    async def receive(self) -> Message | None:
        while True:
            if self._ready:
                return self._ready.pop()
            if self._error is not None:
                raise self._error
            if self._closed:
                return None
            data = await self._reader.read(_READ_CHUNK)
            TRAFFIC.received += len(data)
            try:
                if not data:
                    self._decoder.eof()  # raises if the peer stopped mid-frame
                    self._closed = True
                    return None
                messages = self._decoder.feed(data)
            except RemoteProtocolError as exc:
                self._error = exc
                messages = exc.messages
            if len(messages) == 1:
                return messages[0]  # the common case: no list juggling
            messages.reverse()
            self._ready = messages

    def limit_frames(self, limit: int | None) -> None:
        """Accept frames of at most ``limit`` bytes from now on (None: the transport's
        ``max_frame_size`` again): node/net/auth.py lowers it until the peer has
        authenticated. Not part of the Connection interface (frames are TCP's)."""
        self._decoder.max_frame_size = self._limit if limit is None else min(limit, self._limit)

    def abort(self) -> None:
        """Reset the connection at once: unsent and unread frames are dropped, the peer
        sees a reset (RST, else end of stream); ``receive`` then returns ``None`` and
        ``send`` raises. ``close`` still ends it cleanly (fault injection uses this)."""
        self._closed = True
        self._ready.clear()
        sock = self._writer.get_extra_info("socket")
        # uvloop hands out a pseudo-socket whose descriptor is -1 once its transport lost
        # the connection; setsockopt on it raises ValueError, not OSError (dpc soak: a
        # reset fault on a connection the peer had just broken answered HTTP 500).
        if sock is not None and sock.fileno() >= 0:
            with contextlib.suppress(OSError):  # linger 0: close sends RST, not FIN
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self._writer.transport.abort()

    async def close(self) -> None:
        if self._closed and self._writer.is_closing():
            return
        self._closed = True
        writer = self._writer
        writer.close()
        try:
            async with asyncio.timeout(_CLOSE_GRACE):
                await writer.wait_closed()
        except TimeoutError:
            writer.transport.abort()  # the peer does not read: drop the unsent frames
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        except OSError:
            pass  # already broken: closed is closed


class TcpServer:
    """A listening socket and the handler tasks of its connections."""

    def __init__(self, handler: Handler, max_frame_size: int, log: logging.Logger,
                 tls: ssl.SSLContext | None = None, tls_timeout: float = 5.0) -> None:
        self._tls, self._tls_timeout = tls, tls_timeout
        self._runner = HandlerRunner(handler, log)
        self._limit = max_frame_size
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = False
        self._host = ""
        self._port = 0

    async def _start(self, host: str, port: int) -> None:
        if self._tls is None:
            self._server = await asyncio.start_server(self._on_connect, host, port)
        else:  # a peer that does not complete the TLS handshake in time is dropped
            self._server = await asyncio.start_server(
                self._on_connect, host, port, ssl=self._tls,
                ssl_handshake_timeout=self._tls_timeout)
        self._host, self._port = self._server.sockets[0].getsockname()[:2]

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        return self._port

    def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A plain callback, so that the handler's task is ours from the start (asyncio would
        # wrap a coroutine in a task of its own): close() cancels and awaits every one.
        conn = TcpConnection(reader, writer, self._limit)
        task = asyncio.get_running_loop().create_task(self._run(conn))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, conn: TcpConnection) -> None:
        if self._closing:  # accepted just before close(): refuse politely
            await conn.close()
            return
        await self._runner.run(conn)  # the transport's rule for a failing handler

    async def failed(self) -> NoReturn:
        await self._runner.failed()

    async def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        server = self._server
        if server is not None:  # None: _start never ran, nothing listens
            server.close()  # stop listening first: no new handler starts after this
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            await server.wait_closed()


class TcpTransport:
    """:class:`~node.net.transport.Transport` over TCP.

    ``max_frame_size`` bounds the frames sent and accepted. ``hello_timeout`` bounds the
    opening handshake of ``connect`` (an unreachable host would otherwise hold a link for
    the kernel's SYN retries, minutes) and, with TLS, each side's TLS handshake; the first
    *message* on a connection is the business of its handler (see ``Publisher``) or of
    node/net/auth.py. ``tls`` ([cluster.tls], node/net/tls.py) runs every connection over
    mutual TLS: servers ask for the cluster's certificate, and ``connect`` checks the
    server's against the host it dialled.
    """

    def __init__(
        self,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        hello_timeout: float = 5.0,
        tls: TlsFiles | None = None,
        log: logging.Logger = _log,
    ) -> None:
        FrameDecoder(max_frame_size)  # validates the limit now, not at the first connection
        self.max_frame_size = max_frame_size
        self.hello_timeout = hello_timeout
        self.tls = tls
        self._log = log

    async def serve(self, host: str, port: int, handler: Handler) -> TcpServer:
        ctx = None if self.tls is None else server_context(self.tls)
        server = TcpServer(handler, self.max_frame_size, self._log, ctx, self.hello_timeout)
        await server._start(host, port)
        return server

    async def connect(self, host: str, port: int) -> TcpConnection:
        async with asyncio.timeout(self.hello_timeout):
            if self.tls is None:
                reader, writer = await asyncio.open_connection(host, port)
            else:
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=client_context(self.tls), server_hostname=host)
        return TcpConnection(reader, writer, self.max_frame_size)
