"""OutputBuffer: UNDO application, the three replay cases, acks and trimming."""

from __future__ import annotations

import pytest

from protocol.tuples import Tuple
from state import OutputBuffer, ReplayAheadError, ReplayError, StateError

from .helpers import RD, TB, B, S, T, U


def buf(*tuples: Tuple, consumers: tuple[str, ...] = ()) -> OutputBuffer:
    b = OutputBuffer("out1")
    b.set_consumers(consumers)
    b.append(list(tuples))
    return b


def test_empty_buffer() -> None:
    b = OutputBuffer("s")
    assert (len(b), b.first_id, b.last_id, b.last_stable_id, b.trimmed_up_to) == (0, None, 0, 0, 0)
    assert b.replay(0, 0) == []
    assert b.replay(0, 5) == [U(0)]


def test_a_buffer_that_retains_nothing_trims_every_stable_tuple_at_once() -> None:
    """Fault tolerance off: whatever the consumers acked, only tentative tuples (and the
    control tuples after the last stable one) stay."""
    b = OutputBuffer("out1", retain=False)
    b.set_consumers(("c1",))  # never acks
    b.append([S(1), S(2), B(20)])
    assert (list(b), b.trimmed_up_to, b.last_stable_id) == ([B(20)], 2, 2)
    b.append([S(3), T(4), T(5)])
    assert (list(b), b.trimmed_up_to) == ([T(4), T(5)], 3)
    b.append([U(3), S(4), B(40)])
    assert (list(b), b.trimmed_up_to) == ([B(40)], 4)


def test_replay_without_tentatives_resumes_after_the_stable_id_with_its_controls() -> None:
    b = buf(B(5), S(1), S(2), B(20), S(3), B(30))
    assert b.replay(0, 0) == [B(5), S(1), S(2), B(20), S(3), B(30)]
    assert b.replay(2, 0) == [B(20), S(3), B(30)]
    assert b.replay(2, 2) == [B(20), S(3), B(30)]
    assert b.replay(3, 0) == [B(30)]
    assert (b.first_id, b.last_id, b.last_stable_id) == (1, 3, 3)


def test_a_replay_is_history_and_carries_no_rec_done() -> None:
    # simulate seed 70580: the REC_DONE right after stable 2 ended an earlier
    # reconciliation; this replica is stabilizing again (UNDO(2), corrected 3, stalled).
    # A corrections reader served it adopted the replica as if that one were done.
    b = buf(S(1), S(2), B(20), RD, T(3), T(4), U(2), S(3), B(30))
    assert list(b) == [S(1), S(2), B(20), RD, S(3), B(30)]
    assert b.replay(2, 2) == [B(20), S(3), B(30)]  # case 1
    assert b.replay(0, 0) == [S(1), S(2), B(20), S(3), B(30)]
    assert b.replay(2, 5) == [U(2), B(20), S(3), B(30)]  # case 3
    assert b.after(2) == [B(20), RD, S(3), B(30)]  # a reader's own buffer keeps it
    b.append([RD, S(4)])
    assert b.replay(3, 3) == [B(30), S(4)]  # a live REC_DONE goes out live, not replayed
    c = buf(S(1), T(2), RD, T(3))
    assert c.replay(1, 2) == [T(3)]  # case 2
    c.set_consumers(["a"])
    c.release_unheard()
    assert c.trimmed_up_to == 1 and c.replay_lapsed("a", 0, 0) == [T(2), T(3)]


def test_replay_continues_the_same_tentative_run() -> None:
    b = buf(S(1), S(2), RD, T(3), T(4), B(40), T(5))
    assert b.replay(2, 4) == [B(40), T(5)]
    assert b.replay(2, 3) == [T(4), B(40), T(5)]
    assert b.replay(2, 5) == []
    assert b.last_stable_id == 2 and b.last_id == 5


