"""Output buffers that no consumer reads still trim (issue 13, defect 4), over every transport.

The acks a consumer's heartbeats carry reach every replica of its upstream node, the ones
it does not read from too (node/streams/monitor.py -> node/streams/publisher.py); a
consumer never heard from stops holding trimming after the grace period, and is served from
the trim point if it comes later (state/buffer.py's grace rule)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from node.streams.monitor import UpstreamMonitor, UpstreamReplica
from protocol.messages import (
    Batch,
    ConsistencyState,
    HeartbeatRequest,
    HeartbeatResponse,
    Message,
    Subscribe,
)
from protocol.tuples import undo
from tests.node.net.test_transport import GUARD, LEAK_FREE, Net, make_net, wait_until
from tests.node.streams.test_publisher import (
    LOG,
    Producer,
    S,
    T,
    make_link,
    raw_subscribe,
    running,
    stable,
)

pytestmark = LEAK_FREE

STABLE = ConsistencyState.STABLE


@pytest.fixture(params=["tcp", "memory", "memory-codec"])
def net(request: pytest.FixtureRequest) -> Net:
    return make_net(request.param)


async def replica(net: Net, name: str, **kw: Any) -> Producer:
    """A started producer of stream ``s`` with consumer c1 whose data port answers
    heartbeats, like a replica's."""

    def respond(msg: Message) -> Message | None:
        if isinstance(msg, HeartbeatRequest):
            return HeartbeatResponse(name, msg.seq, STABLE, {"s": STABLE}, {"s": 0})
        return None

    prod = Producer(net, name=name, responder=respond, **kw)
    prod.buffers["s"].set_consumers(["c1"])
    return await prod.start()


async def heartbeat(net: Net, prod: Producer, msg: HeartbeatRequest) -> Message | None:
    conn = await raw_subscribe(net, prod, msg.sender, msg)
    try:
        async with asyncio.timeout(GUARD):
            return await conn.receive()
    finally:
        await conn.close()


# ------------------------------------------------------------------ acks on heartbeats
async def test_heartbeat_acks_trim_a_buffer_the_consumer_does_not_read(net: Net) -> None:
    b = await replica(net, "b")
    await b.publish(stable(1, 10))
    answer = await heartbeat(net, b, HeartbeatRequest("c1", 1, {"s": 7}))
    assert answer == HeartbeatResponse("b", 1, STABLE, {"s": STABLE}, {"s": 0})
    assert b.buffers["s"].trimmed_up_to == 7 and not b.subscribers()
    await heartbeat(net, b, HeartbeatRequest("c1", 2, {"s": 3}))  # older: changes nothing
    assert b.buffers["s"].trimmed_up_to == 7
    await b.stop()


@pytest.mark.parametrize(
    ("acks", "says"),
    [
        ({"s": 5, "nope": 5}, "sent a heartbeat acking unknown stream 'nope' (streams here: 's', 't')"),
        ({"s": 5, "t": 5}, "sent a heartbeat acking stream 't' as 'c1', which is not one of "
                           "its consumers (none)"),
    ],
)
async def test_a_heartbeat_with_a_bad_ack_is_refused_and_applies_none(
    net: Net, caplog: pytest.LogCaptureFixture, acks: dict[str, int], says: str
) -> None:
    b = await replica(net, "b", streams=("s", "t"))
    await b.publish(stable(1, 10))
    assert await heartbeat(net, b, HeartbeatRequest("c1", 1, acks)) is None  # closed
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(says in e and "closing the connection" in e for e in errors), errors
    assert b.buffers["s"].trimmed_up_to == 0  # not even the good one
    await b.stop()


async def test_a_heartbeat_from_a_stranger_acking_a_stream_is_refused(
    net: Net, caplog: pytest.LogCaptureFixture
) -> None:
    b = await replica(net, "b")
    await b.publish(stable(1, 10))
    assert await heartbeat(net, b, HeartbeatRequest("zed", 1, {"s": 4})) is None
    assert any("as 'zed', which is not one of its consumers ('c1')" in r.getMessage()
               for r in caplog.records)
    # Without acks it is a plain probe, answered whoever sends it.
    assert await heartbeat(net, b, HeartbeatRequest("zed", 2)) is not None
    assert b.buffers["s"].trimmed_up_to == 0
    await b.stop()


async def test_the_monitor_acks_to_every_upstream_replica_so_both_buffers_trim(net: Net) -> None:
    a, b = await replica(net, "a"), await replica(net, "b")
    link, _ = make_link(net, [a.address, b.address], name="c1")
    monitor = UpstreamMonitor(
        "c1", net.transport("c1"),
        {"s": (link, [UpstreamReplica("a", *a.address), UpstreamReplica("b", *b.address)])},
        interval=2000, misses=3, lag=700_000, log=LOG,
    )
    async with running(link.run(), monitor.run()):
        for first in range(1, 200, 20):
            await a.publish(stable(first, first + 19))
            await b.publish(stable(first, first + 19))
        await wait_until(lambda: link.last_stable_id == 200)
        assert monitor.acks_for("b") == {"s": 200} == monitor.acks_for("a")
        reading = a if a.subscribers() else b
        other = b if reading is a else a
        assert not other.subscribers()
        # The replica it does not read trims too: by the acks its heartbeats carry.
        await wait_until(lambda: other.buffers["s"].trimmed_up_to == 200)
        await wait_until(lambda: reading.buffers["s"].trimmed_up_to == 200)
    for p in (a, b):
        await p.stop()


