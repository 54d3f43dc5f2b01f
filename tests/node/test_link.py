"""The input link against real publishers, over every transport: resume ids, reconnects
without duplicates or losses, UNDO forwarding and the three replay cases, level-1 acks,
failover between producers, switching, and misbehaving producers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from node.errors import NodeError
from node.link import InputLink
from node.transport import Connection
from protocol.messages import Batch, HeartbeatRequest
from protocol.tuples import Kind, Tuple, boundary, rec_done, undo
from tests.node.test_publisher import (
    LOG,
    Producer,
    S,
    T,
    make_link,
    running,
    stable,
)
from tests.node.test_transport import (
    GUARD,
    Net,
    assert_nothing_leaked,
    make_net,
    open_fds,
    wait_until,
)

pytestmark = pytest.mark.filterwarnings(
    "error::ResourceWarning", "error::pytest.PytestUnraisableExceptionWarning"
)


@pytest.fixture(autouse=True)
async def _no_leaks() -> AsyncIterator[None]:
    before = open_fds()
    yield
    await assert_nothing_leaked(before)


@pytest.fixture(params=["tcp", "memory", "memory-codec"])
def net(request: pytest.FixtureRequest) -> Net:
    return make_net(request.param)


def ids_of(tuples: list[Tuple]) -> list[int]:
    return [t.id for t in tuples if t.kind in (Kind.STABLE, Kind.TENTATIVE)]


# ---------------------------------------------------------------------------- resume ids
async def test_resume_ids_follow_stable_tentative_and_undo() -> None:
    net = make_net("memory")
    steps: asyncio.Queue[tuple[Tuple, ...]] = asyncio.Queue()

    async def feed(conn: Connection) -> None:
        await conn.receive()  # the Subscribe
        while True:
            await conn.send(Batch("s", await steps.get()))

    server = await net.transport("up").serve(net.host, 0, feed)
    link, _ = make_link(net, [(net.host, server.port)])

    async def after(*tuples: Tuple) -> tuple[int, int]:
        n = link.batches_in
        await steps.put(tuples)
        await wait_until(lambda: link.batches_in > n)
        return link.last_stable_id, link.last_tentative_id

    async with running(link.run()):
        assert await after(S(1), S(2), boundary(20)) == (2, 0)
        assert await after(T(3), T(4)) == (2, 4)
        assert await after(undo(3)) == (2, 3)  # the tentative run now ends at 3
        assert await after(T(4), undo(2), S(3), S(4), rec_done()) == (4, 2)  # none held
        assert await after(T(5), undo(4), T(5), T(6)) == (4, 6)
        assert await after(undo(4)) == (4, 4)  # no tentative left: t meets s
        assert await after(boundary(99)) == (4, 4)
    await server.close()


# ---------------------------------------------------------------------------- reconnects
async def test_reconnects_resume_without_duplicates_or_losses(net: Net) -> None:
    prod = await Producer(net, max_batch=7).start()
    link, sink = make_link(net, [prod.address])
    async with running(link.run()):
        for round_ in range(5):
            first = round_ * 40 + 1
            await prod.publish(stable(first, first + 19))
            await wait_until(lambda: link.last_stable_id > first)  # noqa: B023
            for conn in list(prod.conns):
                await conn.close()  # the publisher drops the link, mid-stream maybe
            await prod.publish(stable(first + 20, first + 39))  # while it may be away
        await wait_until(lambda: link.last_stable_id == 200)
    assert sink.ids() == list(range(1, 201))
    assert [t.id for t in sink.raw] == list(range(1, 201))  # not even a repeat to undo
    assert link.reconnects >= 5
    await prod.stop()


async def test_undo_and_rec_done_are_forwarded_live(net: Net) -> None:
    prod = await Producer(net).start()
    link, sink = make_link(net, [prod.address])
    async with running(link.run()):
        await prod.publish([S(1), S(2), T(3), T(4)])
        await wait_until(lambda: link.last_tentative_id == 4)
        assert link.last_stable_id == 2
        await prod.publish([undo(2), S(3), S(4), S(5), rec_done(50)])
        await wait_until(lambda: link.last_stable_id == 5)
    assert sink.in_force() == [*stable(1, 5), rec_done(50)]
    assert undo(2) in sink.raw and link.last_tentative_id <= link.last_stable_id
    await prod.stop()


async def test_resubscribing_with_corrected_tentatives_gets_the_undo_first(net: Net) -> None:
    # Replay case 3: the producer corrected what the link holds while it was away.
    prod = await Producer(net).start()
    link, sink = make_link(net, [prod.address])
    async with running(link.run()):
        await prod.publish([S(1), S(2), T(3), T(4)])
        await wait_until(lambda: link.last_tentative_id == 4)
        await prod.stop()
        await prod.publish([undo(2), S(3), S(4), rec_done(40)])
        await prod.start()
        await wait_until(lambda: link.last_stable_id == 4)
    again = [t for n, b in sink.batches if n == 2 for t in b]
    assert again[0] == undo(2) and ids_of(again) == [3, 4]
    assert sink.in_force() == [*stable(1, 4), rec_done(40)]
    await prod.stop()


async def test_resubscribing_within_a_tentative_run_continues_it(net: Net) -> None:
    # Replay case 2: the producer still holds the link's tentative run and extended it.
    prod = await Producer(net).start()
    link, sink = make_link(net, [prod.address])
    async with running(link.run()):
        await prod.publish([S(1), S(2), T(3), T(4)])
        await wait_until(lambda: link.last_tentative_id == 4)
        await prod.stop()
        await prod.publish([T(5), T(6)])
        await prod.start()
        await wait_until(lambda: link.last_tentative_id == 6)
    again = [t for n, b in sink.batches if n == 2 for t in b]
    assert again == [T(5), T(6)]
    assert sink.in_force() == [S(1), S(2), T(3), T(4), T(5), T(6)]
    await prod.stop()


# ---------------------------------------------------------------------------- acks
async def test_acks_trim_the_buffer_only_up_to_what_was_processed(net: Net) -> None:
    prod = await Producer(net).start()
    buffer = prod.buffers["s"]
    buffer.set_consumers(["c1"])
    gate = asyncio.Event()
    gate.set()
    link, sink = make_link(net, [prod.address], gate=gate)
    async with running(link.run()):
        await prod.publish(stable(1, 50))
        await wait_until(lambda: buffer.trimmed_up_to == 50)
        gate.clear()
        await prod.publish([*stable(51, 60), T(61)])
        async with asyncio.timeout(GUARD):
            await sink.holding.wait()
        assert link.last_stable_id == 50 and buffer.trimmed_up_to == 50  # received, not processed
        gate.set()
        await wait_until(lambda: buffer.trimmed_up_to == 60)
        assert link.last_tentative_id == 61 and buffer.last_id == 61  # tentatives stay
    await prod.stop()


# ---------------------------------------------------------------------------- producers
async def test_the_link_fails_over_to_the_second_producer_when_the_first_is_down(net: Net) -> None:
    up = await Producer(net, name="up").start()
    down = await Producer(net, name="down").start()
    await down.stop()  # its address now refuses connections
    await up.publish(stable(1, 30))
    link, sink = make_link(net, [down.address, up.address])
    async with running(link.run()):
        await wait_until(lambda: link.last_stable_id == 30)
        assert link.producer == f"{net.host}:{up.port}" and link.failures >= 1
    assert sink.ids() == list(range(1, 31))
    await up.stop()


async def test_losing_a_replica_switches_to_the_other_without_duplicates(net: Net) -> None:
    a, b = await Producer(net, name="a").start(), await Producer(net, name="b").start()
    link, sink = make_link(net, [a.address, b.address])
    async with running(link.run()):
        for p in (a, b):
            await p.publish(stable(1, 50))
        await wait_until(lambda: link.last_stable_id == 50)
        assert link.producer == f"{net.host}:{a.port}"
        await a.stop()
        for p in (a, b):
            await p.publish(stable(51, 100))
        await wait_until(lambda: link.last_stable_id == 100)
        assert link.producer == f"{net.host}:{b.port}"
    assert [t.id for t in sink.raw] == list(range(1, 101))
    await b.stop()


async def test_switch_to_moves_the_subscription_and_resumes(net: Net) -> None:
    a, b = await Producer(net, name="a").start(), await Producer(net, name="b").start()
    link, sink = make_link(net, [a.address, b.address])
    with pytest.raises(NodeError):
        link.switch_to(("elsewhere", 1))
    async with running(link.run()):
        for p in (a, b):
            await p.publish(stable(1, 20))
        await wait_until(lambda: link.last_stable_id == 20)
        link.switch_to(b.address)
        await wait_until(lambda: link.producer == f"{net.host}:{b.port}")
        for p in (a, b):
            await p.publish(stable(21, 40))
        await wait_until(lambda: link.last_stable_id == 40)
        await wait_until(lambda: not a.subscribers())  # it left a
        assert link.connects == 2 and link.failures == 0
    assert [t.id for t in sink.raw] == list(range(1, 41))
    for p in (a, b):
        await p.stop()


async def test_a_misbehaving_producer_is_logged_and_left(
    net: Net, caplog: pytest.LogCaptureFixture
) -> None:
    async def liar(conn: Connection) -> None:
        await conn.receive()  # the Subscribe
        await conn.send(HeartbeatRequest("liar", 1))
        await conn.send(Batch("s", (S(1),)))  # never processed: the link left
        await conn.receive()

    liar_server = await net.transport("liar").serve(net.host, 0, liar)
    good = await Producer(net).start()
    await good.publish(stable(1, 10))
    link, sink = make_link(net, [(net.host, liar_server.port), good.address])
    async with running(link.run()):
        await wait_until(lambda: link.last_stable_id == 10)
    assert sink.ids() == list(range(1, 11))
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(
        f"{net.host}:{liar_server.port} sent an unexpected HeartbeatRequest" in e for e in errors
    ), errors
    await liar_server.close()
    await good.stop()


async def test_an_on_batch_failure_ends_run(net: Net) -> None:
    prod = await Producer(net).start()
    await prod.publish(stable(1, 3))

    async def broken(stream: str, tuples: object) -> None:
        raise RuntimeError("downstream bug")

    link = InputLink(net.transport("c"), "s", "c", [prod.address], broken, log=LOG)
    with pytest.raises(BaseExceptionGroup) as info:
        async with asyncio.timeout(GUARD):
            await link.run()
    assert info.group_contains(RuntimeError, match="downstream bug")
    assert not link.connected and link.last_stable_id == 0
    await wait_until(lambda: not prod.subscribers())
    await prod.stop()


def test_a_link_needs_a_producer() -> None:
    with pytest.raises(NodeError, match="no producer"):
        make_link(make_net("memory"), [])
