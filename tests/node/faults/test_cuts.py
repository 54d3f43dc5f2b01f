"""Cuts (node.faults.rules) over TCP on loopback and over the memory transport.

Blackhole cuts silence one or both directions without blocking anyone, connects to a cut
peer time out or wait for the heal, a heal closes the connections that may have lost
messages and only those; directed cuts drop one direction and leave the other and new
connections alone; reset cuts tear connections down at once and refuse connects until
healed. The processes and the network come from tests/node/faults/fault_world.py; the rules
without a network are in test_rules.py, shapes in test_shaping.py.

Every wait for an outcome waits on a condition; the only timings asserted are guards: a heal
wakes a pending connect and a reset refuses one far sooner than the connect timeout."""

from __future__ import annotations

import asyncio

import pytest

from protocol.messages import Ack, HeartbeatRequest, Message, Subscribe
from tests.node.faults.fault_world import CLEAN, FLOOD, World, closed_by_peer, flood
from tests.node.net.test_transport import (
    GUARD,
    LEAK_FREE,
    big_batch,
    wait_until,
)

pytestmark = LEAK_FREE


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
    assert a.faults.status() == CLEAN


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
        **CLEAN,
        "cut": ["b"],
        "rules": {"b": {"direction": "both", "kind": "blackhole"}},
        "dropped_in": 5,
        "dropped_out": 3,
    }
    a.faults.heal()
    assert await closed_by_peer(conn)
    assert a.faults.status() == {**CLEAN, "dropped_in": 5, "dropped_out": 3, "closed_on_heal": 1}
    assert b.faults.status() == CLEAN


# ---------------------------------------------------------------------------- directed cuts
async def test_a_cut_in_drops_what_the_peer_sends_and_nothing_else(world: World) -> None:
    a, b = await world.start("a"), await world.start("b")
    b_to_a, a_served = await world.link(b, a)  # a accepted
    a_to_b, b_served = await world.link(a, b)  # a connected
    a.faults.cut(["b"], direction="in")
    a_draining = asyncio.create_task(a_to_b.receive())
    try:
        await b_to_a.send(Ack("s", "b", 1))  # both vanish at a
        await b_served.send(Ack("s", "b", 2))
        await wait_until(lambda: a.faults.status()["dropped_in"] == 2)
        # What a sends still arrives, on both connections, and a new connection opens.
        await a_served.send(Ack("s", "a", 1))
        await a_to_b.send(Ack("s", "a", 2))
        fresh = await world.connect(a, b)
        await fresh.send(Ack("s", "a", 3))
        async with asyncio.timeout(GUARD):
            assert await b_to_a.receive() == Ack("s", "a", 1)
            got = {await b.inbox.get(), await b.inbox.get()}  # two connections: any order
        assert got == {Ack("s", "a", 2), Ack("s", "a", 3)}
        assert a.inbox.empty() and not a_draining.done()
        assert a.faults.status()["dropped_out"] == 0

        assert a.faults.heal(["b"]) == ["b"]
        # Every connection open during the cut may have a gap: all three are closed.
        async with asyncio.timeout(GUARD):
            assert await a_draining is None
        assert await closed_by_peer(b_to_a)
        await wait_until(lambda: a.ended == 1 and b.ended == 2)
        assert a.faults.status()["closed_on_heal"] == 3
        await world.link(b, a)  # and new ones carry both ways
    finally:
        a_draining.cancel()
        await asyncio.gather(a_draining, return_exceptions=True)


async def test_a_cut_out_drops_what_this_process_sends_and_nothing_else(world: World) -> None:
    a, b = await world.start("a", connect_timeout=0.2), await world.start("b")
    b_to_a, a_served = await world.link(b, a)
    a_to_b, b_served = await world.link(a, b)
    a.faults.cut(["b"], direction="out")
    await a_served.send(Ack("s", "a", 1))  # both vanish at a
    await a_to_b.send(Ack("s", "a", 2))
    assert a.faults.status()["dropped_out"] == 2
    # What b sends still arrives, on both connections.
    await b_to_a.send(Ack("s", "b", 1))
    await b_served.send(Ack("s", "b", 2))
    async with asyncio.timeout(GUARD):
        assert await a.inbox.get() == Ack("s", "b", 1)
        assert await a_to_b.receive() == Ack("s", "b", 2)
    with pytest.raises(TimeoutError, match="a and b are cut by fault injection"):
        await a.transport.connect(world.host, b.port)  # the handshake gets no answer
    assert a.faults.heal() == ["b"]
    # What arrives next at b is the close: nothing a sent crossed the cut.
    assert await closed_by_peer(b_to_a)
    await wait_until(lambda: b.ended == 1)
    assert b.inbox.empty()
    assert a.faults.status()["dropped_in"] == 0
    await world.link(a, b)


