"""Passive standby's checkpoints and upstream backup's restart points
(node/replica/standby.py), pure: what the primary sends (whole, then deltas of the
operators that changed and the output queued since, or of the leaves that moved; nothing
when nothing did), and what the secondary holds after applying them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from node.replica.standby import Shipper, Standby
from protocol.messages import StandbyAck, StandbyCheckpoint
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
    assert sh.take(2, {}, {}, lambda: {"out": [S(1)]}) is None  # nothing moved: nothing sent


def test_nothing_moved_nothing_sent_and_the_next_delta_is_on_the_last_one_sent() -> None:
    sh, bufs = Shipper("n1a"), Buffers()
    sb = Standby(bufs.append)
    first = sh.take(1, {"u": 1}, {"s1": (3, 3)}, lambda: {})
    sb.apply("n1b", first, {})
    assert sh.take(2, {"u": 1}, {"s1": (3, 3)}, lambda: {}) is None
    moved = sh.take(3, {"u": 1}, {"s1": (5, 5)}, lambda: {})  # the input ids alone moved
    assert moved.base == first.seq and moved.parts == {}
    assert not sb.apply("n1b", moved, {}).whole and sb.inputs == {"s1": (5, 5)}


HEADER = {"v": 1, "base": {"last_id": 5, "watermarks": [10, 10], "log": []},
          "state": {"next": 2, "closed_below": 10}}


def test_upstream_backup_ships_the_moved_leaves_of_a_header() -> None:
    """Restart points (operators/restart.py) go as leaf deltas (state/leaves.py): the
    secondary rebuilds every header exactly; an operator of a new shape goes whole."""
    sh, bufs = Shipper("n1a", leaf_deltas=True), Buffers()
    sb = Standby(bufs.append)
    first = sh.take(1, {"agg": HEADER, "f": {"a": 1}}, {"s1": (4, 4)}, lambda: {})
    assert first.parts == {"agg": HEADER, "f": {"a": 1}} and first.leaves == {}
    sb.apply("n1b", first, {})
    header = {"v": 1, "base": {"last_id": 9, "watermarks": [20, 20], "log": []},
              "state": {"next": 2, "closed_below": 20}}
    second = sh.take(2, {"agg": header, "f": {"a": 1, "b": 2}}, {"s1": (8, 8)}, lambda: {})
    assert second.parts == {"f": {"a": 1, "b": 2}}  # another shape: whole
    assert second.leaves == {"agg": [[0, 9], [2, [20, 20]], [3, 20]]}
    assert not sb.apply("n1b", second, {}).whole
    assert sb.parts == {"agg": header, "f": {"a": 1, "b": 2}}
    assert sh.take(3, {"agg": header, "f": {"a": 1, "b": 2}}, {"s1": (8, 8)}, lambda: {}) is None


def test_a_leaf_delta_that_does_not_fit_asks_for_a_whole_one_and_changes_nothing() -> None:
    sb = Standby(Buffers().append)
    sb.apply("n1b", StandbyCheckpoint("n1a", 1, 0, {"agg": HEADER}, {"s1": (4, 4)}, {}), {})
    bad = StandbyCheckpoint("n1a", 2, 1, {}, {"s1": (8, 8)}, {}, {"agg": [[0, 9], [40, 1]]})
    ack = sb.apply("n1b", bad, {})
    assert ack.whole and "does not fit" in (sb.refused or "")
    assert sb.seq == 1 and sb.parts == {"agg": HEADER} and sb.inputs == {"s1": (4, 4)}
    unknown = StandbyCheckpoint("n1a", 3, 1, {}, {}, {}, {"nope": [[0, 1]]})
    assert sb.apply("n1b", unknown, {}).whole and sb.parts == {"agg": HEADER}
