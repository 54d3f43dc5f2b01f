"""Fault injection (node.faults.rules) over TCP on loopback and over the memory transport.

Blackhole cuts silence one or both directions without blocking anyone, connects to a cut
peer time out or wait for the heal, a heal closes the connections that may have lost
messages and only those, in the order they were opened; reset cuts tear connections down at
once and refuse connects; shapes add latency (not a pause per message), pace to a bandwidth
and read slowly, and their back-pressure reaches the sender. A replica's ``POST /fault``
action is driven in-process (the replica built over memory, never run).

Every wait for an outcome waits on a condition; the only timings asserted are lower bounds
the shapes imply (and one generous upper bound: a delay is latency, not a per-message
pause)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from node.config.load import load_config
from node.errors import ActionError, NodeError
from node.faults.ops import CutKind, Direction
from node.faults.rules import CutRule, Faults
from node.net.memory import MemoryTransport
from node.procs.rundir import RunDir
from node.replica.runtime import Replica
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
from tests.node.faults.fault_world import CLEAN, FLOOD, LOG, World, closed_by_peer, flood
from tests.node.net.test_transport import (
    GUARD,
    LEAK_FREE,
    big_batch,
    wait_until,
)
from tests.paths import EXAMPLES

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


async def test_a_rule_made_while_a_receive_waits_applies_to_what_it_reads() -> None:
    faults = Faults("a", log=LOG)
    inner = Scripted([])
    conn = faults.wrap(inner, "b")
    pending = asyncio.create_task(conn.receive())
    try:
        await asyncio.sleep(0)  # now waiting inside the inner receive, with no rule at all
        faults.cut(["b"], direction="in")
        inner.queue.put_nowait(Ack("s", "b", 1))
        await wait_until(lambda: faults.status()["dropped_in"] == 1)
        assert not pending.done()  # dropped, and reading goes on
        faults.cut(["b"], direction="out")  # replaces the rule: what b sends arrives again
        faults.shape(["b"], delay=0.05)
        loop = asyncio.get_running_loop()
        sent = loop.time()
        inner.queue.put_nowait(Ack("s", "b", 2))
        async with asyncio.timeout(GUARD):
            assert await pending == Ack("s", "b", 2)
        assert loop.time() - sent >= 0.05
    finally:
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)
        await conn.close()


class Named(Scripted):
    """A scripted connection that writes its name in ``log`` when closed."""

    def __init__(self, name: str, log: list[str]) -> None:
        super().__init__([])
        self.name, self.log = name, log

    async def close(self) -> None:
        self.log.append(self.name)
        await super().close()


async def test_the_registry_holds_open_connections_only_in_wrap_order() -> None:
    faults = Faults("a", log=LOG)
    closed = faults.wrap(Scripted([]), "b")
    kept = [faults.wrap(Scripted([]), peer) for peer in ("c", "b", None, "d")]
    healed = faults.wrap(Scripted([]), "e")
    reset = faults.wrap(Scripted([]), "f")
    await closed.close()
    faults.cut(["e"])
    faults.heal(["e"])  # severed: out at once
    faults.cut(["f"], kind="reset")  # torn down: out at once
    assert list(faults._conns.values()) == kept
    assert list(faults._conns) == sorted(faults._conns)  # keys only grow
    for conn in [*kept, healed, reset]:
        await conn.close()
    assert not faults._conns


async def test_a_heal_and_a_reset_close_connections_in_the_order_they_were_opened() -> None:
    faults = Faults("a", log=LOG)
    log: list[str] = []
    peers = ["c", "b", "d", "c", "x", "b", "d"]  # x is never cut
    conns = [faults.wrap(Named(f"{i}:{peer}", log), peer) for i, peer in enumerate(peers)]
    faults.cut(["d", "b"])
    faults.cut(["c"], direction="in")
    faults.heal()
    for conn in reversed(conns):  # closing in another order changes nothing
        await conn.close()
    assert log[:6] == ["0:c", "1:b", "2:d", "3:c", "5:b", "6:d"]
    log.clear()
    conns = [faults.wrap(Named(f"{i}:{peer}", log), peer) for i, peer in enumerate(peers)]
    faults.cut(["d", "c", "b"], kind="reset")
    for conn in reversed(conns):
        await conn.close()
    assert log == ["0:c", "1:b", "2:d", "3:c", "5:b", "6:d", "4:x"]


# ---------------------------------------------------------------------------- rules
def test_a_later_cut_replaces_the_rule_and_status_reports_rules_and_shapes() -> None:
    faults = Faults("a", log=LOG)
    faults.cut(["b", "c"])
    faults.cut(["b"], direction="in")
    faults.cut(["d"], kind=CutKind.RESET)
    faults.shape(["b"], delay=0.5)
    faults.shape(["b", "e"], bandwidth=1000, slow=0.1)
    st = faults.status()
    assert st["cut"] == ["b", "c", "d"]
    assert st["rules"] == {
        "b": {"direction": "in", "kind": "blackhole"},
        "c": {"direction": "both", "kind": "blackhole"},
        "d": {"direction": "both", "kind": "reset"},
    }
    shaped = {"delay": 0.0, "bandwidth": 1000.0, "slow": 0.1}
    assert st["shapes"] == {"b": shaped, "e": shaped}
    assert faults.rule("b") == CutRule(Direction.IN, CutKind.BLACKHOLE)
    assert faults.heal(["e", "b", "z"]) == ["b", "e"]  # a cut, a shape, or both
    st = faults.status()
    assert (st["cut"], st["shapes"]) == (["c", "d"], {})
    assert faults.heal() == ["c", "d"] and faults.status() == CLEAN


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda f: f.cut(["b"], direction="sideways"),
         r"direction must be one of 'both', 'in', 'out', got 'sideways'"),
        (lambda f: f.cut(["b"], kind="crash"),
         r"kind must be one of 'blackhole', 'reset', got 'crash'"),
        (lambda f: f.cut(["b"], direction="in", kind="reset"),
         r"a reset cuts both ways, so kind 'reset' takes direction 'both', got 'in'"),
        (lambda f: f.cut(["b"], direction=Direction.OUT, kind=CutKind.RESET), r"got 'out'"),
        (lambda f: f.shape(["b"]), r"give a delay > 0, a bandwidth or a slow > 0"),
        (lambda f: f.shape(["b"], delay=-1), r"delay must be a finite number of seconds >= 0"),
        (lambda f: f.shape(["b"], slow=float("nan")), r"slow must be a finite number"),
        (lambda f: f.shape(["b"], delay=True), r"delay must be .*, got True"),
        (lambda f: f.shape(["b"], delay="1"), r"delay must be .*, got '1'"),
        (lambda f: f.shape(["b"], bandwidth=0), r"bandwidth must be .* > 0 .*, got 0"),
        (lambda f: f.shape(["b"], bandwidth=float("inf")), r"bandwidth must be .*, got inf"),
        (lambda f: f.shape(["a"], delay=1), r"cannot shape process 'a' from itself"),
        (lambda f: f.shape("b", delay=1), r"expected a list of names, got the string 'b'"),
    ],
)
def test_bad_rules_raise_node_error_and_change_nothing(
    call: Callable[[Faults], None], message: str
) -> None:
    faults = Faults("a", log=LOG)
    faults.cut(["b"], direction="out")
    before = faults.status()
    with pytest.raises(NodeError, match=message):
        call(faults)
    assert faults.status() == before


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


# ---------------------------------------------------------------------------- control plane
@pytest.fixture
def replica(tmp_path: Path) -> Iterator[Replica]:
    """Replica n1a of examples/basic.toml, built in-process over memory and never run:
    enough for its ``POST /fault`` action (the control plane hands it the JSON body)."""
    config = load_config(EXAMPLES / "basic.toml")
    r = Replica(config, "n1a", RunDir(tmp_path).ensure(), MemoryTransport().for_process("n1a"))
    yield r
    for writer in r.output_logs.values():
        writer.close()


async def test_the_fault_action_cuts_shapes_and_heals(replica: Replica) -> None:
    act, faults = replica._fault_action, replica.faults
    assert await act({"cut": ["s3"]}) == {
        "cut": ["s3"], "rules": {"s3": {"direction": "both", "kind": "blackhole"}}
    }
    await act({"cut": ["s2", "n1b"], "direction": "in"})
    await act({"cut": ["s1"], "kind": "reset", "direction": "both"})
    assert await act({"shape": ["s3"], "delay": 0.2, "bandwidth": 5e4, "slow": 0.01}) == {
        "shapes": {"s3": {"delay": 0.2, "bandwidth": 5e4, "slow": 0.01}}
    }
    await act({"shape": ["s2"], "bandwidth": None, "slow": 1})
    st = faults.status()
    assert st["rules"] == {
        "n1b": {"direction": "in", "kind": "blackhole"},
        "s1": {"direction": "both", "kind": "reset"},
        "s2": {"direction": "in", "kind": "blackhole"},
        "s3": {"direction": "both", "kind": "blackhole"},
    }
    assert st["shapes"]["s2"] == {"delay": 0.0, "bandwidth": None, "slow": 1.0}
    assert await act({"heal": ["s3", "n1b"]}) == {"healed": ["n1b", "s3"], "cut": ["s1", "s2"]}
    assert await act({"stall": "replay"}) and not replica.manager.replay_gate.is_set()
    assert await act({"heal": "all"}) == {"healed": ["s1", "s2"], "cut": []}
    assert faults.status() == CLEAN and replica.manager.replay_gate.is_set()


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ({}, 'send {"cut": [names]}'),
        ({"cut": ["s3"], "heal": "all"}, 'send {"cut": [names]}'),
        ({"delay": 1}, 'send {"cut": [names]}'),
        ({"cut": "s3"}, "'cut': the names must be a list of process names, got 's3'"),
        ({"heal": None}, "'heal': the names must be a list of process names, got None"),
        ({"cut": ["nobody"]}, "unknown process(es) ['nobody']"),
        ({"shape": ["n1a"], "delay": 1}, "unknown process(es) ['n1a']"),
        ({"cut": ["s3"], "delay": 1}, "unknown key(s) ['delay'] with 'cut': it takes"),
        ({"heal": "all", "kind": "reset"}, "unknown key(s) ['kind'] with 'heal'"),
        ({"cut": ["s3"], "direction": "up"}, "direction must be one of 'both', 'in', 'out'"),
        ({"cut": ["s3"], "kind": None}, "kind must be one of 'blackhole', 'reset', got None"),
        ({"cut": ["s3"], "kind": "reset", "direction": "out"}, "a reset cuts both ways"),
        ({"shape": ["s3"]}, "give a delay > 0, a bandwidth or a slow > 0"),
        ({"shape": ["s3"], "bandwidth": -5}, "bandwidth must be a finite number"),
        ({"shape": ["s3"], "delay": "1s"}, "delay must be a finite number of seconds >= 0"),
        ({"shape": ["s3"], "slow": True}, "slow must be a finite number of seconds >= 0"),
        ({"stall": "everything"}, 'send {"stall": "replay"}'),
    ],
)
async def test_the_fault_action_refuses_bad_bodies_and_changes_nothing(
    replica: Replica, body: dict[str, Any], why: str
) -> None:
    await replica._fault_action({"cut": ["s2"], "direction": "out"})
    before = replica.faults.status()
    with pytest.raises(ActionError) as caught:
        await replica._fault_action(body)
    assert why in str(caught.value)
    assert replica.faults.status() == before
