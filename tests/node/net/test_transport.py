"""The transport contract, passed by both implementations (TCP on loopback, memory with and
without the codec), then the memory transport's fault controls."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from node.net.memory import MemoryTransport
from node.net.tcp import TcpTransport
from node.net.transport import Connection, Handler, Server, Transport
from protocol.codec import encode
from protocol.errors import LocalProtocolError, RemoteProtocolError
from protocol.messages import (
    MESSAGE_TYPES,
    Ack,
    Batch,
    Challenge,
    ConsistencyState,
    HeartbeatRequest,
    HeartbeatResponse,
    Hello,
    Message,
    Proof,
    ReconcileGrant,
    ReconcileRefuse,
    ReconcileRequest,
    StandbyAck,
    StandbyCheckpoint,
    Subscribe,
    Unsubscribe,
)
from protocol.tuples import Kind, boundary, make_tuple, rec_done, tentative_boundary, undo

# An unclosed socket or transport warns when collected: make that a failure.
#: The marks of a test module whose every test must leave no task running and no socket
#: open behind it (the ``no_leaks`` fixture, tests/node/conftest.py), and whose unclosed
#: resources are errors.
LEAK_FREE = [
    pytest.mark.filterwarnings(
        "error::ResourceWarning", "error::pytest.PytestUnraisableExceptionWarning"
    ),
    pytest.mark.usefixtures("no_leaks"),
]
pytestmark = LEAK_FREE

GUARD = 10.0  # seconds: only ever a bound on a wait for a condition, never asserted on


async def wait_until(cond: Callable[[], bool]) -> None:
    """Poll ``cond`` until it holds; fail after ``GUARD`` seconds."""
    async with asyncio.timeout(GUARD):
        # A poll on purpose: ``cond`` reads state of the objects under test (ids, counters,
        # subscribers) that no Event announces, and the tests must not add one to them.
        while not cond():  # noqa: ASYNC110
            await asyncio.sleep(0.002)


async def wait_stalled(progress: Callable[[], int], quiet: float = 0.2) -> None:
    """Wait until ``progress()`` stops changing for ``quiet`` seconds (a blocked task)."""
    async with asyncio.timeout(GUARD):
        last = progress()
        while True:
            await asyncio.sleep(quiet)
            now = progress()
            if now == last:
                return
            last = now


def open_fds() -> int:
    """Open file descriptors of this process (sockets included); -1 where unknown. Garbage
    is collected first, so that a socket an earlier test dropped is not counted."""
    gc.collect()
    fds = Path("/proc/self/fd")
    return len(list(fds.iterdir())) if fds.is_dir() else -1


async def assert_nothing_leaked(fds_before: int) -> None:
    """No task of the test still runs and no socket it opened is still open."""
    for _ in range(5):
        await asyncio.sleep(0)  # let closed transports finish closing their sockets
    me = asyncio.current_task()
    left = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    assert not left, f"tasks left running: {left}"
    # Fewer is no leak: a descriptor open before the test (not the test's) may have closed.
    assert open_fds() <= fds_before, "file descriptors (sockets) left open"



@dataclass
class Net:
    """One kind of network: ``transport(name)`` is what process ``name`` uses."""

    kind: str
    host: str
    memory: MemoryTransport | None = None

    def transport(self, name: str | None = None) -> Transport:
        if self.memory is None:
            return TcpTransport(max_frame_size=MAX_FRAME)
        return self.memory if name is None else self.memory.for_process(name)


MAX_FRAME = 1 << 20


def make_net(kind: str, queue_size: int = 64) -> Net:
    if kind == "tcp":
        return Net(kind, "127.0.0.1")
    codec = kind == "memory-codec"
    return Net(
        kind, "mem", MemoryTransport(queue_size=queue_size, codec=codec, max_frame_size=MAX_FRAME)
    )


@pytest.fixture(params=["tcp", "memory", "memory-codec"])
def net(request: pytest.FixtureRequest) -> Net:
    return make_net(request.param)


async def serve(net: Net, handler: Handler, name: str | None = None) -> Server:
    server = await net.transport(name).serve(net.host, 0, handler)
    assert server.port != 0 and server.host
    return server


def big_batch(i: int, n: int = 10, width: int = 10) -> Batch:
    return Batch(
        f"s{i}", tuple(make_tuple(Kind.STABLE, j + 1, j, j, ("x" * width, i)) for j in range(n))
    )


SAMPLES: list[Message] = [
    Batch(
        "s1",
        (
            make_tuple(Kind.STABLE, 1, 10, 10, ("a", 1, 2.5, True, None)),
            make_tuple(Kind.TENTATIVE, 2, 20, 20, ("é", -3, None, False, 0.5)),
            undo(1),
            boundary(30),
            tentative_boundary(31),
            rec_done(40),
            make_tuple(Kind.UNDO_START, 0, 0, 0, ()),
            make_tuple(Kind.UP_FAILURE, 0, 50, 50, ()),
            make_tuple(Kind.REC_REQUEST, 0, 60, 60, ()),
        ),
    ),
    Batch("empty", ()),
    Subscribe("s1", "n2a", 17, 19),
    Unsubscribe("s1", "n2a"),
    HeartbeatRequest("n2a", 7),
    HeartbeatResponse(
        "n1a",
        7,
        ConsistencyState.UP_FAILURE,
        {"n1.out": ConsistencyState.STABILIZATION, "n1.x": ConsistencyState.STABLE},
        {"n1.out": 1_700_000_002_500_000, "n1.x": 0},
    ),
    Ack("s1", "n2a", 12),
    ReconcileRequest("n1a", "n1", 3, 0),
    ReconcileGrant("n1b", 3),
    ReconcileRefuse("n1b", 3, "reconciling myself"),
    Hello("n2a", "0f" * 16),
    Challenge("n1a", "a1" * 16, "5e" * 32),
    Proof("77" * 32),
    StandbyCheckpoint("n1a", 2, 1, {"agg": {"panes": [[0, "k", 3]]}}, {"s1": (12, 12)},
                      {"n1.out": (make_tuple(Kind.STABLE, 5, 50, 50, ("k", 3)),)},
                      {"u": [[0, 17], [3, [1, 2]]]}),
    StandbyAck("n1b", 2, False),
]


async def echo(conn: Connection) -> None:
    while (msg := await conn.receive()) is not None:
        await conn.send(msg)


# ---------------------------------------------------------------------------- contract
def test_samples_cover_every_message_type() -> None:
    assert {type(m) for m in SAMPLES} == set(MESSAGE_TYPES)


async def test_round_trip_of_every_message_type(net: Net) -> None:
    server = await serve(net, echo)
    conn = await net.transport("client").connect(net.host, server.port)
    try:
        assert conn.peer == f"{net.host}:{server.port}"
        for msg in SAMPLES:
            await conn.send(msg)
            async with asyncio.timeout(GUARD):
                assert await conn.receive() == msg
    finally:
        await conn.close()
        await server.close()


async def test_tcp_counts_the_bytes_each_message_type_puts_on_the_wire() -> None:
    """node/net/traffic.py: the frames' lengths, sent per type, and every byte read (here
    both ends are this process: an echo reads what was sent, and sends it back)."""
    from node.net.traffic import TRAFFIC
    from protocol.codec import encode

    net = make_net("tcp")
    server = await serve(net, echo)
    conn = await net.transport("client").connect(net.host, server.port)
    sent, received = TRAFFIC.sent["Ack"], TRAFFIC.received
    try:
        msg = Ack("s1", "n2a", 12)
        await conn.send(msg)
        async with asyncio.timeout(GUARD):
            assert await conn.receive() == msg
    finally:
        await conn.close()
        await server.close()
    assert TRAFFIC.sent["Ack"] - sent == 2 * len(encode(msg))  # there and back
    assert TRAFFIC.received - received == 2 * len(encode(msg))


async def test_many_messages_arrive_whole_and_in_order(net: Net) -> None:
    got: list[Message] = []
    done = asyncio.Event()

    async def collect(conn: Connection) -> None:
        while (msg := await conn.receive()) is not None:
            got.append(msg)
        done.set()

    server = await serve(net, collect)
    conn = await net.transport("client").connect(net.host, server.port)
    sent = [big_batch(i, n=i % 7) if i % 3 else HeartbeatRequest("c", i) for i in range(3000)]
    for msg in sent:
        await conn.send(msg)
    await conn.close()
    async with asyncio.timeout(GUARD):
        await done.wait()
    assert got == sent
    await server.close()


async def test_clean_close_gives_none_both_ways(net: Net) -> None:
    served_none = asyncio.Event()

    async def speak_then_listen(conn: Connection) -> None:
        for i in range(3):
            await conn.send(HeartbeatRequest("server", i))
        assert await conn.receive() == Ack("s", "c", 1)
        if await conn.receive() is None:
            served_none.set()

    server = await serve(net, speak_then_listen)
    conn = await net.transport("client").connect(net.host, server.port)
    async with asyncio.timeout(GUARD):
        assert [await conn.receive() for _ in range(3)] == [
            HeartbeatRequest("server", i) for i in range(3)
        ]
        await conn.send(Ack("s", "c", 1))
        await conn.close()
        await served_none.wait()
        assert await conn.receive() is None  # this end closed: nothing more
    with pytest.raises(ConnectionError):
        await conn.send(Ack("s", "c", 2))
    await conn.close()  # idempotent
    await server.close()


async def test_a_handler_return_closes_its_connection(net: Net) -> None:
    async def say_one(conn: Connection) -> None:
        await conn.send(HeartbeatRequest("server", 1))

    server = await serve(net, say_one)
    conn = await net.transport("client").connect(net.host, server.port)
    async with asyncio.timeout(GUARD):
        assert await conn.receive() == HeartbeatRequest("server", 1)
        assert await conn.receive() is None
    await conn.close()
    await server.close()


async def test_send_blocks_while_the_reader_does_not_read(net: Net) -> None:
    # TCP buffers megabytes (socket buffers both sides); send well beyond that.
    n, batch = (800, big_batch(0, n=64, width=1000)) if net.kind == "tcp" else (500, big_batch(0))
    start_reading = asyncio.Event()
    got = 0
    all_read = asyncio.Event()

    async def lazy(conn: Connection) -> None:
        nonlocal got
        await start_reading.wait()
        while await conn.receive() is not None:
            got += 1
        all_read.set()

    server = await serve(net, lazy)
    conn = await net.transport("client").connect(net.host, server.port)
    sent = 0

    async def send_all() -> None:
        nonlocal sent
        for _ in range(n):
            await conn.send(batch)
            sent += 1
        await conn.close()

    sender = asyncio.create_task(send_all())
    try:
        await wait_stalled(lambda: sent)
        assert not sender.done() and 0 < sent < n, (
            f"sent {sent} of {n} to a reader that reads nothing"
        )
        start_reading.set()
        async with asyncio.timeout(GUARD):
            await sender
            await all_read.wait()
        assert got == n
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        await conn.close()
        await server.close()


async def test_connect_to_nothing_is_refused(net: Net) -> None:
    server = await serve(net, echo)
    port = server.port
    await server.close()
    with pytest.raises(ConnectionRefusedError):
        await net.transport("client").connect(net.host, port)


async def test_server_close_cancels_running_handlers(net: Net) -> None:
    entered, cancelled = asyncio.Event(), asyncio.Event()

    async def forever(conn: Connection) -> None:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    server = await serve(net, forever)
    conn = await net.transport("client").connect(net.host, server.port)
    async with asyncio.timeout(GUARD):
        await entered.wait()
        await server.close()
        assert cancelled.is_set()
        assert await conn.receive() is None  # its connection was closed
    await conn.close()


async def test_a_failing_handler_is_logged_with_the_peer_and_raised_to_the_owner(
    net: Net, caplog: pytest.LogCaptureFixture
) -> None:
    """A handler's bug (not a peer's error) ends its connection, is logged with the peer
    and the traceback, and ``Server.failed`` raises it, so that the owner ends loudly; the
    other connections are served until the owner stops the server."""
    peers: list[str] = []

    async def fail_first(conn: Connection) -> None:
        peers.append(conn.peer)
        if len(peers) == 1:
            raise RuntimeError("handler bug")
        await echo(conn)

    server = await serve(net, fail_first)
    transport = net.transport("client")
    first = await transport.connect(net.host, server.port)
    async with asyncio.timeout(GUARD):
        assert await first.receive() is None
    second = await transport.connect(net.host, server.port)
    await second.send(Ack("s", "c", 3))
    async with asyncio.timeout(GUARD):
        assert await second.receive() == Ack("s", "c", 3)
    assert any(
        peers[0] in r.getMessage() and r.exc_info
        for r in caplog.records
        if r.levelno == logging.ERROR
    )
    with pytest.raises(RuntimeError, match="handler bug"):
        async with asyncio.timeout(GUARD):
            await server.failed()
    for c in (first, second):
        await c.close()
    await server.close()


async def test_a_peers_error_in_a_handler_ends_only_its_connection(net: Net) -> None:
    """What a dead or garbage-sending peer raises (OSError, RemoteProtocolError) ends that
    connection and nothing else: ``Server.failed`` does not fire."""
    errors = iter([ConnectionResetError("peer gone"), RemoteProtocolError("garbage")])

    async def peer_fails(conn: Connection) -> None:
        raise next(errors)

    server = await serve(net, peer_fails)
    transport = net.transport("client")
    watch = asyncio.ensure_future(server.failed())
    for _ in range(2):
        conn = await transport.connect(net.host, server.port)
        async with asyncio.timeout(GUARD):
            assert await conn.receive() is None
        await conn.close()
    assert not watch.done()
    watch.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watch
    await server.close()


# Only transports that encode frames: the plain memory transport passes objects.
@pytest.mark.parametrize("net", ["tcp", "memory-codec"], indirect=True)
async def test_sending_an_oversized_frame_is_a_local_error(net: Net) -> None:
    server = await serve(net, echo)
    conn = await net.transport("client").connect(net.host, server.port)
    with pytest.raises(LocalProtocolError):
        await conn.send(big_batch(1, n=10, width=MAX_FRAME))
    await conn.send(Ack("s", "c", 1))  # still usable: nothing was written
    async with asyncio.timeout(GUARD):
        assert await conn.receive() == Ack("s", "c", 1)
    await conn.close()
    await server.close()


# ---------------------------------------------------------------------------- TCP only
async def test_tcp_hands_over_messages_decoded_before_garbage() -> None:
    results: list[object] = []
    done = asyncio.Event()

    async def record(conn: Connection) -> None:
        try:
            while True:
                results.append(await conn.receive())
        except RemoteProtocolError as exc:
            results.append(exc)
            with pytest.raises(RemoteProtocolError):
                await conn.receive()  # stays failed
        done.set()

    server = await TcpTransport().serve("127.0.0.1", 0, record)
    _, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(encode(Ack("s", "c", 1)) + encode(Ack("s", "c", 2)) + b"\x00\x00\x00\x01\x01")
    async with asyncio.timeout(GUARD):
        await done.wait()
    assert results[:2] == [Ack("s", "c", 1), Ack("s", "c", 2)]
    assert isinstance(results[2], RemoteProtocolError) and "too short" in str(results[2])
    writer.close()
    await writer.wait_closed()
    await server.close()


# ---------------------------------------------------------------------------- memory controls
async def test_memory_blackhole_partition_then_heal() -> None:
    net = make_net("memory")
    assert net.memory is not None
    inbox: asyncio.Queue[Message | None] = asyncio.Queue()
    server_conns: list[Connection] = []

    async def keep(conn: Connection) -> None:
        server_conns.append(conn)
        while (msg := await conn.receive()) is not None:
            await inbox.put(msg)

    server = await serve(net, keep, name="s")
    a = await net.transport("a").connect(net.host, server.port)
    b = await net.transport("b").connect(net.host, server.port)
    async with asyncio.timeout(GUARD):
        await a.send(HeartbeatRequest("a", 1))
        assert await inbox.get() == HeartbeatRequest("a", 1)
        net.memory.partition("a", "s")
        await a.send(HeartbeatRequest("a", 2))  # vanishes, silently
        await server_conns[0].send(HeartbeatRequest("s", 2))  # the other way too
        await b.send(HeartbeatRequest("b", 2))  # b is not cut off
        assert await inbox.get() == HeartbeatRequest("b", 2)
        net.memory.heal()
        await a.send(HeartbeatRequest("a", 3))
        assert await inbox.get() == HeartbeatRequest("a", 3)
        await server_conns[0].send(HeartbeatRequest("s", 3))
        assert await a.receive() == HeartbeatRequest("s", 3)
    assert inbox.empty()
    for c in (a, b):
        await c.close()
    await server.close()


async def test_memory_blackhole_connect_waits_for_heal_or_times_out() -> None:
    net = make_net("memory")
    assert net.memory is not None
    impatient = MemoryTransport(hello_timeout=0.05)
    lonely = await impatient.serve("mem", 0, echo)
    impatient.partition("a", f"mem:{lonely.port}")
    with pytest.raises(TimeoutError):
        await impatient.for_process("a").connect("mem", lonely.port)
    await lonely.close()

    server = await serve(net, echo)
    net.memory.partition("a", f"{net.host}:{server.port}")  # by address, this time
    pending = asyncio.create_task(net.transport("a").connect(net.host, server.port))
    await asyncio.sleep(0)
    assert not pending.done()
    net.memory.heal()
    async with asyncio.timeout(GUARD):
        conn = await pending
        await conn.send(Ack("s", "a", 1))
        assert await conn.receive() == Ack("s", "a", 1)
    await conn.close()
    await server.close()


async def test_memory_reset_partition_breaks_connections_and_refuses_new_ones() -> None:
    net = make_net("memory")
    assert net.memory is not None
    errors: list[BaseException] = []

    async def wait_for_reset(conn: Connection) -> None:
        try:
            await conn.receive()
        except ConnectionResetError as exc:
            errors.append(exc)

    server = await serve(net, wait_for_reset, name="s")
    conn = await net.transport("a").connect(net.host, server.port)
    net.memory.partition("a", "s", reset=True)
    async with asyncio.timeout(GUARD):
        with pytest.raises(ConnectionResetError):
            await conn.receive()
        await wait_until(lambda: bool(errors))
    with pytest.raises(ConnectionResetError):
        await conn.send(Ack("s", "a", 1))
    with pytest.raises(ConnectionRefusedError):
        await net.transport("a").connect(net.host, server.port)
    net.memory.heal()
    again = await net.transport("a").connect(net.host, server.port)
    for c in (conn, again):
        await c.close()
    await server.close()


async def test_memory_address_in_use() -> None:
    net = make_net("memory")
    assert net.memory is not None
    server = await serve(net, echo)
    with pytest.raises(OSError):
        await net.memory.serve(net.host, server.port, echo)
    await server.close()
