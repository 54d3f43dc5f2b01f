"""The soak's rule: does a series of samples grow steadily? (pure: no I/O, no clock)

Role: ``dpc soak`` (``soak.py``) samples every process's resident memory and every output
buffer's size over a long run; this module turns those samples into series and judges each
one, so that the rule is one function with unit tests, and the report, the plot and the
exit code all read its verdicts.

The rule (:data:`RULE`, printed with every report):

* a **series** is one process incarnation's RSS (bytes), one replica incarnation's live
  Python heap (blocks allocated, its ``/status`` gauge ``heap_blocks``), or one output
  buffer's size (tuples) at one replica incarnation: a process restarted under a new pid
  starts a new series (a restart resets memory; a line fitted across it would judge the
  reset);
* each series ignores its first ``warmup`` seconds (from the soak's start for the processes
  started with it, from its restart for a restarted one) and is judged on the rest;
* a least-squares line is fitted to the judged points; the series **grows steadily** when
  its slope times the judged span (the growth the trend predicts over the remaining
  duration) exceeds both an absolute floor (RSS: :data:`RSS_FLOOR` = 16 MiB; the heap:
  :data:`HEAP_FLOOR` = 20,000 blocks; a buffer: what the stream produces in
  :data:`BUFFER_FLOOR_SECONDS` = 2 s, its rate measured from the replica's stable output
  count over the same points) and a relative one (:data:`RELATIVE_FLOOR` = 10 % of the
  judged points' median);
* an RSS series that grows steadily while the same incarnation's live heap is judged flat
  is **retained**, not grown: the process holds no more objects, and the pages are what
  the allocator kept after a burst (a replica's RSS steps up at the longest input failure
  it has lived through: the replay's buffers are freed, their arenas not returned). A
  process without a heap series (sources, clients: no control plane) cannot be retained;
* a series with fewer than :data:`MIN_POINTS` judged points is ``short``: not judged;
* a soak **passes** when no series grows steadily and at least one series was judged
  (:func:`soak_passes`).

A flat series, a noisy flat one, and a sawtooth that is flat on average (garbage
collection, a buffer trimmed by acks in bursts) stay under the floors; a slow leak that
would add more than 16 MiB (or 2 s of a stream) over the run does not.

The samples are the records of ``RUN_DIR/soak.jsonl`` (written by ``soak.py``)::

    {"t": 12.0, "rss": {"n1a": {"pid": 4242, "bytes": 104857600}, ...},
     "heap": {"n1a": {"pid": 4242, "blocks": 612345}, ...},
     "buffers": {"n1a": {"pid": 4242, "streams": {"n1.out": {"buffered": 17, "out": 3300}}}}}

``t`` in seconds from the soak's start; ``out`` is the replica's count of stable tuples put
on the stream (its ``/status`` counter ``tuples_out``), from which the stream's rate comes.
A process that was down, or a control plane that did not answer, is absent from a sample.
"""

from __future__ import annotations

import dataclasses
import enum
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BUFFER_FLOOR_SECONDS",
    "HEAP_FLOOR",
    "MIB",
    "MIN_POINTS",
    "RELATIVE_FLOOR",
    "RSS_FLOOR",
    "RULE",
    "Judgement",
    "Series",
    "SeriesKind",
    "Verdict",
    "default_warmup",
    "judge",
    "judge_all",
    "least_squares_slope",
    "series_from_samples",
    "soak_passes",
]

MIB = 1024 * 1024
#: The absolute floor of an RSS series' growth (bytes).
RSS_FLOOR = 16 * MIB
#: The absolute floor of a live heap series' growth (blocks).
HEAP_FLOOR = 20_000
#: A buffer's absolute floor: what its stream produces in this many seconds (tuples).
BUFFER_FLOOR_SECONDS = 2.0
#: The relative floor: this fraction of the judged points' median.
RELATIVE_FLOOR = 0.10
#: Fewer judged points than this: the series is too short to judge.
MIN_POINTS = 3

