"""Passive standby's checkpoints (node/replica/standby.py), pure: what the primary sends
(whole, then deltas of the operators that changed and the output queued since), and what
the secondary holds after applying them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from node.replica.standby import Shipper, Standby
from protocol.messages import StandbyAck
from protocol.tuples import Kind, Tuple, boundary, make_tuple


def S(i: int) -> Tuple:
    return make_tuple(Kind.STABLE, i, 10 * i, 10 * i, (i,))


class Buffers:
    """The secondary's output buffers, as lists."""

    def __init__(self) -> None:
        self.got: dict[str, list[Tuple]] = {}

    def append(self, stream: str, tuples: Sequence[Tuple]) -> None:
        self.got.setdefault(stream, []).extend(tuples)

    def last_ids(self) -> dict[str, int]:
        return {s: max((t.id for t in ts if t.kind is Kind.STABLE), default=0)
                for s, ts in self.got.items()}


def test_a_whole_checkpoint_then_deltas_of_what_changed() -> None:
    sh, bufs = Shipper("n1a"), Buffers()
    sb = Standby(bufs.append)
    parts: dict[str, Any] = {"u": {"n": 1}, "agg": {"sum": 5}}
    held = {"out": [S(1), S(2), boundary(25)]}
    first = sh.take(1, parts, {"s1": (7, 7)}, lambda: held)
    assert first.base == 0 and first.parts == parts and first.outputs == {"out": tuple(held["out"])}
    assert sb.apply("n1b", first, bufs.last_ids()) == StandbyAck("n1b", first.seq, False)
    sh.acked(StandbyAck("n1b", first.seq, False))
    sh.queued("out", [S(3)])
    parts = {"u": {"n": 1}, "agg": {"sum": 9}}  # only the aggregate changed
    second = sh.take(2, parts, {"s1": (9, 9)}, lambda: held)
    assert second.base == first.seq and second.parts == {"agg": {"sum": 9}}
    assert second.outputs == {"out": (S(3),)}
    assert not sb.apply("n1b", second, bufs.last_ids()).whole
    assert sb.seq == second.seq and sb.parts == parts and sb.inputs == {"s1": (9, 9)}
    assert bufs.got["out"] == [S(1), S(2), boundary(25), S(3)]
    assert sh.acked_seq == first.seq


def test_a_delta_on_another_base_asks_for_a_whole_one() -> None:
    sh, bufs = Shipper("n1a"), Buffers()
    sh.take(1, {"u": 1}, {}, lambda: {})
    delta = sh.take(2, {"u": 2}, {}, lambda: {})  # the whole one never reached it
    sb = Standby(bufs.append)
    ack = sb.apply("n1b", delta, {})
    assert ack.whole and sb.seq == 0 and sb.parts == {}
    sh.acked(ack)
    again = sh.take(3, {"u": 2}, {}, lambda: {})
    assert again.base == 0 and again.parts == {"u": 2}  # whole
    assert not sb.apply("n1b", again, {}).whole and sb.parts == {"u": 2}


def test_a_whole_checkpoint_appends_only_what_the_buffer_lacks() -> None:
    """After a reconnection (or on a stepped-down primary) the secondary's buffer already
    holds a prefix: only the tuples after its last id are appended."""
    sh, bufs = Shipper("n1a"), Buffers()
    bufs.got["out"] = [S(1), S(2)]
    sb = Standby(bufs.append)
    whole = sh.take(1, {}, {}, lambda: {"out": [S(1), S(2), boundary(25), S(3), S(4)]})
    sb.apply("n1b", whole, bufs.last_ids())
    assert bufs.got["out"] == [S(1), S(2), S(3), S(4)]


def test_nothing_is_queued_for_a_delta_before_a_whole_checkpoint_went_out() -> None:
    sh = Shipper("n1a")
    sh.queued("out", [S(1)])  # no connection yet: the whole one will carry the buffer
    whole = sh.take(1, {}, {}, lambda: {"out": [S(1)]})
    assert whole.outputs == {"out": (S(1),)}
    delta = sh.take(2, {}, {}, lambda: {"out": [S(1)]})
    assert delta.outputs == {}
