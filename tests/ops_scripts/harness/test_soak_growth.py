"""The soak's rule (ops_scripts/harness/growth.py), a pure function of samples: flat, noisy
flat, a slow steady leak, a sawtooth flat on average, a restart that resets a process's
memory (a new series), buffers against their stream's rate, series too short to judge, and
RSS that steps up beside a flat live heap (retained, not grown)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from ops_scripts.harness.growth import (
    MIB,
    RSS_FLOOR,
    Judgement,
    Series,
    SeriesKind,
    Verdict,
    default_warmup,
    judge,
    judge_all,
    least_squares_slope,
    series_from_samples,
    soak_passes,
)

MINUTES = 30
SAMPLE = 10.0  # seconds between samples
WARMUP = 5 * 60.0  # seconds


def times(minutes: float = MINUTES, start: float = 0.0) -> list[float]:
    return [start + i * SAMPLE for i in range(int(minutes * 60 / SAMPLE) + 1)]


def rss(f: Callable[[float], float], minutes: float = MINUTES) -> Series:
    """An RSS series of one process whose memory at ``t`` seconds is ``f(t)`` MiB."""
    return Series(SeriesKind.RSS, "n1a", 1, tuple((t, f(t) * MIB) for t in times(minutes)))


def verdict(series: Series, warmup: float = WARMUP) -> Judgement:
    return judge(series, warmup)


def test_least_squares_slope_of_a_line_and_of_nothing() -> None:
    assert least_squares_slope([(t, 3.0 + 2.5 * t) for t in range(10)]) == pytest.approx(2.5)
    assert least_squares_slope([(1.0, 5.0)]) == 0.0
    assert least_squares_slope([(1.0, 5.0), (1.0, 9.0)]) == 0.0


def test_default_warmup_is_five_minutes_or_a_third() -> None:
    assert default_warmup(30) == 5.0
    assert default_warmup(2) == pytest.approx(2 / 3)


def test_flat_memory_is_flat() -> None:
    j = verdict(rss(lambda t: 100.0))
    assert j.verdict is Verdict.FLAT
    assert j.slope_per_minute == 0.0 and j.growth == 0.0
    assert j.median == 100 * MIB and j.threshold == RSS_FLOOR
    assert j.points == (MINUTES * 60 - WARMUP) / SAMPLE + 1


def test_noisy_flat_memory_is_flat() -> None:
    rng = random.Random(7)
    noise = {t: rng.uniform(-8, 8) for t in times()}
    j = verdict(rss(lambda t: 100.0 + noise[t]))
    assert j.verdict is Verdict.FLAT
    assert j.growth is not None and abs(j.growth) < RSS_FLOOR / 2


def test_a_slow_steady_leak_grows_and_a_slower_one_stays_under_the_floor() -> None:
    # 1 MiB a minute: 25 MiB over the 25 judged minutes, above 16 MiB and 10 % of ~115 MiB.
    j = verdict(rss(lambda t: 100.0 + t / 60))
    assert j.verdict is Verdict.GROWS
    assert j.slope_per_minute == pytest.approx(1.0 * MIB)
    assert j.growth == pytest.approx(25 * MIB)
    # 0.5 MiB a minute: 12.5 MiB, under the absolute floor.
    assert verdict(rss(lambda t: 100.0 + t / 120)).verdict is Verdict.FLAT


def test_the_relative_floor_spares_a_large_process() -> None:
    # 20 MiB over the run (above 16 MiB) on a 400 MiB process (under 10 % of it).
    j = verdict(rss(lambda t: 400.0 + 20 * (t - WARMUP) / (MINUTES * 60 - WARMUP)))
    assert j.growth == pytest.approx(20 * MIB)
    assert j.verdict is Verdict.FLAT and j.threshold == pytest.approx(0.1 * j.median)  # type: ignore[operator]


def test_a_sawtooth_flat_on_average_is_flat() -> None:
    # A collector that lets 40 MiB pile up and frees it every two minutes.
    j = verdict(rss(lambda t: 80.0 + 40 * ((t % 120) / 120)))
    assert j.verdict is Verdict.FLAT
    assert j.growth is not None and abs(j.growth) < RSS_FLOOR / 2


def samples_with_restart(restart: float, pid_after: int) -> list[dict[str, Any]]:
    """n1a at 150 MiB until ``restart`` s; its next incarnation (pid ``pid_after``) starts
    at 60 MiB and climbs back to 150 MiB over its first four minutes, then stays."""
    out = []
    for t in times():
        if t < restart:
            pid, mib = 100, 150.0
        else:
            pid, mib = pid_after, min(150.0, 60.0 + 90 * (t - restart) / 240)
        out.append({"t": t, "rss": {"n1a": {"pid": pid, "bytes": int(mib * MIB)}}})
    return out


def test_a_restart_starts_a_new_series_with_its_own_warmup() -> None:
    first, second = series_from_samples(samples_with_restart(6 * 60.0, pid_after=200))
    assert (first.pid, first.incarnation, second.pid, second.incarnation) == (100, 1, 200, 2)
    assert second.start == 6 * 60.0 and second.label == "n1a #2"
    judged = [verdict(s) for s in (first, second)]
    assert [j.verdict for j in judged] == [Verdict.FLAT, Verdict.FLAT]
    assert judged[1].judged_from == 11 * 60.0  # its own start + the warm-up
    assert soak_passes(judged)
    # Fitted across the reset (as if one pid), the climb back reads as a leak.
    (one,) = series_from_samples(samples_with_restart(6 * 60.0, pid_after=100))
    assert verdict(one).verdict is Verdict.GROWS


def buffer(values: Callable[[float], float], rate: float) -> Series:
    ts = times()
    return Series(SeriesKind.BUFFER, "n1b", 1, tuple((t, values(t)) for t in ts), "n1.out",
                  tuple((t, rate * t) for t in ts))


def test_a_buffer_is_judged_against_two_seconds_of_its_stream() -> None:
    # Trimmed by acks in bursts: 0 to 150 tuples at 100 tuples/s.
    j = verdict(buffer(lambda t: (t % 50) * 3, rate=100.0))
    assert j.verdict is Verdict.FLAT
    assert j.rate == pytest.approx(100.0) and j.floor == pytest.approx(200.0)
    # Nobody trims it: 1 tuple/s more, 1500 tuples over 25 minutes.
    leak = verdict(buffer(lambda t: 20 + t, rate=100.0))
    assert leak.verdict is Verdict.GROWS and leak.growth == pytest.approx(1500.0)
    # The same growth on a stream of 1000 tuples/s is under 2 s of it.
    assert verdict(buffer(lambda t: 20 + t, rate=1000.0)).verdict is Verdict.FLAT


def test_buffers_of_a_restarted_replica_start_a_new_series() -> None:
    samples = [{"t": float(t), "buffers": {"n1a": {"pid": 1 if t < 5 else 2, "streams": {
        "n1.out": {"buffered": 10 * t, "out": 100 * t}}}},
                "rss": {"n1a": {"pid": 1 if t < 5 else 2, "bytes": 1000}}} for t in range(10)]
    got = series_from_samples(samples)
    assert [(s.kind, s.pid, s.incarnation, len(s.points)) for s in got] == [
        (SeriesKind.RSS, 1, 1, 5), (SeriesKind.RSS, 2, 2, 5),
        (SeriesKind.BUFFER, 1, 1, 5), (SeriesKind.BUFFER, 2, 2, 5)]
    assert got[3].out[0] == (5.0, 500.0) and got[3].stream == "n1.out"


def test_a_process_missing_from_samples_goes_on_in_its_series() -> None:
    samples = [{"t": float(t), "rss": {} if 3 <= t < 6 else {"s1": {"pid": 9, "bytes": t}}}
               for t in range(10)]
    (s,) = series_from_samples(samples)
    assert [t for t, _ in s.points] == [0, 1, 2, 6, 7, 8, 9]


def test_short_series_are_not_judged_and_a_soak_needs_one_judged() -> None:
    short = verdict(rss(lambda t: 100.0, minutes=5.2))
    assert short.verdict is Verdict.SHORT and short.points == 2 and short.growth is None
    flat = verdict(rss(lambda t: 100.0))
    grows = verdict(rss(lambda t: 100.0 + t / 60))
    assert not soak_passes([short])
    assert soak_passes([short, flat])
    assert not soak_passes([flat, grows])


def stepping(heap: Callable[[float], float]) -> list[dict[str, Any]]:
    """A replica n1a and a source s1, both of whose RSS steps up 5 MiB at four failures
    (minutes 8, 12, 17 and 24: what the allocator keeps after each replay's burst), with
    n1a's live heap at ``heap(t)`` blocks (s1 has no control plane: no heap)."""
    rng = random.Random(7)
    out = []
    for t in times():
        mib = 140.0 + 5 * sum(t >= m * 60 for m in (8, 12, 17, 24))
        out.append({"t": t,
                    "rss": {n: {"pid": pid, "bytes": int(mib * MIB)}
                            for n, pid in (("n1a", 10), ("s1", 11))},
                    "heap": {"n1a": {"pid": 10, "blocks": int(heap(t) + rng.uniform(-3e3, 3e3))}}})
    return out


def test_rss_that_steps_up_beside_a_flat_live_heap_is_retained_not_grown() -> None:
    judged = {(j.series.kind, j.series.process): j
              for j in judge_all(series_from_samples(stepping(lambda t: 600_000.0)), WARMUP)}
    rss_n1a = judged[SeriesKind.RSS, "n1a"]
    assert judged[SeriesKind.HEAP, "n1a"].verdict is Verdict.FLAT
    assert rss_n1a.verdict is Verdict.RETAINED and rss_n1a.growth is not None
    assert rss_n1a.growth > RSS_FLOOR  # by RSS alone it grows
    assert rss_n1a.notes and "live heap flat" in rss_n1a.notes[0]
    # The source's RSS steps alike, and nothing says its heap is flat: it grows.
    assert judged[SeriesKind.RSS, "s1"].verdict is Verdict.GROWS
    assert not soak_passes(list(judged.values()))
    assert soak_passes([judged[SeriesKind.RSS, "n1a"], judged[SeriesKind.HEAP, "n1a"]])


def test_rss_and_a_live_heap_that_grow_together_are_a_leak() -> None:
    # 100 blocks more per second: 150,000 over the judged 25 minutes (25 % of the median).
    judged = judge_all(series_from_samples(stepping(lambda t: 500_000.0 + 100 * t)), WARMUP)
    by = {(j.series.kind, j.series.process): j for j in judged}
    assert by[SeriesKind.HEAP, "n1a"].verdict is Verdict.GROWS
    assert by[SeriesKind.RSS, "n1a"].verdict is Verdict.GROWS
    assert not soak_passes(judged)
    # A heap that grows under its floors beside flat RSS: flat.
    small = judge_all(series_from_samples(stepping(lambda t: 600_000.0 + 10 * t)), WARMUP)
    assert {j.verdict for j in small if j.series.kind is SeriesKind.HEAP} == {Verdict.FLAT}


def test_heap_series_sit_between_rss_and_buffers() -> None:
    samples = [{"t": float(t), "rss": {"n1a": {"pid": 1, "bytes": 1000}},
                "heap": {"n1a": {"pid": 1, "blocks": 50}},
                "buffers": {"n1a": {"pid": 1, "streams": {"n1.out": {"buffered": 1, "out": t}}}}}
               for t in range(5)]
    assert [s.kind for s in series_from_samples(samples)] == [
        SeriesKind.RSS, SeriesKind.HEAP, SeriesKind.BUFFER]
