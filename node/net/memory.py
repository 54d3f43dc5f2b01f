"""The in-memory transport: a simulated network in one process, for fast tests (STYLE.md 7).

One :class:`MemoryTransport` is a network; ``for_process(name)`` gives the view of it that
one process uses, so that the connections it opens carry its name (what ``partition``
matches on, and the ``peer`` its servers see). Servers listen on ``(host, port)`` keys; no
socket is involved. A connection is a pair of bounded FIFOs (:class:`_Pipe`) of message
objects, one per direction.

Invariants, matching what :mod:`node.net.tcp` gives over a real network:

* Order: each direction delivers messages in the order they were sent, or not at all.
* Back-pressure: a direction holds at most ``queue_size`` messages; ``send`` waits while
  the peer's queue is full. Nothing is dropped except across a partition (below).
* Close: the peer receives what was sent before ``close``, then ``None``; its later sends
  raise ``ConnectionResetError``. Connecting to an address nobody serves raises
  ``ConnectionRefusedError``.
* Abort: ``abort()`` on either end resets the connection (both ends' ``receive`` and
  ``send`` raise ``ConnectionResetError``), as TCP's does.
* ``codec=True`` round-trips every message through :func:`protocol.codec.encode` and the
  decoder, so that tests exercise the wire format (and its limits) as TCP would.

Fault controls act on the whole network, until changed (link shapes: delay, bandwidth, a
slow reader, are node/faults/'s, over either transport):

* ``partition(a, b)`` cuts every connection whose two ends are ``a`` and ``b`` (a process
  name, or a server's ``host:port``), both ways. As a blackhole (the default), messages
  sent across vanish silently and a connect across waits for ``heal`` up to
  ``hello_timeout``, then raises ``TimeoutError``, as a real partition does. With
  ``reset=True`` the connections across are reset at once (both ends' ``receive`` and
  ``send`` raise ``ConnectionResetError``) and connects across are refused.
* ``heal()`` removes every partition (reset connections stay dead: their owners reconnect).
"""

from __future__ import annotations

import asyncio
import errno
import logging
from collections import deque
from dataclasses import dataclass
from typing import NoReturn

from node.net.transport import Handler, HandlerRunner
from protocol.codec import DEFAULT_MAX_FRAME_SIZE, decode_frame, encode
from protocol.messages import Message

__all__ = ["MemoryConnection", "MemoryServer", "MemoryTransport"]

_log = logging.getLogger(__name__)
_FIRST_PORT = 40_000  # where port-0 servers are numbered from, per host


class _Pipe:
    """One direction of a connection: a bounded FIFO of messages."""

    __slots__ = ("_capacity", "_items", "_readable", "_writable", "eof", "error", "reader_gone")

    def __init__(self, capacity: int) -> None:
        self._items: deque[Message] = deque()
        self._capacity = capacity
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        self.eof = False  # the writer closed: the reader gets what is left, then None
        self.reader_gone = False  # the reader closed: writes fail, what was queued is gone
        self.error = ""  # set by a reset: both ends fail at once

    async def put(self, message: Message) -> None:
        while True:
            if self.error:
                raise ConnectionResetError(self.error)
            if self.eof or self.reader_gone:
                raise ConnectionResetError("connection closed")
            if len(self._items) < self._capacity:
                break
            self._writable.clear()
            await self._writable.wait()
        self._items.append(message)
        self._readable.set()

    async def get(self) -> Message | None:
        while True:
            if self.error:
                raise ConnectionResetError(self.error)
            if self._items:
                message = self._items.popleft()
                self._writable.set()
                return message
            if self.eof or self.reader_gone:
                return None
            self._readable.clear()
            await self._readable.wait()

    def close_write(self) -> None:
        self.eof = True
        self._wake()

    def close_read(self) -> None:
        self.reader_gone = True
        self._items.clear()
        self._wake()

    def reset(self, reason: str) -> None:
        self.error = reason
        self._items.clear()
        self._wake()

    def _wake(self) -> None:
        self._readable.set()
        self._writable.set()


@dataclass(eq=False)
class _Link:
    """Both directions of one connection and the names of its two ends."""

    client_ids: frozenset[str]
    server_ids: frozenset[str]
    to_server: _Pipe
    to_client: _Pipe


@dataclass(frozen=True)
class _Cut:
    a: str
    b: str
    reset: bool

    def splits(self, link: _Link) -> bool:
        c, s = link.client_ids, link.server_ids
        return (self.a in c and self.b in s) or (self.b in c and self.a in s)


class _Network:
    """What every view of one :class:`MemoryTransport` shares."""

    def __init__(self, queue_size: int, codec: bool, max_frame_size: int) -> None:
        self.queue_size = queue_size
        self.codec = codec
        self.max_frame_size = max_frame_size
        self.servers: dict[tuple[str, int], MemoryServer] = {}
        self.links: set[_Link] = set()
        self.cuts: list[_Cut] = []
        self.clients = 0
        self.changed = asyncio.Event()  # replaced after each set(): "the cuts changed"

    def cut_of(self, link: _Link) -> _Cut | None:
        for cut in self.cuts:
            if cut.splits(link):
                return cut
        return None

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


