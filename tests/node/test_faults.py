"""Fault injection (node.faults) over TCP on loopback and over the memory transport: a cut
silences both directions without blocking anyone, connects to a cut peer time out or wait
for the heal, a heal closes the connections that may have lost messages and only those."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from node.errors import NodeError
from node.faults import Faults, FaultyConnection, FaultyTransport
from node.memory import MemoryTransport
from node.tcp import TcpTransport
from node.transport import Connection, Server, Transport
from protocol.messages import (
    Ack,
    Batch,
    ConsistencyState,
    HeartbeatRequest,
    HeartbeatResponse,
    Message,
    ReconcileGrant,
    ReconcileRequest,
    Subscribe,
    Unsubscribe,
)
from tests.node.test_transport import (
    GUARD,
    assert_nothing_leaked,
    big_batch,
    open_fds,
    wait_until,
)

pytestmark = pytest.mark.filterwarnings(
    "error::ResourceWarning", "error::pytest.PytestUnraisableExceptionWarning"
)

LOG = logging.getLogger("tests.faults")


@pytest.fixture(autouse=True)
async def _no_leaks() -> AsyncIterator[None]:
    before = open_fds()
    yield
    await assert_nothing_leaked(before)


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
                await self.inbox.put(msg)
        except ConnectionError:
            pass
        self.ended += 1


class World:
    """Processes on one network; closes every server and connection it made at the end."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.host = "127.0.0.1" if kind == "tcp" else "mem"
        self.memory = None if kind == "tcp" else MemoryTransport()
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

    async def close(self) -> None:
        for conn in self.opened:
            await conn.close()
        for proc in self.procs:
            if proc.server is not None:
                await proc.server.close()


@pytest.fixture(params=["tcp", "memory"])
async def world(request: pytest.FixtureRequest) -> AsyncIterator[World]:
    w = World(request.param)
    try:
        yield w
    finally:
        await w.close()


def flood(world: World, i: int) -> Batch:
    # TCP: ~48 MB in all, beyond the socket buffers (a reader that stops reading would
    # stall the sender long before the end).
    return big_batch(i, n=16, width=1000) if world.kind == "tcp" else big_batch(i)


FLOOD = 3000


async def closed_by_peer(conn: Connection) -> bool:
    """Whether the next thing ``conn`` gets is the end: None, or a broken connection."""
    try:
        async with asyncio.timeout(GUARD):
            return await conn.receive() is None
    except ConnectionError:
        return True


# ---------------------------------------------------------------------------- over a network
async def test_messages_flow_without_a_cut(world: World) -> None:
    a, b = await world.start("a"), await world.start("b")
    conn, served = await world.link(b, a)
    msgs: list[Message] = [Subscribe("s", "b", 1, 0), big_batch(1), Ack("s", "b", 3)]
    async with asyncio.timeout(GUARD):
        for msg in msgs:
            await conn.send(msg)
            assert await a.inbox.get() == msg
            await served.send(msg)
            assert await conn.receive() == msg
    assert a.faults.status() == {"cut": [], "dropped_in": 0, "dropped_out": 0, "closed_on_heal": 0}


async def test_a_cut_silences_both_ways_and_never_blocks_a_sender(world: World) -> None:
    a, b = await world.start("a"), await world.start("b")
    b_to_a, a_served = await world.link(b, a)  # a accepted: it learned "b"
    a_to_b, b_served = await world.link(a, b)  # a connected: it knew "b"
    a.faults.cut(["b"])
    a_draining = asyncio.create_task(a_to_b.receive())  # a reads its connect side
    try:
        async with asyncio.timeout(GUARD):  # every send returns: nobody stalls
            for i in range(FLOOD):
                await b_to_a.send(flood(world, i))  # a's handler discards
                await b_served.send(flood(world, i))  # a_draining discards
                await a_served.send(HeartbeatRequest("a", i))  # dropped at a
                await a_to_b.send(HeartbeatRequest("a", i))  # dropped at a
        await wait_until(lambda: a.faults.status()["dropped_in"] == 2 * FLOOD)
        assert a.faults.status()["dropped_out"] == 2 * FLOOD
        assert a.inbox.empty() and not a_draining.done()

        assert a.faults.heal() == ["b"]
        # What arrives next on every end is the close: nothing crossed the cut.
        async with asyncio.timeout(GUARD):
            assert await a_draining is None
        assert await closed_by_peer(b_to_a)
        await wait_until(lambda: a.ended == 1 and b.ended == 1)
        assert a.inbox.empty() and b.inbox.empty()
        assert a.faults.status()["closed_on_heal"] == 2
        with pytest.raises(ConnectionResetError, match="heal"):
            await a_to_b.send(HeartbeatRequest("a", -1))
    finally:
        a_draining.cancel()
        await asyncio.gather(a_draining, return_exceptions=True)