def test_replay_undoes_tentatives_the_buffer_has_as_stable() -> None:
    b = buf(S(1), S(2), S(3), B(30), S(4))
    assert b.replay(2, 4) == [U(2), S(3), B(30), S(4)]
    assert b.replay(4, 6) == [U(4)]


def test_replay_undoes_tentatives_the_buffer_does_not_have() -> None:
    # The subscriber got tentative 3..5 elsewhere; this replica's run only reaches 3.
    assert buf(S(1), S(2), B(20), T(3)).replay(2, 5) == [U(2), B(20), T(3)]
    # Ids need not be consecutive (a filter drops some): 4 is not a tuple here.
    assert buf(S(1), S(2), T(3), T(5)).replay(2, 4) == [U(2), T(3), T(5)]
    # A run with a gap cannot be matched to the subscriber's (did it hold 4?): case 3.
    assert buf(S(1), S(2), T(3), T(5), T(6)).replay(2, 5) == [U(2), T(3), T(5), T(6)]
    # Gaps among the stable tuples do not matter.
    assert buf(S(1), S(3), T(4), T(5), B(50)).replay(3, 4) == [T(5), B(50)]


def test_replay_from_a_trimmed_id_raises() -> None:
    b = buf(*[S(i) for i in range(1, 131)], consumers=("d",))
    b.ack("d", 120)
    assert b.trimmed_up_to == 120 and b.first_id == 121 and len(b) == 10
    with pytest.raises(ReplayError) as err:
        b.replay(5, 0)
    assert str(err.value) == (
        "stream 'out1': replay from id 5 requested but the buffer was trimmed up to id 120"
    )
    assert b.replay(120, 0) == [S(i) for i in range(121, 131)]
    assert b.replay(120, 125) == [U(120), *[S(i) for i in range(121, 131)]]


def test_replay_for_a_subscriber_ahead_of_this_replica_raises() -> None:
    b = buf(S(1), S(2), T(3), T(4))
    with pytest.raises(
        ReplayAheadError, match="stable id 4 requested but the last stable id here is 2"
    ):
        b.replay(4, 0)


def test_a_subscriber_ahead_gets_fresh_tentatives_and_never_loses_its_stable_prefix() -> None:
    """It holds stable 1-4 from a partner; this replica (in UP_FAILURE) has stable 1-2 and
    tentative 3-6. It gets tentative 5-6 now, its reconciliation's UNDO(2) as UNDO(4), the
    corrections after 4 and the REC_DONE; then the stream passes unfiltered."""
    b = buf(S(1), S(2), T(3), B(30), T(4), T(5), T(6))
    first, ahead = b.replay_ahead(4, 0)
    assert first == [B(30), T(5), T(6)]
    later = ahead.view([U(2), S(3), S(4), S(5), RD, S(6)])
    assert later == [U(4), S(5), RD, S(6)]
    assert ahead.passing and ahead.view([T(7)]) == [T(7)]
    # It held tentatives of its own past 4 (from the partner): they are taken back first.
    first, ahead = buf(S(1), S(2), T(3)).replay_ahead(4, 6)
    assert first == [U(4)] and not ahead.passing
    # Nothing tentative went out after 4: an UNDO below 4 and its REC_DONE stay here.
    ahead = buf(S(1), S(2), T(3)).replay_ahead(4, 0)[1]
    assert ahead.view([U(2), S(3), RD, S(4), S(5)]) == [S(5)]


def test_undo_deletes_from_the_first_undone_tuple_and_keeps_the_controls_before_it() -> None:
    b = buf(S(1), S(2), B(20), T(3), B(30), T(4), RD)
    b.append([U(3)])
    assert list(b) == [S(1), S(2), B(20), T(3), B(30)]
    assert (b.last_id, b.last_stable_id) == (3, 2)
    b.append([U(2)])  # B(20) closed the last stable bucket: it stays
    assert list(b) == [S(1), S(2), B(20)]
    assert (b.last_id, b.last_stable_id) == (2, 2)
    assert b.replay(2, 0) == [B(20)]
    b.append([S(3), B(30)])  # the correction reuses the undone ids
    assert list(b) == [S(1), S(2), B(20), S(3), B(30)]
    assert (b.last_id, b.last_stable_id) == (3, 3)


