"""The pure half of a source (node/procs/pacing.py): which tuples are due, their ids and
times, when the stream ends, and what a boundary may promise."""

from __future__ import annotations

import itertools

from node.procs.pacing import CAP, EndReason, RatePace, Schedule
from protocol.tuples import Kind

S = 1_000_000  # µs per second


def rows(n: int | None = None):  # type: ignore[no-untyped-def]
    it = ((i,) for i in itertools.count(1))
    return it if n is None else itertools.islice(it, n)


def test_tuples_come_at_the_rate_numbered_and_stamped_when_produced() -> None:
    sched = Schedule(rows(), RatePace(0, 1000.0))
    assert sched.take(0) == []
    batch = sched.take(S // 100)  # 10 ms: 10 due
    assert [t.id for t in batch] == list(range(1, 11))
    assert {t.time for t in batch} == {S // 100} and batch[0].kind is Kind.STABLE
    assert [t.values for t in batch] == [(i,) for i in range(1, 11)]
    assert sched.next_due() == 11_000 and sched.ended is None


def test_a_stall_longer_than_a_batch_never_ends_the_stream() -> None:
    """Defect 1 of issue 13: 13 s of stall at 1000 tuples/s is 13,000 tuples due, more than
    one batch holds; the source used to take the short batch for the end of its data."""
    sched = Schedule(rows(), RatePace(0, 1000.0))
    assert len(sched.take(S)) == 1000
    stalled = 14 * S
    first = sched.take(stalled)
    assert len(first) == CAP and sched.ended is None
    second = sched.take(stalled)
    assert len(second) == 3000 and sched.ended is None  # everything due, in capped turns
    assert sched.take(stalled) == []
    assert sched.ended is None and sched.next_due() == 14 * S + 1000
    later = sched.take(15 * S)
    assert len(later) == 1000 and later[-1].id == 15_000  # and it goes on
    ids = [t.id for t in first + second + later]
    assert ids == list(range(1001, 15_001))


def test_the_end_is_the_rows_running_out_or_the_limit() -> None:
    sched = Schedule(rows(25), RatePace(0, 1000.0))
    assert len(sched.take(20_000)) == 20 and sched.ended is None
    assert len(sched.take(10 * S)) == 5 and sched.ended is EndReason.FILE
    assert sched.next_due() is None
    limited = Schedule(rows(), RatePace(0, 1000.0), limit=7)
    assert len(limited.take(10 * S)) == 7 and limited.ended is EndReason.LIMIT
    empty = Schedule(rows(0), RatePace(0, 1000.0))
    assert empty.ended is EndReason.FILE  # known before anything is due


def test_ids_and_times_go_on_from_an_earlier_incarnation() -> None:
    sched = Schedule(rows(), RatePace(5 * S, 10.0), produced=40, limit=42, last_time=9 * S)
    batch = sched.take(6 * S)  # 10 due, 2 left under the limit
    assert [t.id for t in batch] == [41, 42] and sched.ended is EndReason.LIMIT
    assert {t.time for t in batch} == {9 * S}  # never before the last logged time


def test_the_horizon_is_never_above_a_tuple_to_come() -> None:
    sched = Schedule(rows(), RatePace(0, 10.0))
    assert sched.horizon(50_000) == 50_000
    batch = sched.take(S)
    assert sched.horizon(S) >= batch[-1].time
    assert all(t.time >= sched.horizon(S) for t in sched.take(2 * S))
