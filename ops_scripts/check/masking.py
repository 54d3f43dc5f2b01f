"""Masking (issue 46): a failure that touches only some replicas of the nodes on a client's
path is masked: the client receives no tentative result from it, and its new results keep
coming within the time it takes to detect the failure and switch to a STABLE replica.

Role: a pure checker over a run's history (``ops_scripts/check/history.py``: faults with
their resolved effects, heals, the replicas' state changes) and one client's log with
arrival times; ``ops_scripts/check/compose.py`` composes it (with a history only, like
availability and liveness). One verdict per client of a node's stream, subject
``client NAME (STREAM)``.

Why (the paper, section 3.3, "upstream failure"): every node heartbeats each replica of
each upstream neighbour; the answers carry the state of each output stream (STABLE,
UP_FAILURE, STABILIZATION), and a node whose upstream replica is unreachable or not STABLE
switches to a STABLE replica of that neighbour. A replica that loses an input says so in
its heartbeat answers as soon as its own heartbeats declare that input failed (before
SUnion's alpha*X runs out), so its consumers leave it for a partner that kept every input
before it releases anything tentative. The paper's switch took about 1 ms, "small compared
with alpha*X" (``../shared/seeds/NUMBERS.md``: heartbeats every 100 ms, a replica failed
after more than 3 unanswered): a failure of some replicas only is masked.

*Eligible windows.* Each fault of the history is judged on its window ``[start, heal)``
when it is a *subset failure* for the client, conservatively:

* it is a failure (it cuts pairs or takes processes down: not a slowed link or a stalled
  reconciliation alone), it touches the client's path (a process down on it, or a cut
  between two of its processes), it was healed, and it started after the cluster was
  ready;
* every fault in force within ``B`` (the bound below) of the window, before or after,
  counts (a failure's effects outlast it by its detection and switch; one that starts just
  after may take a result in flight): under all of them, no source on the path is down,
  and every node on the path (the client's producer and every node upstream of it) has a
  *clean* replica: not down, stalled or RECOVERING, STABLE from ``B`` before the window
  starts until it starts (no
  state logged counts as STABLE: start-up is not a failure), every input reachable over an
  edge no fault cuts or slows (a source's stream from the source, a node's from a clean
  replica of that node, both directions: heartbeats and subscriptions go back); and the
  client reaches a clean replica of its producer the same way;
* every node on the path runs DPC (``ha = "dpc"``): a process pair's promise is its own
  (docs/ha-modes.md), so a client behind one is not judged at all.

A fault that is not eligible is *not judged*; a client none of whose faults is eligible
gets a valid verdict that says so (as availability does for "no new result checked" and
liveness for "no result's input came before the final heal"), never a pass by silence.

*The rule*, on each eligible window: the client receives no TENTATIVE tuple whose tmax
lies in it, or up to the path's normal delay before it (input still in flight when the
failure began is held with it: a replica's stuck bucket holds what came just before), and
every *new* result (``availability.new_results``: a data tuple whose tmax exceeds every
earlier one's) whose tmax lies in it arrives within ``B`` of its tmax.

*The bound* (:class:`MaskBound`)::

    B = detection (m+1)*h   a replica's heartbeats declare an input failed: more than m
                            unanswered, h apart (the slowest node of the path's m and h)
      + answer 1*h          its consumer's next heartbeat hears the new state (a client
                            heartbeats with its producer's settings)
      + switch 2*h          the consumer resubscribes to a STABLE replica, which replays
                            from the consumer's last stable id: a fixed allowance of
                            SWITCH_INTERVALS heartbeat intervals (a link retries a
                            connect every 100 ms)
      + path  sum (b + h)   the normal delay: per node of the heaviest chain from the
                            sources, a bucket (b, its boundary) and a heartbeat interval

``h`` in the answer and switch terms is the largest heartbeat interval on the path. With
the paper's settings (h = 100 ms, m = 3, b = 100 ms) and one node: B = 0.9 s, against
alpha*X = 2.7 s. Where a node's alpha*X is not above detection + answer + switch, its
replicas may release tentative results before their consumers have switched: an invalid
verdict says so beside its evidence (the paper's premise does not hold there).

Invariants: pure (no I/O, no clock); every verdict gives B with its numbers; a history that
cannot be read (a fault without its effects) raises :class:`HistoryError`, which
``guarded`` makes unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from node.config.model import ClientConfig, ClusterConfig, NodeConfig
from ops_scripts.check.availability import NewResult, new_results
from ops_scripts.check.liveness import replica_states
from ops_scripts.check.paths import FaultSpan, Span, down_spans, fault_spans, upstream_nodes
from ops_scripts.check.properties import Status, Verdict, client_subject, fmt_tuple, guarded
from protocol.tuples import Kind, Tuple

__all__ = [
    "SWITCH_INTERVALS",
    "MaskBound",
    "MaskWindow",
    "check_masking",
    "mask_bound",
    "mask_windows",
    "masking_verdicts",
]

#: The switch allowance, in heartbeat intervals: resubscribe and replay (module docstring).
SWITCH_INTERVALS = 2
NAME = "masking"
STABLE = "STABLE"
Row = tuple[int, Tuple]  # (arrival in microseconds, the tuple)
Event = Mapping[str, Any]
Pair = tuple[str, str]
#: At most this many faults are named in a verdict's evidence.
SHOWN = 4


def _s(us: int) -> str:
    return f"{us / 1e6:.3f}"


# ---------------------------------------------------------------- the bound
@dataclass(frozen=True, slots=True)
class MaskBound:
    """``B`` of one client's path and its numbers (microseconds; module docstring)."""

    misses: int  # m of the node whose detection (m+1)*h is the slowest
    detect_interval: int  # h of that node
    interval: int  # the largest heartbeat interval on the path (answer, switch)
    path: tuple[tuple[str, int, int], ...]  # (node, bucket, heartbeat) of the heaviest chain

    @property
    def detection(self) -> int:
        return (self.misses + 1) * self.detect_interval

    @property
    def switch(self) -> int:
        return SWITCH_INTERVALS * self.interval

    @property
    def path_delay(self) -> int:
        return sum(b + h for _, b, h in self.path)

    @property
    def total(self) -> int:
        return self.detection + self.interval + self.switch + self.path_delay

    def describe(self) -> str:
        """``B = 0.900 s = detection 4 x 0.100 + answer 1 x 0.100 + switch 2 x 0.100 +
        path 1 x (bucket 0.100 + heartbeat 0.100)``."""
        each = {(b, h) for _, b, h in self.path}
        if len(each) == 1:
            b, h = each.pop()
            path = f"{len(self.path)} x (bucket {_s(b)} + heartbeat {_s(h)})"
        else:
            path = " + ".join(f"{n} (bucket {_s(b)} + heartbeat {_s(h)})" for n, b, h in self.path)
        return (f"B = {_s(self.total)} s = detection {self.misses + 1} x "
                f"{_s(self.detect_interval)} + answer 1 x {_s(self.interval)} + switch "
                f"{SWITCH_INTERVALS} x {_s(self.interval)} + path {path}")


