"""The process pair's roles (node/replica/pair.py): who starts primary, who takes over, and
that two replicas that hear each other end with exactly one primary whatever happened."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from node.replica.keepalive import role_of
from node.replica.pair import Pair, Role, StepDown, TakeOver, heard, holds_state, silent, start
from protocol.messages import ConsistencyState, HeartbeatResponse

P, S = Role.PRIMARY, Role.SECONDARY


def test_a_fresh_start_follows_the_config_and_a_restart_is_a_secondary() -> None:
    assert start("a", "b", 0, recovered=False).role is P
    assert start("b", "a", 1, recovered=False).role is S
    assert start("a", "b", 0, recovered=True).role is S
    assert start("b", "a", 1, recovered=True).role is S
    with pytest.raises(ValueError, match="ranks 0 and 1"):
        start("c", "a", 2, recovered=False)


def test_a_secondary_takes_over_when_its_primary_fails() -> None:
    b = start("b", "a", 1, recovered=False)
    b, actions = silent(b)
    assert b.role is P and actions == [TakeOver("a failed: taking over")]
    assert silent(b) == (b, [])  # a primary whose secondary fails goes on alone


def test_of_two_secondaries_the_one_that_holds_state_serves_at_once() -> None:
    """a restarted before b noticed the crash: b, which holds the state (a passive
    standby's checkpoints), takes over at its first answer; a, stateless, waits."""
    a = start("a", "b", 0, recovered=True, patience=4)
    b = Pair("b", "a", 1, S)
    b, actions = heard(b, a.role)
    assert b.role is P and isinstance(actions[0], TakeOver)
    for _ in range(10):
        a, actions = heard(a, S)  # (had b not answered as a primary yet)
        if a.role is P:
            break
    assert a.waited == 0 and a.role is P  # only after its patience, by rank
    a = start("a", "b", 0, recovered=True, patience=4)
    for _ in range(3):
        a, actions = heard(a, S)
        assert a.role is S and not actions
    a, _ = heard(a, P)  # b took over meanwhile
    assert a.role is S and a.waited == 0


def test_two_stateless_secondaries_make_the_lower_rank_primary_after_their_patience() -> None:
    a = start("a", "b", 0, recovered=True, patience=2)
    b = start("b", "a", 1, recovered=True, patience=2)
    for _ in range(5):
        b, actions = heard(b, a.role)
        assert b.role is S and not actions  # the higher rank never claims it
    a, actions = heard(a, b.role)
    assert a.role is S
    a, actions = heard(a, b.role)
    assert a.role is P and isinstance(actions[0], TakeOver)


def test_a_restarted_replica_holds_state_once_it_has_a_copy() -> None:
    a = holds_state(start("a", "b", 0, recovered=True))
    assert not a.recovered
    a, actions = heard(a, S)
    assert a.role is P and isinstance(actions[0], TakeOver)


def test_two_primaries_make_the_higher_rank_step_down_after_its_patience() -> None:
    a = start("a", "b", 0, recovered=False, patience=3)
    b = Pair("b", "a", 1, P, patience=3)  # it took over across a partition that healed
    for _ in range(5):
        a, actions = heard(a, P)
        assert a.role is P and not actions  # the lower rank never yields by rank
    for _ in range(2):
        b, actions = heard(b, a.role)
        assert b.role is P and not actions
    b, actions = heard(b, a.role)
    assert b.role is S and isinstance(actions[0], StepDown)


def test_a_primary_without_state_yields_at_once_and_a_secondary_needing_state_waits() -> None:
    """A restarted replica of a mode that serves from checkpoints, cut off before its first
    one: silence does not make it take over (its partner is alive: one failure at a
    time); one that took over without state (amnesia) yields at once to a second primary."""
    c = start("c", "d", 0, recovered=True, needs_state=True)
    assert silent(c) == (c, [])
    assert silent(holds_state(c))[0].role is P
    e = start("e", "f", 1, recovered=True)  # amnesia: needs no state
    e, _ = silent(e)
    assert e.role is P and e.recovered
    e, actions = heard(e, P)
    assert e.role is S and isinstance(actions[0], StepDown)


EVENTS = st.lists(st.sampled_from(["a_hears", "b_hears", "a_silent", "b_silent",
                                   "a_restarts", "b_restarts"]), max_size=30)


@given(EVENTS, st.booleans())
def test_two_replicas_that_hear_each_other_end_with_one_primary(events: list[str],
                                                                 a_first: bool) -> None:
    pairs = {"a": start("a", "b", 0, recovered=False), "b": start("b", "a", 1, recovered=False)}
    other = {"a": "b", "b": "a"}
    for e in events:
        who, what = e.split("_")
        if what == "hears":
            pairs[who], _ = heard(pairs[who], pairs[other[who]].role)
        elif what == "silent":
            pairs[who], _ = silent(pairs[who])
        else:
            pairs[who] = start(who, other[who], 0 if who == "a" else 1, recovered=True,
                               patience=3)
    # Then keep-alives answered each way, in either order, for longer than the patience.
    for _ in range(4):
        for who in ("a", "b") if a_first else ("b", "a"):
            pairs[who], _ = heard(pairs[who], pairs[other[who]].role)
    assert sorted(p.role.value for p in pairs.values()) == ["primary", "secondary"]


def test_a_partner_answering_standby_is_a_secondary() -> None:
    def answer(state: ConsistencyState) -> HeartbeatResponse:
        return HeartbeatResponse("b", 1, ConsistencyState.STABLE, {"n1.out": state},
                                 {"n1.out": 0})
    assert role_of(answer(ConsistencyState.STANDBY)) is S
    assert role_of(answer(ConsistencyState.STABLE)) is P
    assert role_of(answer(ConsistencyState.UP_FAILURE)) is P