def test_undo_past_the_last_data_tuple_deletes_nothing() -> None:
    b = buf(S(1), T(2), B(20), RD)
    for u in (2, 5):
        b.append([U(u)])
        assert list(b) == [S(1), T(2), B(20), RD]
        assert (b.last_id, b.last_stable_id) == (2, 1)
    assert b.replay(1, 2) == [B(20)]  # still the same tentative run (REC_DONE: history)
    b.append([T(3)])
    assert list(b) == [S(1), T(2), B(20), RD, T(3)] and b.last_id == 3


def test_undo_takes_a_tentative_boundary_after_u_even_without_data_after_it() -> None:
    # The UNDO rule (protocol/undo_rule.py); an SOutput never emits one, but the rule holds.
    b = buf(S(1), S(2), B(20), TB(25))
    b.append([U(2)])
    assert list(b) == [S(1), S(2), B(20)] and (b.last_id, b.last_stable_id) == (2, 2)
    b.append([TB(25), T(3), RD, TB(35)])
    b.append([U(3)])
    assert list(b) == [S(1), S(2), B(20), TB(25), T(3), RD]
    b.append([U(2)])
    assert list(b) == [S(1), S(2), B(20)] and b.last_id == 2


def test_undo_to_an_id_that_is_not_in_the_stream() -> None:
    b = buf(S(1), S(3), T(5), B(50), T(7))
    b.append([U(6)])
    assert list(b) == [S(1), S(3), T(5), B(50)] and b.last_id == 5
    b.append([U(4)])
    assert list(b) == [S(1), S(3)] and b.last_id == 3


def test_undo_zero_before_any_stable_tuple_deletes_every_data_tuple() -> None:
    b = buf(B(1), T(1), T(2), RD)
    b.append([U(0)])
    assert list(b) == [B(1)]  # the controls before the first data tuple stay
    assert (b.last_id, b.last_stable_id, b.first_id) == (0, 0, None)
    b.append([S(1)])
    assert list(b) == [B(1), S(1)]
    assert b.replay(0, 2) == [U(0), B(1), S(1)]


def test_undo_and_corrections_inside_one_batch() -> None:
    b = buf(S(1), S(2))
    b.append([T(3), B(30), T(4), U(2), S(3), S(4), RD, T(5)])
    assert list(b) == [S(1), S(2), S(3), S(4), RD, T(5)]
    assert (b.last_stable_id, b.last_id) == (4, 5)
    assert b.replay(4, 5) == []


def test_undoing_stable_tuples_is_refused() -> None:
    b = buf(S(1), S(2), S(3), T(4), consumers=("d",))
    with pytest.raises(
        StateError, match=r"UNDO\(2\) would undo stable tuples \(last stable id 3\)"
    ):
        b.append([U(2)])
    b.ack("d", 3)
    with pytest.raises(
        ReplayError, match=r"UNDO\(0\) would undo stable tuples that the buffer already trimmed"
    ):
        b.append([U(0)])
    assert list(b) == [T(4)]


def test_ids_must_increase_across_batches() -> None:
    b = buf(S(1), S(2))
    with pytest.raises(StateError, match="tuple id 2 appended after id 2"):
        b.append([B(5), S(2)])
    assert list(b) == [S(1), S(2)]


@pytest.mark.parametrize("split", [True, False])
def test_stable_after_tentative_without_undo_is_refused(split: bool) -> None:
    b = buf(S(1))
    batches = [[T(2)], [B(20), S(3)]] if split else [[T(2), B(20), S(3)]]
    with pytest.raises(StateError, match="STABLE tuple id 3 follows TENTATIVE tuple id 2"):
        for batch in batches:
            b.append(batch)
    assert list(b) == ([S(1), T(2)] if split else [S(1)])


