"""Outages: when a client had no clean path from the sources, read from a run's history.

Role: pure analysis of the history's events (``ops_scripts/check/history.py``: ``fault`` with its
resolved effects, ``heal``, ``heal_all``, ``state``) against the config's stream graph. The
availability verdict (``ops_scripts/check/properties.py``) checks a new result's delay against
k*X only when its input had a path to the client; a result about a time near an outage
is excused. The digest verdict asks :func:`down_at_end` which replicas could not report.

Model. The stream graph: a source -> every replica of each node reading its stream; a
replica of node P -> every replica of each node reading an output of P; a replica of the
node producing a client's stream -> the client. At a time tau:

* a process is **down** while a kill or pause of it is in force (from its ``fault`` to its
  ``heal``, or to a ``heal_all``). A killed replica stays down after its heal while it
  rebuilds: until its first non-RECOVERING ``state`` at or after the heal, when it logged
  any state then (the restart's start-up is part of the outage). Any replica is down while
  its state is RECOVERING, until its next other state.
* the **edge** x-y is broken while (x, y) or (y, x) is cut *or impaired*, or x or y is
  down. Both directions count: data flows one way, heartbeats, acks and subscriptions the
  other. A slowed link (delay, bandwidth, slow reader) counts as broken: **availability is
  judged on clean paths only**, so a result late because of a slowed link is excused, not
  checked.
* a replica is **stalled** while a ``stall`` of it is in force: any reconciliation it
  starts holds its new input until the heal, and the k*X bound assumes a reconciliation
  that ends. Whether it reconciled meanwhile is not asked: a stalled replica counts as
  serving nothing new. Its partner still serves the client if live (the client reads fresh
  data there, through ``state/buffer.py`` ``AheadView`` if it took part of the stalled
  corrections), so a stall excuses nothing while another replica of the node can serve.
* a client is not judged while the clock of a process on its path (or its own) is
  **skewed** (a ``skew`` fault in force): the bound k*X speaks of synchronized clocks. A
  source ahead stamps results in the client's future; taken as new results they would hide
  every later one from the tmax rule, so the skew's window is an outage, said to be one.
* a source is **live** if not down; a replica is live if neither down nor stalled and at
  least one of its node's input streams has a live producer over an unbroken edge (SUnion
  releases results, tentative, with an input missing); a client is **served** if a live
  producer of its stream reaches it over an unbroken edge.

An :class:`Outage` is a maximal interval where a client is not served. Before the history's
``ready`` event (the cluster up and every client holding a first result) every client is in
an outage: start-up is not a failure the bound speaks of; a history with a ``start`` and no
``ready`` (stopped during start-up) is one outage from its start on. Every fault ends at
its heal or at the next ``heal_all`` (the final one ends everything still in force); a
fault never healed lasts past the end of the history (``end`` is None). A replica still
RECOVERING after the final ``heal_all`` stays down (it serves no one yet): states are not
faults.

Invariants: pure (no I/O, no clock). The conditions change only at span boundaries, so
each segment between them is judged once, at its start. Events are taken in time order
(stable). A fault event without its resolved effects raises :class:`HistoryError` (an
unknown verdict, never a guess); a heal of an unknown fault id is ignored.

The same stream graph gives each stream its **promise** (:func:`stream_promise`): the
recovery its path's high-availability modes promise (operators/taxonomy.py
``promised_recovery``, Table 2), the weakest over the node producing it and every node
upstream of it, transitively through their inputs (a source's stream is precise). A gap
anywhere upstream reaches every stream below it: a node fed a stream with a hole computes
from that hole, whatever its own mode.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from node.config.model import ClusterConfig, NodeConfig
from operators.network import network_class
from operators.taxonomy import RecoveryType, promised_recovery
from ops_scripts.errors import HistoryError

__all__ = [
    "Conditions",
    "FaultSpan",
    "Outage",
    "Promise",
    "Span",
    "client_outages",
    "conditions_at",
    "down_at_end",
    "down_spans",
    "fault_spans",
    "flux_path",
    "live_processes",
    "node_promise",
    "own_promise",
    "served",
    "stream_promise",
    "upstream_nodes",
    "why_not_served",
]

Pair = tuple[str, str]
RECOVERING = "RECOVERING"


@dataclass(frozen=True, slots=True)
class Span:
    """``[start, end)`` in microseconds; ``end`` None: still so at the end of the history."""

    start: int
    end: int | None

    def covers(self, t: int) -> bool:
        return self.start <= t and (self.end is None or t < self.end)


@dataclass(frozen=True, slots=True)
class FaultSpan:
    """One fault event and when it was in force, with its resolved effects."""

    id: Any
    kind: str  # the fault's kind ("partition", "kill", ...), "" if the event lacks it
    span: Span
    describe: str
    cut: frozenset[Pair]
    down: frozenset[str]
    impaired: frozenset[Pair]
    stalled: frozenset[str] = frozenset()  # a stall: that replica's reconciliation held
    skewed: frozenset[str] = frozenset()  # a skew: that process's clock offset


@dataclass(frozen=True, slots=True)
class Conditions:
    """What is broken at one time: directed pairs cut and impaired, processes down,
    replicas whose reconciliation is stalled."""

    cut: frozenset[Pair] = frozenset()
    impaired: frozenset[Pair] = frozenset()
    down: frozenset[str] = frozenset()
    stalled: frozenset[str] = frozenset()
    skewed: frozenset[str] = frozenset()

    def edge_ok(self, x: str, y: str) -> bool:
        """The edge x-y is usable: both ends up, neither direction cut nor slowed."""
        if x in self.down or y in self.down:
            return False
        return not ({(x, y), (y, x)} & (self.cut | self.impaired))


@dataclass(frozen=True, slots=True)
class Outage:
    """A maximal interval ``[start, end)`` in which ``client`` was not served (``end``
    None: not served again before the history ends); ``why`` explains its first moment."""

    client: str
    start: int
    end: int | None
    why: str


# ---------------------------------------------------------------- spans from events
def _ordered(events: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(events, key=lambda e: e["t"])  # sorted() is stable: equal times keep order


def _pairs(value: Any, where: str) -> frozenset[Pair]:
    try:
        return frozenset((str(a), str(b)) for a, b in value)
    except (TypeError, ValueError):
        raise HistoryError(f"{where}: expected a list of [a, b] pairs, got {value!r}") from None


def fault_spans(events: Iterable[Mapping[str, Any]]) -> list[FaultSpan]:
    """Every ``fault`` event with the time it ended: its ``heal`` (matched by id) or the
    next ``heal_all``; None if neither came. In start order."""
    open_: list[tuple[Mapping[str, Any], int]] = []  # (event, its index) not yet healed
    ends: dict[int, int] = {}
    faults: list[tuple[int, Mapping[str, Any]]] = []
    for i, e in enumerate(_ordered(events)):
        if e["event"] == "fault":
            missing = [k for k in ("id", "cut", "down", "impaired") if k not in e]
            if missing:
                raise HistoryError(f"history event {i} (fault at t={e['t']}): no {missing}")
            faults.append((i, e))
            open_.append((e, i))
        elif e["event"] == "heal":
            hit = next((k for k, (f, _) in enumerate(open_) if f["id"] == e.get("id")), None)
            if hit is not None:  # a heal of a fault never injected (refused): nothing to end
                ends[open_.pop(hit)[1]] = e["t"]
        elif e["event"] == "heal_all":
            for _, k in open_:
                ends[k] = e["t"]
            open_.clear()
    out = []
    for i, e in faults:
        where = f"history event {i} (fault {e['id']!r})"
        raw = e.get("fault")
        kind = str(raw.get("fault", "")) if isinstance(raw, Mapping) else ""
        down = e["down"]
        if not isinstance(down, list | tuple):
            raise HistoryError(f"{where}: down must be a list of names, got {down!r}")
        stalled: frozenset[str] = frozenset()
        skewed: frozenset[str] = frozenset()
        if kind in ("stall", "skew") and isinstance(raw, Mapping) and "process" in raw:
            who = frozenset([str(raw["process"])])
            stalled, skewed = (who, skewed) if kind == "stall" else (stalled, who)
        out.append(FaultSpan(
            e["id"], kind, Span(e["t"], ends.get(i)), str(e.get("describe", "")),
            _pairs(e["cut"], where), frozenset(str(p) for p in down),
            _pairs(e["impaired"], where), stalled, skewed))
    return out


def _states(events: Iterable[Mapping[str, Any]]) -> dict[str, list[tuple[int, str]]]:
    states: dict[str, list[tuple[int, str]]] = {}
    for e in _ordered(events):
        if e["event"] == "state":
            states.setdefault(str(e["process"]), []).append((e["t"], str(e["state"])))
    return states


def down_spans(events: Sequence[Mapping[str, Any]]) -> dict[str, list[Span]]:
    """Per process, when it was down (module docstring): kills and pauses in force, a
    killed replica's restart until its first non-RECOVERING state, RECOVERING states."""
    states = _states(events)
    spans: dict[str, list[Span]] = {}
    for f in fault_spans(events):
        for p in f.down:
            end = f.span.end
            later = [(t, s) for t, s in states.get(p, []) if end is not None and t >= end]
            if f.kind == "kill" and later:
                end = next((t for t, s in later if s != RECOVERING), None)
            spans.setdefault(p, []).append(Span(f.span.start, end))
    for p, seq in states.items():
        since: int | None = None
        for t, s in seq:
            if s == RECOVERING and since is None:
                since = t
            elif s != RECOVERING and since is not None:
                spans.setdefault(p, []).append(Span(since, t))
                since = None
        if since is not None:
            spans.setdefault(p, []).append(Span(since, None))
    return spans