async def test_after_the_heal_new_connections_work(world: World) -> None:
    a, b = await world.start("a"), await world.start("b")
    old, _ = await world.link(b, a)
    a.faults.cut(["b"])
    assert a.faults.heal(["b"]) == ["b"]
    assert await closed_by_peer(old)
    conn, served = await world.link(b, a)  # b reconnects and says hello again
    await served.send(Subscribe("s", "a", 0, 0))
    async with asyncio.timeout(GUARD):
        assert await conn.receive() == Subscribe("s", "a", 0, 0)
    again = await world.connect(a, b)
    await again.send(Ack("s", "a", 1))
    async with asyncio.timeout(GUARD):
        assert await b.inbox.get() == Ack("s", "a", 1)


async def test_connect_to_a_cut_peer_times_out(world: World) -> None:
    a, b = await world.start("a", connect_timeout=0.2), await world.start("b")
    a.faults.cut(["b"])
    with pytest.raises(TimeoutError, match="a and b are cut by fault injection") as caught:
        await a.transport.connect(world.host, b.port)
    assert isinstance(caught.value, OSError)
    assert "connect to b at" in str(caught.value)
    assert not b.accepted  # nothing reached b


async def test_connect_to_a_cut_peer_goes_on_when_healed(world: World) -> None:
    a, b = await world.start("a", connect_timeout=10 * GUARD), await world.start("b")
    a.faults.cut(["b"])
    pending = asyncio.create_task(a.transport.connect(world.host, b.port))
    try:
        for _ in range(5):
            await asyncio.sleep(0)
        assert not pending.done() and not b.accepted
        a.faults.heal(["b"])
        async with asyncio.timeout(GUARD):  # far less than connect_timeout: heal woke it
            conn = await pending
        world.opened.append(conn)
        await conn.send(HeartbeatRequest("a", 1))
        async with asyncio.timeout(GUARD):
            assert await b.inbox.get() == HeartbeatRequest("a", 1)
    finally:
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)


async def test_an_uncut_peer_is_untouched(world: World) -> None:
    a, b, c = await world.start("a"), await world.start("b"), await world.start("c")
    await world.link(b, a)
    c_to_a, a_served = await world.link(c, a)
    a_to_c, _ = await world.link(a, c)
    a.faults.cut(["b"])
    assert not a.faults.blocks("c")
    await c_to_a.send(Ack("s", "c", 1))
    await a_served.send(Ack("s", "a", 1))
    async with asyncio.timeout(GUARD):
        assert await a.inbox.get() == Ack("s", "c", 1)
        assert await c_to_a.receive() == Ack("s", "a", 1)
    assert a.faults.heal() == ["b"]
    await wait_until(lambda: a.ended == 1)  # b's connection, only
    assert a.faults.status()["closed_on_heal"] == 1
    await c_to_a.send(Ack("s", "c", 2))
    await a_to_c.send(Ack("s", "a", 2))
    async with asyncio.timeout(GUARD):
        assert await a.inbox.get() == Ack("s", "c", 2)
        assert await c.inbox.get() == Ack("s", "a", 2)
    assert a.ended == 1 and c.ended == 0


async def test_status_counts(world: World) -> None:
    a, b = await world.start("a"), await world.start("b")
    conn, served = await world.link(b, a)
    a.faults.cut(["b"])
    for i in range(5):
        await conn.send(Ack("s", "b", i))
    for i in range(3):
        await served.send(Ack("s", "a", i))
    await wait_until(lambda: a.faults.status()["dropped_in"] == 5)
    assert a.faults.status() == {
        "cut": ["b"],
        "dropped_in": 5,
        "dropped_out": 3,
        "closed_on_heal": 0,
    }
    a.faults.heal()
    assert await closed_by_peer(conn)
    assert a.faults.status() == {"cut": [], "dropped_in": 5, "dropped_out": 3, "closed_on_heal": 1}
    assert b.faults.status() == {"cut": [], "dropped_in": 0, "dropped_out": 0, "closed_on_heal": 0}