def test_append_takes_any_iterable() -> None:
    b = OutputBuffer("s")
    b.append(S(i) for i in range(1, 4))
    b.append(())
    assert list(b) == [S(1), S(2), S(3)]


def test_trimming_waits_for_every_consumer_and_takes_the_minimum() -> None:
    b = buf(S(1), B(10), S(2), B(20), S(3), B(30), S(4), S(5), consumers=("a", "b"))
    b.ack("a", 4)
    assert b.trimmed_up_to == 0 and len(b) == 8  # b never acked: it holds trimming back
    b.ack("b", 2)
    assert b.trimmed_up_to == 2
    # The boundary right after the last trimmed tuple stays: b may not have received it.
    assert list(b) == [B(20), S(3), B(30), S(4), S(5)]
    b.ack("b", 1)  # a late, older ack changes nothing
    b.ack("b", 5)
    assert b.trimmed_up_to == 4 and list(b) == [S(5)]
    assert b.first_id == 5


def test_ack_from_an_unknown_consumer_raises() -> None:
    b = buf(S(1), consumers=("a",))
    with pytest.raises(
        StateError, match="ack from unknown consumer 'zed' \\(known consumers: 'a'\\)"
    ):
        b.ack("zed", 1)


def test_dropping_a_lagging_consumer_releases_trimming() -> None:
    b = buf(S(1), S(2), S(3), consumers=("a", "slow"))
    b.ack("a", 3)
    assert b.trimmed_up_to == 0
    b.set_consumers(["a"])
    assert b.trimmed_up_to == 3 and len(b) == 0
    b.set_consumers(["a", "new"])  # a new consumer keeps everything from now on
    b.append([S(4)])
    b.ack("a", 4)
    assert b.trimmed_up_to == 3 and b.consumers == ("a", "new")


def test_no_consumer_means_no_trimming() -> None:
    b = buf(S(1), S(2))
    b.set_consumers([])
    assert b.trimmed_up_to == 0 and len(b) == 2


def test_tentative_tuples_are_never_trimmed() -> None:
    b = buf(S(1), S(2), B(20), T(3), T(4), consumers=("a",))
    b.ack("a", 4)  # a holds stable 3 and 4 from another replica, say
    assert b.trimmed_up_to == 2 and list(b) == [B(20), T(3), T(4)]
    b.append([U(2), S(3), S(4), S(5)])
    # What a acked ahead is trimmed as it is appended (Flux's dangling sequence numbers,
    # tests/state/test_flux_buffer_equivalence.py), not at its next ack only.
    assert b.trimmed_up_to == 4 and list(b) == [S(5)]


def test_long_stream_with_compaction() -> None:
    n = 5000
    b = OutputBuffer("long")
    b.set_consumers(["a"])
    for i in range(1, n + 1, 50):
        b.append([x for j in range(i, i + 50) for x in (S(j), B(10 * j + 5))])
    b.append([T(n + 1), T(n + 2), B(1), T(n + 3)])
    b.ack("a", 4000)  # trims most of the list: the prefix is dropped physically
    assert b.trimmed_up_to == 4000 and len(b) == 2 * (n - 4000) + 1 + 4
    assert list(b)[:2] == [B(40005), S(4001)]
    assert b.replay(n, n + 2) == [B(1), T(n + 3)]
    b.ack("a", n)
    assert b.trimmed_up_to == n
    b.append([U(n + 1)])
    assert list(b)[-2:] == [B(10 * n + 5), T(n + 1)]
    with pytest.raises(StateError, match=f"follows TENTATIVE tuple id {n + 1}"):
        b.append([S(n + 2)])
    b.append([U(n)])  # keeps the boundary after the (trimmed) stable tuple n
    assert list(b) == [B(10 * n + 5)]
    assert (b.last_id, b.last_stable_id, b.first_id) == (n, n, None)
    b.append([S(n + 1)])
    assert b.replay(n, 0) == [B(10 * n + 5), S(n + 1)]
    assert b.replay(n, n + 7) == [U(n), B(10 * n + 5), S(n + 1)]
    assert (b.last_id, b.last_stable_id, len(b)) == (n + 1, n + 1, 2)