def conditions_at(faults: Sequence[FaultSpan], down: Mapping[str, Sequence[Span]],
                  t: int) -> Conditions:
    """What is broken at time ``t``."""
    active = [f for f in faults if f.span.covers(t)]
    return Conditions(
        cut=frozenset().union(*(f.cut for f in active)),
        impaired=frozenset().union(*(f.impaired for f in active)),
        down=frozenset(p for p, spans in down.items() if any(s.covers(t) for s in spans)),
        stalled=frozenset().union(*(f.stalled for f in active)),
        skewed=frozenset().union(*(f.skewed for f in active)),
    )


def down_at_end(events: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    """The processes down at the last event of the history (e.g. still RECOVERING)."""
    if not events:
        return frozenset()
    end = max(e["t"] for e in events)
    return frozenset(p for p, spans in down_spans(events).items()
                     if any(s.covers(end) for s in spans))


# ---------------------------------------------------------------- the stream graph
def _producers(config: ClusterConfig, stream: str) -> list[str]:
    producer = config.producer_of(stream)
    if isinstance(producer, NodeConfig):
        return [r.name for r in producer.replicas]
    return [producer.name]


def live_processes(config: ClusterConfig, cond: Conditions) -> frozenset[str]:
    """The live sources and replicas under ``cond`` (module docstring), nodes taken in
    config order, which is topological."""
    live = {s for s in config.sources if s not in cond.down}
    for node in config.nodes.values():
        feeders = [p for stream in node.inputs for p in _producers(config, stream)]
        for r in node.replicas:
            if r.name not in cond.down and r.name not in cond.stalled and any(
                p in live and cond.edge_ok(p, r.name) for p in feeders
            ):
                live.add(r.name)
    return frozenset(live)


def served(config: ClusterConfig, client: str, cond: Conditions,
           live: frozenset[str] | None = None) -> bool:
    """A live producer of the client's stream reaches it over an unbroken edge."""
    live = live_processes(config, cond) if live is None else live
    stream = config.clients[client].stream
    return any(p in live and cond.edge_ok(p, client) for p in _producers(config, stream))


def why_not_served(config: ClusterConfig, client: str, cond: Conditions,
                   live: frozenset[str] | None = None) -> str:
    """Per producer of the client's stream, what keeps it from serving the client."""
    live = live_processes(config, cond) if live is None else live
    reasons = []
    for p in _producers(config, config.clients[client].stream):
        if p in cond.down:
            reasons.append(f"{p} down")
        elif p in cond.stalled:
            reasons.append(f"{p} stalled")
        elif p not in live:
            reasons.append(f"{p} has no live input")
        elif client in cond.down:
            reasons.append(f"{client} down")
        else:
            pairs = {(p, client), (client, p)}
            how = "cut" if pairs & cond.cut else "slowed"
            reasons.append(f"{p}-{client} {how}")
    return "; ".join(reasons)


def upstream_of(config: ClusterConfig, client: str) -> frozenset[str]:
    """Every process whose output reaches ``client``, transitively, and the client."""
    seen = {client}
    todo = [config.clients[client].stream]
    while todo:
        stream = todo.pop()
        producer = config.producer_of(stream)
        for p in _producers(config, stream):
            seen.add(p)
        if isinstance(producer, NodeConfig):
            todo.extend(producer.inputs)
    return frozenset(seen)


def client_outages(config: ClusterConfig,
                   events: Sequence[Mapping[str, Any]]) -> dict[str, list[Outage]]:
    """Every client of ``config`` -> its outages, in time order (module docstring)."""
    faults = fault_spans(events)
    down = down_spans(events)
    points = sorted({t for f in faults for t in (f.span.start, f.span.end) if t is not None}
                    | {t for spans in down.values() for s in spans
                       for t in (s.start, s.end) if t is not None})
    out: dict[str, list[Outage]] = {c: [] for c in config.clients}
    started: dict[str, tuple[int, str]] = {}  # client -> (start, why) of an open outage
    upstream = {c: upstream_of(config, c) for c in config.clients}
    for t in points:
        cond = conditions_at(faults, down, t)
        live = live_processes(config, cond)
        for c in config.clients:
            skewed = sorted(cond.skewed & upstream[c])
            ok = served(config, c, cond, live) and not skewed
            if not ok and c not in started:
                started[c] = (t, why_not_served(config, c, cond, live) if not skewed else
                              f"the clock of {', '.join(skewed)} skewed (k*X assumes "
                              "synchronized clocks)")
            elif ok and c in started:
                start, why = started.pop(c)
                out[c].append(Outage(c, start, t, why))
    for c, (start, why) in started.items():
        out[c].append(Outage(c, start, None, why))
    ready = next((e["t"] for e in _ordered(events) if e["event"] == "ready"), None)
    first = min((e["t"] for e in events), default=0)
    if ready is not None:  # before its clients got a first result, the cluster was starting
        if ready > first:  # (a history up at once has no start-up to excuse)
            for c in out:
                out[c].insert(0, Outage(c, first, ready, "the cluster was starting"))
    elif any(e["event"] == "start" for e in events):
        # Started but never ready: stopped during its start-up (Ctrl-C of dpc launch while
        # it waited for first results), so every result is a start-up one.
        for c in out:
            out[c] = [Outage(c, first, None, "the cluster was stopped before it was ready")]
    return out


# ---------------------------------------------------------------- promises
@dataclass(frozen=True, slots=True)
class Promise:
    """The recovery a stream's path promises, and who sets it: ``by`` holds ``(node, ha)``
    of every node on the path whose own promise is ``type``, in config order (empty for a
    source's stream)."""

    type: RecoveryType
    by: tuple[tuple[str, str], ...] = ()

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.by)

    def who(self) -> str:
        """The modes that set it, as evidence says it: "amnesia at node n1"."""
        return " and ".join(f"{ha} at node {n}" for n, ha in self.by)


