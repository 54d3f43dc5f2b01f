"""Availability at the client: the paper's Delay_new, counts of what arrived, and the bound.

Role: pure functions of a client's log (``(arrival_us, Tuple)`` rows in arrival order, as
``node/procs/rundir.py`` stores them and ``ops_scripts/check/recorded.py`` reads them). ``dpc check``
prints :func:`assess` and the distribution of :func:`judge_delays` per client; with a run
history, the availability verdict (``ops_scripts/check/properties.py``) judges the delays
:func:`judge_delays` did not excuse. ``dpc demo`` uses :func:`delay_new`
and :func:`apply_undos` on its simulated client.

Theory of operation. A source stamps each tuple with the wall clock (``tmax = time``) and
every operator carries forward the newest ``tmax`` that affected a result, so for a data
tuple ``arrival - tmax`` is its end-to-end delay. The paper measures availability as
Delay_new: the worst delay of a *new* result, leaving out corrections, which are by nature
late (they re-send results the client already had, tentatively). The paper identifies
corrections as the tuples between an UNDO and its REC_DONE. That rule alone does not fit our
clients: a client that switches replicas while holding tentative results may receive an
UNDO and then the other replica's versions of them, with no REC_DONE to close the
"correction" span; the rule would then either count those as new (an inflated delay) or
exclude everything after the switch. And within a reconciliation, SOutput emits results
the failed node never produced at all, which are new and must count.

So :func:`delay_new` decides by content, not by position: **a data tuple (STABLE or
TENTATIVE) is new iff its tmax is greater than the tmax of every data tuple received before
it.** A correction or a replay is about times the client has already seen results for (a
tentative version, or the same stable tuple from the other replica), so its tmax is not
above the running maximum; a result about later input is. Tentative tuples count: they are
how DPC keeps results flowing during a failure.

Caveat of the rule: a new tuple emitted after a sibling with a larger tmax (the groups of one
window, which close together) is not counted, and its delay exceeds the sibling's by the
difference of their tmax: at most one window length for an aggregate, usually much less
(in ``dpc demo``, a few hundredths of a second). Join matches for one input share its tmax,
so they lose nothing.

The bound is the paper's property 1: a result is delayed at most ``X`` by each node it
crosses, so a client of a stream produced ``k`` nodes away from the sources waits at most
``k * X``. Nodes may each set their own ``X``; :func:`bound_for` sums each node's ``X``
along the path whose sum is largest (with equal ``X`` that is the path with most nodes).

The bound under issue 46's rules (docs/design.md, "Failure detection"). A node's SUnion
holds a bucket at most ``alpha*X`` before it releases it tentatively, and less once an input
carries tentative tuples (the chain rule: ``min(alpha*X, process_wait)`` in process mode), so
a result still waits at most ``X`` per node: ``k*X`` stays the bound, and process & process
now stays near ``alpha*X`` plus the path's normal delay, flat in ``k`` (experiment 3). A
failure that leaves a STABLE replica of every node on the path is held to a much tighter
bound, detection plus a switch: the masking property (``ops_scripts/check/masking.py``).

Invariants: every function is pure (no I/O, no clock).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from node.config.model import ClusterConfig, NodeConfig
from protocol import undo_rule
from protocol.tuples import DATA_KINDS, Kind, Tuple

__all__ = [
    "ClientAvailability",
    "ClientDelays",
    "NewResult",
    "apply_undos",
    "assess",
    "bound_for",
    "delay_new",
    "judge_delays",
    "new_results",
    "percentile",
]

Row = tuple[int, Tuple]  # (arrival in microseconds, the tuple)


def apply_undos(stream: Iterable[Tuple]) -> list[Tuple]:
    """The client's final data: its stream with every UNDO applied by the one UNDO rule
    (``protocol.undo_rule``), data tuples only. Control tuples never change which data
    tuples an UNDO removes, so they are left out before applying (fewer to walk over)."""
    return undo_rule.apply_undos(t for t in stream if t.kind is Kind.UNDO or t.kind in DATA_KINDS)


@dataclass(frozen=True, slots=True)
class NewResult:
    """A new result at the client: ``row`` of its log (1-based), the tuple's ``kind``
    name, ``id`` and ``tmax``, its ``arrival`` and ``delay = arrival - tmax`` (µs)."""

    row: int
    kind: str
    id: int
    tmax: int
    arrival: int
    delay: int


def new_results(received: Iterable[Row]) -> list[NewResult]:
    """The new data tuples of a client's log, in log order: a data tuple is new iff its
    tmax exceeds that of every data tuple before it (module docstring: this leaves out
    corrections and replays)."""
    out: list[NewResult] = []
    newest: int | None = None
    for row, (arrival, t) in enumerate(received, start=1):
        if t.kind in DATA_KINDS and (newest is None or t.tmax > newest):
            newest = t.tmax
            out.append(NewResult(row, t.kind.name, t.id, t.tmax, arrival, arrival - t.tmax))
    return out


def delay_new(received: Iterable[Row]) -> int:
    """The paper's Delay_new in microseconds: the maximum of ``arrival - tmax`` over the new
    data tuples (:func:`new_results`). 0 if nothing is new or every delay is negative (clock
    skew between hosts)."""
    return max([0, *(r.delay for r in new_results(received))])


def bound_for(config: ClusterConfig, stream: str) -> int:
    """The delay bound of property 1 for a client of ``stream``, in microseconds: the largest
    sum of the nodes' ``settings.x`` along a path from a source to the node producing
    ``stream`` (``k * X`` when every node has the same X). 0 for a source's own stream.
    Raises ``KeyError`` for a stream of no node and ``ValueError`` on a cycle."""
    memo: dict[str, int] = {}
    visiting: set[str] = set()

    def weight(node: NodeConfig) -> int:
        if node.name in memo:
            return memo[node.name]
        if node.name in visiting:
            raise ValueError(f"bound_for: node {node.name!r} is on a cycle of streams")
        visiting.add(node.name)
        upstream = 0
        for s in node.inputs:
            producer = config.producer_of(s)
            if isinstance(producer, NodeConfig):
                upstream = max(upstream, weight(producer))
        visiting.discard(node.name)
        memo[node.name] = upstream + node.settings.x
        return memo[node.name]

    producer = config.producer_of(stream)
    return weight(producer) if isinstance(producer, NodeConfig) else 0


@dataclass(frozen=True, slots=True)
class ClientAvailability:
    """What one client saw. ``received`` counts every row of its log, control tuples
    included; times are microseconds; ``exceeded`` is ``delay_new_us > bound_us``."""

    client: str
    stream: str
    received: int
    n_tentative: int
    n_undo: int
    n_rec_done: int
    delay_new_us: int
    bound_us: int
    exceeded: bool


def assess(config: ClusterConfig, client: str, rows: Sequence[Row]) -> ClientAvailability:
    """Availability of the client named ``client`` (a key of ``config.clients``) from its
    log ``rows``: ``(arrival, tuple)`` in arrival order."""
    stream = config.clients[client].stream
    counts = dict.fromkeys((Kind.TENTATIVE, Kind.UNDO, Kind.REC_DONE), 0)
    for _, t in rows:
        if t.kind in counts:
            counts[t.kind] += 1
    worst = delay_new(rows)
    bound = bound_for(config, stream)
    return ClientAvailability(
        client=client,
        stream=stream,
        received=len(rows),
        n_tentative=counts[Kind.TENTATIVE],
        n_undo=counts[Kind.UNDO],
        n_rec_done=counts[Kind.REC_DONE],
        delay_new_us=worst,
        bound_us=bound,
        exceeded=worst > bound,
    )


@dataclass(frozen=True, slots=True)
class ClientDelays:
    """The delays of one client's new results (:func:`new_results`), split by outages.

    ``judged``: a run history said when the client had a path (``ops_scripts/check/paths.py``):
    ``excused`` counts the new results whose tmax lies within ``[start - bound, end +
    bound]`` of one of the ``outages`` and ``checked`` the others. Without a history
    (``judged`` false) every new result is measured and counted in ``checked``, none is
    excused, and nothing here is a verdict. Percentiles (nearest rank), ``max_us`` and
    ``worst`` are over the checked ones (None if there are none); ``late`` counts checked
    ones over ``bound_us``, ``first_late`` is the first of them in the log. Microseconds."""

    client: str
    stream: str
    bound_us: int
    judged: bool
    outages: int
    checked: int
    excused: int
    late: int
    p50_us: int | None
    p90_us: int | None
    p99_us: int | None
    max_us: int | None
    worst: NewResult | None
    first_late: NewResult | None


def percentile(ordered: Sequence[int], p: float) -> int:
    """The nearest-rank ``p``-th percentile of a non-empty ascending sequence."""
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


Window = tuple[int, int | None]  # an outage's [start, end), end None: never ended


def _excuse_windows(outages: Sequence[Window], bound: int) -> list[tuple[int, float]]:
    """The outages widened by ``bound`` on both sides, merged, sorted by start."""
    widened = sorted((s - bound, math.inf if e is None else e + bound) for s, e in outages)
    merged: list[tuple[int, float]] = []
    for lo, hi in widened:
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def judge_delays(client: str, stream: str, rows: Sequence[Row], bound: int,
                 outages: Sequence[Window] | None) -> ClientDelays:
    """Split the client's new results into excused and checked (``outages`` None: no
    history, all measured) and describe the checked delays (:class:`ClientDelays`)."""
    results = new_results(rows)
    checked = results
    if outages is not None:
        windows = _excuse_windows(outages, bound)
        starts = [lo for lo, _ in windows]

        def excused(r: NewResult) -> bool:
            k = bisect.bisect_right(starts, r.tmax) - 1  # the last window starting <= tmax
            return k >= 0 and r.tmax <= windows[k][1]

        checked = [r for r in results if not excused(r)]
    delays = sorted(r.delay for r in checked)
    late = [r for r in checked if r.delay > bound]
    return ClientDelays(
        client=client, stream=stream, bound_us=bound, judged=outages is not None,
        outages=len(outages or ()), checked=len(checked), excused=len(results) - len(checked),
        late=len(late),
        p50_us=percentile(delays, 50) if delays else None,
        p90_us=percentile(delays, 90) if delays else None,
        p99_us=percentile(delays, 99) if delays else None,
        max_us=delays[-1] if delays else None,
        worst=max(checked, key=lambda r: r.delay, default=None),
        first_late=late[0] if late else None,
    )