def test_a_buffer_started_after_an_id_refuses_replays_from_before_it() -> None:
    b = OutputBuffer("out1")
    b.start_after(5)  # a recovered replica: its stream begins after the partner's id 5
    assert (b.last_id, b.last_stable_id, b.trimmed_up_to) == (5, 5, 5)
    with pytest.raises(ReplayError, match="trimmed up to id 5"):
        b.replay(4, 0)
    b.append([S(6), T(7)])
    assert b.replay(5, 0) == [S(6), T(7)]
    with pytest.raises(StateError, match="in use"):
        b.start_after(9)


def test_a_buffer_started_with_the_partners_tail_serves_a_consumer_behind_it() -> None:
    # The partner's buffer held ids 3..5 (a consumer had acked only 2): the recovered
    # replica can serve that consumer too, instead of refusing it as trimmed.
    b = OutputBuffer("out1")
    b.start_after(5, [S(3), B(35), S(4), S(5)], trimmed_up_to=2)
    assert (b.last_id, b.last_stable_id, b.trimmed_up_to) == (5, 5, 2)
    assert b.replay(2, 0) == [S(3), B(35), S(4), S(5)]
    assert b.replay(3, 7) == [U(3), B(35), S(4), S(5)]
    with pytest.raises(ReplayError, match="trimmed up to id 2"):
        b.replay(1, 0)
    b.append([S(6)])
    assert b.replay(5, 0) == [S(6)]
    with pytest.raises(StateError, match="must be stable and end at id 5"):
        OutputBuffer("out1").start_after(5, [S(3), S(4)], trimmed_up_to=2)
    with pytest.raises(StateError, match="with tentative tuples"):
        OutputBuffer("out1").start_after(5, [S(3), T(5)], trimmed_up_to=2)


# ------------------------------------------------------------------ the grace rule


def test_a_consumer_in_its_grace_period_holds_trimming_then_is_released() -> None:
    b = buf(S(1), B(10), S(2), S(3), consumers=("a", "late"))
    b.ack("a", 3)
    assert b.trimmed_up_to == 0  # "late" was never heard from: it holds, for now
    assert b.release_unheard() == ["late"]
    assert b.trimmed_up_to == 3 and list(b) == []
    assert b.lapsed("late") and not b.lapsed("a")
    assert b.release_unheard() == []  # released once
    assert b.consumer_status() == {
        "a": {"acked": 3, "holds": True, "lapsed": False},
        "late": {"acked": None, "holds": False, "lapsed": True},
    }


def test_a_consumer_heard_from_keeps_pinning_when_it_goes_silent() -> None:
    # Heard from, then dead or cut off: its last ack holds trimming for ever (a recovering
    # replica resumes from here), the grace rule releases only those never heard from.
    b = buf(S(1), S(2), S(3), consumers=("a", "dead"))
    b.ack("dead", 1)
    b.ack("a", 3)
    assert b.release_unheard() == []
    b.append([S(4), S(5)])
    b.ack("a", 5)
    assert b.trimmed_up_to == 1 and b.replay(1, 0) == [S(2), S(3), S(4), S(5)]


def test_with_no_consumer_holding_every_append_trims_its_stable_tuples() -> None:
    b = buf(S(1), S(2), consumers=("c1",))
    b.append([S(3)])
    assert len(b) == 3  # in its grace period c1 holds everything
    b.release_unheard()
    assert b.trimmed_up_to == 2 + 1 and len(b) == 0
    b.append([S(4), B(40), S(5), B(50), T(6), T(7)])
    assert b.trimmed_up_to == 5 and list(b) == [B(50), T(6), T(7)]  # tentatives stay
    for i in range(8, 5000):
        b.append([U(5), S(i - 2), B(10 * i)] if i == 8 else [S(i), B(10 * i)])
    assert len(b) <= 2  # bounded: the last boundary (and what follows it)