RULE = (
    "each series (one process incarnation's RSS; one replica incarnation's live heap; one "
    "buffer at one replica incarnation: a restart starts a new series) ignores its first "
    "WARMUP (from the soak's start, or from its restart); a least-squares line is fitted to "
    "the rest; it grows steadily when slope x judged span exceeds both an absolute floor "
    "(RSS: 16 MiB; heap: 20,000 blocks; buffer: 2 s of its stream's rate, in tuples) and 10 % "
    "of its median; RSS that grows while the same incarnation's live heap is flat is "
    "retained (the allocator's high-water mark after a burst), not grown; a soak passes when "
    f"no series grows steadily (a series with fewer than {MIN_POINTS} judged points is too "
    "short: not judged)"
)


class Verdict(enum.Enum):
    FLAT = "flat"
    GROWS = "grows"
    RETAINED = "retained"  # RSS only: it grew, the live heap did not (module docstring)
    SHORT = "short"


class SeriesKind(enum.Enum):
    RSS = "rss"
    HEAP = "heap"
    BUFFER = "buffer"


@dataclass(frozen=True, slots=True)
class Series:
    """One series: ``points`` are ``(t seconds, value)``, in time order; ``out`` (buffers
    only) the stream's stable output count at the same times, for its rate."""

    kind: SeriesKind
    process: str
    pid: int
    points: tuple[tuple[float, float], ...]
    stream: str | None = None
    out: tuple[tuple[float, float], ...] = ()
    incarnation: int = 1  # 1: the process as started; 2: after its first restart; ...

    @property
    def start(self) -> float:
        return self.points[0][0]

    @property
    def label(self) -> str:
        what = self.process if self.stream is None else f"{self.process} {self.stream}"
        return what if self.incarnation == 1 else f"{what} #{self.incarnation}"


@dataclass(frozen=True, slots=True)
class Judgement:
    """A series' verdict and the figures behind it (None where ``SHORT``)."""

    series: Series
    verdict: Verdict
    judged_from: float  # seconds: the first point the fit may use
    points: int  # judged points
    slope_per_minute: float | None = None  # value units per minute
    growth: float | None = None  # slope x judged span
    median: float | None = None
    floor: float | None = None  # the absolute floor
    threshold: float | None = None  # max(floor, relative floor): growth must exceed it
    rate: float | None = None  # a buffer's stream, tuples/s
    notes: tuple[str, ...] = field(default_factory=tuple)


def default_warmup(minutes: float) -> float:
    """The default warm-up, in minutes: min(5, M / 3)."""
    return min(5.0, minutes / 3)


def least_squares_slope(points: Sequence[tuple[float, float]]) -> float:
    """The slope of the least-squares line through ``points`` (value per second); 0.0 when
    every point has the same time."""
    n = len(points)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    return sum((t - mt) * (v - mv) for t, v in points) / var


def _rate(out: Sequence[tuple[float, float]], start: float, end: float) -> float:
    """A stream's rate (tuples/s) over ``[start, end]`` from its output counts (0.0 if
    fewer than two counts fall in it)."""
    inside = [(t, c) for t, c in out if start <= t <= end]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return 0.0
    return max(0.0, (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0]))


def judge(series: Series, warmup: float) -> Judgement:
    """Judge one series by the rule (module docstring); ``warmup`` in seconds."""
    judged_from = series.start + warmup
    pts = [(t, v) for t, v in series.points if t >= judged_from]
    if len(pts) < MIN_POINTS:
        return Judgement(series, Verdict.SHORT, judged_from, len(pts))
    slope = least_squares_slope(pts)
    span = pts[-1][0] - pts[0][0]
    growth = slope * span
    median = statistics.median(v for _, v in pts)
    rate = None
    if series.kind is SeriesKind.RSS:
        floor = float(RSS_FLOOR)
    elif series.kind is SeriesKind.HEAP:
        floor = float(HEAP_FLOOR)
    else:
        rate = _rate(series.out, pts[0][0], pts[-1][0])
        floor = BUFFER_FLOOR_SECONDS * rate
    threshold = max(floor, RELATIVE_FLOOR * median)
    verdict = Verdict.GROWS if growth > floor and growth > RELATIVE_FLOOR * median else Verdict.FLAT
    return Judgement(series, verdict, judged_from, len(pts), slope * 60, growth, median,
                     floor, threshold, rate)