async def test_a_parked_link_sends_no_acks_so_its_release_holds(net: Net) -> None:
    """A parked link (an amnesia secondary) released its producers; were its heartbeats to
    ack 0, every upstream buffer would be pinned at 0 again. They carry no ack of it."""
    a, b = await replica(net, "a"), await replica(net, "b")
    link, _ = make_link(net, [a.address, b.address], name="c1")
    link.park()
    monitor = UpstreamMonitor(
        "c1", net.transport("c1"),
        {"s": (link, [UpstreamReplica("a", *a.address), UpstreamReplica("b", *b.address)])},
        interval=2000, misses=3, lag=700_000, log=LOG,
    )
    assert monitor.acks_for("a") == {} == monitor.acks_for("b")
    async with running(link.run(), monitor.run()):
        for p in (a, b):
            await p.publish(stable(1, 50))
        await wait_until(lambda: a.buffers["s"].trimmed_up_to == b.buffers["s"].trimmed_up_to == 50)
        link.unpark()
        await wait_until(lambda: monitor.acks_for("a") == {"s": 0})
    for p in (a, b):
        await p.stop()


# ------------------------------------------------------------------ the grace rule
GRACE = 20_000  # µs


async def run_out_the_grace(prod: Producer, first: int, unheard: str) -> int:
    """Publish a stable tuple per poll until the grace period (started by the first
    publish) is over, which releases consumer ``unheard``; returns the next id."""
    i = first
    while not prod.buffers["s"].lapsed(unheard):
        await prod.publish([S(i)])
        i += 1
        await asyncio.sleep(0.002)
    return i


async def test_a_consumer_never_heard_from_stops_pinning_after_the_grace(
    net: Net, caplog: pytest.LogCaptureFixture
) -> None:
    b = await replica(net, "b", consumer_grace=GRACE)
    await b.publish(stable(1, 10))
    assert b.buffers["s"].trimmed_up_to == 0  # c1 holds everything in its grace period
    async with asyncio.timeout(GUARD):
        n = await run_out_the_grace(b, 11, "c1")
    assert any("c1 never heard from in 0.02 s" in r.getMessage() for r in caplog.records)
    # Nobody holds trimming now: every stable tuple goes as it comes.
    await b.publish([S(n), T(n + 1)])
    assert b.buffers["s"].trimmed_up_to == n and list(b.buffers["s"]) == [T(n + 1)]
    # c1 turns up after all: served from the trim point, and told what it missed.
    conn = await raw_subscribe(net, b, "c1", Subscribe("s", "c1", 0, 0))
    async with asyncio.timeout(GUARD):
        assert await conn.receive() == Batch("s", (T(n + 1),))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"it missed stable ids 1..{n}" in w and "c1" in w for w in warnings), warnings
    # From then on it is an ordinary consumer: it pins what it has not acked.
    await b.publish([undo(n), S(n + 1), S(n + 2)])
    async with asyncio.timeout(GUARD):
        assert await conn.receive() == Batch("s", (undo(n), S(n + 1), S(n + 2)))
    assert b.buffers["s"].trimmed_up_to == n and len(b.buffers["s"]) == 2
    await conn.close()
    await b.stop()


async def test_a_consumer_heard_from_keeps_pinning_after_the_grace(net: Net) -> None:
    b = await replica(net, "b", consumer_grace=GRACE)
    b.buffers["s"].set_consumers(["c1", "c2"])  # c2 never turns up
    await b.publish(stable(1, 10))
    conn = await raw_subscribe(net, b, "c1", Subscribe("s", "c1", 4, 0))  # heard from
    async with asyncio.timeout(GUARD):
        assert await conn.receive() == Batch("s", tuple(stable(5, 10)))
    await conn.close()  # and then gone (dead, or cut off)
    async with asyncio.timeout(GUARD):
        await run_out_the_grace(b, 11, "c2")
    # c1 held 4 when last heard from: a recovering replica resumes from here.
    assert b.buffers["s"].trimmed_up_to == 4
    assert b.pub.stats()["s"]["consumers"] == {
        "c1": {"acked": 4, "holds": True, "lapsed": False},
        "c2": {"acked": None, "holds": False, "lapsed": True},
    }
    await b.stop()


# ------------------------------------------------------------------ the Subscribe's ack
async def test_a_subscribe_acks_only_its_ack_id_when_it_gives_one(net: Net) -> None:
    """A replica with CEC checkpoints holds tuples it may ask for again after a crash
    (node/replica/cec.py): its Subscribe acks ``ack_id``, not all it holds; without one,
    all it holds, as before."""
    b = await replica(net, "b")
    await b.publish(stable(1, 10))
    conn = await raw_subscribe(net, b, "c1", Subscribe("s", "c1", 8, 0, 3))
    await wait_until(lambda: bool(b.subscribers()))
    assert b.buffers["s"].trimmed_up_to == 3
    await conn.close()
    conn = await raw_subscribe(net, b, "c1", Subscribe("s", "c1", 8, 0, 9))  # at most held
    await wait_until(lambda: b.buffers["s"].trimmed_up_to == 8)
    await conn.close()
    await b.stop()