# ---------------------------------------------------------------------------- reset
async def test_a_reset_tears_down_both_ends_and_refuses_connects_until_healed(
    world: World,
) -> None:
    a, b = await world.start("a", connect_timeout=10 * GUARD), await world.start("b")
    c = await world.start("c")
    b_to_a, _ = await world.link(b, a)
    a_to_b, _ = await world.link(a, b)
    c_to_a, _ = await world.link(c, a)
    a.faults.cut(["b"], kind="reset")
    # The remote ends see the end at once; a's own ends raise, naming the fault.
    assert await closed_by_peer(b_to_a)
    await wait_until(lambda: b.ended == 1 and a.ended == 1)
    with pytest.raises(ConnectionResetError, match=r"reset by fault injection \(a resets b\)"):
        await a_to_b.receive()
    with pytest.raises(ConnectionResetError, match="reset by fault injection"):
        await a_to_b.send(Ack("s", "a", 1))
    # A connect is refused at once (connect_timeout is far longer than this guard).
    async with asyncio.timeout(GUARD):
        with pytest.raises(ConnectionRefusedError, match=r"refused: a resets its connections to b"):
            await a.transport.connect(world.host, b.port)
    # A connection from b is torn down as soon as a learns who it is.
    late = await world.connect(b, a)
    await late.send(HeartbeatRequest("b", 1))
    assert await closed_by_peer(late)
    await wait_until(lambda: a.ended == 2)
    assert a.inbox.empty()
    # c is untouched.
    await c_to_a.send(Ack("s", "c", 1))
    async with asyncio.timeout(GUARD):
        assert await a.inbox.get() == Ack("s", "c", 1)
    st = a.faults.status()
    assert (st["reset"], st["refused"]) == (3, 1)
    assert st["rules"] == {"b": {"direction": "both", "kind": "reset"}}

    assert a.faults.heal() == ["b"]
    assert a.faults.status()["closed_on_heal"] == 0  # the reset ones are gone already
    await world.link(b, a)  # connects succeed again, both ways
    await world.link(a, b)


async def test_a_connection_that_names_its_peer_when_accepted_is_torn_down_by_a_reset(
    world: World,
) -> None:
    """An authenticated connection (node/net/auth.py) names its process when it is accepted
    (``FaultyTransport.serve`` wraps it with its identity), so no later message teaches
    the name: a reset rule for that peer must end it at once. (It did not: an isolated
    replica, cut from its client by a reset, accepted the client's new heartbeat and
    subscribe connections, answered STABLE with no input, and the client switched to it:
    the isolate scenario's availability, invalid under load.)"""
    a, b = await world.start("a"), await world.start("b")
    a.faults.cut(["b"], kind="reset")
    raw = await b.inner.connect(world.host, a.port)  # not through b's faults: b cut nobody
    served = a.faults.wrap(raw, "b")  # what a's server does with b's authenticated connection
    async with asyncio.timeout(GUARD):  # (it waited for ever)
        with pytest.raises(ConnectionResetError,
                           match=r"reset by fault injection \(a resets b\)"):
            await served.receive()
    with pytest.raises(ConnectionResetError):
        await served.send(Ack("s", "a", 1))
    assert a.faults.status()["reset"] == 1
    await wait_until(lambda: a.ended == 1)  # the other end of the raw connection saw it end
    await served.close()
    # A blackhole rule marks it as one that may lose messages (closed at the heal), as before.
    a.faults.cut(["b"])
    gappy = a.faults.wrap(await b.inner.connect(world.host, a.port), "b")
    assert gappy._gappy
    await gappy.close()


async def test_a_reset_replaces_a_blackhole_and_ends_a_delayed_connection(world: World) -> None:
    a, b = await world.start("a"), await world.start("b")
    b_to_a, a_served = await world.link(b, a)
    a.faults.shape(["b"], delay=GUARD)  # nothing is due before the reset
    a.faults.cut(["b"], direction="out")
    for i in range(3):
        await a_served.send(Ack("s", "a", i))  # queued behind the delay
    await b_to_a.send(Ack("s", "b", 1))  # read ahead at a, held for the delay
    await wait_until(lambda: a_served._head is not None)
    a.faults.cut(["b"], kind="reset")
    assert await closed_by_peer(b_to_a)  # nothing queued crossed: the end comes first
    await wait_until(lambda: a.ended == 1)  # a's held receive woke up at the reset
    assert a.inbox.empty()
    # The autouse fixture checks that the pumps are gone with the connection.