def judge_all(series: Iterable[Series], warmup: float) -> list[Judgement]:
    """Judge every series; an RSS series that grows beside a flat live heap of the same
    incarnation is retained (module docstring)."""
    judged = [judge(s, warmup) for s in series]
    heaps = {(j.series.process, j.series.pid): j for j in judged
             if j.series.kind is SeriesKind.HEAP}
    out = []
    for j in judged:
        heap = heaps.get((j.series.process, j.series.pid))
        if (j.series.kind is SeriesKind.RSS and j.verdict is Verdict.GROWS
                and heap is not None and heap.verdict is Verdict.FLAT):
            j = dataclasses.replace(j, verdict=Verdict.RETAINED, notes=(
                *j.notes, f"live heap flat ({heap.growth or 0:+,.0f} blocks)"))
        out.append(j)
    return out


def soak_passes(judgements: Sequence[Judgement]) -> bool:
    """No series grows steadily, and at least one was judged."""
    return (all(j.verdict is not Verdict.GROWS for j in judgements)
            and any(j.verdict in (Verdict.FLAT, Verdict.RETAINED) for j in judgements))


# ---------------------------------------------------------------- samples -> series
def series_from_samples(samples: Iterable[Mapping[str, Any]]) -> list[Series]:
    """The series of ``soak.jsonl``'s sample records (module docstring), RSS, heap, then
    buffers, each kind ordered by process, stream and incarnation. A new pid for a process starts a new
    series (its incarnation counts the pids seen for that process, in order); a process
    missing from some samples (paused, unreachable) goes on in the same series when it
    comes back under the same pid."""
    pids: dict[str, list[int]] = {}
    points: dict[tuple[SeriesKind, str, str | None, int], list[tuple[float, float]]] = {}
    counts: dict[tuple[SeriesKind, str, str | None, int], list[tuple[float, float]]] = {}

    def seen(name: str, pid: int) -> None:
        known = pids.setdefault(name, [])
        if pid not in known:
            known.append(pid)

    for s in samples:
        t = float(s["t"])
        for name, r in s.get("rss", {}).items():
            seen(name, int(r["pid"]))
            points.setdefault((SeriesKind.RSS, name, None, int(r["pid"])), []).append(
                (t, float(r["bytes"])))
        for name, h in s.get("heap", {}).items():  # soaks before the heap was sampled: none
            seen(name, int(h["pid"]))
            points.setdefault((SeriesKind.HEAP, name, None, int(h["pid"])), []).append(
                (t, float(h["blocks"])))
        for name, b in s.get("buffers", {}).items():
            seen(name, int(b["pid"]))
            for stream, st in b["streams"].items():
                key = (SeriesKind.BUFFER, name, stream, int(b["pid"]))
                points.setdefault(key, []).append((t, float(st["buffered"])))
                counts.setdefault(key, []).append((t, float(st["out"])))

    kinds = list(SeriesKind)

    def order(key: tuple[SeriesKind, str, str | None, int]) -> tuple[int, str, str, int]:
        kind, name, stream, pid = key
        return (kinds.index(kind), name, stream or "", pids[name].index(pid))

    return [Series(kind, name, pid, tuple(points[key]), stream, tuple(counts.get(key, ())),
                   pids[name].index(pid) + 1)
            for key in sorted(points, key=order) for kind, name, stream, pid in (key,)]
