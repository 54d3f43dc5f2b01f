"""The publisher, over every transport: what subscribers receive (complete, in order, at
most ``max_batch`` per frame), back-pressure to the producer, subscription bookkeeping, and
bad requests that close only their own connection.

The helpers here (Producer, Sink, running) serve the link and bad-input tests too."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Coroutine, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from node.errors import NodeError
from node.net.transport import Connection, Server
from node.streams.link import InputLink
from node.streams.publisher import FRAMES_PER_TURN, Publisher
from protocol.exchange import Split
from protocol.messages import Ack, Batch, HeartbeatRequest, Message, Subscribe, Unsubscribe
from protocol.tuples import DATA_KINDS, Kind, Tuple, boundary, make_tuple
from protocol.undo_rule import apply_undos
from state.buffer import OutputBuffer
from state.spill import SpillStore
from state.spill_list import SpillList
from tests.node.net.test_transport import (
    GUARD,
    LEAK_FREE,
    Net,
    make_net,
    wait_stalled,
    wait_until,
)

pytestmark = LEAK_FREE
LOG = logging.getLogger("test.publisher")



@pytest.fixture(params=["tcp", "memory", "memory-codec"])
def net(request: pytest.FixtureRequest) -> Net:
    return make_net(request.param)


def S(i: int) -> Tuple:
    return make_tuple(Kind.STABLE, i, 10 * i, 10 * i, (i, "s"))


def T(i: int) -> Tuple:
    return make_tuple(Kind.TENTATIVE, i, 10 * i, 10 * i, (i, "t"))


def stable(first: int, last: int) -> list[Tuple]:
    return [S(i) for i in range(first, last + 1)]


class Producer:
    """A publisher of stream ``s`` served on ``net``, stoppable and restartable at the same
    address; it keeps the server side of every connection it accepted."""

    def __init__(self, net: Net, name: str = "up", streams: Iterable[str] = ("s",), **kw: Any):
        self.net = net
        self.name = name
        self.buffers = {s: OutputBuffer(s) for s in streams}
        self.pub = Publisher(name, self.buffers, log=LOG, **kw)
        self.conns: list[Connection] = []
        self.server: Server | None = None
        self.port = 0

    @property
    def address(self) -> tuple[str, int]:
        return (self.net.host, self.port)

    async def start(self) -> Producer:
        async def handler(conn: Connection) -> None:
            self.conns.append(conn)
            await self.pub.handle(conn)

        self.server = await self.net.transport(self.name).serve(self.net.host, self.port, handler)
        self.port = self.server.port
        return self

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.close()
            self.server = None

    async def publish(self, tuples: list[Tuple], stream: str = "s") -> None:
        await self.pub.wait_for_room()
        self.pub.publish(stream, tuples)

    def subscribers(self, stream: str = "s") -> dict[str, Any]:
        subs: dict[str, Any] = self.pub.stats()[stream]["subscribers"]
        return subs


class Sink:
    """An ``on_batch`` that records each batch with the connection it came on; while
    ``gate`` is clear it holds each batch (and says so with ``holding``)."""

    def __init__(self, gate: asyncio.Event | None = None) -> None:
        self.link: InputLink | None = None
        self.batches: list[tuple[int, Sequence[Tuple]]] = []
        self.gate = gate
        self.holding = asyncio.Event()

    async def on_batch(self, stream: str, tuples: Sequence[Tuple]) -> None:
        assert self.link is not None and stream == self.link.stream
        if self.gate is not None and not self.gate.is_set():
            self.holding.set()
            await self.gate.wait()
        self.batches.append((self.link.connects, tuples))

    @property
    def raw(self) -> list[Tuple]:
        return [t for _, batch in self.batches for t in batch]

    def in_force(self) -> list[Tuple]:
        """The stream received, UNDOs applied by the one UNDO rule (``protocol.undo_rule``:
        a plain scan, independent of the buffer's binary search)."""
        return apply_undos(self.raw)

    def data(self) -> list[Tuple]:
        return [t for t in self.in_force() if t.kind in DATA_KINDS]

    def ids(self) -> list[int]:
        return [t.id for t in self.data()]


def make_link(
    net: Net,
    producers: Sequence[tuple[str, int]],
    name: str = "c1",
    gate: asyncio.Event | None = None,
    **kw: Any,
) -> tuple[InputLink, Sink]:
    sink = Sink(gate)
    kw.setdefault("retry_interval", 0.01)
    kw.setdefault("ack_interval", 0.01)
    link = InputLink(net.transport(name), "s", name, producers, sink.on_batch, log=LOG, **kw)
    sink.link = link
    return link, sink


@asynccontextmanager
async def running(*coros: Coroutine[Any, Any, None]) -> AsyncIterator[list[asyncio.Task[None]]]:
    """Run ``coros`` as tasks for the body; cancel and await them after it."""
    tasks = [asyncio.create_task(c) for c in coros]
    try:
        yield tasks
    finally:
        for t in tasks:
            t.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    for r in results:
        if isinstance(r, Exception):
            raise r


# ---------------------------------------------------------------------------- delivery
async def test_a_subscriber_gets_the_stream_from_before_and_after_it_subscribed(net: Net) -> None:
    prod = await Producer(net).start()
    await prod.publish(stable(1, 50))
    link, sink = make_link(net, [prod.address])
    async with running(link.run()):
        await wait_until(lambda: link.last_stable_id == 50)
        assert link.connected and link.producer == f"{net.host}:{prod.port}"
        for i in range(51, 101, 10):
            await prod.publish(stable(i, i + 9))
        await wait_until(lambda: link.last_stable_id == 100)
    assert sink.raw == stable(1, 100)
    assert link.reconnects == 0
    await prod.stop()


async def test_subscribing_while_the_producer_publishes_misses_and_repeats_nothing(
    net: Net,
) -> None:
    prod = await Producer(net).start()
    link, sink = make_link(net, [prod.address])

    async def produce() -> None:
        for i in range(1, 3001, 10):
            await prod.publish(stable(i, i + 9))
            await asyncio.sleep(0)  # let the subscription come in anywhere in between

    async with running(produce()) as (producer,):
        await wait_until(lambda: len(prod.buffers["s"]) >= 500)
        async with running(link.run()):
            await wait_until(lambda: link.last_stable_id == 3000)
        await producer
    assert sink.ids() == list(range(1, 3001))
    await prod.stop()


async def test_frames_carry_at_most_max_batch_and_go_out_without_waiting(net: Net) -> None:
    prod = await Producer(net, max_batch=7).start()
    link, sink = make_link(net, [prod.address])
    async with running(link.run()):
        await wait_until(lambda: link.connected)
        await prod.publish(stable(1, 100))
        await wait_until(lambda: link.last_stable_id == 100)
        assert all(len(b) <= 7 for _, b in sink.batches)
        for i in range(101, 104):  # one at a time: each goes at once, alone
            await prod.publish([S(i)])
            await wait_until(lambda i=i: link.last_stable_id == i)
    assert [list(b) for _, b in sink.batches[-3:]] == [[S(101)], [S(102)], [S(103)]]
    assert sink.raw == stable(1, 103)
    await prod.stop()


async def test_a_long_replay_goes_out_in_slices_that_let_other_tasks_run(net: Net) -> None:
    """The defect: the writer sent a subscription's whole replay (100,000 tuples for a
    client that switched during a long failure) without giving up the event loop while the
    socket took it, so the replica's heartbeat answers waited behind it and its consumers
    declared it failed. Now between two turns of another task the writer sends at most
    FRAMES_PER_TURN frames."""
    prod = await Producer(net, max_batch=10).start()
    await prod.publish(stable(1, 5000))
    samples: list[int] = []

    async def watch() -> None:
        while True:
            subs = prod.subscribers()
            samples.append(subs["x"]["sent"] if "x" in subs else 0)
            await asyncio.sleep(0)

    async with running(watch()):
        conn = await raw_subscribe(net, prod, "x", Subscribe("s", "x", 0, 0))
        got = 0
        async with asyncio.timeout(GUARD):
            while got < 5000:
                msg = await conn.receive()
                assert isinstance(msg, Batch)
                got += len(msg.tuples)
    jumps = [b - a for a, b in itertools.pairwise(samples)]
    assert max(jumps) <= FRAMES_PER_TURN * 10, f"the writer held the loop for {max(jumps)} tuples"
    await conn.close()
    await prod.stop()


async def test_a_spilled_replay_is_read_from_disk_as_it_is_sent(net: Net, tmp_path: Path) -> None:
    """A buffer whose stream is on disk (state/spill_list.py, one tuple in memory) serves a
    subscriber its replay a batch at a time (Catchup): complete, in order, in frames of at
    most max_batch, and followed by what was published meanwhile (tests/state/
    test_spill_list.py holds the catch-up to the replay of its moment and its segments)."""
    prod = Producer(net, max_batch=50)
    store = SpillStore(tmp_path, "s")
    prod.buffers["s"] = OutputBuffer("s", spill=SpillList(store, 1))
    prod.pub = Publisher("up", prod.buffers, log=LOG, max_batch=50)
    await prod.start()
    await prod.publish(stable(1, 2000))
    assert store.stats().tuples >= 1999
    link, sink = make_link(net, [prod.address])
    async with running(link.run()):
        await wait_until(lambda: link.connected)
        await prod.publish(stable(2001, 2100))  # published during the replay: after it
        await wait_until(lambda: link.last_stable_id == 2100)
    assert sink.raw == stable(1, 2100)
    assert all(len(b) <= 50 for _, b in sink.batches)
    await prod.stop()


async def test_stats_report_buffer_and_subscribers(net: Net) -> None:
    prod = await Producer(net).start()
    link, _ = make_link(net, [prod.address], name="c7")
    async with running(link.run()):
        await prod.publish(stable(1, 40))
        await wait_until(lambda: link.last_stable_id == 40)
        stats = prod.pub.stats()["s"]
        assert stats["buffered"] == 40 and stats["last_stable_id"] == 40
        assert list(stats["subscribers"]) == ["c7"]
        assert (
            stats["subscribers"]["c7"]["sent"] == 40 and stats["subscribers"]["c7"]["pending"] == 0
        )
    await wait_until(lambda: not prod.subscribers())  # the link's cancellation closed it
    await prod.stop()


# ---------------------------------------------------------------------------- back-pressure
@pytest.mark.parametrize("kind", ["memory", "memory-codec"])
async def test_a_slow_consumer_holds_its_producer_back_and_loses_nothing(kind: str) -> None:
    net = make_net(kind, queue_size=4)
    prod = await Producer(net, high_water=100, max_batch=10).start()
    gate = asyncio.Event()
    link, sink = make_link(net, [prod.address], gate=gate)
    async with running(link.run()):
        await wait_until(lambda: link.connected)
        prod.pub.publish("s", stable(1, 1000))
        async with running(prod.pub.wait_for_room()) as (room,):
            await wait_stalled(lambda: prod.subscribers()["c1"]["sent"])
            assert not room.done()
            assert prod.subscribers()["c1"]["pending"] >= 100
            gate.set()
            async with asyncio.timeout(GUARD):
                await room
        await wait_until(lambda: link.last_stable_id == 1000)
    assert sink.ids() == list(range(1, 1001))
    await prod.stop()


async def test_wait_for_room_returns_at_once_without_backlog(net: Net) -> None:
    prod = await Producer(net, high_water=10).start()
    prod.pub.publish("s", stable(1, 1000))  # no subscriber: nobody to wait for
    async with asyncio.timeout(GUARD):
        await prod.pub.wait_for_room()
    await prod.stop()


# ---------------------------------------------------------------------------- bookkeeping
async def raw_subscribe(net: Net, prod: Producer, name: str, msg: Message) -> Connection:
    conn = await net.transport(name).connect(net.host, prod.port)
    await conn.send(msg)
    return conn


async def test_a_new_subscribe_replaces_the_old_one_and_unsubscribe_ends_it(net: Net) -> None:
    prod = await Producer(net).start()
    await prod.publish(stable(1, 5))
    first = await raw_subscribe(net, prod, "x", Subscribe("s", "x", 0, 0))
    async with asyncio.timeout(GUARD):
        assert await first.receive() == Batch("s", tuple(stable(1, 5)))
        second = await raw_subscribe(net, prod, "x", Subscribe("s", "x", 3, 0))
        assert await second.receive() == Batch("s", tuple(stable(4, 5)))
        assert prod.subscribers()["x"]["peer"] == prod.conns[1].peer
        await prod.publish([S(6)])
        assert await second.receive() == Batch("s", (S(6),))
        await second.send(Unsubscribe("s", "x"))
        await wait_until(lambda: not prod.subscribers())
        # The first connection is still open and served: it may subscribe again.
        await first.send(Subscribe("s", "x", 6, 0))
        await prod.publish([S(7)])
        assert await first.receive() == Batch("s", (S(7),))
    for c in (first, second):
        await c.close()
    await prod.stop()


async def test_a_late_subscribe_on_an_older_connection_does_not_steal_the_feed(
        net: Net) -> None:
    """A Subscribe delayed on a connection the subscriber has left (found by dpc simulate,
    seed 4063: a delay fault on the client's link) arrives after the one on its newer
    connection: the older connection is refused, the newer keeps the subscription."""
    prod = await Producer(net).start()
    await prod.publish(stable(1, 5))
    older = await net.transport("x").connect(net.host, prod.port)
    await wait_until(lambda: len(prod.conns) == 1)  # accepted first
    newer = await raw_subscribe(net, prod, "x", Subscribe("s", "x", 3, 0))
    async with asyncio.timeout(GUARD):
        assert await newer.receive() == Batch("s", tuple(stable(4, 5)))
        await older.send(Subscribe("s", "x", 3, 0))  # the late one
        assert await older.receive() is None  # refused: that connection is closed
        await prod.publish([S(6)])
        assert await newer.receive() == Batch("s", (S(6),))
    for c in (older, newer):
        await c.close()
    await prod.stop()


async def test_acks_of_consumers_trim_the_buffer_and_others_are_ignored(net: Net) -> None:
    prod = await Producer(net).start()
    prod.buffers["s"].set_consumers(["c1"])
    await prod.publish(stable(1, 10))
    conn = await raw_subscribe(net, prod, "x", Ack("s", "stranger", 10))
    await conn.send(Ack("s", "c1", 4))
    await conn.send(Subscribe("s", "stranger", 8, 0))
    async with asyncio.timeout(GUARD):
        assert await conn.receive() == Batch("s", tuple(stable(9, 10)))  # still served
    assert prod.buffers["s"].trimmed_up_to == 4
    await conn.close()
    await prod.stop()


def test_publishing_to_an_unknown_stream_is_a_local_error() -> None:
    pub = Publisher("up", {"s": OutputBuffer("s")}, log=LOG)
    with pytest.raises(NodeError, match="'nope'"):
        pub.publish("nope", [S(1)])


# ---------------------------------------------------------------------------- bad requests
BAD = {
    "batch": (Batch("s", (S(1),)), "sent a Batch"),
    "unknown stream": (Subscribe("nope", "x", 0, 0), "unknown stream 'nope'"),
    "trimmed": (Subscribe("s", "x", 0, 0), "already trimmed"),
    "unexpected": (HeartbeatRequest("x", 1), "unexpected HeartbeatRequest"),
    "ack unknown stream": (Ack("nope", "x", 1), "Ack for unknown stream"),
}


@pytest.mark.parametrize("case", list(BAD))
async def test_a_bad_request_closes_only_its_connection(
    net: Net, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    msg, says = BAD[case]
    prod = await Producer(net).start()
    await prod.publish(stable(1, 10))
    link, sink = make_link(net, [prod.address], name="c9")
    async with running(link.run()):
        await wait_until(lambda: link.last_stable_id == 10)
        if case == "trimmed":  # the link acks: the buffer forgets 1..10
            prod.buffers["s"].set_consumers(["c9"])
            await wait_until(lambda: prod.buffers["s"].trimmed_up_to == 10)
        bad = await raw_subscribe(net, prod, "bad", msg)
        async with asyncio.timeout(GUARD):
            assert await bad.receive() is None  # closed on us
        peer = prod.conns[-1].peer
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert any(peer in e and says in e for e in errors), errors
        await prod.publish(stable(11, 20))
        await wait_until(lambda: link.last_stable_id == 20)
    assert sink.ids() == list(range(1, 21)) and link.reconnects == 0
    await bad.close()
    await prod.stop()


async def test_a_silent_peer_is_closed_after_hello_timeout(
    net: Net, caplog: pytest.LogCaptureFixture
) -> None:
    prod = await Producer(net, hello_timeout=0.05).start()
    conn = await net.transport("mute").connect(net.host, prod.port)
    async with asyncio.timeout(GUARD):
        assert await conn.receive() is None
    peer = prod.conns[-1].peer
    assert any(
        f"peer {peer} connected but said nothing for 0.05 s" in r.getMessage()
        for r in caplog.records
    )
    await conn.close()
    await prod.stop()


# ------------------------------------------------------------- amnesia: live end, release
async def test_a_live_subscribe_starts_after_the_last_stable_tuple(net: Net) -> None:
    """``Subscribe(live=True)`` ignores the ids it carries: the subscriber gets what follows
    the producer's last stable tuple (its tentative tail included), then everything new,
    and it counts as an ack of that tuple (an amnesia takeover, docs/ha-modes.md)."""
    prod = await Producer(net).start()
    prod.buffers["s"].set_consumers(["x", "other"])
    await prod.publish([*stable(1, 5), T(6), T(7)])
    conn = await raw_subscribe(net, prod, "x", Subscribe("s", "x", 0, 0, live=True))
    async with asyncio.timeout(GUARD):
        assert await conn.receive() == Batch("s", (T(6), T(7)))
        await prod.publish([T(8)])
        assert await conn.receive() == Batch("s", (T(8),))
    assert prod.buffers["s"].consumer_status()["x"]["acked"] == 5
    await conn.close()
    await prod.stop()


async def test_a_release_stops_a_silent_consumer_pinning_the_buffer(net: Net) -> None:
    """A consumer heard from pins the buffer at its last ack for ever (a crashed replica
    resumes from there); ``Unsubscribe(release=True)`` says it wants nothing any more (an
    amnesia secondary, restarted), so the buffer trims by the others; its next ack holds
    trimming again. A release naming a stream or consumer not served here is refused."""
    prod = await Producer(net).start()
    buf = prod.buffers["s"]
    buf.set_consumers(["x", "y"])
    await prod.publish(stable(1, 10))
    conn = await raw_subscribe(net, prod, "x", Ack("s", "x", 2))
    await conn.send(Ack("s", "y", 9))
    await wait_until(lambda: buf.trimmed_up_to == 2)  # x pins at 2
    await conn.send(Unsubscribe("s", "x", release=True))
    await wait_until(lambda: buf.trimmed_up_to == 9)
    await prod.publish(stable(11, 12))
    await conn.send(Ack("s", "x", 11))
    await conn.send(Ack("s", "y", 12))
    await wait_until(lambda: buf.trimmed_up_to == 11)  # x holds trimming again
    await conn.send(Unsubscribe("s", "stranger", release=True))
    async with asyncio.timeout(GUARD):
        assert await conn.receive() is None  # refused: the connection is closed
    assert buf.trimmed_up_to == 11
    await conn.close()
    await prod.stop()


# ---------------------------------------------------------------------------- partitions
async def test_a_partition_s_subscriber_gets_its_share_in_replay_live_feed_and_resume(
        net: Net) -> None:
    """A replica of a partition node (``splits``) receives the data tuples whose key hashes
    to its partition and every control tuple, in the replay and in the live feed, and after
    the producer restarts it resumes after its last id: exactly its share, once
    (protocol/exchange.py)."""
    splits = {"s": {f"p{i}": Split(i, 2, (0,)) for i in range(2)}}
    prod = await Producer(net, splits=splits).start()
    stream = [*stable(1, 30), boundary(300), *stable(31, 60)]
    await prod.publish(stream[:20])
    links = [make_link(net, [prod.address], name=f"p{i}") for i in range(2)]
    whole = make_link(net, [prod.address], name="all")
    async with running(*(link.run() for link, _ in [*links, whole])):
        await wait_until(lambda: all(link.connected for link, _ in [*links, whole]))
        await prod.publish(stream[20:40])
        await wait_until(lambda: whole[0].last_stable_id == 39)
        await prod.stop()  # every link loses its connection, and resumes
        await prod.start()
        await prod.publish(stream[40:])
        await wait_until(lambda: whole[0].last_stable_id == 60)
        shares = [Split(i, 2, (0,)).select(stream) for i in range(2)]
        for (link, _), share in zip(links, shares, strict=True):
            await wait_until(lambda link=link, share=share:
                             link.last_stable_id == share[-1].id)
    for (link, sink), share in zip(links, shares, strict=True):
        assert link.reconnects >= 1
        assert sink.raw == share  # its share, in order, nothing twice
        assert boundary(300) in sink.raw
    assert sorted(t.id for _, sink in links for t in sink.data()) == list(range(1, 61))
    assert whole[1].raw == stream  # a subscriber without a split: the whole stream
    await prod.stop()