# ---------------------------------------------------------------------------- bookkeeping
def test_bad_names_raise_node_error() -> None:
    faults = Faults("a", log=LOG)
    with pytest.raises(NodeError, match=r"cannot cut process 'a' from itself"):
        faults.cut(["b", "a"])
    with pytest.raises(NodeError, match=r"must be a str, got 3 \(int\)"):
        faults.cut(["b", 3])  # type: ignore[list-item]
    with pytest.raises(NodeError, match=r"expected a list of names, got the string 'bc'"):
        faults.cut("bc")
    with pytest.raises(NodeError, match=r"cannot heal 'a': a process name must be a str, got None"):
        faults.heal([None])  # type: ignore[list-item]
    assert faults.cut_peers == []  # a refused call changes nothing


def test_cut_and_heal_are_idempotent_and_sorted() -> None:
    faults = Faults("a", log=LOG)
    faults.cut(["c", "b", "b"])
    faults.cut(["b"])
    assert faults.cut_peers == ["b", "c"]
    assert faults.blocks("b") and not faults.blocks("a") and not faults.blocks(None)
    assert faults.heal(["b", "x"]) == ["b"]
    assert faults.heal(["b"]) == []
    faults.cut(["d"])
    assert faults.heal() == ["c", "d"]
    assert faults.heal() == [] and faults.cut_peers == []


class Scripted:
    """A connection that hands out what is ``put`` in it, then ``None`` once closed."""

    def __init__(self, script: list[Message]) -> None:
        self.queue: asyncio.Queue[Message] = asyncio.Queue()
        for message in script:
            self.queue.put_nowait(message)
        self.sent: list[Message] = []
        self.closed = False

    @property
    def peer(self) -> str:
        return "scripted:1"

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    async def receive(self) -> Message | None:
        if self.closed and self.queue.empty():
            return None
        return await self.queue.get()

    async def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(
    ("first", "name"),
    [
        (Subscribe("s", "b", 0, 0), "b"),
        (Unsubscribe("s", "b"), "b"),
        (Ack("s", "b", 1), "b"),
        (HeartbeatRequest("b", 1), "b"),
        (ReconcileRequest("b", "n1", 1, 0), "b"),
        (Batch("s", ()), None),
        (HeartbeatResponse("b", 1, ConsistencyState.STABLE, {}), None),
        (ReconcileGrant("b", 1), None),
    ],
)
async def test_the_accepting_end_learns_the_name_from_the_first_message(
    first: Message, name: str | None
) -> None:
    faults = Faults("a", log=LOG)
    conn = faults.wrap(Scripted([first, HeartbeatRequest("z", 2)]))
    assert await conn.receive() == first
    assert conn.peer_name == name
    await conn.receive()
    assert conn.peer_name == (name or "z")  # the first message that names it, then fixed
    await conn.close()


async def test_a_severed_connection_delivers_nothing_more() -> None:
    faults = Faults("a", log=LOG)
    inner = Scripted([Ack("s", "b", 1), Ack("s", "b", 2)])
    conn = faults.wrap(inner, "b")
    assert await conn.receive() == Ack("s", "b", 1)
    faults.cut(["b"])
    faults.heal()
    assert await conn.receive() is None  # Ack 2 follows a possible gap
    with pytest.raises(ConnectionResetError, match="closed on heal"):
        await conn.send(Ack("s", "a", 1))
    await conn.close()
    assert inner.closed and not inner.sent


async def test_a_receive_pending_at_the_heal_delivers_nothing_more() -> None:
    faults = Faults("a", log=LOG)
    inner = Scripted([])
    conn = faults.wrap(inner, "b")
    pending = asyncio.create_task(conn.receive())
    await asyncio.sleep(0)  # now waiting inside the inner receive
    faults.cut(["b"])
    faults.heal()
    inner.queue.put_nowait(Ack("s", "b", 9))  # arrived after the gap
    async with asyncio.timeout(GUARD):
        assert await pending is None
    await conn.close()
    assert inner.closed


async def test_the_registry_holds_open_connections_only() -> None:
    faults = Faults("a", log=LOG)
    closed = faults.wrap(Scripted([]), "b")
    dropped = faults.wrap(Scripted([]), "b")
    kept = faults.wrap(Scripted([]), "c")
    await closed.close()
    del dropped
    gc.collect()
    assert list(faults._conns) == [kept]
    await kept.close()
    assert not list(faults._conns)
