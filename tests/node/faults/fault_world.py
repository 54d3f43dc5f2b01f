"""The fault-injection test world (tests/node/faults/test_cuts.py, test_shaping.py): processes
with their ``Faults`` and ``FaultyTransport`` on one network (TCP on loopback or memory),
which keep what their servers receive; the ``world`` fixture is in conftest.py."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from node.faults.rules import Faults, FaultyConnection, FaultyTransport
from node.net.memory import MemoryTransport
from node.net.tcp import TcpTransport
from node.net.transport import Connection, Server, Transport
from protocol.messages import Batch, HeartbeatRequest, Message
from tests.node.net.test_transport import GUARD, big_batch

LOG = logging.getLogger("tests.faults")


@dataclass
class Proc:
    """One process: its faults, its transport, its server and what the server received."""

    name: str
    inner: Transport
    faults: Faults
    transport: FaultyTransport
    server: Server | None = None
    accepted: list[FaultyConnection] = field(default_factory=list)
    inbox: asyncio.Queue[Message] = field(default_factory=asyncio.Queue)
    times: list[float] = field(default_factory=list)  # loop time of each inbox arrival
    ended: int = 0  # accepted connections whose receive returned None or raised

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    async def keep(self, conn: Connection) -> None:
        assert isinstance(conn, FaultyConnection) and conn.peer_name is None
        self.accepted.append(conn)
        try:
            while (msg := await conn.receive()) is not None:
                self.times.append(asyncio.get_running_loop().time())
                await self.inbox.put(msg)
        except ConnectionError:
            pass
        self.ended += 1


class World:
    """Processes on one network; closes every server and connection it made at the end."""

    def __init__(self, kind: str, queue_size: int = 64) -> None:
        self.kind = kind
        self.host = "127.0.0.1" if kind == "tcp" else "mem"
        self.memory = None if kind == "tcp" else MemoryTransport(queue_size=queue_size)
        self.names: dict[tuple[str, int], str] = {}
        self.procs: list[Proc] = []
        self.opened: list[Connection] = []

    async def start(self, name: str, connect_timeout: float = GUARD) -> Proc:
        inner: Transport = TcpTransport() if self.memory is None else self.memory.for_process(name)
        faults = Faults(name, log=LOG)
        transport = FaultyTransport(inner, faults, self.names, connect_timeout=connect_timeout)
        proc = Proc(name, inner, faults, transport)
        proc.server = await transport.serve(self.host, 0, proc.keep)
        self.names[(self.host, proc.port)] = name
        self.procs.append(proc)
        return proc

    async def connect(self, src: Proc, dst: Proc) -> FaultyConnection:
        conn = await src.transport.connect(self.host, dst.port)
        self.opened.append(conn)
        return conn

    async def link(self, src: Proc, dst: Proc) -> tuple[FaultyConnection, FaultyConnection]:
        """``src`` connects to ``dst`` and says hello: (src's end, dst's end)."""
        conn = await self.connect(src, dst)
        assert conn.peer_name == dst.name
        await conn.send(HeartbeatRequest(src.name, 0))
        async with asyncio.timeout(GUARD):
            assert await dst.inbox.get() == HeartbeatRequest(src.name, 0)
        served = dst.accepted[-1]
        assert served.peer_name == src.name  # learned from the hello
        return conn, served

    async def __aenter__(self) -> World:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for conn in self.opened:
            await conn.close()
        for proc in self.procs:
            if proc.server is not None:
                await proc.server.close()


def flood(world: World, i: int) -> Batch:
    # TCP: ~48 MB in all, beyond the socket buffers (a reader that stops reading would
    # stall the sender long before the end).
    return big_batch(i, n=16, width=1000) if world.kind == "tcp" else big_batch(i)


FLOOD = 3000
CLEAN = {
    "cut": [],
    "rules": {},
    "shapes": {},
    "dropped_in": 0,
    "dropped_out": 0,
    "closed_on_heal": 0,
    "reset": 0,
    "refused": 0,
}


async def closed_by_peer(conn: Connection) -> bool:
    """Whether the next thing ``conn`` gets is the end: None, or a broken connection."""
    try:
        async with asyncio.timeout(GUARD):
            return await conn.receive() is None
    except ConnectionError:
        return True
