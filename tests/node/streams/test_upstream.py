"""node.streams.upstream: heartbeat liveness and deadlines, the upstream preference table, the four
switching cases of property 2 (with the corrections source and a reconciled current source),
the frontier rule among UP_FAILURE replicas (and that it does not flap), and the tmax filter;
with property tests for the chooser (against a small reference ranking) and the filter."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.errors import NodeError
from node.streams.upstream import (
    Choice,
    HeartbeatTracker,
    ReplicaView,
    Resume,
    TmaxFilter,
    choose_upstream,
)
from protocol.messages import ConsistencyState
from protocol.tuples import Kind, Tuple, boundary, rec_done, undo

S = ConsistencyState.STABLE
U = ConsistencyState.UP_FAILURE
Z = ConsistencyState.STABILIZATION
IV = 100  # heartbeat interval (any unit: the tracker never reads a clock)
LAG = 700  # the frontier rule's lag (alpha * X, in the same unit as the frontiers)
LINK_LAG = 400  # the link rule's lag ((misses + 1) * interval)


def up(alive: bool = True, state: ConsistencyState | None = S, frontier: int = 0) -> ReplicaView:
    return ReplicaView(alive, state, frontier)


def dead(state: ConsistencyState | None = S, frontier: int = 0) -> ReplicaView:
    return ReplicaView(False, state, frontier)


def tracker(misses: int = 3, names: tuple[str, ...] = ("a", "b")) -> HeartbeatTracker:
    return HeartbeatTracker(names, IV, misses)


def answer(hb: HeartbeatTracker, name: str, seq: int, state: ConsistencyState = S) -> bool:
    return hb.answered(name, seq, state, {"out": state})


# ------------------------------------------------------------------------------ heartbeats
@pytest.mark.parametrize("misses", [1, 3, 5])
def test_failed_exactly_after_more_than_misses_unanswered(misses: int) -> None:
    hb = tracker(misses)
    # misses + 1 requests: misses of them missed, the newest still in flight.
    for seq in range(1, misses + 2):
        hb.sent("a", seq, seq * IV)
        assert hb.alive("a"), seq
    assert hb.missed("a") == misses
    hb.sent("a", misses + 2, (misses + 2) * IV)  # now misses + 1 missed
    assert hb.missed("a") == misses + 1
    assert not hb.alive("a")
    assert hb.failed() == ["a"]
    assert hb.alive("b")  # never probed: nothing missed


def test_answers_keep_alive_and_revive() -> None:
    hb = tracker(3)
    for seq in range(1, 6):
        hb.sent("a", seq, seq * IV)
    assert not hb.alive("a")
    assert answer(hb, "a", 5)  # answers everything up to 5
    assert hb.alive("a") and hb.missed("a") == 0
    assert hb.node_state("a") is S and hb.stream_states("a") == {"out": S}


def test_late_answer_counts_only_for_requests_up_to_its_seq() -> None:
    hb = tracker(3)
    for seq in range(1, 7):  # 6 sent: 5 missed, 1 in flight
        hb.sent("a", seq, seq * IV)
    assert hb.missed("a") == 5
    # An answer to 2 leaves 3..6 waiting: 3 missed + 1 in flight, no more than misses.
    assert answer(hb, "a", 2)
    assert hb.missed("a") == 3 and hb.alive("a")
    hb.sent("a", 7, 700)
    assert not hb.alive("a")
    # An answer to 1 (older than the counted one) is ignored: it cannot revive a replica
    # that missed newer requests, nor roll its states back.
    assert not answer(hb, "a", 1, U)
    assert not hb.alive("a") and hb.stream_states("a") == {"out": S}


def test_answer_older_than_the_window_cannot_revive() -> None:
    hb = tracker(3)
    for seq in range(1, 11):
        hb.sent("a", seq, seq * IV)
    # Requests 6..10 sent after 5: 4 missed + 1 in flight, failed whatever the order.
    assert not answer(hb, "a", 5)
    assert not hb.alive("a")
    assert answer(hb, "a", 6)  # 7..10 after it: 3 missed, alive
    assert hb.alive("a")


def test_answer_order_does_not_matter() -> None:
    rng = random.Random(7)
    for _ in range(50):
        answered = rng.sample(range(1, 9), rng.randint(0, 8))
        results = set()
        for order in (sorted(answered), sorted(answered, reverse=True), answered):
            hb = tracker(2)
            for seq in range(1, 9):
                hb.sent("a", seq, seq * IV)
            for seq in order:
                answer(hb, "a", seq)
            results.add((hb.alive("a"), hb.missed("a")))
        # Only the misses + 2 = 4 newest requests (5..8) can be counted answers.
        newest = max((q for q in answered if q >= 5), default=None)
        expected_missed = 7 if newest is None else max(0, 8 - newest - 1)
        assert results == {(expected_missed <= 2, expected_missed)}


def test_garbage_answers_are_ignored_and_misuse_raises() -> None:
    hb = tracker()
    hb.sent("a", 1, 0)
    assert not answer(hb, "zz", 1)  # unknown replica
    assert not answer(hb, "a", 2)  # never sent
    assert not answer(hb, "b", 1)  # sent to a, not to b
    assert hb.node_state("b") is None and hb.stream_states("b") == {}
    with pytest.raises(NodeError, match="unknown replica 'zz'"):
        hb.sent("zz", 1, 0)
    with pytest.raises(NodeError, match="seq 1 to 'a'"):
        hb.sent("a", 1, 100)
    bad: list[tuple[list[str], int, int, str]] = [
        ([], IV, 3, "no upstream replica"),
        (["a", "a"], IV, 3, "duplicate replica"),
        (["a"], 0, 3, "interval must be > 0"),
        (["a"], IV, 0, "misses must be >= 1"),
    ]
    for names, interval, misses, message in bad:
        with pytest.raises(NodeError, match=message):
            HeartbeatTracker(names, interval, misses)


def test_deadlines_follow_a_fixed_grid_and_skip_late_rounds() -> None:
    hb = HeartbeatTracker(["a", "b"], IV, 3, start=1000)
    assert hb.next_deadline() == 1000
    assert hb.due(999) == []
    assert hb.due(1000) == ["a", "b"]
    assert hb.due(1000) == ["a", "b"]  # a query: nothing moves until sent()
    hb.sent("a", 1, 1000)
    assert hb.due(1000) == ["b"] and hb.next_deadline() == 1000
    hb.sent("b", 1, 1030)  # a little late: the grid does not drift
    assert hb.next_deadline() == 1100 and hb.due(1099) == []
    hb.sent("a", 2, 1350)  # very late: rounds 1200 and 1300 are skipped, not bursted
    assert hb.due(1350) == ["b"]
    hb.sent("b", 2, 1350)
    assert hb.next_deadline() == 1400 and hb.due(1400) == ["a", "b"]
    hb.sent("a", 3, 1380)  # extra early requests do not move the schedule
    hb.sent("a", 4, 1210)
    assert hb.due(1399) == [] and hb.due(1400) == ["a", "b"]


def test_view_reports_liveness_and_stream_state() -> None:
    hb = tracker(1, ("a", "b", "c"))
    hb.sent("a", 1, 0)
    hb.answered("a", 1, U, {"out": S, "other": U})
    hb.sent("b", 1, 0)
    hb.answered("b", 1, U, {"out": U})
    for seq in (2, 3, 4):
        hb.sent("b", seq, seq * IV)
    view = hb.view("out")
    assert view == {"a": up(True, S), "b": dead(U), "c": up(True, None)}
    assert hb.view("other")["a"] == up(True, U)
    # A later answer replaces the states: a stream it no longer reports is unknown.
    hb.sent("a", 2, 200)
    hb.answered("a", 2, S, {"out": S})
    assert hb.view("other")["a"] == up(True, None)


def test_frontiers_come_from_counted_answers_only() -> None:
    hb = tracker(1, ("a", "b"))
    hb.sent("a", 1, 0)
    hb.sent("a", 2, IV)
    assert hb.answered("a", 2, U, {"out": U, "x": S}, {"out": 4_450, "x": 10})
    assert hb.view("out")["a"] == up(True, U, 4_450) and hb.frontiers("a") == {"out": 4_450, "x": 10}
    # An older answer is ignored: its frontier (and state) do not roll the view back.
    assert not hb.answered("a", 1, U, {"out": U}, {"out": 3_500})
    assert hb.view("out")["a"].frontier == 4_450
    # A stream an answer reports no frontier for (or a replica never answered) counts as 0.
    hb.sent("a", 3, 2 * IV)
    assert hb.answered("a", 3, U, {"out": U})
    assert hb.view("out")["a"] == up(True, U, 0)
    assert hb.view("out")["b"] == up(True, None, 0) and hb.frontiers("b") == {}


# ------------------------------------------------------------------------ preference table
def choose(
    current: str | None,
    view: dict[str, ReplicaView],
    corrections: str | None = None,
    holding_tentative: bool = False,
    reconciled: bool = False,
    lag: int = LAG,
    received: int | None = None,
    link_lag: int = LINK_LAG,
) -> Choice:
    return choose_upstream(
        "out",
        current,
        view,
        lag=lag,
        corrections=corrections,
        holding_tentative=holding_tentative,
        current_reconciled=reconciled,
        received=received,
        link_lag=link_lag,
    )


def test_keeps_current_if_stable() -> None:
    c = choose("b", {"a": up(), "b": up(), "c": up()})
    assert c == Choice("out", "b", None, Resume.KEEP)


def test_current_stable_beats_a_stable_corrections_source() -> None:
    view = {"a": up(True, S), "b": up(True, S), "c": up(True, S)}
    assert choose("c", view, corrections="b").data == "c"


def test_prefers_a_stable_corrections_source() -> None:
    view = {"a": up(True, S), "b": up(True, U), "c": up(True, S)}
    c = choose("b", view, corrections="c", holding_tentative=True)
    assert (c.data, c.corrections, c.resume) == ("c", None, Resume.IDS)


def test_any_stable_by_smallest_name() -> None:
    view = {"c": up(True, S), "a": dead(S), "b": up(True, S), "d": up(True, U)}
    c = choose("d", view)
    assert (c.data, c.resume) == ("b", Resume.IDS)


def test_current_if_up_failure_then_any_up_failure() -> None:
    view = {"a": up(True, U), "b": up(True, U), "c": dead(S)}
    assert choose("b", view).data == "b"
    assert choose("b", view).resume is Resume.KEEP
    assert choose("c", view).data == "a"


def test_nothing_usable() -> None:
    view = {"a": dead(S), "b": up(True, None), "c": dead(U)}
    assert choose("a", view) == Choice("out", None, None, Resume.NONE)
    assert choose(None, {}) == Choice("out", None, None, Resume.NONE)


def test_a_standby_replica_is_never_chosen() -> None:
    """A process pair's secondary (node/replica/pair.py) serves nobody: not while its
    primary lives, not when nothing else is left, and a primary that stepped down is left."""
    standby = ConsistencyState.STANDBY
    assert choose(None, {"a": up(True, S), "b": up(True, standby)}).data == "a"
    assert choose("a", {"a": dead(S), "b": up(True, standby)}) == Choice("out", None, None,
                                                                        Resume.NONE)
    c = choose("a", {"a": up(True, standby), "b": up(True, S)})
    assert (c.data, c.resume) == ("b", Resume.IDS)
    assert choose("a", {"a": up(True, standby), "b": up(True, U)}).data == "b"


def test_unknown_current_counts_as_dead() -> None:
    assert choose("ghost", {"a": up(True, U)}).data == "a"


# ------------------------------------------------------------------ the frontier rule (rank 4)
def test_an_up_failure_replica_ahead_by_more_than_lag_takes_over() -> None:
    # Seed 922's shape: the current source n2b says UP_FAILURE and emits nothing (its
    # frontier stays at the last stable boundary); n2a serves fresh tentative results.
    view = {"n2a": up(True, U, 4_450), "n2b": up(True, U, 3_500)}
    c = choose("n2b", view)
    assert c == Choice("out", "n2a", None, Resume.IDS)  # nothing tentative held: by ids
    c = choose("n2b", view, holding_tentative=True)
    assert c == Choice("out", "n2a", None, Resume.TMAX)  # the tmax filter avoids duplicates


def test_an_up_failure_replica_ahead_by_lag_or_less_does_not() -> None:
    for ahead in (0, 1, LAG // 2, LAG):  # strictly more than lag is needed
        view = {"a": up(True, U, 3_500 + ahead), "b": up(True, U, 3_500)}
        assert choose("b", view) == Choice("out", "b", None, Resume.KEEP), ahead
    # Behind: kept as well.
    assert choose("a", {"a": up(True, U, 5_000), "b": up(True, U, 100)}).resume is Resume.KEEP
    # lag 0: any progress ahead of the current source counts.
    assert choose("b", {"a": up(True, U, 3_501), "b": up(True, U, 3_500)}, lag=0).data == "a"


def test_a_stable_replica_still_wins_over_a_frontier_far_ahead() -> None:
    view = {"a": up(True, U, 9_000), "b": up(True, U, 1_000), "c": up(True, S, 0)}
    assert choose("b", view) == Choice("out", "c", None, Resume.IDS)
    # A reconciled current source counts as STABLE: kept, whatever the frontiers say.
    view = {"a": up(True, U, 9_000), "b": up(True, Z, 1_000)}
    assert choose("b", view, reconciled=True) == Choice("out", "b", None, Resume.KEEP)


def test_the_frontier_rule_needs_a_live_up_failure_current_source() -> None:
    # Dead or unknown current source: rank 6, the smallest name, as in the paper's table
    # (the next evaluation applies the frontier rule from there).
    view = {"a": up(True, U, 100), "b": up(True, U, 9_000), "c": dead(U, 0)}
    assert choose("c", view).data == "a"
    assert choose(None, view).data == "a"
    # Current source stabilizing (case 4): fresh data from the smallest UP_FAILURE name.
    view = {"a": up(True, U, 100), "b": up(True, U, 9_000), "z": up(True, Z, 0)}
    assert choose("z", view) == Choice("out", "a", "z", Resume.IDS)
    # Only UP_FAILURE replicas take over: not a dead one, nor a STABILIZATION one.
    view = {"a": dead(U, 9_000), "b": up(True, U, 1_000), "z": up(True, Z, 9_000)}
    assert choose("b", view) == Choice("out", "b", "z", Resume.KEEP)


def test_the_farthest_ahead_takes_over_then_the_smallest_name_deterministically() -> None:
    view = {"a": up(True, U, 2_000), "b": up(True, U, 3_000), "c": up(True, U, 3_000),
            "d": up(True, U, 100)}
    rng = random.Random(3)
    for _ in range(20):
        items = list(view.items())
        rng.shuffle(items)
        assert choose("d", dict(items)) == Choice("out", "b", None, Resume.IDS)


def test_two_progressing_replicas_do_not_flap() -> None:
    """Two UP_FAILURE replicas on the same inputs: their frontiers step by a window (500)
    and are sampled by heartbeats of different ages, so the lead changes hands every few
    rounds, never by more than lag. The current source is kept throughout."""
    rng = random.Random(11)
    trace = []
    for step in range(1, 500):
        now = 10_000 + step * 100
        # Each replica's frontier: the last 500-wide window it released, as heard by a
        # heartbeat answered 0 to 200 ago (b's windows close 50 later than a's).
        fa = (now - 100 * rng.randint(0, 2)) // 500 * 500
        fb = (now - 100 * rng.randint(0, 2) - 50) // 500 * 500
        assert abs(fa - fb) <= LAG
        trace.append({"a": up(True, U, fa), "b": up(True, U, fb)})
    assert any(v["a"].frontier > v["b"].frontier for v in trace)  # the lead changes hands
    assert any(v["b"].frontier > v["a"].frontier for v in trace)

    def switches(lag: int) -> int:
        current, n = "b", 0
        for view in trace:
            c = choose(current, view, holding_tentative=True, lag=lag)
            if c.data != current:
                n, current = n + 1, c.data or current
        return n

    assert switches(LAG) == 0
    assert switches(0) > 10  # without the lag's margin it would flap
    # One stops (its inputs are gone): one switch to the other once it is more than lag
    # ahead, and none back while the stopped one stays behind.
    frontiers, history = {"a": 20_000, "b": 20_000}, []
    current = "b"
    for _ in range(30):
        frontiers["a"] += 100  # a progresses, b is stuck
        c = choose(current, {n: up(True, U, f) for n, f in frontiers.items()},
                   holding_tentative=True)
        current = c.data or current
        history.append((current, c.resume))
    assert history[:LAG // 100] == [("b", Resume.KEEP)] * (LAG // 100)
    assert history[LAG // 100] == ("a", Resume.TMAX)
    assert all(h == ("a", Resume.KEEP) for h in history[LAG // 100 + 1:])


def test_a_negative_lag_is_refused() -> None:
    with pytest.raises(NodeError, match="lag must be >= 0"):
        choose("a", {"a": up(True, U)}, lag=-1)
    with pytest.raises(NodeError, match="link_lag must be >= 0"):
        choose("a", {"a": up(True, U)}, link_lag=-1)


# --------------------------------------------------------------------- the link rule (rank 1b)
def test_a_stable_source_whose_link_lags_is_left_for_the_farthest_stable_replica() -> None:
    # Torture seed 301: b is STABLE and answers heartbeats, but its data reaches us through
    # a throttled link: we hold up to 9_000 while a and c have published up to 10_000.
    view = {"a": up(True, S, 10_000), "b": up(True, S, 10_000), "c": up(True, S, 10_050)}
    assert choose("b", view, received=9_000) == Choice("out", "c", None, Resume.IDS)
    # Behind by link_lag or less: kept (heartbeat age and batching, not a slow link).
    assert choose("b", view, received=10_050 - LINK_LAG) == Choice("out", "b", None, Resume.KEEP)
    # Not judged (a session younger than link_lag, or none): the paper's rule, kept.
    assert choose("b", view, received=None) == Choice("out", "b", None, Resume.KEEP)
    # Only a STABLE replica takes over: fresh tentative data does not beat stable data.
    tentative_ahead = {"a": up(True, U, 20_000), "b": up(True, S, 10_000)}
    assert choose("b", tentative_ahead, received=0) == Choice("out", "b", None, Resume.KEEP)
    # Nor a dead one, whatever it published.
    assert choose("b", {"a": dead(S, 20_000), "b": up(True, S, 10_000)},
                  received=0) == Choice("out", "b", None, Resume.KEEP)
    # The link lags only if the current source itself reports what has not reached us:
    # another replica's answer may report an output step (a 500 ms window) before b's batch
    # with that step arrives; b's own answer comes after its batch through a healthy link.
    stepped = {"a": up(True, S, 10_500), "b": up(True, S, 10_000)}
    assert choose("b", stepped, received=10_000) == Choice("out", "b", None, Resume.KEEP)


def test_the_link_rule_follows_the_seen_frontier_of_an_up_failure_source() -> None:
    # The frontier rule (rank 4) compares the current source's frontier as seen through its
    # link: b reports 10_000 but only 9_000 reached us, and a is at 9_800.
    view = {"a": up(True, U, 9_800), "b": up(True, U, 10_000)}
    assert choose("b", view, holding_tentative=True).data == "b"
    assert choose("b", view, holding_tentative=True, received=9_000) == Choice(
        "out", "a", None, Resume.TMAX)
    # What reached us beyond the heartbeat's report (an older answer) does not count more.
    assert choose("b", view, holding_tentative=True, received=12_000).data == "b"


def test_a_throttled_link_is_left_once_and_healthy_ones_do_not_flap() -> None:
    """Three STABLE replicas progress by 100 a round (heartbeats of 0 to 200 old). Through
    a healthy link the consumer holds what its source published up to 50 ago: no switch in
    500 rounds. Then b's link is throttled to half the rate: one switch, as soon as the data
    held lags the farthest frontier by more than link_lag, and none after (a's link is
    healthy)."""
    rng = random.Random(301)

    def view(now: int) -> dict[str, ReplicaView]:
        return {n: up(True, S, now - 100 * rng.randint(0, 2)) for n in ("a", "b", "c")}

    current = "b"
    for step in range(1, 500):
        now = 10_000 + step * 100
        c = choose(current, view(now), received=now - rng.randint(0, 50))
        assert c.resume is Resume.KEEP
    start, received, history = now, now, []
    for step in range(1, 40):
        now = start + step * 100
        if current == "b":
            received += 50  # the throttled link delivers half of what b publishes
        else:
            received = now - rng.randint(0, 50)
        v = view(now)
        c = choose(current, v, received=received)
        if c.data != current:
            ahead = max(f.frontier for f in v.values())
            assert ahead > received + LINK_LAG and c.resume is Resume.IDS
            history.append((step, c.data))
        current = c.data or current
    assert len(history) == 1 and history[0][1] != "b"
    # Soon after the gap passed link_lag plus the heartbeats' age (up to 200).
    assert history[0][0] <= (LINK_LAG + 200) // 50 + 2


# ---------------------------------------------------------------- property 2: the four cases
def test_case1_stable_to_stable_resumes_by_ids() -> None:
    c = choose("a", {"a": dead(S), "b": up(True, S)}, holding_tentative=False)
    assert (c.data, c.corrections, c.resume) == ("b", None, Resume.IDS)


def test_case2_up_failure_to_stable_resumes_by_ids_and_drops_corrections() -> None:
    # The STABLE replica's buffer sees our tentative id and stabilizes (UNDO if needed):
    # no tmax filter, and no separate corrections source is needed any more.
    view = {"a": up(True, U), "b": up(True, S), "z": up(True, Z)}
    c = choose("a", view, corrections="z", holding_tentative=True)
    assert (c.data, c.corrections, c.resume) == ("b", None, Resume.IDS)


def test_case3_to_up_failure_uses_tmax_only_when_holding_tentative() -> None:
    view = {"a": dead(S), "b": up(True, U)}
    assert choose("a", view, holding_tentative=True).resume is Resume.TMAX
    assert choose("a", view, holding_tentative=False).resume is Resume.IDS
    assert choose("b", view, holding_tentative=True).resume is Resume.KEEP


def test_case4_stabilization_is_a_corrections_source_only() -> None:
    # The current source starts stabilizing: keep it for corrections, take fresh data
    # from an UP_FAILURE replica, with tmax filtering since tentative tuples are held.
    view = {"a": up(True, Z), "b": up(True, U), "c": up(True, Z)}
    c = choose("a", view, holding_tentative=True)
    assert (c.data, c.corrections, c.resume) == ("b", "a", Resume.TMAX)
    # Later: the corrections source in use is kept until REC_DONE, even if "a" < "c".
    c = choose("b", view, corrections="c", holding_tentative=True)
    assert (c.data, c.corrections, c.resume) == ("b", "c", Resume.KEEP)
    assert choose("a", view, corrections="c").corrections == "c"  # over the current one
    # No UP_FAILURE replica: corrections only, never data from STABILIZATION.
    c = choose("a", {"a": up(True, Z)}, holding_tentative=True)
    assert (c.data, c.corrections, c.resume) == (None, "a", Resume.NONE)
    # With no corrections source yet, the current one is preferred over a smaller name.
    c = choose("c", view, holding_tentative=True)
    assert (c.data, c.corrections) == ("b", "c")
    # The corrections source dies: another STABILIZATION replica, by name.
    c = choose("b", {"a": up(True, Z), "b": up(True, U), "c": dead(Z)}, corrections="c")
    assert c.corrections == "a"
    # It finished and went back to UP_FAILURE (a new failure): no longer a corrections source.
    c = choose("b", {"b": up(True, U), "c": up(True, U)}, corrections="c")
    assert (c.data, c.corrections) == ("b", None)


def test_a_reconciled_current_source_is_kept_while_its_heartbeats_lag() -> None:
    # The link moved to corrections source "b" on its REC_DONE; b still reports
    # STABILIZATION for a beat or two. Not moved back to the UP_FAILURE replica, and no
    # corrections source (b's stream is stable now), even with tentatives held.
    view = {"a": up(True, U), "b": up(True, Z), "c": up(True, Z)}
    c = choose("b", view, holding_tentative=True, reconciled=True)
    assert c == Choice("out", "b", None, Resume.KEEP)
    # Without the REC_DONE it is case 4: fresh data from "a", corrections from "b".
    c = choose("b", view, holding_tentative=True)
    assert (c.data, c.corrections, c.resume) == ("a", "b", Resume.TMAX)
    # No other replica usable at all: still kept, never Resume.NONE.
    assert choose("b", {"b": up(True, Z)}, reconciled=True).resume is Resume.KEEP
    # Kept over another STABLE replica too: its stream is the stable stream already.
    c = choose("b", {"a": up(True, S), "b": up(True, Z)}, reconciled=True)
    assert (c.data, c.resume) == ("b", Resume.KEEP)


def test_reconciled_only_vouches_for_a_live_stabilizing_current_source() -> None:
    # Dead: its REC_DONE does not make it reachable.
    c = choose("b", {"a": up(True, U), "b": dead(Z)}, reconciled=True)
    assert (c.data, c.resume) == ("a", Resume.IDS)
    # UP_FAILURE again (a new failure): ordinary rank 4, and a STABLE replica wins.
    assert choose("b", {"a": up(True, S), "b": up(True, U)}, reconciled=True).data == "a"
    # Another replica's STABILIZATION is not vouched for: it stays a corrections source.
    c = choose("a", {"a": up(True, U), "b": up(True, Z)}, reconciled=True)
    assert (c.data, c.corrections, c.resume) == ("a", "b", Resume.KEEP)
    # No current source: nothing to vouch for.
    assert choose(None, {"b": up(True, Z)}, reconciled=True) == Choice(
        "out", None, "b", Resume.NONE
    )


# ---------------------------------------------------------------------- chooser properties
NAMES = ["r1", "r2", "r3", "r4"]
STATES = [S, U, Z, None]
RANK = {S: 0, U: 1}


def reference(
    current: str | None,
    view: dict[str, ReplicaView],
    corrections: str | None,
    holding: bool,
    reconciled: bool = False,
    lag: int = LAG,
    received: int | None = None,
    link_lag: int = LINK_LAG,
) -> tuple[str | None, str | None, Resume]:
    """The preference table as one ranking key (an independent formulation)."""
    if reconciled and current in view and view[current].alive and view[current].state is Z:
        # its REC_DONE is in: as good as STABLE
        view = {**view, current: ReplicaView(True, S, view[current].frontier)}
    ok = {n: v.state for n, v in view.items() if v.alive and v.state in RANK}
    data = min(
        ok,
        key=lambda n: (RANK[ok[n]], n != current, not (ok[n] is S and n == corrections), n),
        default=None,
    )
    lags = (received is not None and current in view
            and view[current].frontier > received + link_lag)
    if data is not None and data == current and (ok[data] is U or lags):
        seen = received if lags else view[current].frontier
        assert seen is not None
        margin = lag if ok[data] is U else link_lag
        ahead = [n for n in ok if ok[n] is ok[data] and n != current
                 and view[n].frontier > seen + margin]
        data = min(ahead, key=lambda n: (-view[n].frontier, n), default=current)
    fixer = None
    if data is None or ok[data] is not S:
        zs = [n for n, v in view.items() if v.alive and v.state is Z]
        fixer = min(zs, key=lambda n: (n != corrections, n != current, n), default=None)
    if data is None:
        resume = Resume.NONE
    elif data == current:
        resume = Resume.KEEP
    else:
        resume = Resume.TMAX if ok[data] is U and holding else Resume.IDS
    return data, fixer, resume


views = st.dictionaries(
    st.sampled_from(NAMES),
    # Frontiers and lags of a few units: the frontier rule fires, or just does not.
    st.builds(ReplicaView, st.booleans(), st.sampled_from(STATES), st.integers(0, 6)),
    max_size=len(NAMES),
)
maybe_name = st.one_of(st.none(), st.sampled_from([*NAMES, "ghost"]))


@settings(max_examples=400, deadline=None)
@given(
    views,
    maybe_name,
    maybe_name,
    st.booleans(),
    st.booleans(),
    st.integers(0, 3),
    st.one_of(st.none(), st.integers(0, 6)),
    st.integers(0, 3),
    st.randoms(use_true_random=False),
)
def test_choice_properties(
    view: dict[str, ReplicaView],
    current: str | None,
    corrections: str | None,
    holding: bool,
    reconciled: bool,
    lag: int,
    received: int | None,
    link_lag: int,
    rnd: random.Random,
) -> None:
    c = choose(current, view, corrections, holding, reconciled, lag, received, link_lag)
    # A STABILIZATION replica is the data source only as the reconciled current source.
    vouched = reconciled and current is not None and current in view
    if c.data is not None:
        v = view[c.data]
        assert v.alive and (v.state in (S, U) or (v.state is Z and vouched and c.data == current))
    if c.corrections is not None:
        v = view[c.corrections]
        assert v.alive and v.state is Z
        assert not (vouched and c.corrections == current)  # never read twice
    if any(v.alive and v.state is S for v in view.values()):
        assert c.data is not None and (view[c.data].state is S or c.data == current)
        assert c.corrections is None
    # Deterministic, whatever the dict order.
    items = list(view.items())
    rnd.shuffle(items)
    assert choose(current, dict(items), corrections, holding, reconciled, lag, received,
                  link_lag) == c
    expected = reference(current, view, corrections, holding, reconciled, lag, received,
                         link_lag)
    assert (c.data, c.corrections, c.resume) == expected
    # Leaving a live UP_FAILURE current source for another UP_FAILURE replica takes a
    # frontier ahead by more than lag; a switch back would take the same the other way.
    if c.data is not None and c.data != current and current in view:
        was, now = view[current], view[c.data]
        lags = received is not None and was.frontier > received + link_lag
        seen = received if lags and received is not None else was.frontier
        if was.alive and was.state is U and now.state is U:
            assert now.frontier > seen + lag
            back = choose(c.data, view, corrections, holding, reconciled, lag)
            assert back.data == c.data
        # The link rule leaves a live STABLE source only for a STABLE replica ahead of what
        # reached us by more than link_lag, and only when the link was judged.
        if was.alive and was.state is S and not (reconciled and current == c.data):
            assert lags and now.state is S
            assert now.frontier > seen + link_lag


# ------------------------------------------------------------------------------ tmax filter
def d(kind: Kind, tid: int, tmax: int) -> Tuple:
    return Tuple(kind, tid, tmax, tmax, ())


T, ST = Kind.TENTATIVE, Kind.STABLE


def test_tmax_filter_drops_tentatives_not_newer_than_held() -> None:
    f = TmaxFilter()
    held = [d(ST, 1, 10), d(T, 2, 30), d(T, 3, 20), boundary(40)]
    assert f.accept(held) == held  # not armed: everything passes, highest recorded
    assert f.highest == 30 and not f.armed
    f.arm()
    assert f.threshold == 30
    new = [d(T, 3, 25), boundary(50), d(T, 4, 30), d(T, 5, 31), d(T, 6, 31), d(T, 7, 29)]
    # Two tuples of the new source with the same tmax (31) both pass: the threshold is
    # frozen at the switch, not raised by the new source's own tuples.
    assert f.accept(new) == [boundary(50), d(T, 5, 31), d(T, 6, 31)]
    assert f.highest == 31


def test_tmax_filter_passes_stable_and_control_and_disarms_on_undo() -> None:
    f = TmaxFilter()
    f.accept([d(T, 1, 100)])
    f.arm()
    batch = [d(ST, 1, 50), d(T, 2, 60), undo(1), d(T, 2, 70), rec_done(80)]
    assert f.accept(batch) == [d(ST, 1, 50), undo(1), d(T, 2, 70), rec_done(80)]
    assert not f.armed
    f.arm()
    f.reset()
    assert not f.armed and f.accept([d(T, 9, 1)]) == [d(T, 9, 1)]


def test_tmax_filter_arm_with_nothing_seen_is_a_no_op() -> None:
    f = TmaxFilter()
    f.arm()
    assert not f.armed and f.accept([d(T, 1, 0)]) == [d(T, 1, 0)]


tuples = st.lists(
    st.one_of(
        st.builds(d, st.sampled_from([T, ST]), st.integers(1, 50), st.integers(0, 40)),
        st.builds(boundary, st.integers(0, 40)),
        st.builds(rec_done, st.integers(0, 40)),
        st.builds(undo, st.integers(0, 50)),
    ),
    max_size=20,
)


@settings(max_examples=300, deadline=None)
@given(tuples, tuples, tuples)
def test_tmax_filter_never_passes_an_old_tentative(
    before: list[Tuple], after: list[Tuple], more: list[Tuple]
) -> None:
    f = TmaxFilter()
    assert f.accept(before) == before
    seen = max((t.tmax for t in before if t.kind in (T, ST)), default=None)
    f.arm()
    out = f.accept(after) + f.accept(more)
    stream = after + more
    # Armed until the first UNDO, which disarms it.
    cut = next((i for i, t in enumerate(stream) if t.kind is Kind.UNDO), len(stream))
    expected = [
        t
        for i, t in enumerate(stream)
        if not (i < cut and seen is not None and t.kind is T and t.tmax <= seen)
    ]
    assert out == expected  # a subsequence: only old tentatives before an UNDO are dropped
    passed = out[: len(out) - (len(stream) - cut)]  # what came before the first UNDO
    assert [t for t in passed if t.kind is not T] == [t for t in stream[:cut] if t.kind is not T]
    if seen is not None:
        assert all(t.tmax > seen for t in passed if t.kind is T)