def test_a_released_consumer_holds_trimming_again_from_its_first_ack() -> None:
    b = buf(S(1), S(2), S(3), consumers=("a", "late"))
    b.ack("a", 2)
    b.release_unheard()
    assert b.trimmed_up_to == 2
    b.ack("late", 0)  # its first heartbeat: it holds nothing yet, and now pins
    b.append([S(4), S(5)])
    b.ack("a", 5)
    assert b.trimmed_up_to == 2 and b.lapsed("late")
    b.ack("late", 4)  # past the trim point: an ordinary consumer again
    assert not b.lapsed("late") and b.trimmed_up_to == 4 and list(b) == [S(5)]


def test_a_consumer_released_on_request_pins_nothing_until_it_acks_again() -> None:
    """``release``: an acked consumer (pinning at 1 for ever otherwise) says it wants
    nothing (an amnesia secondary); its next ack, at the live end, holds trimming again."""
    b = buf(S(1), S(2), S(3), consumers=("a", "sec"))
    b.ack("sec", 1)
    b.ack("a", 3)
    assert b.trimmed_up_to == 1
    b.release("sec")
    assert b.trimmed_up_to == 3 and b.lapsed("sec")
    b.append([S(4), S(5)])
    b.ack("sec", 4)  # its live Subscribe
    b.ack("a", 5)
    assert b.trimmed_up_to == 4 and not b.lapsed("sec")
    with pytest.raises(StateError, match="release of unknown consumer 'zed'"):
        b.release("zed")


def test_a_lapsed_consumer_is_served_from_the_trim_point() -> None:
    b = buf(S(1), B(10), S(2), B(20), S(3), consumers=("a", "late"))
    b.ack("a", 2)
    b.release_unheard()
    with pytest.raises(ReplayError, match="trimmed up to id 2"):
        b.replay(0, 0)
    # It missed stable ids 1..2; it gets what follows them, controls included.
    assert b.replay_lapsed("late", 0, 0) == [B(20), S(3)]
    assert not b.lapsed("late") and b.consumer_status()["late"]["acked"] == 2
    with pytest.raises(ReplayError, match="not one below the trim point"):
        b.replay_lapsed("late", 0, 0)  # served once: an ordinary consumer now


def test_a_lapsed_consumer_holding_tentatives_has_them_undone_first() -> None:
    b = buf(S(1), S(2), S(3), S(4), consumers=("a", "late"))
    b.ack("a", 3)
    b.release_unheard()
    # It held stable 1 and tentatives 2..5 from elsewhere: all of those go, then 4.
    assert b.replay_lapsed("late", 1, 5) == [U(1), S(4)]


def test_only_a_lapsed_consumer_below_the_trim_point_is_served_from_it() -> None:
    b = buf(S(1), S(2), S(3), consumers=("a", "b", "late"))
    b.ack("a", 2)
    b.ack("b", 0)
    assert b.release_unheard() == ["late"]
    with pytest.raises(ReplayError, match="lapsed consumers: 'late'"):
        b.replay_lapsed("b", 0, 0)  # b was heard from: no grace rule for it
    b.ack("b", 2)
    assert b.trimmed_up_to == 2
    with pytest.raises(ReplayError, match="not one below the trim point"):
        b.replay_lapsed("late", 2, 0)  # at the trim point: an ordinary replay serves it
    assert b.replay(2, 0) == [S(3)]


def test_dropping_a_released_consumer_forgets_its_release() -> None:
    b = buf(S(1), consumers=("a", "late"))
    b.release_unheard()
    b.set_consumers(["a"])
    assert b.consumer_status() == {"a": {"acked": None, "holds": False, "lapsed": True}}
    b.set_consumers(["a", "new"])  # a new consumer holds until the next release
    b.append([S(2)])
    assert b.trimmed_up_to == 1 and len(b) == 1