class MemoryConnection:
    """One end of an in-memory connection."""

    __slots__ = ("_closed", "_in", "_link", "_net", "_out", "_peer")

    def __init__(self, net: _Network, link: _Link, out: _Pipe, in_: _Pipe, peer: str) -> None:
        self._net = net
        self._link = link
        self._out = out
        self._in = in_
        self._peer = peer
        self._closed = False

    @property
    def peer(self) -> str:
        return self._peer

    async def send(self, message: Message) -> None:
        net = self._net
        if net.codec:
            limit = net.max_frame_size
            message = decode_frame(encode(message, max_frame_size=limit), max_frame_size=limit)
        if self._closed:
            raise ConnectionResetError(f"connection to {self._peer} is closed")
        if self._out.error:
            raise ConnectionResetError(self._out.error)
        if net.cuts and net.cut_of(self._link) is not None:
            await asyncio.sleep(0)  # vanished; still yield, as a real send would
            return
        await self._out.put(message)

    async def receive(self) -> Message | None:
        return await self._in.get()

    def abort(self) -> None:
        """Reset the connection at once: what is queued either way is dropped, and both
        ends' ``receive`` and ``send`` raise ``ConnectionResetError`` (as ``partition``
        with ``reset=True`` does)."""
        if self._closed:
            return
        self._closed = True
        reason = f"connection reset: aborted by the end connected to {self._peer}"
        self._out.reset(reason)
        self._in.reset(reason)
        self._net.links.discard(self._link)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._out.close_write()
        self._in.close_read()
        self._net.links.discard(self._link)


class MemoryServer:
    """A listening ``(host, port)`` of a :class:`MemoryTransport` and its handler tasks."""

    def __init__(
        self,
        net: _Network,
        host: str,
        port: int,
        ids: frozenset[str],
        handler: Handler,
        log: logging.Logger,
    ) -> None:
        self._net = net
        self._host = host
        self._port = port
        self.ids = ids
        self._runner = HandlerRunner(handler, log)
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        return self._port

    def _accept(self, conn: MemoryConnection) -> None:
        # Owned by this server: close() cancels and awaits every one of them.
        task = asyncio.get_running_loop().create_task(self._run(conn))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, conn: MemoryConnection) -> None:
        await self._runner.run(conn)  # the transport's rule for a failing handler

    async def failed(self) -> NoReturn:
        await self._runner.failed()

    async def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if self._net.servers.get((self._host, self._port)) is self:
            del self._net.servers[(self._host, self._port)]
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class MemoryTransport:
    """A simulated network and one process's view of it. See the module docstring.

    ``queue_size`` is the capacity, in messages, of each direction of a connection.
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        queue_size: int = 64,
        codec: bool = False,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        hello_timeout: float = 5.0,
        log: logging.Logger = _log,
        _net: _Network | None = None,
    ) -> None:
        if queue_size < 1:
            raise ValueError(f"queue_size must be at least 1, got {queue_size}")
        self.name = name
        self.hello_timeout = hello_timeout
        self._log = log
        self._net = _net if _net is not None else _Network(queue_size, codec, max_frame_size)

    def for_process(self, name: str) -> MemoryTransport:
        """The view of this network used by process ``name`` (same network, same controls)."""
        return MemoryTransport(
            name, hello_timeout=self.hello_timeout, log=self._log, _net=self._net
        )

    # ------------------------------------------------------------------ Transport
    async def serve(self, host: str, port: int, handler: Handler) -> MemoryServer:
        servers = self._net.servers
        if port == 0:
            port = _FIRST_PORT
            while (host, port) in servers:
                port += 1
        elif (host, port) in servers:
            raise OSError(errno.EADDRINUSE, f"address {host}:{port} is already in use (memory)")
        ids = frozenset({f"{host}:{port}", *([self.name] if self.name else [])})
        server = MemoryServer(self._net, host, port, ids, handler, self._log)
        servers[(host, port)] = server
        return server

    async def connect(self, host: str, port: int) -> MemoryConnection:
        net = self._net
        net.clients += 1
        label = f"{self.name or 'memory-client'}#{net.clients}"
        client_ids = frozenset({self.name or label})
        deadline = asyncio.get_running_loop().time() + self.hello_timeout
        while True:
            server = net.servers.get((host, port))
            if server is None:
                raise ConnectionRefusedError(
                    errno.ECONNREFUSED, f"nothing listens on {host}:{port} (memory)"
                )
            pipes = _Pipe(net.queue_size), _Pipe(net.queue_size)
            link = _Link(client_ids, server.ids, *pipes)
            cut = net.cut_of(link)
            if cut is None:
                break
            where = f"{host}:{port} is partitioned from {self.name or label}"
            if cut.reset:
                raise ConnectionRefusedError(errno.ECONNREFUSED, f"connection refused: {where}")
            try:  # a blackhole: the handshake gets no answer, unless the partition heals
                async with asyncio.timeout_at(deadline):
                    await net.changed.wait()
            except TimeoutError:
                raise TimeoutError(f"connect timed out: {where}") from None
        net.links.add(link)
        client = MemoryConnection(net, link, link.to_server, link.to_client, f"{host}:{port}")
        server._accept(MemoryConnection(net, link, link.to_client, link.to_server, label))
        return client

    # ------------------------------------------------------------------ fault controls
    def partition(self, a: str, b: str, *, reset: bool = False) -> None:
        """Cut traffic between ``a`` and ``b`` both ways (see the module docstring)."""
        net = self._net
        cut = _Cut(a, b, reset)
        net.cuts.append(cut)
        if reset:
            for link in [lk for lk in net.links if cut.splits(lk)]:
                reason = f"connection reset: {a} and {b} are partitioned"
                link.to_server.reset(reason)
                link.to_client.reset(reason)
                net.links.discard(link)
        net.notify()

    def heal(self) -> None:
        """Remove every partition."""
        self._net.cuts.clear()
        self._net.notify()