def mask_bound(config: ClusterConfig, stream: str) -> MaskBound:
    """``B`` for a client of ``stream`` (a node's output). Raises ``KeyError`` for a stream
    of no node and ``ValueError`` for a source's stream (no node to mask anything)."""
    producer = config.producer_of(stream)
    if not isinstance(producer, NodeConfig):
        raise ValueError(f"masking: {stream!r} is a source's stream: no replica to switch")
    nodes = upstream_nodes(config, producer.name)
    slow = max(nodes, key=lambda n: (n.settings.heartbeat_misses + 1)
               * n.settings.heartbeat_interval)
    chain: dict[str, tuple[int, tuple[tuple[str, int, int], ...]]] = {}
    for node in nodes:  # config order is topological
        st = node.settings
        ups = [chain[p.name] for s in node.inputs
               if isinstance(p := config.producer_of(s), NodeConfig) and p.name in chain]
        weight, before = max(ups, key=lambda c: c[0], default=(0, ()))
        me = (node.name, st.bucket, st.heartbeat_interval)
        chain[node.name] = (weight + st.bucket + st.heartbeat_interval, (*before, me))
    return MaskBound(
        misses=slow.settings.heartbeat_misses,
        detect_interval=slow.settings.heartbeat_interval,
        interval=max(n.settings.heartbeat_interval for n in nodes),
        path=chain[producer.name][1])


