"""Upstream monitoring and choice (paper sections 3.3, 3.4.3 and 3.5): which replica of an
upstream node feeds an input stream. Pure: no I/O, no clock (``now`` is a parameter, in the
integer time unit of the config, microseconds), deterministic (STYLE.md 1-2). The runtime
sends the heartbeats and moves the links; this module only decides.

:class:`HeartbeatTracker` -- liveness and last known stream states of the replicas of one
upstream node. The runtime asks :meth:`~HeartbeatTracker.due` which replicas to probe,
reports each ``HeartbeatRequest`` with :meth:`~HeartbeatTracker.sent` and each
``HeartbeatResponse`` with :meth:`~HeartbeatTracker.answered`, and sleeps until
:meth:`~HeartbeatTracker.next_deadline`. Liveness rules (paper: probe every 100 ms, failed
after more than 3 consecutive unanswered):

* A request is *in flight* until the next request to the same replica is sent; then, if
  still unanswered, it is *missed* (it had a whole interval to be answered). ``missed(r)``
  counts the requests sent after the newest counted answer, minus the one in flight. A
  replica is failed iff ``missed(r) > misses``: with ``misses = 3`` it is declared failed
  when the 5th unanswered request is sent, (misses + 1) intervals after the first.
* An answer to seq ``s`` is *counted* iff ``s`` is newer than the last counted answer and
  is one of the ``misses + 2`` newest requests sent to that replica. It answers every
  request up to ``s`` and none after: a late answer revives a failed replica only if at
  most ``misses`` requests sent after ``s`` went unanswered, so liveness is a function of
  *which* requests were answered, not of the order the answers arrived in. An older answer
  cannot change liveness (more than ``misses`` newer requests are unanswered) and carries
  staler states: it is ignored. An answer from an unknown replica or to a seq never sent
  is a peer's garbage: ignored (``answered`` returns False; the caller logs it).
* Only a counted answer updates the replica's last known states and frontiers, so they
  never go back in time. A failed replica keeps its last known states; the view marks it
  dead.
* Rounds follow a fixed grid ``start + k * interval`` per replica; a round the runtime
  was too late for is skipped, never sent in a burst (that would count misses faster than
  the replica could answer).

:func:`choose_upstream` -- the data source and the corrections source of one input
stream, from a :class:`ReplicaView` per replica (alive, state of its output ``stream``,
its *frontier* on it; an unanswered or unreported state is unknown and never chosen).
Preference for the data source, first match wins, ties broken by name so that every
replica of the downstream node tends to choose alike:

====  =============================================  ======================================
rank  candidate                                      why
====  =============================================  ======================================
0     Flux: the dual producer (the pair's replica    each side of a flux stage feeds its
      of this consumer's rank), STABLE or STANDBY    own consumers (docs/flux.md)
1     the current source, if STABLE (or reconciled)  no switch at all
      and its link keeps up (link rule, below)
1b    if the current STABLE source's link lags: the  its data reaches this consumer too
      STABLE replica farthest ahead of what the      late: as good as failed (link rule)
      link received by more than ``link_lag``
2     the corrections source, if it became STABLE    already subscribed; its stream is ours
3     any STABLE replica (smallest name)             stable data, property 1
4     if the current source is UP_FAILURE: the       fresh tentative data beats a replica
      UP_FAILURE replica whose frontier is ahead of  that makes no progress (frontier rule)
      the current one's by more than ``lag`` (the
      farthest ahead, then the smallest name)
5     the current source, if UP_FAILURE              no switch; tentative beats nothing
6     any UP_FAILURE replica (smallest name)         availability
7     none (:attr:`Resume.NONE`)                     SUnion times out and goes tentative
====  =============================================  ======================================

The paper's rule is the state rule: ranks 1-3 before 4-6, so a STABLE replica always wins
and the frontier only tells apart replicas that all say UP_FAILURE.

Frontier rule (rank 4; not in the paper). A replica's *frontier* on a stream is the
largest tuple time its output buffer has reached, stable or tentative (the ``tmax`` of
data tuples, the time of stable boundaries; 0: nothing yet), reported on every heartbeat
answer (``HeartbeatResponse.frontiers``). The state alone cannot tell an UP_FAILURE
replica that serves fresh tentative results from one whose own inputs are all gone and
emits nothing: keeping the current UP_FAILURE source (rank 5) could leave a consumer
waiting for the heal although a path existed (simulate seed 922: two replicas of n2 both
UP_FAILURE, one fed tentative data by the only n1 replica that still had a source, the
other by n1 replicas with no input at all). So an UP_FAILURE replica whose frontier is
ahead of the current UP_FAILURE source's by more than ``lag`` takes over (as rank 6 would:
:attr:`Resume.TMAX` when holding tentative tuples, else :attr:`Resume.IDS`; the
:class:`TmaxFilter` drops what the new source repeats).

``lag`` is the consuming node's alpha*X (``NodeSettings.wait``; a client uses the node it
reads), not X: it is the delay after which that node's SUnion already treats an input as
failed and releases without it, so a source lagging a partner by more than alpha*X is, for
this node, as good as a failed one; and the switch must come early enough to leave the
k*X budget for the new source's tentative results, which already carry every upstream
SUnion's alpha*X. With X, seed 922's client got its first new result 1.645 s late (of a
2 s bound) instead of 1.145 s: the frontier steps by a 500 ms window, so the switch came
one window later.

No flapping: a switch needs the new source ahead by more than ``lag``; switching back
needs the old one ahead of it by more than ``lag`` again, a swing of more than 2*lag in
their difference. Two replicas that both progress on the same inputs stay within lag of
each other (their frontiers differ by output granularity and heartbeat age, not by a
failure's delay: on examples/sim.toml a 500 ms window and 100 ms heartbeats against
alpha*X = 700 ms), so between them the current one is kept whichever momentarily leads.
Outputs that step by more than alpha*X (windows wider than it) can put one of two
progressing replicas a whole step ahead for a moment (heartbeats of different ages): the
rule then switches on such a lead, a resubscription that the :class:`TmaxFilter` keeps
free of duplicates; only a lag wider than the step would rule it out.

Link rule (rank 1b; not in the paper). Heartbeats say whether a replica is alive and what
it has published, not whether its data reaches this consumer: answers go ahead of pending
batches, so a replica behind a throttled link (a bandwidth or delay fault, a slow network
path) keeps answering while its results arrive seconds late, and the state rule keeps it
(torture seed 301: c1 read n1b through a link limited to 100 kB/s for 2 s; 295 new results
came up to 2.05 s after their input, bound X = 1 s, while n1a and n1c were STABLE and
unimpaired). So the caller also passes ``received``: the largest tuple time the link has
received (:attr:`TmaxFilter.highest`; earlier sessions count too, which can only hide a
lag, never invent one; None: not judged, below). The current source's link *lags* when the
source's own frontier is ahead of ``received`` by more than ``link_lag``: it says it
published what has not reached us. Its frontier *as this consumer sees it* is then
``received`` (else what it reports). A lagging current STABLE source is left for another
STABLE replica whose frontier is ahead of that by more than ``link_lag`` (the farthest
ahead, then the smallest name: :attr:`Resume.IDS`, case 1 or 2 below), and the frontier
rule (rank 4) compares the same seen frontier.

Why the current source's own frontier and not only the others': a source sends a batch
when it publishes it and reports the frontier it reached on a later heartbeat answer, so
through a healthy link the batch arrives first; but another replica's answer may report a
step of the output before the current source's batch with the same step arrives (two
connections, two processes). Outputs that step by more than ``link_lag`` (a 500 ms window
with no boundary in between, examples/sim.toml's n2) would then move a consumer between two
healthy replicas now and then: comparing the current source with itself rules that out.

``link_lag`` is the consumer's failure-detection time, ``(misses + 1) * interval`` of its
heartbeats: a link whose data lags by more than the time a silent replica takes to be
declared failed is treated like one, so a slow link costs the consumer no more of its k*X
budget than a crash does (a threshold of alpha*X would switch too late: the lagging results
are already alpha*X late then, and the replay from the new source adds to it). Between two
replicas that both progress on the same inputs and reach the consumer promptly, the seen
frontiers differ by heartbeat age and batching (tens of ms against the paper's 400 ms), so
the rule does not flap. ``received`` is None while the session is younger than
``link_lag`` (the caller's clock): a new session's replay must have had the time to
arrive before its link is judged, or a switch would be followed by another one at once.
A consumer too slow to read any link (its own CPU starved) sees every source lag and may
move once per ``link_lag``: each move is an id-based resubscription, exact (property 2).

A STABILIZATION replica is never the data source: it is producing corrections, not fresh
data. While the data source is not STABLE, an alive STABILIZATION replica is the
corrections source (the one already in use, else the current source, else the smallest
name), read in parallel with an UP_FAILURE data source until REC_DONE arrives on the
corrections stream; the caller then passes ``corrections=None``. A STABLE data source
needs no corrections source: its own replay stabilizes the stream.

On that REC_DONE the input link moves to the corrections source by itself (node/streams/link.py),
before its heartbeats stop reporting STABILIZATION. The caller says so with
``current_reconciled`` (the current source sent its REC_DONE, and no tentative tuple since):
such a current source counts as STABLE, so it is kept (rank 1) and needs no corrections
source, instead of being left for an UP_FAILURE replica as case 4 would have it.

The four switching cases of property 2 (no duplicates; only tentative tuples may be lost):

1. STABLE to STABLE (nothing tentative held): :attr:`Resume.IDS`, subscribe with
   ``(last stable id, last tentative id)``; the new replica replays after the stable id.
2. UP_FAILURE to STABLE (tentative tuples held): also :attr:`Resume.IDS`; the new
   replica's buffer sees the tentative id and stabilizes the stream (``UNDO(s)`` then
   stable tuples) unless it holds that very run (``state.buffer`` replay cases).
3. To UP_FAILURE: replicas may hold different tentative tuples and stable tuples are
   never undone, so with tentative tuples held it is :attr:`Resume.TMAX`: subscribe as
   usual and pass every batch through a :class:`TmaxFilter` armed at the switch, which
   drops new tentative tuples that are not newer (by ``tmax``) than all held. With nothing
   tentative held it is :attr:`Resume.IDS`: the stable prefix is the same everywhere.
   A replica whose stable prefix is shorter than ours refuses the replay
   (``ReplayAheadError``): the link must wait or try the next choice.
4. An upstream in STABILIZATION: its stream is redundant corrections, read in the
   background (``Choice.corrections``) beside an UP_FAILURE data source, as above. On its
   REC_DONE the link moves there: ``UNDO(s)`` then its buffered corrections after ``s``
   (the equivalent of case 2's replay), and ``current_reconciled`` keeps it there.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from operator import itemgetter

from node.errors import NodeError
from protocol.messages import ConsistencyState
from protocol.tuples import DATA_KINDS, Kind, Tuple

__all__ = [
    "Choice",
    "HeartbeatTracker",
    "ReplicaView",
    "Resume",
    "TmaxFilter",
    "choose_upstream",
]

STABLE = ConsistencyState.STABLE
UP_FAILURE = ConsistencyState.UP_FAILURE
STABILIZATION = ConsistencyState.STABILIZATION
STANDBY = ConsistencyState.STANDBY
TENTATIVE, UNDO = Kind.TENTATIVE, Kind.UNDO
_TMAX = itemgetter(3)


class _Replica:
    """What the tracker knows of one upstream replica."""

    __slots__ = ("due", "frontiers", "last_seq", "node_state", "since", "streams", "window")

    def __init__(self, start: int, misses: int) -> None:
        self.due = start  # when the next request is due
        self.last_seq: int | None = None  # newest seq sent
        # Seqs sent after the last counted answer, newest misses + 2 only: an answer older
        # than those cannot revive the replica (see the module docstring).
        self.window: deque[int] = deque(maxlen=misses + 2)
        self.since = 0  # requests sent after the last counted answer (exact, unbounded)
        self.node_state: ConsistencyState | None = None
        self.streams: dict[str, ConsistencyState] = {}
        self.frontiers: dict[str, int] = {}


class HeartbeatTracker:
    """Heartbeat bookkeeping for the replicas of one upstream node (module docstring)."""

    def __init__(
        self, replicas: Sequence[str], interval: int, misses: int, *, start: int = 0
    ) -> None:
        if not replicas:
            raise NodeError("heartbeat tracker: no upstream replica to watch")
        if len(set(replicas)) != len(replicas):
            raise NodeError(f"heartbeat tracker: duplicate replica names in {list(replicas)}")
        if interval <= 0:
            raise NodeError(f"heartbeat tracker: interval must be > 0, got {interval}")
        if misses < 1:
            raise NodeError(f"heartbeat tracker: misses must be >= 1, got {misses}")
        self.replicas = tuple(replicas)
        self.interval = interval
        self.misses = misses
        self._r = {name: _Replica(start, misses) for name in self.replicas}

    def _get(self, replica: str) -> _Replica:
        try:
            return self._r[replica]
        except KeyError:
            raise NodeError(
                f"heartbeat tracker: unknown replica {replica!r} (expected one of "
                f"{list(self.replicas)})"
            ) from None

    def next_deadline(self) -> int:
        """The earliest ``now`` at which :meth:`due` returns a replica."""
        return min(r.due for r in self._r.values())

    def due(self, now: int) -> list[str]:
        """The replicas to send a request to at ``now``, in constructor order. A query:
        the schedule moves only when :meth:`sent` is called."""
        return [name for name, r in self._r.items() if r.due <= now]

    def sent(self, replica: str, seq: int, now: int) -> None:
        """A request ``seq`` went to ``replica`` at ``now`` (count it even when the send
        failed: a request that cannot be sent is not answered either). Seqs must increase
        per replica."""
        r = self._get(replica)
        if r.last_seq is not None and seq <= r.last_seq:
            raise NodeError(
                f"heartbeat tracker: seq {seq} to {replica!r} is not above the last one "
                f"sent, {r.last_seq}"
            )
        r.last_seq = seq
        r.window.append(seq)
        r.since += 1
        if now >= r.due:  # next grid point strictly after now: late rounds are skipped
            r.due += self.interval * ((now - r.due) // self.interval + 1)

    def answered(
        self,
        replica: str,
        seq: int,
        state: ConsistencyState,
        streams: Mapping[str, ConsistencyState],
        frontiers: Mapping[str, int] | None = None,
    ) -> bool:
        """Record a response (``frontiers``: ``HeartbeatResponse.frontiers``; a stream
        without one counts as 0). True iff it was counted (module docstring); an ignored
        one changes nothing."""
        r = self._r.get(replica)
        if r is None or seq not in r.window:
            return False
        # Every request up to seq is answered; the ones sent after it still wait.
        while r.window[0] <= seq:
            r.window.popleft()
            if not r.window:
                break
        r.since = len(r.window)
        r.node_state = state
        r.streams = dict(streams)  # a copy: decoded messages hand us their own dict
        r.frontiers = dict(frontiers) if frontiers is not None else {}
        return True

    def missed(self, replica: str) -> int:
        """Consecutive requests to ``replica`` left unanswered (the one in flight excluded)."""
        return max(0, self._get(replica).since - 1)

    def alive(self, replica: str) -> bool:
        """False once more than ``misses`` consecutive requests went unanswered."""
        return self.missed(replica) <= self.misses

    def failed(self) -> list[str]:
        """The replicas currently declared failed, in constructor order."""
        return [name for name in self.replicas if not self.alive(name)]

    def node_state(self, replica: str) -> ConsistencyState | None:
        """The replica's own state from its last counted answer (None: none yet)."""
        return self._get(replica).node_state

    def stream_states(self, replica: str) -> Mapping[str, ConsistencyState]:
        """The state of each output stream of ``replica``, from its last counted answer."""
        return dict(self._get(replica).streams)

    def frontiers(self, replica: str) -> Mapping[str, int]:
        """The frontier of each output stream of ``replica``, from its last counted answer."""
        return dict(self._get(replica).frontiers)

    def view(self, stream: str) -> dict[str, ReplicaView]:
        """What :func:`choose_upstream` needs for ``stream``."""
        return {
            name: ReplicaView(self.alive(name), r.streams.get(stream), r.frontiers.get(stream, 0))
            for name, r in self._r.items()
        }


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One upstream replica as the chooser sees it: reachable, the state of the stream's
    output there (None: unknown, never chosen), and its frontier on the stream (the
    largest tuple time its output reached; 0: nothing yet, or not reported)."""

    alive: bool
    state: ConsistencyState | None
    frontier: int = 0


class Resume(Enum):
    """What the input link does to follow a :class:`Choice` (module docstring, cases)."""

    #: The data source is unchanged: nothing to do.
    KEEP = "keep"
    #: Subscribe at the new source with the held (last stable id, last tentative id).
    IDS = "ids"
    #: As IDS, and arm a :class:`TmaxFilter` (case 3 with tentative tuples held).
    TMAX = "tmax"
    #: No usable source: keep the link as it is; SUnion's timeouts take over.
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Choice:
    """The upstream choice for ``stream``: where fresh data comes from, where corrections
    come from (a STABILIZATION replica, or None) and how the link resumes."""

    stream: str
    data: str | None
    corrections: str | None
    resume: Resume


def choose_upstream(
    stream: str,
    current: str | None,
    view: Mapping[str, ReplicaView],
    *,
    lag: int,
    corrections: str | None = None,
    holding_tentative: bool = False,
    current_reconciled: bool = False,
    received: int | None = None,
    link_lag: int = 0,
    dual: str | None = None,
) -> Choice:
    """Choose the data and corrections sources of ``stream`` (table in the module docstring).

    ``current`` is the data source in use (None: none yet), ``corrections`` the corrections
    source in use until its REC_DONE (None: none), ``holding_tentative`` whether the link
    holds tentative tuples in force (``last_tentative_id > last_stable_id``),
    ``current_reconciled`` whether the link received the current source's REC_DONE and no
    tentative tuple since (it then counts as STABLE, whatever its heartbeats still say),
    ``lag`` (>= 0, in tuple time: the consumer's alpha*X) how far another UP_FAILURE
    replica's frontier must be ahead of the current UP_FAILURE source's to take over,
    ``received`` (None: not judged) the largest tuple time the link has received and ``link_lag`` (>= 0) how far another STABLE replica's frontier must be ahead
    of the current STABLE source's seen frontier to take over (the link rule), ``dual``
    (Flux, docs/flux.md) the replica of a flux producer pair on this consumer's side:
    STABLE or STANDBY, it comes first (rank 0). A
    name absent from ``view`` counts as dead. The result depends on the view's contents
    only, never on its iteration order.
    """
    if lag < 0 or link_lag < 0:
        raise NodeError(f"choose_upstream: lag and link_lag must be >= 0, got {lag} and "
                        f"{link_lag} (stream {stream!r})")
    usable = {n: v.state for n, v in view.items() if v.alive and v.state is not None}
    if dual is not None and usable.get(dual) is STANDBY:
        usable[dual] = STABLE  # Flux: a pair's secondary feeds its dual consumer
    if current_reconciled and current is not None and usable.get(current) is STABILIZATION:
        usable[current] = STABLE  # its REC_DONE is in: the heartbeats lag behind the stream
    by_state: dict[ConsistencyState, list[str]] = {s: [] for s in ConsistencyState}
    for name in sorted(usable):  # sorted: the tie-break, and independence of dict order
        by_state[usable[name]].append(name)

    def first(*options: str | None, among: list[str]) -> str | None:
        for option in options:
            if option is not None and option in among:
                return option
        return among[0] if among else None

    # The current source's frontier as this consumer sees it: what it reports, unless its
    # link lags (it reports more than link_lag beyond what the link received).
    seen = view[current].frontier if current is not None and current in view else 0
    lags = False
    if received is not None and seen > received + link_lag:
        lags, seen = True, received
    data = first(dual, current, corrections, among=by_state[STABLE])
    if data is not None and data == current and lags:  # rank 1b, the link rule
        data = _ahead(current, seen, by_state[STABLE], view, link_lag)
    if data is None:
        data = first(current, among=by_state[UP_FAILURE])
        if data is not None and data == current:  # rank 4, the frontier rule
            data = _ahead(current, seen, by_state[UP_FAILURE], view, lag)
    fixer = None
    if data is None or usable[data] is not STABLE:
        fixer = first(corrections, current, among=by_state[STABILIZATION])

    if data is None:
        resume = Resume.NONE
    elif data == current:
        resume = Resume.KEEP
    elif usable[data] is UP_FAILURE and holding_tentative:
        resume = Resume.TMAX
    else:
        resume = Resume.IDS
    return Choice(stream, data, fixer, resume)


def _ahead(current: str, seen: int, candidates: list[str], view: Mapping[str, ReplicaView],
           lag: int) -> str:
    """The candidate whose frontier is farthest ahead of ``seen`` (``current``'s frontier
    as the consumer sees it) by more than ``lag`` (ties: the first of ``candidates``, which
    are sorted by name), else ``current``."""
    best, top = current, seen + lag
    for name in candidates:
        if name != current and view[name].frontier > top:
            best, top = name, view[name].frontier
    return best


class TmaxFilter:
    """Duplicate avoidance after switching to an UP_FAILURE replica (property 2, case 3).

    Feed it every batch of the stream, in order. It records the highest ``tmax`` of the
    data tuples it let through. :meth:`arm` (at a :attr:`Resume.TMAX` switch) freezes that
    value as the threshold: from then on a TENTATIVE tuple with ``tmax <= threshold`` is
    dropped, since it may repeat results already held from the old source. The threshold
    stays frozen: the new source's own tuples may share a ``tmax`` (two outputs of one
    input), and those are not duplicates of each other.

    Never dropped: control tuples, and STABLE tuples, which the id-based resubscription
    makes the exact continuation of the one stable stream (dropping one would lose a
    stable tuple). An UNDO disarms the filter (what follows it replaces every held
    tentative tuple, so there is nothing left to duplicate); so does :meth:`reset`, for
    a switch to a STABLE source. ``highest`` still counts undone tuples: a later threshold
    can only be too high, which loses tentative tuples, never duplicates one. Output is
    always a subsequence of the input.
    """

    __slots__ = ("_threshold", "highest")

    def __init__(self) -> None:
        self.highest: int | None = None  # highest data tmax let through so far
        self._threshold: int | None = None  # None: not armed

    @property
    def armed(self) -> bool:
        return self._threshold is not None

    @property
    def threshold(self) -> int | None:
        """The frozen threshold while armed, else None."""
        return self._threshold

    def arm(self) -> None:
        """Start filtering against everything let through so far (nothing seen: no-op)."""
        self._threshold = self.highest

    def reset(self) -> None:
        """Stop filtering: the stream is being stabilized from a STABLE source."""
        self._threshold = None

    def observe(self, tuples: Sequence[Tuple]) -> None:
        """Unarmed fast path: raise ``highest`` to the batch's highest ``tmax`` (C-level).
        Control tuples count too (a boundary's tmax is its time, never below the data it
        follows): the threshold can only come out higher, which loses tentative tuples,
        never duplicates one."""
        if tuples:
            top = max(map(_TMAX, tuples))
            if self.highest is None or top > self.highest:
                self.highest = top

    def observe_highest(self, top: int) -> None:
        """:meth:`observe` of a batch whose highest ``tmax`` is ``top`` (a batch of
        columns: node/streams/link.py)."""
        if self.highest is None or top > self.highest:
            self.highest = top

    def accept(self, tuples: Iterable[Tuple]) -> list[Tuple]:
        """The tuples of the batch to keep, in order."""
        out: list[Tuple] = []
        highest, threshold = self.highest, self._threshold
        for t in tuples:
            kind = t.kind
            if kind in DATA_KINDS:
                if threshold is not None and kind == TENTATIVE and t.tmax <= threshold:
                    continue
                if highest is None or t.tmax > highest:
                    highest = t.tmax
            elif kind == UNDO:
                threshold = None
            out.append(t)
        self.highest, self._threshold = highest, threshold
        return out
