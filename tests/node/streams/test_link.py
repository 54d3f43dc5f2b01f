"""The input link against real publishers, over every transport: resume ids, reconnects
without duplicates or losses, UNDO forwarding and the three replay cases, level-1 acks,
failover between producers, switching, misbehaving producers, and the corrections reader
(buffered until REC_DONE, then adopted as the data source; with the HA monitor too)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from node.errors import NodeError
from node.net.transport import Connection
from node.streams.link import InputLink
from node.streams.monitor import UpstreamMonitor, UpstreamReplica
from protocol.columns import Columns
from protocol.messages import Batch, ConsistencyState, HeartbeatRequest
from protocol.tuples import Kind, Tuple, boundary, make_tuple, rec_done, undo
from protocol.undo_rule import apply_undos
from tests.node.net.test_transport import (
    GUARD,
    LEAK_FREE,
    Net,
    make_net,
    wait_until,
)
from tests.node.streams.test_publisher import (
    LOG,
    Producer,
    S,
    Sink,
    T,
    make_link,
    running,
    stable,
)

pytestmark = LEAK_FREE



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
    assert sink.in_force() == stable(1, 4)  # REC_DONE went out while the link was away:
    # history, not replayed (state/buffer.py)
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


async def test_a_producer_that_was_serving_is_left_for_the_next_at_once(net: Net) -> None:
    """No retry pause after a producer that served the link fails: its partner is tried at
    once (with the pause, a client's failover after a kill took 100 ms more). A producer
    that never served is still retried only after the pause: here, an hour."""
    a, b = await Producer(net, name="a").start(), await Producer(net, name="b").start()
    link, sink = make_link(net, [a.address, b.address], retry_interval=3600.0)
    async with running(link.run()):
        for p in (a, b):
            await p.publish(stable(1, 20))
        await wait_until(lambda: link.last_stable_id == 20)
        await a.stop()
        await b.publish(stable(21, 40))
        await wait_until(lambda: link.last_stable_id == 40)  # well within the hour
        assert link.producer == f"{net.host}:{b.port}"
    assert [t.id for t in sink.raw] == list(range(1, 41))
    await b.stop()


async def test_producers_that_do_not_serve_are_retried_after_the_pause(net: Net) -> None:
    a, b = await Producer(net, name="a").start(), await Producer(net, name="b").start()
    for p in (a, b):
        await p.stop()  # both refuse connections
    link, _ = make_link(net, [a.address, b.address], retry_interval=3600.0)
    async with running(link.run()):
        await wait_until(lambda: link.failures >= 1)
        for _ in range(200):
            await asyncio.sleep(0)
        assert link.failures == 1  # not retried in a tight loop


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


# ---------------------------------------------------------------------------- corrections
def TB(i: int) -> Tuple:
    """A tentative tuple of replica b: b's own, never the same as a's ``T(i)``."""
    return make_tuple(Kind.TENTATIVE, i, 10 * i, 10 * i, (i, "b"))


def from_b(tuples: list[Tuple]) -> list[Tuple]:
    """What in ``tuples`` can only have come from b (its tentatives, corrections, REC_DONE)."""
    return [
        t
        for t in tuples
        if t == undo(10)
        or t in (TB(11), TB(12), TB(13))
        or t.kind is Kind.REC_DONE
        or (t.kind is Kind.STABLE and t.id > 10)
    ]


def stable_ids(tuples: list[Tuple]) -> list[int]:
    return [t.id for t in tuples if t.kind is Kind.STABLE]


async def a_fails_b_reconciles(net: Net) -> tuple[Producer, Producer, InputLink, Sink]:
    """Both replicas stable through 10; then a goes UP_FAILURE (tentatives 11, 12, which the
    link reads) and b has its own tentatives 11-13 and is about to stabilize."""
    a, b = await Producer(net, name="a").start(), await Producer(net, name="b").start()
    for p in (a, b):
        await p.publish(stable(1, 10))
    await b.publish([TB(11), TB(12), TB(13)])
    link, sink = make_link(net, [a.address, b.address])
    return a, b, link, sink


async def test_corrections_are_buffered_until_rec_done_then_their_source_feeds_the_link(
    net: Net,
) -> None:
    a, b, link, sink = await a_fails_b_reconciles(net)
    b.buffers["s"].set_consumers(["c1"])  # so that acks show which producer the link acks
    gate = asyncio.Event()
    gate.set()
    sink.gate = gate
    async with running(link.run()):
        await wait_until(lambda: link.last_stable_id == 10)
        await a.publish([T(11), T(12)])
        await wait_until(lambda: link.last_tentative_id == 12)
        link.correct_from(b.address)
        assert link.corrections == b.address
        await wait_until(lambda: link.corrections_buffered == 3)  # b's replay after 10
        await b.publish([undo(10), S(11), S(12)])  # b stabilizes: 3 undone, 2 corrected
        await wait_until(lambda: link.corrections_buffered == 2)
        await a.publish([T(13), T(14)])  # fresh data still flows from a meanwhile
        await wait_until(lambda: link.last_tentative_id == 14)
        before = list(sink.raw)
        assert from_b(before) == [] and link.current == a.address
        # The reader's Subscribe(10, 10) says the link holds 10 (an ack of it, for the
        # grace rule's "heard from"); the reader never acks beyond it.
        assert b.buffers["s"].trimmed_up_to == 10

        # REC_DONE arrives while on_batch holds a batch of a: it is not interrupted.
        gate.clear()
        await a.publish([T(15)])
        async with asyncio.timeout(GUARD):
            await sink.holding.wait()
        await b.publish([S(13), rec_done(135), S(14)])
        await b.publish(stable(15, 17))  # queued on the corrections connection: no gap
        await wait_until(lambda: link.current == b.address and link.corrections is None)
        assert link.corrections_applied == 0 and from_b(sink.raw) == []
        gate.set()
        await wait_until(lambda: link.corrections_applied == 1 and link.last_stable_id == 17)
        assert link.producer == f"{net.host}:{b.port}" and link.reconciled
        await a.publish([T(16)])  # a is left: never delivered
        await b.publish(stable(18, 20))
        await wait_until(lambda: link.last_stable_id == 20)
        await wait_until(lambda: b.buffers["s"].trimmed_up_to == 20)  # acked to b now
        await wait_until(lambda: not a.subscribers())
        assert link.connects == 1  # the corrections connection was adopted, not replaced
        assert link.corrections_buffered == 0 and link.last_tentative_id <= 20
    after = sink.raw[len(before) :]
    assert after[:2] == [T(15), undo(10)]  # a's held batch went through whole, then the
    assert T(16) not in sink.raw  # UNDO of every tentative of a; a is left for good
    assert sink.in_force() == [*stable(1, 13), rec_done(135), *stable(14, 20)]
    assert stable_ids(sink.raw) == list(range(1, 21))  # every stable id exactly once
    assert TB(11) not in sink.raw  # b's undone tentatives never reached the consumer
    for p in (a, b):
        await p.stop()


async def test_a_rec_done_in_the_corrections_sources_history_does_not_end_its_reconciliation(
    net: Net,
) -> None:
    # simulate seed 70580: b's REC_DONE right after stable 10 ended an earlier
    # reconciliation; b then failed again (11-13) and is stabilizing anew, stalled after
    # corrected 11. The reader's replay (after 10) held that old REC_DONE, and the link
    # moved to b at once: c1 got nothing new for 2.2 s (bound 2 s) while a served fresh
    # tentative results. The reader now waits for a REC_DONE that b sends after it.
    a, b = await Producer(net, name="a").start(), await Producer(net, name="b").start()
    for p in (a, b):
        await p.publish(stable(1, 10))
    await b.publish([boundary(105), rec_done(106), TB(11), TB(12), TB(13), undo(10), S(11)])
    link, sink = make_link(net, [a.address, b.address])
    async with running(link.run()):
        await wait_until(lambda: link.last_stable_id == 10)
        await a.publish([T(11), T(12)])
        await wait_until(lambda: link.last_tentative_id == 12)
        link.correct_from(b.address)
        await wait_until(lambda: link.corrections_buffered == 2)  # b's replay: B(105), 11
        await a.publish([T(13)])  # a still feeds the link: it was not left for b
        await wait_until(lambda: link.last_tentative_id == 13)
        assert link.current == a.address and link.corrections_applied == 0
        await b.publish([S(12), S(13), rec_done(135)])  # b's reconciliation ends now
        await wait_until(lambda: link.corrections_applied == 1 and link.last_stable_id == 13)
        assert link.current == b.address
    assert sink.in_force() == [*stable(1, 10), boundary(105), *stable(11, 13), rec_done(135)]
    assert stable_ids(sink.raw) == list(range(1, 14))
    for p in (a, b):
        await p.stop()


async def test_a_lost_corrections_connection_delivers_nothing_and_is_retried() -> None:
    net = make_net("memory")
    a, b, link, sink = await a_fails_b_reconciles(net)
    async with running(link.run()):
        await wait_until(lambda: link.last_stable_id == 10)
        await a.publish([T(11), T(12)])
        await wait_until(lambda: link.last_tentative_id == 12)
        link.correct_from(b.address)
        await b.publish([undo(10), S(11), S(12)])
        await wait_until(lambda: link.corrections_buffered == 2)
        await b.stop()  # the corrections connection breaks before REC_DONE
        await wait_until(lambda: link.corrections_buffered == 0)
        await a.publish([T(13)])
        await wait_until(lambda: link.last_tentative_id == 13)
        assert from_b(sink.raw) == [] and link.current == a.address
        assert link.corrections == b.address  # still wanted: retried
        await b.publish([S(13)])
        await b.start()
        await wait_until(lambda: link.corrections_buffered == 3)  # read again: 11-13
        await b.publish([rec_done(135)])
        await wait_until(lambda: link.corrections_applied == 1 and link.last_stable_id == 13)
        assert link.current == b.address
    assert sink.in_force() == [*stable(1, 13), rec_done(135)]
    assert stable_ids(sink.raw) == list(range(1, 14))
    for p in (a, b):
        await p.stop()


async def test_correct_from_none_drops_the_buffer() -> None:
    net = make_net("memory")
    a, b, link, sink = await a_fails_b_reconciles(net)
    with pytest.raises(NodeError):
        link.correct_from(("elsewhere", 1))
    async with running(link.run()):
        await wait_until(lambda: link.last_stable_id == 10 and link.current == a.address)
        link.correct_from(a.address)  # the data source itself: never read twice
        assert link.corrections is None
        link.correct_from(b.address)
        await wait_until(lambda: link.corrections_buffered == 3)
        link.correct_from(None)
        await wait_until(lambda: link.corrections_buffered == 0 and not b.subscribers())
        await b.publish([undo(10), S(11), rec_done(115)])  # nobody reads it now
        await a.publish([T(11)])
        await wait_until(lambda: link.last_tentative_id == 11)
        assert link.corrections_applied == 0 and link.current == a.address
    assert from_b(sink.raw) == [] and sink.in_force() == [*stable(1, 10), T(11)]
    for p in (a, b):
        await p.stop()


async def test_switching_to_the_corrections_source_resubscribes_there_by_ids(net: Net) -> None:
    # The monitor moves the link to b (b turned STABLE before its REC_DONE reached the
    # reader): the reader leaves b first, then the main session subscribes there alone.
    a, b, link, sink = await a_fails_b_reconciles(net)
    async with running(link.run()):
        await wait_until(lambda: link.last_stable_id == 10)
        await a.publish([T(11), T(12)])
        await wait_until(lambda: link.last_tentative_id == 12)
        link.correct_from(b.address)
        await b.publish([undo(10), S(11), S(12)])
        await wait_until(lambda: link.corrections_buffered == 2)
        link.switch_to(b.address)
        await wait_until(
            lambda: (
                link.last_stable_id == 12
                and link.producer is not None
                and link.producer.endswith(f":{b.port}")
            )
        )
        assert link.corrections is None and link.corrections_applied == 0
        await b.publish([S(13), rec_done(135), S(14)])
        await wait_until(lambda: link.last_stable_id == 14)
        assert list(b.subscribers()) == ["c1"] and link.connects == 2
    assert sink.in_force() == [*stable(1, 13), rec_done(135), S(14)]
    assert stable_ids(sink.raw) == list(range(1, 15))
    for p in (a, b):
        await p.stop()


async def test_stable_tuples_the_link_got_meanwhile_are_not_delivered_again(net: Net) -> None:
    # The reader subscribed at b after 10; then a still delivered stable 11 (in flight when
    # it failed) and tentative 12. b's corrections repeat 11: it is dropped, not repeated.
    a, b, link, sink = await a_fails_b_reconciles(net)
    async with running(link.run()):
        await wait_until(lambda: link.last_stable_id == 10)
        link.correct_from(b.address)
        await wait_until(lambda: link.corrections_buffered == 3)
        await a.publish([S(11), T(12)])
        await wait_until(lambda: link.last_tentative_id == 12)
        await b.publish([undo(10), S(11), S(12), S(13), rec_done(135)])
        await wait_until(lambda: link.corrections_applied == 1 and link.last_stable_id == 13)
        await b.publish([S(14)])
        await wait_until(lambda: link.last_stable_id == 14)
    assert sink.raw[-5:] == [undo(11), S(12), S(13), rec_done(135), S(14)]
    assert sink.in_force() == [*stable(1, 13), rec_done(135), S(14)]
    assert stable_ids(sink.raw) == list(range(1, 15))
    for p in (a, b):
        await p.stop()


async def test_a_corrections_source_behind_the_link_is_not_adopted() -> None:
    # The link got stable tuples 11-12 from a after the reader subscribed at b with 10;
    # b's REC_DONE comes with stable 11 only: adopting it would lose nothing but could not
    # continue the ids held, so the link resubscribes by ids (b now serves a subscriber
    # ahead of it, filtered until it catches up: state/buffer.py AheadView).
    net = make_net("memory")
    a, b, link, sink = await a_fails_b_reconciles(net)
    async with running(link.run()):
        await wait_until(lambda: link.last_stable_id == 10)
        link.correct_from(b.address)
        await wait_until(lambda: link.corrections_buffered == 3)
        await a.publish([S(11), S(12)])
        await wait_until(lambda: link.last_stable_id == 12)
        await b.publish([undo(10), S(11), rec_done(115)])
        await wait_until(lambda: link.failures + link.reconnects >= 1 and link.connected)
        await a.publish([S(13)])
        await b.publish([S(12), S(13)])  # b catches up: 12 the link holds, 13 is new
        await wait_until(lambda: link.last_stable_id == 13)
        assert link.corrections_applied == 0
    assert sink.raw == stable(1, 13)  # no stable tuple twice, nothing taken back
    for p in (a, b):
        await p.stop()


async def test_the_monitor_reads_corrections_beside_fresh_data_and_keeps_the_new_source() -> None:
    net = make_net("memory")
    a, b, link, sink = await a_fails_b_reconciles(net)
    monitor = UpstreamMonitor(
        "c1",
        net.transport("c1"),
        {"s": (link, [UpstreamReplica("a", *a.address), UpstreamReplica("b", *b.address)])},
        interval=1000,
        misses=3,
        lag=700_000,
        log=LOG,
    )
    assert monitor.tracker is not None
    tracker, seq = monitor.tracker, 0

    def beat(**states: ConsistencyState) -> None:
        nonlocal seq
        for name, state in states.items():
            seq += 1
            tracker.sent(name, seq, seq)
            assert tracker.answered(name, seq, state, {"s": state})
        monitor.evaluate()

    stable_, up_failure, stabilization = (
        ConsistencyState.STABLE,
        ConsistencyState.UP_FAILURE,
        ConsistencyState.STABILIZATION,
    )
    async with running(link.run()):
        await wait_until(lambda: link.last_stable_id == 10)
        beat(a=stable_, b=stable_)
        assert monitor.current("s") == "a" and link.corrections is None
        await a.publish([T(11), T(12)])
        await wait_until(lambda: link.last_tentative_id == 12)
        beat(a=up_failure, b=stabilization)
        status = monitor.status()["s"]
        assert (status["data_source"], status["corrections_source"]) == ("a", "b")
        await wait_until(lambda: monitor.status()["s"]["corrections_buffered"] == 3)
        switches = link.switches
        await b.publish([undo(10), S(11), S(12), rec_done(125)])
        await wait_until(lambda: link.corrections_applied == 1 and link.last_stable_id == 12)
        for _ in range(2):  # b's heartbeats lag behind its REC_DONE: it is kept all the same
            beat(a=up_failure, b=stabilization)
            status = monitor.status()["s"]
            assert (status["data_source"], status["corrections_source"]) == ("b", None)
            assert status["corrections_applied"] == 1 and link.switches == switches
        beat(a=up_failure, b=stable_)
        await b.publish(stable(13, 15))
        await wait_until(lambda: link.last_stable_id == 15)
        assert monitor.current("s") == "b" and link.switches == switches and link.connects == 1
    assert sink.in_force() == [*stable(1, 12), rec_done(125), *stable(13, 15)]
    assert stable_ids(sink.raw) == list(range(1, 16))
    for p in (a, b):
        await p.stop()



class _Held:
    """The server side of a connection whose sends wait while ``gate`` is clear: its
    Subscribe is taken, but nothing is sent on it yet."""

    def __init__(self, conn: Connection, gate: asyncio.Event) -> None:
        self._conn, self._gate = conn, gate
        self.peer = conn.peer

    async def send(self, message: Batch) -> None:
        await self._gate.wait()
        await self._conn.send(message)

    async def receive(self) -> object:
        return await self._conn.receive()

    async def close(self) -> None:
        await self._conn.close()


async def test_a_rec_done_the_link_moved_away_from_is_dropped_before_reading_there_again(
    net: Net,
) -> None:
    # simulate seed 9811: b's REC_DONE reached the reader while on_batch held a batch of a,
    # so its connection waited for the main loop; the monitor sent the link back to a and
    # read corrections at b again (that Subscribe replaced the waiting connection's
    # subscription at b), then moved the link to b and stopped the reader before its
    # REC_DONE came. The main loop adopted the waiting connection, which b sent nothing on
    # any more: the link starved. A waiting connection now counts as a subscription: the
    # reader closes it before subscribing at its producer again.
    a, b, link, sink = await a_fails_b_reconciles(net)
    gate, sends = asyncio.Event(), asyncio.Event()
    gate.set()
    sends.set()
    sink.gate = gate
    handle = b.pub.handle

    async def held_handle(conn: Connection) -> None:
        await handle(_Held(conn, sends))  # type: ignore[arg-type]

    b.pub.handle = held_handle  # type: ignore[method-assign]
    async with running(link.run()):
        await wait_until(lambda: link.last_stable_id == 10)
        await a.publish([T(11), T(12)])
        await wait_until(lambda: link.last_tentative_id == 12)
        gate.clear()
        await a.publish([T(13)])
        async with asyncio.timeout(GUARD):
            await sink.holding.wait()  # the main loop is held from here on
        await b.publish([undo(10), S(11), S(12), S(13)])
        link.correct_from(b.address)
        await wait_until(lambda: link.corrections_buffered == 3)
        await b.publish([rec_done(135)])
        await wait_until(lambda: link.current == b.address and link.corrections is None)
        link.switch_to(a.address, tmax=True)  # the REC_DONE waits; the link goes back to a
        sends.clear()
        first = b.subscribers()["c1"]["peer"]
        link.correct_from(b.address)  # read at b again: subscribed, nothing sent yet
        await wait_until(lambda: b.subscribers().get("c1", {}).get("peer") not in (None, first))
        link.switch_to(b.address)
        link.correct_from(None)
        await wait_until(lambda: not b.subscribers())  # the second reader is gone
        sends.set()
        gate.set()
        await b.publish([S(14)])
        await wait_until(lambda: link.last_stable_id == 14)
        assert link.current == b.address and list(b.subscribers()) == ["c1"]
    # The waiting connection was dropped: the link got 11-13 by ids, REC_DONE was history.
    assert sink.in_force() == stable(1, 14)
    assert stable_ids(sink.raw) == list(range(1, 15))
    for p in (a, b):
        await p.stop()


# ---------------------------------------------------------------- amnesia: parked links
async def test_a_parked_link_releases_its_producers_and_resumes_at_the_live_end(net: Net) -> None:
    """An amnesia secondary's link (node/replica/runtime.py): parked, it holds no
    subscription and releases every producer, so that what it acked in an earlier life
    pins no buffer; unparked, it subscribes at the live end (what came meanwhile is lost)
    and from the first data tuple on resumes by ids as any link."""
    a, b = await Producer(net, "a").start(), await Producer(net, "b").start()
    for prod in (a, b):
        prod.buffers["s"].set_consumers(["c1", "c2"])
        await prod.publish(stable(1, 10))
        prod.buffers["s"].ack("c1", 2)  # its earlier life
        prod.buffers["s"].ack("c2", 10)
    link, sink = make_link(net, [a.address, b.address])
    link.park()
    async with running(link.run()):
        await wait_until(lambda: a.buffers["s"].trimmed_up_to == b.buffers["s"].trimmed_up_to == 10)
        assert not a.subscribers() and not b.subscribers()
        await a.publish(stable(11, 12))  # while parked: never asked for
        link.unpark()
        await wait_until(lambda: "c1" in a.subscribers() or "c1" in b.subscribers())
        for prod in (a, b):
            await prod.publish(stable(13, 14) if prod is a else stable(11, 14))
        await wait_until(lambda: link.last_stable_id == 14)
        assert not link.live  # ids known: a resubscription resumes by them
    assert sink.ids() in ([13, 14], [11, 12, 13, 14])  # a's live end is 12, b's 10
    assert link.ack_id == 14
    for prod in (a, b):
        await prod.stop()


async def test_a_holding_parked_link_acks_its_checkpoint_to_every_producer(net: Net) -> None:
    """A passive standby's link (node/replica/standby.py): parked, it acks each producer
    what its last checkpoint covers, so upstream keeps the input after it (the other
    consumer, the primary, is ahead); unparked at those ids, it gets exactly the rest."""
    a, b = await Producer(net, "a").start(), await Producer(net, "b").start()
    for prod in (a, b):
        prod.buffers["s"].set_consumers(["c1", "c2"])
        await prod.publish(stable(1, 20))
        prod.buffers["s"].ack("c2", 20)  # the primary processed everything
    link, sink = make_link(net, [a.address, b.address])
    link.park(hold=True)
    async with running(link.run()):
        link.hold_at(8)
        await wait_until(lambda: a.buffers["s"].trimmed_up_to == b.buffers["s"].trimmed_up_to == 8)
        assert link.ack_id == 8 and not a.subscribers() and not b.subscribers()
        link.hold_at(12)
        await wait_until(lambda: a.buffers["s"].trimmed_up_to == b.buffers["s"].trimmed_up_to == 12)
        link.unpark((12, 12))
        await wait_until(lambda: link.last_stable_id == 20)
    assert sink.ids() == list(range(13, 21))
    for prod in (a, b):
        await prod.stop()


async def test_a_holding_parked_link_keeps_one_connection_and_tells_a_restarted_producer(
        net: Net) -> None:
    """Upstream backup's secondary acks every M: on one standing connection per producer
    (a connection and handshake per ack were a tenth of the scheme's bandwidth); when the
    producer restarts (that connection ends), the new one is told too, unasked."""
    a = await Producer(net, "a").start()
    a.buffers["s"].set_consumers(["c1", "c2"])
    await a.publish(stable(1, 20))
    a.buffers["s"].ack("c2", 20)
    link, _ = make_link(net, [a.address])
    link.park(hold=True)
    async with running(link.run()):
        for upto in (4, 8, 12):
            link.hold_at(upto)
            await wait_until(lambda upto=upto: a.buffers["s"].trimmed_up_to == upto)
        assert len(a.conns) == 1
        await a.stop()  # a crash: its buffer is gone; a fresh one comes at the same port
        again = Producer(net, "a")
        again.port = a.port
        again.buffers["s"].set_consumers(["c1", "c2"])
        await again.publish(stable(1, 20))
        again.buffers["s"].ack("c2", 20)
        await again.start()
        await wait_until(lambda: again.buffers["s"].trimmed_up_to == 12)
        assert len(again.conns) == 1
    await again.stop()


async def test_a_producer_that_refuses_is_warned_of_once_per_run_of_failures(
        net: Net, caplog: pytest.LogCaptureFixture) -> None:
    """The link retries a refusing producer every retry_interval: one warning for the
    run (the rest at debug level; a producer down for a minute was 600 warnings), and one
    again when it is down again after it served."""
    a = await Producer(net, "a").start()
    await a.stop()  # its port refuses now
    link, _ = make_link(net, [a.address])

    def warned() -> int:
        return sum("cannot connect to producer" in r.getMessage() for r in caplog.records
                   if r.levelno == logging.WARNING)

    with caplog.at_level(logging.DEBUG):
        async with running(link.run()):
            await wait_until(lambda: link.failures >= 8)
            assert warned() == 1
            again = Producer(net, "a")
            again.port = a.port
            await again.publish(stable(1, 3))
            await again.start()
            await wait_until(lambda: link.last_stable_id == 3)
            await again.stop()
            before = link.failures
            await wait_until(lambda: link.failures >= before + 5)
            assert warned() == 2


# ---------------------------------------------------------------------------- columns
async def test_a_link_in_columns_hands_on_columns_and_its_ids_move_as_with_tuples(
        net: Net) -> None:
    """``columns=True`` (a replica's links): a batch off the wire goes on as its columns
    unless it holds an UNDO; the resume ids, reconnects and the stream in force are what
    the tuple path gives (the tests above)."""
    prod = await Producer(net, max_batch=7).start()
    link, sink = make_link(net, [prod.address], columns=True)
    async with running(link.run()):
        await prod.publish([S(1), S(2), T(3), T(4)])
        await wait_until(lambda: link.last_tentative_id == 4)
        assert link.last_stable_id == 2 and not link.reconciled
        await prod.publish([undo(2), S(3), S(4), S(5), rec_done(50)])
        await wait_until(lambda: link.last_stable_id == 5)
        for conn in list(prod.conns):
            await conn.close()  # a reconnect resumes by the ids the columns moved
        await prod.publish([*stable(6, 30), boundary(300)])
        await wait_until(lambda: link.last_stable_id == 30)
    got = [t for _, b in sink.batches
           for t in (b.to_tuples() if isinstance(b, Columns) else b)]
    assert apply_undos(got) == [*stable(1, 5), rec_done(50), *stable(6, 30), boundary(300)]
    assert [t.id for t in got if t.kind is Kind.STABLE] == [1, 2, 3, 4, 5, *range(6, 31)]
    kinds = {type(b) for _, b in sink.batches}
    assert Columns in kinds and kinds - {Columns}  # the UNDO's batch came as tuples
    assert link.tmax.highest is not None
    await prod.stop()