# ---------------------------------------------------------------- eligible windows
@dataclass(frozen=True, slots=True)
class MaskWindow:
    """One fault as the masking rule sees it for one client: its window ``[start, end)``
    (``end`` None: never healed), whether it is ``judged`` (a subset failure) and ``why``:
    the clean replicas of each node when judged, else why not."""

    fault: Any  # the history's fault id
    describe: str
    start: int
    end: int | None
    judged: bool
    why: str

    def name(self) -> str:
        return f"#{self.fault} ({self.describe})"


def _overlaps(span: Span, lo: int, hi: int) -> bool:
    return span.start < hi and (span.end is None or span.end > lo)


def _state_at(states: Sequence[tuple[int, str]], t: int) -> str:
    """A replica's state at ``t`` (STABLE if it logged none by then)."""
    now = STABLE
    for at, s in states:
        if at > t:
            break
        now = s
    return now


def _not_stable_in(states: Sequence[tuple[int, str]], lo: int, hi: int) -> str | None:
    """The first state other than STABLE a replica was in during ``[lo, hi]`` (None: STABLE
    all along; no state logged counts as STABLE)."""
    first = _state_at(states, lo)
    if first != STABLE:
        return first
    return next((s for at, s in states if lo < at <= hi and s != STABLE), None)


class _Path:
    """The client's path: its nodes (upstream first), their sources, every process."""

    def __init__(self, config: ClusterConfig, client: ClientConfig) -> None:
        producer = config.producer_of(client.stream)
        if not isinstance(producer, NodeConfig):
            raise ValueError(f"masking: client {client.name!r} reads a source's stream")
        self.config = config
        self.client = client.name
        self.producer = producer
        self.nodes = upstream_nodes(config, producer.name)
        self.sources = sorted({s for n in self.nodes for s in n.inputs if s in config.sources})
        self.procs = frozenset([*self.sources, client.name,
                                *(r.name for n in self.nodes for r in n.replicas)])

    def touched_by(self, f: FaultSpan) -> bool:
        return bool(f.down & self.procs) or any(a in self.procs and b in self.procs
                                                for a, b in f.cut)


def _clean(path: _Path, broken: frozenset[Pair], gone: frozenset[str],
           states: Mapping[str, Sequence[tuple[int, str]]], lo: int, start: int,
           ) -> tuple[dict[str, list[str]], str]:
    """Each path node's clean replicas (module docstring), or why some node has none. A
    clean replica was STABLE throughout ``[lo, start]``: the look-around before the window
    (whose tentative results the rule attributes to it) must not hold the tail of an
    earlier failure (simulate seed 46473: a replica STABLE again 0.16 s before an isolation
    of another, its last tentative result from before that judged as the isolation's)."""
    def cut(a: str, b: str) -> bool:
        return (a, b) in broken or (b, a) in broken

    clean: dict[str, list[str]] = {}
    for node in path.nodes:
        ok, out = [], []
        for r in node.replicas:
            state = _not_stable_in(states.get(r.name, ()), lo, start)
            if r.name in gone:
                out.append(f"{r.name} down or stalled")
            elif state is not None:
                out.append(f"{r.name} {state} within B before the start")
            else:
                lost = [s for s in node.inputs if not _reaches(path, clean, cut, s, r.name)]
                if lost:
                    out.append(f"{r.name} lost {', '.join(lost)}")
                else:
                    ok.append(r.name)
        if not ok:
            return clean, f"no replica of {node.name} kept every input ({'; '.join(out)})"
        clean[node.name] = ok
    if not any(not cut(r, path.client) for r in clean[path.producer.name]):
        return clean, (f"{path.client} is cut from every replica of {path.producer.name} that "
                       f"kept its inputs ({', '.join(clean[path.producer.name])})")
    return clean, ""


