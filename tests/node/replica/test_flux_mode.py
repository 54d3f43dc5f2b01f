"""A replica's Flux reactions (node/replica/flux.py) on controller events: a secondary takes
over on fail(partner) only; ack_all on a failed consumer; a catch-up pauses the acks until
avail or fail of *that* incarnation (a late fail of the one before changes nothing: dpc
simulate --cluster examples/flux.toml seed 4100 restarted n1p0a within the detection time,
and that fail, reported after the new incarnation had asked, ended its pause early)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from node.flux.events import Event, Kind
from node.replica.flux import FluxMode
from node.replica.pair import Pair, Role
from state.buffer import OutputBuffer


@dataclass
class Link:
    stream: str
    ack_id: int
    ack_cap: int | None = None


@dataclass
class Settings:
    ha: str = "flux"


@dataclass
class Node:
    settings: Settings = field(default_factory=Settings)


@dataclass
class Me:
    name: str = "n1b"


class Replica(FluxMode):
    def __init__(self, role: Role) -> None:
        self.me = Me()  # type: ignore[assignment]
        self.node = Node()  # type: ignore[assignment]
        self.links = [Link("s1", 10), Link("s2", 7)]  # type: ignore[list-item]
        self.buffers = {"n1.out": OutputBuffer("n1.out")}
        self.buffers["n1.out"].set_consumers(("n2a", "n2b"))
        self.pair = Pair("n1b", "n1a", 1, role)
        self.steps: list[Any] = []

    def _pair_step(self, pair: Pair, actions: Any) -> None:
        self.pair = pair
        self.steps.append(actions)


def test_a_secondary_takes_over_on_the_controller_s_fail_of_its_partner_only() -> None:
    r = Replica(Role.SECONDARY)
    r.flux_event(Event(1, Kind.FAIL, "n2a", 5))
    assert r.pair is not None and r.pair.role is Role.SECONDARY and not r.steps
    assert "n2a" in r.buffers["n1.out"].consumer_status()  # (still a consumer, released)
    r.flux_event(Event(2, Kind.FAIL, "n1a", 5))
    assert r.pair.role is Role.PRIMARY and len(r.steps) == 1
    r.flux_event(Event(3, Kind.AVAIL, "n1a", 6))
    assert r.pair.role is Role.PRIMARY  # the partner rejoins as the secondary


def test_a_catch_up_pauses_acks_until_that_incarnation_is_available_or_failed() -> None:
    r = Replica(Role.PRIMARY)
    r.pause_for_catch_up("n1a", 20)
    assert [link.ack_cap for link in r.links] == [10, 7]
    r.flux_event(Event(4, Kind.FAIL, "n1a", 19))  # the incarnation before, reported late
    assert [link.ack_cap for link in r.links] == [10, 7] and r.catching_up == ("n1a", 20)
    r.flux_event(Event(5, Kind.AVAIL, "n1a", 20))
    assert [link.ack_cap for link in r.links] == [None, None] and r.catching_up is None
    r.pause_for_catch_up("n1a", 21)
    r.flux_event(Event(6, Kind.FAIL, "n1a", 21))  # it failed during the move: idempotent
    assert [link.ack_cap for link in r.links] == [None, None] and r.catching_up is None


def test_a_failed_consumer_stops_holding_the_output_buffer() -> None:
    from protocol.tuples import Kind as TK
    from protocol.tuples import make_tuple

    r = Replica(Role.PRIMARY)
    buf = r.buffers["n1.out"]
    buf.append([make_tuple(TK.STABLE, i, i, i, (i,)) for i in range(1, 11)])
    buf.ack("n2a", 3)
    buf.ack("n2b", 8)
    assert buf.trimmed_up_to == 3
    r.flux_event(Event(7, Kind.FAIL, "n2a", 1))  # ack_all: only n2b's acks hold it now
    assert buf.trimmed_up_to == 8


def test_a_pause_without_word_of_its_incarnation_ends_after_the_limit() -> None:
    """A standby killed before the controller's probes saw it: no event will ever name
    that incarnation; a newer one's request supersedes the pause, and without one the
    pause ends after PAUSE_LIMIT (the producers' buffers stop growing for it)."""
    from node.clock import use_clock
    from node.replica.flux import PAUSE_LIMIT

    now = [1_000]
    use_clock(lambda: now[0])
    try:
        r = Replica(Role.PRIMARY)
        r.pause_for_catch_up("n1a", 20)
        r.pause_for_catch_up("n1a", 21)  # superseded: the newer incarnation's
        assert r.catching_up == ("n1a", 21)
        now[0] += PAUSE_LIMIT
        r.flux_idle()
        assert r.catching_up == ("n1a", 21)
        now[0] += 1
        r.flux_idle()
        assert r.catching_up is None and [link.ack_cap for link in r.links] == [None, None]
    finally:
        use_clock(None)
