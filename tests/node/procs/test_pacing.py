"""The pure half of a source (node/procs/pacing.py): which tuples are due, their ids and
times, when the stream ends, and what a boundary may promise."""

from __future__ import annotations

import itertools

from node.procs.pacing import CAP, EndReason, EventClock, RatePace, Schedule
from protocol.tuples import Kind

S = 1_000_000  # µs per second


def rows(n: int | None = None):  # type: ignore[no-untyped-def]
    it = ((None, (i,)) for i in itertools.count(1))
    return it if n is None else itertools.islice(it, n)


def test_tuples_come_at_the_rate_numbered_and_stamped_when_due() -> None:
    sched = Schedule(rows(), RatePace(0, 1000.0))
    assert sched.take(0) == []
    batch = sched.take(S // 100)  # 10 ms: 10 due
    assert [t.id for t in batch] == list(range(1, 11))
    assert [t.time for t in batch] == [i * 1000 for i in range(1, 11)]
    assert batch[0].kind is Kind.STABLE
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
    # The overdue tuples keep the times they were due at, 1 ms apart, not the instant they
    # went out: a stall delays data, it does not squeeze 13 s of it into one instant (a
    # windowed join would match all of it with itself).
    assert [t.time for t in first + second + later] == [i * 1000 for i in range(1001, 15_001)]


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
    promised = sched.horizon(S)
    assert promised >= batch[-1].time
    assert all(t.time >= promised for t in sched.take(2 * S))
    behind = Schedule(rows(), RatePace(0, 1000.0))
    behind.take(20 * S)  # a stall: one capped batch out, 10,000 overdue tuples to come
    assert behind.horizon(20 * S) == 10_001_000 == behind.take(20 * S)[0].time


# ------------------------------------------------------------------ event time
DAY = 86_400 * S


def events(times: list[int]):  # type: ignore[no-untyped-def]
    return iter([(e, (e,)) for e in times])


def test_event_time_is_rebased_onto_the_run_clock() -> None:
    clock = EventClock(t_start=1000 * S, event_first=50 * DAY, speedup=86_400.0)  # a day a second
    assert clock.rebase(50 * DAY) == 1000 * S
    assert clock.rebase(51 * DAY + DAY // 2) == 1001 * S + S // 2
    assert EventClock.starting(7, 123, 2.0) == EventClock(7, 123, 2.0)


def test_align_keeps_data_days_on_window_multiples() -> None:
    """With align = a day and 0.16 s per data day, each data day is one tumbling window of
    160,000 µs on the run's clock (the weather example's per-day aggregate)."""
    first = 14_610 * DAY + 5 * 3600 * S  # 05:00 on some day
    clock = EventClock.starting(1_795_455_813_411_111, first, 540_000.0, DAY)
    assert clock.t_start % 160_000 == 0 and clock.t_start >= 1_795_455_813_411_111
    assert clock.event_first == 14_610 * DAY
    for day in range(14_610, 14_620):
        for hour in (0, 13, 23):
            t = clock.rebase(day * DAY + hour * 3600 * S)
            assert (t - clock.t_start) // 160_000 == day - 14_610 and t % 160_000 == (t - clock.t_start) % 160_000
    odd = EventClock.starting(10**15 + 1, 0, 7.0, S)  # a grid of 1/7 s
    assert odd.t_start >= 10**15 + 1 and odd.t_start - 10**15 < S


def test_an_event_time_schedule_emits_each_row_when_its_rebased_time_is_due() -> None:
    clock = EventClock(t_start=100 * S, event_first=0, speedup=10.0)  # 10 data s per s
    sched = Schedule(events([0, 10 * S, 10 * S, 40 * S]), clock)
    assert sched.next_due() == 100 * S and sched.horizon(99 * S) == 99 * S
    assert sched.take(99 * S) == []
    first = sched.take(100 * S)
    assert [(t.id, t.time, t.values) for t in first] == [(1, 100 * S, (0,))]
    assert sched.horizon(100 * S + 1) == 100 * S + 1  # never ahead of the run's clock...
    assert sched.horizon(105 * S) == 101 * S  # ...nor of the next tuple's time
    both = sched.take(102 * S)
    assert [(t.id, t.time) for t in both] == [(2, 101 * S), (3, 101 * S)]
    assert sched.next_due() == 104 * S and sched.ended is None
    assert [t.time for t in sched.take(200 * S)] == [104 * S] and sched.ended is EndReason.FILE


def test_an_event_time_source_behind_catches_up_in_capped_batches() -> None:
    clock = EventClock(t_start=0, event_first=0, speedup=1.0)
    sched = Schedule(events(list(range(0, 30_000 * 1000, 1000))), clock)  # 1000 rows/s
    got = [sched.take(25 * S) for _ in range(4)]
    assert [len(b) for b in got] == [CAP, CAP, 5001, 0] and sched.ended is None
    assert [t.time for t in got[2]][-1] == 25 * S  # each keeps its own (past) time