def _reaches(path: _Path, clean: Mapping[str, Sequence[str]], cut: Callable[[str, str], bool],
             stream: str, replica: str) -> bool:
    """Whether ``replica`` gets ``stream``: from its source, or from a clean replica of the
    node producing it, over an edge nothing cuts or slows."""
    if stream in path.config.sources:
        return not cut(stream, replica)
    producer = path.config.producer_of(stream).name
    return any(not cut(u, replica) for u in clean.get(producer, ()))


def mask_windows(config: ClusterConfig, client: str, events: Sequence[Event],
                 bound: MaskBound) -> list[MaskWindow]:
    """Every fault of the history as a window for ``client`` (a client of a node's stream),
    judged or not (module docstring), in start order."""
    path = _Path(config, config.clients[client])
    faults = fault_spans(events)
    down = down_spans(events)
    states = replica_states(events)
    ready = next((e["t"] for e in sorted(events, key=lambda e: e["t"])
                  if e["event"] == "ready"), None)
    out: list[MaskWindow] = []
    for f in faults:
        start, end = f.span.start, f.span.end

        def window(judged: bool, why: str, f: FaultSpan = f) -> MaskWindow:
            return MaskWindow(f.id, f.describe or f.kind, f.span.start, f.span.end, judged, why)

        if not (f.cut or f.down):
            out.append(window(False, f"{f.kind or 'this fault'} cuts nothing and stops "
                                     "nothing: not a failure"))
            continue
        if not path.touched_by(f):
            out.append(window(False, "touches nothing on the client's path"))
            continue
        if end is None:
            out.append(window(False, "never healed"))
            continue
        if ready is not None and start < ready:
            out.append(window(False, "during the start-up"))
            continue
        lo, hi = start - bound.total, end + bound.total
        active = [g for g in faults if _overlaps(g.span, lo, hi)]
        broken = frozenset().union(*(g.cut | g.impaired for g in active))
        gone = frozenset().union(*(g.down | g.stalled for g in active)) | frozenset(
            p for p, spans in down.items() if any(_overlaps(s, lo, hi) for s in spans))
        dead = [s for s in path.sources if s in gone]
        if dead:
            out.append(window(False, f"source {', '.join(dead)} down"))
            continue
        clean, why = _clean(path, broken, gone, states, lo, start)
        if why:
            out.append(window(False, why))
            continue
        kept = "; ".join(f"{', '.join(rs)} of {n}" for n, rs in clean.items())
        out.append(window(True, f"kept every input: {kept}"))
    return out


# ---------------------------------------------------------------- the verdict
def _names(windows: Iterable[MaskWindow]) -> str:
    """The first ``SHOWN`` windows, each with its reason, for evidence."""
    ws = list(windows)
    shown = [f"{w.name()}: {w.why}" for w in ws[:SHOWN]]
    return "; ".join(shown) + ("; ..." if len(ws) > SHOWN else "")


def _premise(config: ClusterConfig, client: ClientConfig, bound: MaskBound) -> str:
    """The note of an invalid verdict where a node's alpha*X leaves no room to switch."""
    producer = config.producer_of(client.stream)
    if not isinstance(producer, NodeConfig):
        return ""
    need = bound.detection + bound.interval + bound.switch
    tight = [n for n in upstream_nodes(config, producer.name) if n.settings.wait <= need]
    if not tight:
        return ""
    which = ", ".join(f"{n.name} {_s(n.settings.wait)} s" for n in tight)
    return (f"; note: alpha*X ({which}) is not above detection + answer + switch "
            f"{_s(need)} s: a replica may release tentative results before its consumers "
            "switch (the paper assumes the switch is small compared with alpha*X)")


def _result(r: NewResult) -> str:
    return (f"row {r.row}: {r.kind}(id={r.id}, tmax={r.tmax}) arrived at {r.arrival}, "
            f"delay {_s(r.delay)} s")


