"""Link shaping (node/faults/shaping.py, through node.faults.rules) over TCP on loopback and over the
memory transport: a delay is latency each way (not a pause per message), close lets
delayed sends leave and ends a pending receive, bandwidth paces each way and its
back-pressure reaches the remote sender, a slow reader backs up the sender, and a heal
removes shapes without closing anything for them.

The processes and the network come from tests/node/faults/fault_world.py. Every wait for an
outcome waits on a condition; the only timings asserted are lower bounds the shapes imply
(and one generous upper bound: a delay is latency, not a per-message pause)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from node.faults.shaping import frame_size
from protocol.messages import Ack, Batch
from tests.node.faults.fault_world import CLEAN, World
from tests.node.net.test_transport import (
    GUARD,
    LEAK_FREE,
    big_batch,
    wait_until,
)

pytestmark = LEAK_FREE



# ---------------------------------------------------------------------------- shapes
async def test_a_delay_is_latency_each_way_not_a_pause_per_message(world: World) -> None:
    delay, n = 0.1, 40
    a, b = await world.start("a"), await world.start("b")
    b_to_a, a_served = await world.link(b, a)
    a.faults.shape(["b"], delay=delay)
    loop = asyncio.get_running_loop()
    # From the peer: handed over no earlier than `delay` after it was sent, in order.
    start = loop.time()
    sent = []
    for i in range(n):
        sent.append(loop.time())
        await b_to_a.send(Ack("s", "b", i))
    got = []
    async with asyncio.timeout(GUARD):
        for _ in range(n):
            got.append(await a.inbox.get())
    assert got == [Ack("s", "b", i) for i in range(n)]
    assert all(t - s >= delay for s, t in zip(sent, a.times[-n:], strict=True))
    assert a.times[-1] - start < n * delay / 4  # latency, not a pause per message
    # To the peer: leaves no earlier than `delay` after send, in order; send returns early.
    start = loop.time()
    sent, arrived = [], []
    for i in range(n):
        sent.append(loop.time())
        await a_served.send(Ack("s", "a", i))
    async with asyncio.timeout(GUARD):
        for i in range(n):
            assert await b_to_a.receive() == Ack("s", "a", i)
            arrived.append(loop.time())
    assert all(t - s >= delay for s, t in zip(sent, arrived, strict=True))
    assert arrived[-1] - start < n * delay / 4
    # A round trip crosses the delay twice.
    start = loop.time()
    await b_to_a.send(Ack("s", "b", -1))
    async with asyncio.timeout(GUARD):
        assert await a.inbox.get() == Ack("s", "b", -1)
    await a_served.send(Ack("s", "a", -1))
    async with asyncio.timeout(GUARD):
        assert await b_to_a.receive() == Ack("s", "a", -1)
    assert loop.time() - start >= 2 * delay


async def test_close_lets_delayed_sends_leave(world: World) -> None:
    a, b = await world.start("a"), await world.start("b")
    a_to_b, _ = await world.link(a, b)
    a.faults.shape(["b"], delay=0.05)
    for i in range(5):
        await a_to_b.send(Ack("s", "a", i))
    await a_to_b.close()  # as TCP flushes on close: what was sent arrives, then the end
    async with asyncio.timeout(GUARD):
        assert [await b.inbox.get() for _ in range(5)] == [Ack("s", "a", i) for i in range(5)]
    await wait_until(lambda: b.ended == 1)


@pytest.mark.parametrize("healed", [False, True])
async def test_close_ends_a_receive_pending_on_a_delayed_connection(
    world: World, healed: bool
) -> None:
    # An input link ends a session by closing the connection while its receive loop waits
    # (node/streams/link.py): that receive must end, also once the reader pump outlived its delay.
    a, b = await world.start("a"), await world.start("b")
    a_to_b, b_served = await world.link(a, b)
    a.faults.shape(["b"], delay=0.01)
    await b_served.send(Ack("s", "b", 1))
    async with asyncio.timeout(GUARD):
        assert await a_to_b.receive() == Ack("s", "b", 1)  # the read-ahead pump runs now
    if healed:
        a.faults.heal(["b"])
    pending = asyncio.create_task(a_to_b.receive())
    await asyncio.sleep(0.02)  # it waits for the pump
    assert not pending.done()
    await a_to_b.close()
    async with asyncio.timeout(GUARD):
        assert await pending is None  # this end closed: nothing more
    assert await a_to_b.receive() is None


def sized(i: int) -> Batch:
    return big_batch(i, n=4, width=200)


async def test_bandwidth_paces_each_way(world: World) -> None:
    n, seconds = 30, 0.3
    size = frame_size(sized(0))
    rate = n * size / seconds  # bytes/s: n messages take `seconds`
    a, b = await world.start("a"), await world.start("b")
    b_to_a, a_served = await world.link(b, a)
    a.faults.shape(["b"], bandwidth=rate)
    loop = asyncio.get_running_loop()
    # To the peer: a's own sends wait for their turn.
    start = loop.time()
    for i in range(n):
        await a_served.send(sized(i))
    assert loop.time() - start >= 0.8 * (n - 1) * size / rate
    async with asyncio.timeout(GUARD):
        for i in range(n):
            assert await b_to_a.receive() == sized(i)
    # From the peer: a reads no faster than the bandwidth.
    for i in range(n):
        await b_to_a.send(sized(i))
    async with asyncio.timeout(GUARD):
        assert [await a.inbox.get() for _ in range(n)] == [sized(i) for i in range(n)]
    assert a.times[-1] - a.times[-n] >= 0.8 * (n - 2) * size / rate


async def test_bandwidth_back_pressure_reaches_the_remote_sender() -> None:
    queue, n, seconds = 2, 30, 0.3
    size = frame_size(sized(0))
    rate = n * size / seconds
    async with World("memory", queue_size=queue) as world:
        a, b = await world.start("a"), await world.start("b")
        b_to_a, _ = await world.link(b, a)
        a.faults.shape(["b"], bandwidth=rate)
        loop = asyncio.get_running_loop()
        start = loop.time()
        for i in range(n):
            await b_to_a.send(sized(i))  # b has no shape: only a's reading holds it back
        # The last send found room: a had read all but `queue` of them, one per size/rate.
        assert loop.time() - start >= 0.8 * (n - queue - 1) * size / rate
        async with asyncio.timeout(GUARD):
            assert [await a.inbox.get() for _ in range(n)] == [sized(i) for i in range(n)]


async def test_a_slow_reader_backs_up_the_sender() -> None:
    queue, n, slow = 4, 12, 0.05
    async with World("memory", queue_size=queue) as world:
        a, b = await world.start("a"), await world.start("b")
        b_to_a, _ = await world.link(b, a)
        a.faults.shape(["b"], slow=slow)
        loop = asyncio.get_running_loop()
        start = loop.time()
        for i in range(n):
            await b_to_a.send(Ack("s", "b", i))
            # Back-pressure: b's sends are never more than the queue, plus one in a's
            # hands, ahead of what a handed over (a.times counts the hello too).
            assert i + 1 <= queue + 1 + (len(a.times) - 1)
        assert loop.time() - start >= 0.8 * (n - queue - 1) * slow
        async with asyncio.timeout(GUARD):
            assert [await a.inbox.get() for _ in range(n)] == [Ack("s", "b", i) for i in range(n)]
        gaps = [t1 - t0 for t0, t1 in itertools.pairwise(a.times[-n:])]
        assert sum(gaps) >= 0.8 * (n - 1) * slow  # one read per `slow` at most


async def test_a_heal_removes_shapes_and_closes_nothing_for_them(world: World) -> None:
    a, b = await world.start("a"), await world.start("b")
    b_to_a, a_served = await world.link(b, a)
    a.faults.shape(["b"], delay=0.01, bandwidth=1e6, slow=0.001)
    await b_to_a.send(Ack("s", "b", 1))
    await a_served.send(Ack("s", "a", 1))
    async with asyncio.timeout(GUARD):
        assert await a.inbox.get() == Ack("s", "b", 1)
        assert await b_to_a.receive() == Ack("s", "a", 1)
    assert a.faults.heal(["b"]) == ["b"]
    assert a.faults.status() == CLEAN  # no shape, nothing closed
    assert a.faults.shape_of("b") is None
    await b_to_a.send(Ack("s", "b", 2))  # the same connection goes on
    await a_served.send(Ack("s", "a", 2))
    async with asyncio.timeout(GUARD):
        assert await a.inbox.get() == Ack("s", "b", 2)
        assert await b_to_a.receive() == Ack("s", "a", 2)
    assert a.ended == 0
