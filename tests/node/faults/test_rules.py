"""A process's fault rules (node.faults.rules.Faults) in-process, over scripted connections
(no network): names are checked, cut and heal are idempotent and sorted, the accepting end
learns its peer's name from the first message that names it, a severed connection delivers
nothing more, the registry holds the open connections only and a heal or a reset closes
them in the order they were opened, a rule made while a receive waits applies to what it
reads, a later rule replaces an earlier one, and a bad rule is refused without a change.
Cuts over a network are in test_cuts.py.

The only timing asserted is a lower bound a shape implies (a delay)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from node.errors import NodeError
from node.faults.ops import CutKind, Direction
from node.faults.rules import CutRule, Faults
from protocol.messages import (
    Ack,
    Batch,
    ConsistencyState,
    HeartbeatRequest,
    HeartbeatResponse,
    Hello,
    Message,
    Proof,
    ReconcileGrant,
    ReconcileRequest,
    Subscribe,
    Unsubscribe,
)
from tests.node.faults.fault_world import CLEAN, LOG
from tests.node.net.test_transport import (
    GUARD,
    LEAK_FREE,
    wait_until,
)

pytestmark = LEAK_FREE


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
        (Hello("b", "00" * 16), "b"),
        # Any message that names its sender (protocol.messages.sender_of): an answer has no
        # business on an accepting end, but it names its sender all the same.
        (HeartbeatResponse("b", 1, ConsistencyState.STABLE, {}, {}), "b"),
        (ReconcileGrant("b", 1), "b"),
        (Batch("s", ()), None),
        (Proof("00"), None),
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
