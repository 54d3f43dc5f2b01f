"""SUnion unit tests with hand-computed outputs, and the determinism property."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators import OperatorError, SpecError, create
from operators.sunion import SUnion
from protocol.tuples import Kind, Tuple, boundary, make_tuple, rec_done, tentative_boundary, undo
from tests.operators.cases_fault import apply_undos, data_of, undo_start

S, T = Kind.STABLE, Kind.TENTATIVE
SCHEMA = ("src", "n")


def d(port: int, id: int, t: int, kind: Kind = S) -> Tuple:
    """An input tuple whose values say where it came from."""
    return make_tuple(kind, id, t, t, (port, id))


def o(kind: Kind, id: int, port: int, in_id: int, t: int) -> Tuple:
    """The output tuple SUnion makes of d(port, in_id, t)."""
    return make_tuple(kind, id, t, t, (port, in_id))


def up_failure(now: int) -> Tuple:
    return make_tuple(Kind.UP_FAILURE, 0, now, now, ())


def rec_request(now: int) -> Tuple:
    return make_tuple(Kind.REC_REQUEST, 0, now, now, ())


def sunion(n: int = 2, **params: Any) -> SUnion:
    p = {"bucket": 10, "wait": 100, "process_wait": 30, **params}
    op = create("sunion", "u", [SCHEMA] * n, p)
    assert isinstance(op, SUnion)
    return op


# ---------------------------------------------------------------------- stable path
def test_stable_bucket_sorted_by_time_port_id() -> None:
    u = sunion(3)
    assert u.process(0, [d(0, 1, 5), d(0, 2, 3)], 0) == []
    assert u.process(1, [d(1, 1, 3), d(1, 2, 7), boundary(10)], 1) == []
    assert u.process(2, [d(2, 1, 5), boundary(10)], 2) == []
    out = u.process(0, [boundary(10)], 3)
    assert out == [
        o(S, 1, 0, 2, 3),
        o(S, 2, 1, 1, 3),
        o(S, 3, 0, 1, 5),
        o(S, 4, 2, 1, 5),
        o(S, 5, 1, 2, 7),
        boundary(10),
    ]
    assert u.signals == []


def test_releases_in_order_and_keeps_tmax() -> None:
    u = sunion(2)
    u.process(0, [make_tuple(S, 1, 12, 99, ("a",)), d(0, 2, 4)], 0)
    out = u.process(1, [boundary(15)], 0)
    assert out == []  # port 0 has no boundary yet
    out = u.process(0, [boundary(25)], 0)
    # Bucket 0 then bucket 1 (complete up to 15 only -> not yet), boundary 10.
    assert out == [o(S, 1, 0, 2, 4), boundary(10)]
    out = u.process(1, [boundary(20)], 0)
    assert out == [make_tuple(S, 2, 12, 99, ("a",)), boundary(20)]


def test_empty_buckets_are_jumped() -> None:
    u = sunion(2)
    u.process(0, [d(0, 1, 5), d(0, 2, 10_005), boundary(20_000)], 0)
    out = u.process(1, [d(1, 1, 10_001), boundary(20_000)], 0)
    assert out == [
        o(S, 1, 0, 1, 5),
        boundary(10),
        o(S, 2, 1, 1, 10_001),
        o(S, 3, 0, 2, 10_005),
        boundary(10_010),
        boundary(20_000),
    ]


def test_jump_over_a_huge_gap_is_constant_time() -> None:
    u = sunion(2, bucket=1)
    gap = 10**9  # one by one this would take minutes
    start = time.perf_counter()
    u.process(0, [d(0, 1, 0), d(0, 2, gap), boundary(2 * gap)], 0)
    out = u.process(1, [boundary(2 * gap)], 0)
    assert time.perf_counter() - start < 0.5
    assert out == [
        o(S, 1, 0, 1, 0),
        boundary(1),
        o(S, 2, 0, 2, gap),
        boundary(gap + 1),
        boundary(2 * gap),
    ]


def test_duplicates_of_a_replay_are_dropped() -> None:
    u = sunion(2)
    u.process(0, [d(0, 1, 1), d(0, 2, 2), d(0, 3, 3)], 0)
    u.process(0, [d(0, 2, 2), d(0, 3, 3), d(0, 4, 4)], 0)  # upstream switch replays 2, 3
    u.process(0, [d(0, 4, 4)], 0)
    u.process(0, [boundary(10)], 0)
    out = u.process(1, [boundary(10)], 0)
    assert data_of(out) == [o(S, i, 0, i, i) for i in (1, 2, 3, 4)]


def test_spec_errors() -> None:
    with pytest.raises(SpecError, match="same attributes"):
        create("sunion", "u", [("a",), ("b",)], {"bucket": 10})
    with pytest.raises(SpecError, match="bucket"):
        create("sunion", "u", [("a",)], {"bucket": 0})
    with pytest.raises(SpecError, match="mode"):
        create("sunion", "u", [("a",)], {"bucket": 1, "mode": "suspend"})
    with pytest.raises(SpecError, match="recovery"):
        create("sunion", "u", [("a",)], {"bucket": 1, "recovery": "redo"})
    with pytest.raises(SpecError, match="unknown parameter"):
        create("sunion", "u", [("a",)], {"bucket": 1, "wiat": 3})


# ---------------------------------------------------------------------- tentative path
def test_tentative_release_exactly_at_deadline_and_one_up_failure() -> None:
    u = sunion(2)  # wait 100, process_wait 30
    u.process(0, [d(0, 1, 5), boundary(10)], 50)
    assert u.next_deadline() == 150
    assert u.on_timer(149) == []
    assert u.on_timer(150) == [o(T, 1, 0, 1, 5), tentative_boundary(10)]
    assert u.signals == [up_failure(150)]
    assert u.in_failure
    u.process(0, [d(0, 2, 15)], 160)
    assert u.next_deadline() == 190  # process mode: the episode's buckets wait 30
    assert u.on_timer(189) == []
    assert u.on_timer(190) == [o(T, 2, 0, 2, 15), tentative_boundary(20)]
    assert u.signals == [up_failure(150)]  # once per episode


def test_process_releases_what_expired_before_the_batch() -> None:
    u = sunion(2)
    u.process(0, [d(0, 1, 5)], 0)
    # Port 1's tuple for bucket 0 arrives after the deadline: the bucket went out without it.
    out = u.process(1, [d(1, 1, 6)], 100)
    assert out == [o(T, 1, 0, 1, 5), tentative_boundary(10)]


def test_a_held_batch_waits_from_its_arrival_at_the_node() -> None:
    """The node held a batch (its replay ran): the bucket's wait began when the batch
    reached the node, not when SUnion got it (simulate seed 27968)."""
    u = sunion(2)  # wait 100
    u.arrived = 20  # what QueryNetwork.push(arrived=20) sets for its call
    assert u.process(0, [d(0, 1, 5)], 60) == []
    u.arrived = None
    assert u.next_deadline() == 120
    assert u.on_timer(120) == [o(T, 1, 0, 1, 5), tentative_boundary(10)]
    # Held longer than the wait: out at once, and may_begin_episode says so beforehand.
    v = sunion(2)
    assert not v.may_begin_episode(100, True, 1) and v.may_begin_episode(100, True, 0)
    v.arrived = 0
    assert v.process(0, [d(0, 1, 5)], 100) == [o(T, 1, 0, 1, 5), tentative_boundary(10)]
    assert v.signals == [up_failure(100)]


def test_an_undo_that_empties_a_pending_bucket_keeps_its_age() -> None:
    """Tentative input for bucket 0 came at 50; the UNDO at 120 empties the bucket; the
    corrections at 140 fill it again, and it is due at 150, not 240 (simulate seed 27968:
    a consumer that moved to another replica waited alpha*X again for the same window).
    In delay mode: in process mode the tentative input would have expired at 80 (the
    chain rule's process_wait)."""
    u = sunion(2, mode="delay")
    u.process(0, [d(0, 1, 5, T)], 50)
    u.process(0, [undo(0)], 120)
    assert u.next_deadline() is None  # nothing pending
    assert not u.may_begin_episode(149, True) and u.may_begin_episode(150, True)
    assert u.process(0, [d(0, 1, 6)], 140) == []
    assert u.next_deadline() == 150
    assert u.on_timer(150) == [o(T, 1, 0, 1, 6), tentative_boundary(10)]


def test_zero_wait_releases_at_once() -> None:
    u = sunion(2, wait=0)
    assert u.process(0, [d(0, 1, 5)], 7) == [o(T, 1, 0, 1, 5), tentative_boundary(10)]


@pytest.mark.parametrize("mode", ["process", "delay"])
def test_process_vs_delay_waits(mode: str) -> None:
    u = sunion(2, mode=mode)  # port 1 is cut: nothing ever becomes stable-ready
    u.process(0, [d(0, 1, 5)], 0)
    u.process(0, [d(0, 2, 15)], 10)
    u.process(0, [d(0, 3, 25)], 50)
    out = u.on_timer(100)
    if mode == "process":
        # Bucket 0 expires; the episode begins and buckets 1 (10+30) and 2 (50+30) are due.
        assert data_of(out) == [o(T, 1, 0, 1, 5), o(T, 2, 0, 2, 15), o(T, 3, 0, 3, 25)]
        assert u.next_deadline() is None
    else:
        assert data_of(out) == [o(T, 1, 0, 1, 5)]
        assert u.next_deadline() == 110
        assert data_of(u.on_timer(110)) == [o(T, 2, 0, 2, 15)]
        assert u.next_deadline() == 150
        assert data_of(u.on_timer(149)) == []
        assert data_of(u.on_timer(150)) == [o(T, 3, 0, 3, 25)]
    assert u.signals == [up_failure(100)]


@pytest.mark.parametrize("mode", ["process", "delay"])
def test_sticky_tentative_even_when_stable_ready(mode: str) -> None:
    u = sunion(2, mode=mode)
    u.process(0, [d(0, 1, 5), boundary(10)], 0)
    assert data_of(u.on_timer(100)) == [o(T, 1, 0, 1, 5)]
    u.process(0, [d(0, 2, 15), boundary(20)], 110)
    out = u.process(1, [d(1, 1, 16), boundary(20)], 120)  # bucket 1 is stable-ready
    if mode == "process":
        assert out == [o(T, 2, 0, 2, 15), o(T, 3, 1, 1, 16), tentative_boundary(20)]
    else:
        # Delay mode holds even a ready bucket for its full wait, still TENTATIVE after.
        assert out == []
        assert u.next_deadline() == 210
        assert u.on_timer(210) == [o(T, 2, 0, 2, 15), o(T, 3, 1, 1, 16), tentative_boundary(20)]


def _failure_then_corrections(u: SUnion) -> list[Tuple]:
    """Port 1's upstream goes tentative for buckets 1 and 2 (one of its tuples wrong, one
    missing), then corrects: UNDO(1) and the stable tuples. Returns all outputs."""
    out: list[Tuple] = []
    out += u.process(0, [d(0, 1, 3), boundary(10)], 0)
    out += u.process(1, [d(1, 1, 4), boundary(10)], 0)  # bucket 0 stable: ids 1, 2
    out += u.process(0, [d(0, 2, 12), boundary(20)], 10)
    out += u.process(1, [d(1, 2, 17, T), boundary(20)], 10)  # tentative, and wrong
    out += u.process(0, [d(0, 3, 21), boundary(30)], 20)
    out += u.on_timer(110)  # bucket 1 due at 10+100; bucket 2 (20+30) in the episode
    assert data_of(out) == [
        o(S, 1, 0, 1, 3),
        o(S, 2, 1, 1, 4),
        o(T, 3, 0, 2, 12),  # bucket 1 holds a tentative tuple: all of it is tentative
        o(T, 4, 1, 2, 17),
        o(T, 5, 0, 3, 21),
    ]
    assert u.signals == [up_failure(110)]
    out += u.process(1, [undo(1)], 120)
    assert u.signals == [up_failure(110)]  # bucket 1 and 2 still miss port 1's boundary
    out += u.process(1, [d(1, 2, 13), boundary(20)], 130)  # the correction of tuple 2
    assert u.signals == [up_failure(110)]
    out += u.process(1, [d(1, 3, 22), boundary(30)], 140)  # the tuple it had missed
    assert u.signals == [up_failure(110), rec_request(140)]
    return out


def test_undo_and_corrections_on_an_input_lead_to_rec_request() -> None:
    u = sunion(2)
    _failure_then_corrections(u)
    # Nothing more happens until the node reconciles; REC_REQUEST is not repeated.
    u.process(0, [boundary(40)], 150)
    assert u.process(1, [rec_done()], 150) == []  # this node's SOutput makes its own
    assert u.signals == [up_failure(110), rec_request(140)]


@pytest.mark.parametrize("recovery", ["checkpoint", "undo"])
def test_undo_redo_via_undo_start(recovery: str) -> None:
    u = sunion(2, recovery=recovery)
    _failure_then_corrections(u)
    out = u.process(1, [undo_start()], 160)
    assert out == [
        undo(2),  # the last output before the first tentative bucket
        o(S, 3, 0, 2, 12),
        o(S, 4, 1, 2, 13),  # the corrected tuple, now in its right place
        boundary(20),
        o(S, 5, 0, 3, 21),
        o(S, 6, 1, 3, 22),  # the missed tuple
        boundary(30),
    ]
    assert not u.in_failure
    # A second UNDO_START (the node injects one per input) has nothing left to undo.
    assert u.process(0, [undo_start()], 160) == []
    # The episode ended: the next expiry signals UP_FAILURE again.
    u.process(0, [d(0, 4, 35)], 170)
    assert data_of(u.on_timer(270)) == [o(T, 7, 0, 4, 35)]
    assert u.signals[-1] == up_failure(270)


def test_checkpoint_redo_via_rewind_reproduces_ids() -> None:
    u = sunion(2)
    u.process(0, [d(0, 1, 3), boundary(10)], 0)
    u.process(1, [d(1, 1, 4), boundary(10)], 0)  # bucket 0: ids 1, 2
    snap = orjson.loads(orjson.dumps(u.snapshot()))  # the node's checkpoint
    u.truncate()
    first = u.process(0, [d(0, 2, 12), boundary(20)], 10)
    first += u.process(1, [d(1, 2, 15), boundary(20)], 10)  # bucket 1: ids 3, 4 (after it)
    first += u.process(0, [d(0, 3, 21), boundary(30)], 20)  # port 1 is cut from here
    first += u.on_timer(120)
    assert data_of(first) == [o(S, 3, 0, 2, 12), o(S, 4, 1, 2, 15), o(T, 5, 0, 3, 21)]
    u.process(1, [d(1, 3, 22), boundary(30)], 130)  # healed: the missed tuple, late
    assert u.signals == [up_failure(120), rec_request(130)]
    u.rewind(snap)
    out = u.replay(140)
    assert out == [
        o(S, 3, 0, 2, 12),  # the same ids as before the failure: SOutput drops them
        o(S, 4, 1, 2, 15),
        boundary(20),
        o(S, 5, 0, 3, 21),
        o(S, 6, 1, 3, 22),
        boundary(30),
    ]
    assert not u.in_failure


def _checkpoint_then_failure(u: SUnion) -> Any:
    """The run of the test above, up to the point the node rewinds: the checkpoint."""
    u.process(0, [d(0, 1, 3), boundary(10)], 0)
    u.process(1, [d(1, 1, 4), boundary(10)], 0)
    snap = orjson.loads(orjson.dumps(u.snapshot()))
    u.truncate()
    u.process(0, [d(0, 2, 12), boundary(20)], 10)
    u.process(1, [d(1, 2, 15), boundary(20)], 10)
    u.process(0, [d(0, 3, 21), boundary(30)], 20)
    u.on_timer(120)
    u.process(1, [d(1, 3, 22), boundary(30)], 130)
    return snap


def test_a_stepped_replay_releases_the_same_stream_one_bucket_per_call() -> None:
    whole, stepped = sunion(2), sunion(2)
    stepped.replay_step = 1
    snaps = [_checkpoint_then_failure(u) for u in (whole, stepped)]
    whole.rewind(snaps[0])
    expected = whole.replay(140)
    stepped.rewind(snaps[1])
    assert stepped.replaying and stepped.replay_progress == (0, 4)
    first = stepped.replay(140)
    assert first == [o(S, 3, 0, 2, 12), o(S, 4, 1, 2, 15), boundary(20)]  # one bucket
    assert stepped.replaying and stepped.replay_progress == (2, 4)
    assert stepped.on_timer(150) == expected[3:]  # any call is a step
    assert not stepped.replaying and stepped.replay_progress == (4, 4)


def test_undo_redo_replays_in_steps_too() -> None:
    whole, stepped = sunion(2, recovery="undo"), sunion(2, recovery="undo")
    stepped.replay_step = 1
    for u in (whole, stepped):
        _failure_then_corrections(u)
    expected = whole.process(1, [undo_start()], 160)
    out = stepped.process(1, [undo_start()], 160)
    assert out == expected[:4] and stepped.replaying  # UNDO, then one bucket
    out += stepped.replay(161)
    assert out == expected and not stepped.replaying


def test_a_bucket_that_expired_during_a_stepped_replay_goes_out_after_it() -> None:
    u = sunion(2)
    u.replay_step = 1
    u.rewind(_checkpoint_then_failure(u))
    # New input (the runtime holds it during a replay; here it comes in): the call is a
    # step, bucket 1 only.
    assert u.process(0, [d(0, 4, 31)], 135)[-1] == boundary(20)
    assert u.signals == [up_failure(120), rec_request(130)]
    out = u.replay(300)  # step 2: bucket 2, the horizon; then bucket 3 is long due
    assert data_of(out) == [o(S, 5, 0, 3, 21), o(S, 6, 1, 3, 22), o(T, 7, 0, 4, 31)]
    assert u.signals[-1] == up_failure(300)  # the new failure, after the corrections


def test_a_replay_ends_before_a_bucket_released_tentatively_after_the_rec_request() -> None:
    # Port 1 catches up on bucket 1 (REC_REQUEST) but lags on: bucket 2 goes out tentative
    # while the node asks permission. Its boundary cannot come during the replay (the
    # runtime holds new input) and a replay step per loop turn never lets its deadline
    # come: the replay ends before it (it used to stay "replaying": the node spun).
    u = sunion(2)
    u.replay_step = 1
    u.process(0, [d(0, 1, 3), boundary(10)], 0)
    u.process(1, [d(1, 1, 4), boundary(10)], 0)  # bucket 0: ids 1, 2
    snap = orjson.loads(orjson.dumps(u.snapshot()))
    u.truncate()
    u.process(0, [d(0, 2, 12), boundary(20)], 10)  # port 1 is cut from here
    assert data_of(u.on_timer(110)) == [o(T, 3, 0, 2, 12)]
    u.process(0, [d(0, 3, 21), boundary(30)], 120)
    u.process(1, [d(1, 2, 15), boundary(20)], 130)  # bucket 1 complete again
    assert u.signals == [up_failure(110), rec_request(130)]
    assert data_of(u.on_timer(150)) == [o(T, 4, 0, 3, 21)]  # bucket 2, in the episode
    u.rewind(snap)
    assert u.replaying and u.replay_progress == (0, 2)
    assert u.replay(160) == [o(S, 3, 0, 2, 12), o(S, 4, 1, 2, 15), boundary(20)]
    assert not u.replaying and u.replay_progress == (2, 2)
    assert u.replay(170) == []  # bucket 2 is pending as usual: its boundary, or its deadline
    out = u.process(1, [d(1, 3, 22), boundary(30)], 180)
    assert out == [o(S, 5, 0, 3, 21), o(S, 6, 1, 3, 22), boundary(30)]
    assert not u.in_failure


def test_rewind_refuses_truncated_history() -> None:
    u = sunion(1, recovery="undo")
    snap = u.snapshot()
    u.process(0, [d(0, 1, 3), boundary(10)], 0)  # undo recovery drops stable releases
    with pytest.raises(OperatorError, match="truncated"):
        u.rewind(snap)
    with pytest.raises(OperatorError, match="snapshot of 'soutput'"):
        u.rewind({"type": "soutput"})


def test_what_is_kept_for_replay() -> None:
    ck, ud = sunion(1), sunion(1, recovery="undo")
    for op in (ck, ud):
        op.process(0, [d(0, 1, 3), d(0, 2, 14), boundary(20)], 0)
    assert (ck.buffered, ud.buffered) == (2, 0)
    ck.truncate()
    assert ck.buffered == 0
    for op in (ck, ud):
        op.process(0, [d(0, 3, 25)], 10)
        op.on_timer(110)  # tentative from here on: both keep it
        op.truncate()
        assert op.buffered == 1


def test_late_tuple_for_a_stable_bucket_is_dropped() -> None:
    u = sunion(1)
    u.process(0, [d(0, 1, 3), boundary(10)], 0)
    assert u.process(0, [d(0, 2, 4), boundary(20)], 0) == [boundary(20)]
    assert u.late_dropped == 1


def test_boundaries_of_a_tentative_input_are_not_promises() -> None:
    u = sunion(1)
    u.process(0, [d(0, 1, 5, T), boundary(30)], 0)
    assert u.process(0, [undo(0)], 0) == []
    # The corrected stream re-sends its boundary: it must count now.
    out = u.process(0, [d(0, 1, 6), boundary(30)], 0)
    assert out == [o(S, 1, 0, 1, 6), boundary(10), boundary(30)]


def test_partial_undo_keeps_the_input_tentative() -> None:
    u = sunion(2)
    u.process(0, [boundary(30)], 0)
    u.process(1, [d(1, 1, 5, T), d(1, 2, 15, T)], 0)
    assert data_of(u.on_timer(100)) == [o(T, 1, 1, 1, 5), o(T, 2, 1, 2, 15)]
    u.process(1, [undo(1), boundary(30)], 110)  # tuple 1 is still tentative
    assert u.signals == [up_failure(100)]  # so that boundary was no promise
    u.process(1, [undo(0), d(1, 1, 6), d(1, 2, 16), boundary(30)], 120)
    assert u.signals == [up_failure(100), rec_request(120)]
    assert u.process(0, [undo_start()], 130) == [
        undo(0),
        o(S, 1, 1, 1, 6),
        boundary(10),
        o(S, 2, 1, 2, 16),
        boundary(20),
        boundary(30),
    ]


def test_control_tuples() -> None:
    u = sunion(2)
    assert u.process(0, [rec_done()], 0) == []  # swallowed
    with pytest.raises(OperatorError, match="UP_FAILURE"):
        u.process(0, [make_tuple(Kind.UP_FAILURE, 0, 0, 0, ())], 0)
    with pytest.raises(OperatorError, match="no input port 2"):
        u.process(2, [], 0)


def test_snapshot_restore_mid_episode_preserves_future() -> None:
    a = sunion(2)
    a.process(0, [d(0, 1, 3), boundary(10)], 0)
    a.process(1, [d(1, 1, 4, T), boundary(10)], 0)
    a.on_timer(100)
    a.process(0, [d(0, 2, 13)], 105)
    b = sunion(2)
    b.restore(orjson.loads(orjson.dumps(a.snapshot())))
    script = [
        (1, [undo(0)], 110),
        (1, [d(1, 1, 5), boundary(20)], 120),
        (0, [boundary(20)], 130),
        (0, [undo_start()], 140),
    ]
    outs = []
    for op in (a, b):
        outs.append([op.process(p, batch, now) for p, batch, now in script])
    assert outs[0] == outs[1]
    assert a.snapshot() == b.snapshot()
    assert outs[0][3][0] == undo(0)  # everything released so far was tentative
    assert data_of(apply_undos([t for out in outs[0] for t in out])) == [
        o(S, 1, 0, 1, 3),
        o(S, 2, 1, 1, 5),
        o(S, 3, 0, 2, 13),
    ]


# ---------------------------------------------------------------------- determinism
W = 10
N_PORTS = 3


@st.composite
def port_streams(draw: st.DrawFn) -> list[list[Tuple]]:
    """Per port: data and boundaries, ids increasing from 1, no tuple older than an earlier
    boundary of its port, times out of order within that limit; a final boundary."""
    streams = []
    for p in range(N_PORTS):
        items: list[Tuple] = []
        cur = next_id = 0
        events = draw(
            st.lists(st.tuples(st.integers(0, 25), st.booleans(), st.integers(0, 30)), max_size=25)
        )
        for delta, is_boundary, jitter in events:
            cur += delta
            if is_boundary:
                items.append(boundary(cur))
            else:
                next_id += 1
                items.append(d(p, next_id, cur + jitter))
        items.append(boundary(10_000))
        streams.append(items)
    return streams


def _run_interleaved(streams: list[list[Tuple]], data: st.DataObject) -> list[Tuple]:
    u = sunion(N_PORTS, bucket=W, wait=10**9)
    pos = [0] * N_PORTS
    out: list[Tuple] = []
    while any(pos[p] < len(s) for p, s in enumerate(streams)):
        live = [p for p, s in enumerate(streams) if pos[p] < len(s)]
        p = data.draw(st.sampled_from(live))
        k = data.draw(st.integers(1, len(streams[p]) - pos[p]))
        out += u.process(p, streams[p][pos[p] : pos[p] + k], 0)
        pos[p] += k
    assert u.next_deadline() is None and u.signals == [] and not u.in_failure
    u.truncate()  # everything was released: nothing pending stays after a checkpoint
    assert u.buffered == 0
    return out


@settings(max_examples=200, deadline=None)
@given(port_streams(), st.data())
def test_any_interleaving_and_batching_gives_the_same_output(
    streams: list[list[Tuple]], data: st.DataObject
) -> None:
    first = _run_interleaved(streams, data)
    second = _run_interleaved(streams, data)
    # Data is a function of the per-port streams alone; boundaries only of how far every
    # port got, so only the data and the final boundary are interleaving-independent.
    assert data_of(first) == data_of(second)
    assert first[-1] == second[-1] == boundary(10_000)
    # ... and it is the failure-free total order (time, input index, id), renumbered.
    ref = sorted((t for s in streams for t in s if t.kind is S), key=lambda t: (t.time, t.values))
    assert data_of(first) == [t._replace(id=i) for i, t in enumerate(ref, 1)]
    bounds = [t.time for t in first if t.kind is Kind.BOUNDARY]
    assert bounds == sorted(set(bounds))


# ---------------------------------------------------------------------- CEC resume point
def test_the_resume_point_keeps_nothing_of_the_pending_input() -> None:
    """operators/cec.py restores an SUnion at a frame's resume point and replays each input
    after its resume id: the pending input is not in it, so neither is what it said (a
    tentative port, whose replayed stable boundaries would be ignored: dpc simulate seed
    25367), nor a watermark past the release point (a replay's: seed 107)."""
    u = sunion()
    u.process(0, [d(0, 1, 1), d(0, 2, 12), boundary(20)], 0)
    u.process(1, [d(1, 1, 3), boundary(10)], 0)  # releases bucket 0 only
    u.process(1, [d(1, 2, 14, T)], 1)  # tentative, pending: no failure yet
    assert not u.in_failure
    point = u.resume_point()
    assert point["state"]["last_in"] == [1, 1]  # port 0's tuple 2 is pending, port 1's too
    assert point["state"]["port_tent"] == [False, False]
    assert point["base"]["watermarks"] == [10, 10]  # port 0 said 20: past the release point
    fresh = sunion()
    fresh.restore(point)
    out = fresh.process(0, [d(0, 2, 12), boundary(20)], 5)
    out += fresh.process(1, [d(1, 2, 14), boundary(20)], 5)
    assert [t for t in out if t.kind is S] == [o(S, 3, 0, 2, 12), o(S, 4, 1, 2, 14)]


# ------------------------------------------------------------------- the chain rule (#46)
def test_a_tentative_input_shortens_the_wait_to_process_wait_in_process_mode() -> None:
    """An input carrying tentative tuples comes from a node that already waited its
    alpha*X: waiting 100 again here would add up along a chain. Every pending bucket then
    waits process_wait (30), as in an episode of our own; the UNDO of that input ends it."""
    u = sunion(2)  # wait 100, process_wait 30
    assert u.process(1, [d(1, 1, 3)], 0) == []  # a stable tuple, bucket 0: due at 100
    assert u.next_deadline() == 100
    assert u.process(0, [d(0, 1, 15, T)], 10) == []  # port 0 turns tentative
    assert u.next_deadline() == 30  # bucket 0 (first at 0) now waits process_wait only
    assert u.on_timer(30) == [o(T, 1, 1, 1, 3), tentative_boundary(10)]
    assert u.in_failure and u.signals == [up_failure(30)]
    assert u.on_timer(40) == [o(T, 2, 0, 1, 15), tentative_boundary(20)]  # 10 + 30
    # Corrections: the UNDO of port 0's tentative suffix; the stable re-sends keep the
    # episode's short wait (its own), but a fresh SUnion shows the wait is back to 100.
    v = sunion(2)
    v.process(0, [d(0, 1, 15, T)], 10)
    assert v.next_deadline() == 40
    v.process(0, [undo(0)], 20)
    assert v.next_deadline() is None  # the bucket is empty again
    v.process(0, [d(0, 1, 15)], 25)
    assert v.next_deadline() == 10 + 100  # not tentative any more: alpha*X, kept age


def test_the_chain_rule_never_releases_in_the_call_that_turned_an_input_tentative() -> None:
    """A stable bucket pending longer than process_wait when an input's first tentative
    tuple arrives: releasing it in that call would begin an episode that
    may_begin_episode could not foresee, and the node's on_failure checkpoint would be
    missed (partition-kill: n2a reconciled with no checkpoint). It goes out at the next
    call, which may_begin_episode announces."""
    u = sunion(2)  # wait 100, process_wait 30
    u.process(1, [d(1, 1, 3)], 0)
    assert not u.may_begin_episode(50, True)  # no input tentative yet: alpha*X
    assert u.process(0, [d(0, 1, 15, T)], 50) == [] and not u.in_failure
    assert u.next_deadline() == 30  # already past: the next call releases
    assert u.may_begin_episode(50, False) and u.may_begin_episode(51, True)
    assert u.on_timer(50) == [o(T, 1, 1, 1, 3), tentative_boundary(10)]
    assert u.on_timer(80) == [o(T, 2, 0, 1, 15), tentative_boundary(20)]  # 50 + 30


def test_delay_mode_keeps_the_full_wait_on_a_tentative_input() -> None:
    """Delay & delay adds alpha*X per node (the paper's figure): no chain rule there."""
    u = sunion(2, mode="delay")
    u.process(0, [d(0, 1, 15, T)], 10)
    assert u.next_deadline() == 110
