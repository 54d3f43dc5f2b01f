"""The HA monitor's heartbeat connections (node/streams/monitor.py): what a dead or
garbage-sending upstream replica raises ends only that connection (the monitor connects
again); anything else raised while handling heartbeats ends the monitor's run, loudly."""

from __future__ import annotations

import asyncio
import logging

import pytest

from node.net.tcp import TcpTransport
from node.net.transport import Connection, Transport
from node.streams.monitor import UpstreamMonitor, UpstreamReplica
from protocol.messages import ConsistencyState, HeartbeatRequest, HeartbeatResponse
from tests.node.net.test_transport import GUARD, LEAK_FREE, make_net
from tests.node.streams.test_publisher import LOG, make_link

pytestmark = LEAK_FREE

STABLE = ConsistencyState.STABLE
INTERVAL = 1000  # us: a heartbeat round every millisecond


def monitor_of(transport: Transport, address: tuple[str, int]) -> UpstreamMonitor:
    """A monitor of client c1 over one link of stream ``s`` from upstream replica ``a``."""
    link, _ = make_link(make_net("memory"), [address])
    return UpstreamMonitor(
        "c1",
        transport,
        {"s": (link, [UpstreamReplica("a", *address)])},
        interval=INTERVAL,
        misses=3,
        lag=700_000,
        log=LOG,
    )


async def test_an_unexpected_error_in_heartbeat_handling_ends_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    net = make_net("memory")
    answered = asyncio.Event()

    async def replica_a(conn: Connection) -> None:
        while isinstance(msg := await conn.receive(), HeartbeatRequest):
            await conn.send(HeartbeatResponse("a", msg.seq, STABLE, {"s": STABLE}, {"s": 0}))
            answered.set()

    server = await net.transport("a").serve(net.host, 0, replica_a)
    monitor = monitor_of(net.transport("c1"), (net.host, server.port))
    tracker = monitor.tracker
    if tracker is None:
        pytest.fail("a monitor with an upstream replica has a heartbeat tracker")

    def broken(*args: object) -> bool:
        raise RuntimeError("tracker bug")

    monkeypatch.setattr(tracker, "answered", broken)
    with pytest.raises(ExceptionGroup) as info:
        async with asyncio.timeout(GUARD):
            await monitor.run()
    assert info.group_contains(RuntimeError, match="tracker bug")
    assert answered.is_set()  # it broke on an answer, not before one
    await server.close()


async def test_a_replica_that_resets_its_heartbeat_connection_is_connected_to_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    net = make_net("memory")
    connections = 0
    again = asyncio.Event()

    async def replica_a(conn: Connection) -> None:
        nonlocal connections
        connections += 1
        if connections >= 3:
            again.set()
        await conn.receive()
        conn.abort()  # type: ignore[attr-defined]  # a reset: the monitor's receive raises

    server = await net.transport("a").serve(net.host, 0, replica_a)
    monitor = monitor_of(net.transport("c1"), (net.host, server.port))
    with caplog.at_level(logging.INFO, logger=LOG.name):
        run = asyncio.create_task(monitor.run())
        async with asyncio.timeout(GUARD):
            await again.wait()
        assert not run.done()
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
    assert "heartbeat connection to a ended: ConnectionResetError" in caplog.text
    await server.close()


async def test_a_replica_that_sends_garbage_is_connected_to_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    connections = 0
    again = asyncio.Event()

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        if connections >= 2:
            again.set()
        writer.write(b"\x00\x00\x00\x02\xff\xff")  # a frame of an unknown version
        await reader.read()  # until the monitor closes its end
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(garbage, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    monitor = monitor_of(TcpTransport(), ("127.0.0.1", port))
    with caplog.at_level(logging.INFO, logger=LOG.name):
        run = asyncio.create_task(monitor.run())
        async with asyncio.timeout(GUARD):
            await again.wait()
        assert not run.done()
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
    assert "upstream a sent bad data on the heartbeat connection" in caplog.text
    server.close()
    await server.wait_closed()