def own_promise(node: NodeConfig) -> RecoveryType:
    """What ``node``'s own mode promises its query network (Table 2), its inputs aside."""
    return promised_recovery(node.settings.ha, network_class(node.network).cls)


def upstream_nodes(config: ClusterConfig, name: str) -> list[NodeConfig]:
    """Node ``name`` and every node upstream of it, through node inputs, in config order."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        todo += [p.name for s in config.nodes[n].inputs
                 if isinstance(p := config.producer_of(s), NodeConfig)]
    return [node for node in config.nodes.values() if node.name in seen]


def flux_path(config: ClusterConfig, stream: str) -> bool:
    """Whether every node ``stream`` comes through is a flux pair (docs/flux.md): what the
    exactly-once property judges."""
    producer = config.producer_of(stream)
    return isinstance(producer, NodeConfig) and all(
        n.settings.ha == "flux" for n in upstream_nodes(config, producer.name))


def node_promise(config: ClusterConfig, name: str) -> Promise:
    """The promise of node ``name``'s outputs: the weakest (largest) of its own and every
    upstream node's (module docstring)."""
    own = [(n, own_promise(n)) for n in upstream_nodes(config, name)]
    weakest = max(t for _, t in own)
    return Promise(weakest, tuple((n.name, n.settings.ha) for n, t in own if t is weakest))


def stream_promise(config: ClusterConfig, stream: str) -> Promise:
    """The promise of ``stream``: its producing node's (:func:`node_promise`), or precise
    for a source's."""
    producer = config.producer_of(stream)
    if isinstance(producer, NodeConfig):
        return node_promise(config, producer.name)
    return Promise(RecoveryType.PRECISE)