def check_masking(subject: str, rows: Sequence[Row], windows: Sequence[MaskWindow],
                  bound: MaskBound, note: str = "") -> Verdict:
    """The rule on the judged ``windows`` of one client's log ``rows`` (``(arrival,
    tuple)`` in log order; row n is element n-1): no TENTATIVE tuple whose tmax lies in a
    judged window or up to ``bound.path_delay`` before it, every new result whose tmax lies
    in one within ``bound``. ``note``: what an invalid verdict adds (:func:`_premise`)."""
    judged = [w for w in windows if w.judged and w.end is not None]
    skipped = [w for w in windows if not w.judged]
    b = bound.describe()
    if not judged:
        what = (f"no fault of the run was a subset failure for this client "
                f"({_names(skipped)})" if skipped else "the run had no fault")
        return Verdict(NAME, Status.VALID, f"not judged: {what}; {b}", subject)

    def within(t: int, lead: int = 0) -> MaskWindow | None:
        return next((w for w in judged
                     if w.end is not None and w.start - lead <= t < w.end), None)

    tentative = [(row, a, t, w) for row, (a, t) in enumerate(rows, start=1)
                 if t.kind is Kind.TENTATIVE
                 and (w := within(t.tmax, bound.path_delay)) is not None]
    if tentative:
        row, a, t, w = tentative[0]
        return Verdict(NAME, Status.INVALID, (
            f"row {row}: {fmt_tuple(t)} arrived at {a}: a tentative result whose input came "
            f"during fault {w.name()}, a subset failure ({w.why}): the client should have been "
            f"switched to a STABLE replica; {len(tentative)} tentative result(s) in the "
            f"{len(judged)} judged window(s); {b}{note}"), subject)
    fresh = [(r, w) for r in new_results(rows) if (w := within(r.tmax)) is not None]
    late = [(r, w) for r, w in fresh if r.delay > bound.total]
    if late:
        r, w = late[0]
        return Verdict(NAME, Status.INVALID, (
            f"{_result(r)} > B in fault {w.name()}, a subset failure ({w.why}); {len(late)} "
            f"of {len(fresh)} new results in the {len(judged)} judged window(s) late; "
            f"{b}{note}"), subject)
    worst = max(fresh, key=lambda rw: rw[0].delay, default=None)
    how = (f"{len(fresh)} new result(s) in them within B, worst {_result(worst[0])}"
           if worst is not None else "no new result in them")
    more = f"; not judged: {_names(skipped)}" if skipped else ""
    return Verdict(NAME, Status.VALID, (
        f"{len(judged)} subset failure(s) judged ({_names(judged)}): no tentative "
        f"result in them, {how}{more}; {b}"), subject)


def _judge(config: ClusterConfig, client: ClientConfig, events: Sequence[Event],
           rows: Sequence[Row]) -> Verdict:
    bound = mask_bound(config, client.stream)
    windows = mask_windows(config, client.name, events, bound)
    return check_masking(client_subject(client), rows, windows, bound,
                         _premise(config, client, bound))


def masking_verdicts(config: ClusterConfig, events: Sequence[Event],
                     clients: Mapping[str, Sequence[Row]],
                     problems: Mapping[str, str] | None = None) -> list[Verdict]:
    """The masking verdict of every client of a node's stream (pure; a client of a source's
    stream has no replica to switch and gets none). ``clients``: client -> its log as
    ``(arrival, tuple)`` rows; ``problems``: subject -> why its log (or, under
    ``"history"``, the history) is unusable: those verdicts are unknown, as is a client
    without a log. A checker crash is unknown (``guarded``)."""
    problems = problems or {}
    out: list[Verdict] = []
    for c in config.clients.values():
        producer = config.producer_of(c.stream)
        if not isinstance(producer, NodeConfig):
            continue
        subject = client_subject(c)
        pairs = [(n.name, n.settings.ha) for n in upstream_nodes(config, producer.name)
                 if n.settings.ha != "dpc"]
        if "history" in problems or subject in problems or c.name not in clients:
            why = problems.get("history") or problems.get(subject, "no log of the client")
            out.append(Verdict(NAME, Status.UNKNOWN, why, subject))
        elif pairs:
            who = " and ".join(f"ha = {ha} at node {n}" for n, ha in pairs)
            out.append(Verdict(NAME, Status.VALID, (
                f"not judged: masking by switching is DPC's promise, and the path has {who} "
                "(a process pair's promise is its own: docs/ha-modes.md)"), subject))
        else:
            out.append(guarded(NAME, subject, _judge, config, c, events, clients[c.name]))
    return out
