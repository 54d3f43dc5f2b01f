"""Liveness, property 6 of DESIGN.md section 6: after the final heal, every replica returns to
STABLE and every client holds every stable result, within a bound the config implies.

Role: pure checkers over a run's history (``ops_scripts/check/history.py``), its replicas'
state changes, its clients' logs with arrival times and the reference run
(``ops_scripts/check/reference.py``); ``ops_scripts/check/compose.py`` composes them. One
verdict per replica (subject ``replica NAME``) and per client.

*The final heal* is the history's last ``heal_all`` (the harness heals everything, then
the quiet period starts), or its last ``heal`` if it has none (``dpc inject`` by hand), or,
in a run without any fault (``dpc launch`` alone), the end of its start-up (``ready``). A
history with faults but no heal, or with a fault after its final heal, gives ``unknown``. *The end of
the run* is the last thing it recorded (an event, a state change, a client's arrival).

*The clock starts* at the final heal, or later for a subject whose own replica or an
upstream process was restarted (a kill healed) and came up after it: a start-up is never
judged (a replica's restart begins at its first state change after the restart; a
source's at its first logged tuple at or after it).

The bound. ``F`` is the longest failure: the longest interval covered by faults in force
without a gap (overlapping faults joined), up to the final heal. For a node ``N`` with
``R`` replicas, its settings (heartbeat interval ``h`` and misses ``m``, ``X``, ``alpha``,
checkpoint interval ``c``) and its replicas' consistency policy
(``node/replica/manager.py`` ``policy_of``: permission retry ``p``, self-grant after ``g``
unanswered requests, catch-up slack ``s``)::

    B_N = m*h                        a link sees its producer back (or moves to another)
        + alpha*X                    SUnion's hold of a bucket before it decides
        + max(R, g+1) * p            permission: the R replicas reconcile in turn, each asking
                                     again at most p after the one before it; or every
                                     partner silent until the self-grant after g+1 requests
        + RECOVERY_RETRY + s         a restarted replica asks a partner's state again, then
                                     catches up within the slack
        + R * REPLAY_FACTOR * (F+c)  each replica replays from its last checkpoint, at most c
                                     before the failure

The rules of issue 46 leave ``B_N`` an upper bound (docs/design.md, "Failure detection"):
a replica that goes into UP_FAILURE on detection (an input unavailable by its heartbeats)
and sees every input back before any tentative release is STABLE again within ``m*h`` of
the heal (its heartbeats' answer) with nothing to reconcile; one that released tentative
tuples follows the terms above, its hold now at most ``alpha*X`` (the chain rule makes a
downstream SUnion wait ``min(alpha*X, process_wait)`` once an input carries tentative
tuples, never longer). A replica whose input is still unavailable at the end is excused
below, as before (an input with no live producer).

A node cannot correct its output before the nodes it reads from corrected theirs, so a
replica of ``N`` gets ``B(N)``, the largest sum of ``B_M`` over the paths of nodes from the
sources to ``N``; a client of a stream ``N`` produces gets ``B(N) + k*X`` (property 1: its
results follow their input within ``k*X``). :data:`REPLAY_FACTOR` is 0.5: a replica that
processes at least three times its input rate replays ``F`` seconds of input, and the input
held meanwhile, within ``F/2`` (measured on these machines: a 2.5 s failure at 300
tuples/s replays in about 15 ms).

Verdicts. A replica is valid when its state at the end of the run is STABLE and it entered
it by the deadline (start + B); invalid when it entered it later, or was still UP_FAILURE,
STABILIZATION or RECOVERING at the end of a run that lasted past the deadline; unknown when
the run ended before the deadline (with what it was) or no state of it was logged. A client
is valid when every reference result of its stream whose input came before the final heal
(``tmax`` below it) is in force as STABLE in its log, UNDOs applied, among the tuples that
arrived by the deadline; invalid (naming the first missing result, and when it came if it
did) when the run lasted past the deadline, unknown otherwise. A process down at the end
(killed or paused, never healed) is excused, named in the evidence, and so is every replica
and client downstream of an input with no live producer at the end.

A client whose stream's path promises only gap recovery (``paths.stream_promise``: an
amnesia node on it) cannot hold every such result: the gap lost some, and a takeover
renumbered the ids after it. Its results are matched by content, ``(time, tmax, values)``,
and only those its log holds as stable in the end are waited for: what the gap lost, and
whether the stream ended recovered, is eventual-consistency's verdict
(``properties.check_stream``). A replica is judged by its state whatever its mode: a
process pair's SUnions never time out (docs/ha-modes.md), so its secondary, which emits
nothing, stays STABLE, and STABLE is all its verdict asks.

Invariants: pure (no I/O, no clock); every verdict says the bound with its numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from node.config.model import ClusterConfig, NodeConfig
from node.replica.manager import policy_of
from node.replica.recovery import RECOVERY_RETRY
from ops_scripts.check.availability import apply_undos, bound_for
from ops_scripts.check.paths import Promise, fault_spans, stream_promise
from ops_scripts.check.properties import Status, Verdict, client_subject, fmt_tuple, seconds
from ops_scripts.check.recovery import RecoveryType, content
from ops_scripts.errors import HistoryError
from protocol.tuples import Kind, Tuple

__all__ = [
    "REPLAY_FACTOR",
    "Bound",
    "Ending",
    "NodeBound",
    "check_client_liveness",
    "check_replica_liveness",
    "ending_of",
    "live_subject",
    "liveness_verdicts",
    "node_bounds",
    "replica_states",
    "restart_starts",
]

#: How long replaying a failure takes, per second of failure (see the module docstring).
REPLAY_FACTOR = 0.5
STABLE = "STABLE"
Event = Mapping[str, Any]


def live_subject(replica: str) -> str:
    """A replica's liveness subject (its state, not one of its streams)."""
    return f"replica {replica}"


# ---------------------------------------------------------------- the bound
@dataclass(frozen=True, slots=True)
class NodeBound:
    """``B_N`` of one node and the numbers behind it (microseconds)."""

    node: str
    replicas: int
    heartbeat_interval: int
    heartbeat_misses: int
    wait: int  # alpha*X
    turns: int  # max(R, g+1)
    permission_retry: int
    recovery: int  # RECOVERY_RETRY + catch-up slack
    longest: int  # F
    checkpoint_interval: int

    @property
    def detect(self) -> int:
        return self.heartbeat_misses * self.heartbeat_interval

    @property
    def permission(self) -> int:
        return self.turns * self.permission_retry

    @property
    def replay(self) -> int:
        return int(self.replicas * REPLAY_FACTOR * (self.longest + self.checkpoint_interval))

    @property
    def total(self) -> int:
        return self.detect + self.wait + self.permission + self.recovery + self.replay

    def describe(self) -> str:
        """The formula with its numbers (seconds), without the node's name."""
        def s(us: int) -> str:  # seconds, without the unit
            return f"{us / 1e6:.3f}"

        return (f"detection {self.heartbeat_misses} x "
                f"{s(self.heartbeat_interval)} + alpha*X {s(self.wait)} + permission "
                f"{self.turns} x {s(self.permission_retry)} + recovery {s(self.recovery)} + "
                f"replay {self.replicas} x {REPLAY_FACTOR:g} x (F {s(self.longest)} + checkpoint "
                f"{s(self.checkpoint_interval)})")


@dataclass(frozen=True, slots=True)
class Bound:
    """B of one subject: its path of nodes (upstream first), plus ``k*X`` for a client."""

    path: tuple[NodeBound, ...]
    delivery: int = 0  # k*X: a client's results follow their input within it

    @property
    def total(self) -> int:
        return sum(b.total for b in self.path) + self.delivery

    def describe(self) -> str:
        parts = " + ".join(f"{b.node} {b.total / 1e6:.3f}" for b in self.path)
        more = f" + k*X {self.delivery / 1e6:.3f}" if self.delivery else ""
        each = {b.describe() for b in self.path}
        how = (f"each node: {each.pop()}" if len(each) == 1 else
               "; ".join(f"{b.node}: {b.describe()}" for b in self.path))
        return f"B = {seconds(self.total)} = {parts}{more} ({how})"

    def for_client(self, delivery: int) -> Bound:
        return Bound(self.path, delivery)


def _node_bound(node: NodeConfig, longest: int) -> NodeBound:
    st = node.settings
    policy = policy_of(node, node.replicas[0].name)
    return NodeBound(
        node=node.name, replicas=len(node.replicas), heartbeat_interval=st.heartbeat_interval,
        heartbeat_misses=st.heartbeat_misses, wait=st.wait,
        turns=max(len(node.replicas), policy.self_grant_after + 1),
        permission_retry=policy.permission_retry,
        recovery=int(RECOVERY_RETRY * 1e6) + policy.catch_up_slack,
        longest=longest, checkpoint_interval=st.checkpoint_interval)


def node_bounds(config: ClusterConfig, longest: int) -> dict[str, Bound]:
    """Every node -> the bound of its replicas: the heaviest path of nodes from the sources
    to it (config order is topological). ``longest``: F, in microseconds."""
    out: dict[str, Bound] = {}
    for node in config.nodes.values():
        upstream = [out[p.name] for s in node.inputs
                    if isinstance(p := config.producer_of(s), NodeConfig) and p.name in out]
        before = max(upstream, key=lambda b: b.total, default=Bound(()))
        out[node.name] = Bound((*before.path, _node_bound(node, longest)))
    return out


# ---------------------------------------------------------------- the end of a run
@dataclass(frozen=True, slots=True)
class Ending:
    """What the history says about the end of a run (times in microseconds)."""

    heal: int  # the final heal
    how: str  # "heal_all", or "heal of fault 3"
    end: int  # the last thing the run recorded
    longest: int  # F: the longest failure, up to the final heal
    down: Mapping[str, str]  # process -> why it is excused: down at the end
    restarts: Mapping[str, tuple[int, ...]]  # process -> when a kill of it was healed
    #: process -> when its last kill began (nothing it logs after that is the killed one's)
    killed: Mapping[str, int] = field(default_factory=dict)

    def at(self, t: int) -> str:
        """``t`` relative to the final heal, as evidence shows it."""
        return f"{'+' if t >= self.heal else '-'}{abs(t - self.heal) / 1e6:.3f} s"


def _longest(spans: Iterable[tuple[int, int]]) -> int:
    longest, cur = 0, None
    for start, end in sorted(spans):
        if cur is not None and start <= cur[1]:
            cur = (cur[0], max(cur[1], end))
            continue
        if cur is not None:
            longest = max(longest, cur[1] - cur[0])
        cur = (start, end)
    return max(longest, 0 if cur is None else cur[1] - cur[0])


def ending_of(events: Sequence[Event], last_record: int) -> Ending | str:
    """The end of the run in ``events``, or why liveness cannot be judged on it.
    ``last_record``: the latest time the run's logs recorded (states, arrivals)."""
    heal, how = None, ""
    for e in events:
        if e["event"] == "heal_all":
            heal, how = e["t"], "heal_all"
    if heal is None:
        for e in events:
            if e["event"] == "heal":
                heal, how = e["t"], f"heal of fault {e.get('id')!r}"
    if heal is None and not any(e["event"] == "fault" for e in events):
        # A run without faults (``dpc launch`` with no ``dpc inject``): its start-up is the
        # only failure it had; judged from its end (``ready``), as from a heal. Started
        # but never ready (Ctrl-C while it waited for first results): the start-up never
        # ended, and a start-up is never judged (paths.py excuses the whole run as one):
        # the replicas are judged from the run's end, where they must be STABLE.
        marks = {e["event"]: e["t"] for e in events if e["event"] in ("start", "ready", "end")}
        if "ready" in marks:
            heal, how = marks["ready"], "ready (the run had no fault)"
        elif "end" in marks:
            heal, how = marks["end"], "end (the run was stopped during its start-up)"
        elif "start" in marks:
            heal, how = marks["start"], "start (the run had no fault)"
    if heal is None:
        return "the history has no heal: liveness is judged from the final heal"
    after = [e for e in events if e["event"] == "fault" and e["t"] > heal]
    if after:
        return (f"fault {after[0].get('id')!r} ({after[0].get('describe', '')}) came after "
                f"the final heal ({how}): no final heal to judge from")
    try:
        spans = fault_spans(events)
    except HistoryError as e:  # a fault without its effects: no guess, unknown
        return f"cannot read the history's faults: {e}"
    down: dict[str, str] = {}
    restarts: dict[str, list[int]] = {}
    killed: dict[str, int] = {}
    for f in spans:
        for p in f.down:
            if f.span.end is None:
                down[p] = f"{f.kind or 'down'} at {f.span.start}, never healed"
            elif f.kind == "kill":
                restarts.setdefault(p, []).append(f.span.end)
                killed[p] = max(killed.get(p, f.span.start), f.span.start)
    longest = _longest((f.span.start, min(f.span.end, heal)) for f in spans
                       if f.span.end is not None and f.span.start < heal)
    end = max([last_record, *(e["t"] for e in events)])
    return Ending(heal, how, end, longest, down, {p: tuple(ts) for p, ts in restarts.items()},
                  killed)


def restart_starts(ending: Ending, states: Mapping[str, Sequence[tuple[int, str]]],
                   sources: Mapping[str, Sequence[Tuple]]) -> dict[str, int | None]:
    """Each restarted process -> when its last restart came up (None: a replica that logged
    no state since): a replica's first state change after its last kill began (the killed
    incarnation logs nothing after it; the history's heal of a kill is recorded once the
    new one is ready, after a replica recovering from its own CEC log may well have become
    STABLE), a source's first logged tuple at or after the restart (the restart itself if it
    logged none since: nothing new to wait for)."""
    out: dict[str, int | None] = {}
    for p, times in ending.restarts.items():
        t = max(times)
        if p in sources:
            out[p] = next((x.time for x in sources[p] if x.time >= t), t)
        else:
            since = ending.killed.get(p, t)
            out[p] = next((s for s, _ in states.get(p, ()) if s >= since), None)
    return out


def _id(t: Tuple) -> int:
    return t.id


# ---------------------------------------------------------------- the verdicts
def check_replica_liveness(replica: str, states: Sequence[tuple[int, str]], ending: Ending,
                           start: int, bound: Bound) -> Verdict:
    """One replica: its state at the end of the run is STABLE, entered by ``start + B``.
    ``states``: its state changes ``(t, state)`` in time order; ``start``: when its clock
    starts (the final heal, or a restart that came up after it)."""
    subject = live_subject(replica)
    deadline = start + bound.total
    clock = (f"deadline {ending.at(deadline)} after the final heal ({ending.how}); "
             f"{bound.describe()}")
    if start > ending.heal:
        clock = f"clock from a restart that came up at {ending.at(start)}; " + clock
    seen = [(t, s) for t, s in states if t <= ending.end]
    if not seen:
        return Verdict("liveness", Status.UNKNOWN, f"no state change of {replica} logged "
                       "(its states.jsonl, or the history's state events)", subject)
    since, state = seen[-1]
    if state == STABLE and since <= deadline:
        return Verdict("liveness", Status.VALID,
                       f"STABLE since {ending.at(since)}; {clock}", subject)
    if state == STABLE:
        return Verdict("liveness", Status.INVALID,
                       f"STABLE only at {ending.at(since)}, after the {clock}", subject)
    stuck = f"{state} since {ending.at(since)} at the end of the run ({ending.at(ending.end)})"
    if ending.end < deadline:
        return Verdict("liveness", Status.UNKNOWN,
                       f"the run ended before the deadline: {stuck}; {clock}", subject)
    return Verdict("liveness", Status.INVALID, f"{stuck}, past the {clock}", subject)


def _stable_in_force(rows: Sequence[tuple[int, Tuple]]) -> list[Tuple]:
    return [t for t in apply_undos(t for _, t in rows) if t.kind is Kind.STABLE]


def _gap_wanted(rows: Sequence[tuple[int, Tuple]], wanted: list[Tuple],
                promise: Promise) -> tuple[list[Tuple], str]:
    """Under a gap promise, the wanted results the client holds in the end (by content),
    and a note for evidence saying how many the gap took."""
    final = {content(t) for t in _stable_in_force(rows)}
    kept = [t for t in wanted if content(t) in final]
    verb = "promises" if len(promise.by) == 1 else "promise"
    note = (f"gap recovery, as {promise.who()} {verb}: {len(wanted) - len(kept)} of the "
            f"{len(wanted)} results whose input came before the final heal never held "
            "(eventual-consistency judges the gap), the others matched by content; ")
    return kept, note


def check_client_liveness(subject: str, rows: Sequence[tuple[int, Tuple]],
                          reference: Sequence[Tuple], ending: Ending, start: int,
                          bound: Bound, promise: Promise | None = None) -> Verdict:
    """One client: every reference result of its stream whose input came before the final
    heal (``tmax`` below it) is in force as STABLE among the tuples that arrived by ``start +
    B`` (``rows``: ``(arrival, tuple)`` in log order; row n is element n-1). Under a gap
    ``promise``, only those it holds in the end, by content (module docstring)."""
    deadline = start + bound.total
    clock = (f"deadline {ending.at(deadline)} after the final heal ({ending.how}); "
             f"{bound.describe()}")
    if start > ending.heal:
        clock = f"clock from a restart that came up at {ending.at(start)}; " + clock
    wanted = [t for t in reference if t.tmax < ending.heal]
    gap = promise is not None and promise.type is RecoveryType.GAP
    if gap and promise is not None:  # (the second test only narrows the type)
        wanted, note = _gap_wanted(rows, wanted, promise)
        clock = note + clock
    if not wanted:
        return Verdict("liveness", Status.VALID,
                       f"no result's input came before the final heal; {clock}", subject)
    n = 0
    while n < len(rows) and rows[n][0] <= deadline:
        n += 1
    stable = _stable_in_force(rows[:n])
    if gap:  # ids renumbered by a takeover: only the content is the reference's
        held_content = {content(t) for t in stable}
        missing = [t for t in wanted if content(t) not in held_content]
    else:
        held = {t.id: t for t in stable}
        missing = [t for t in wanted if held.get(t.id) != t]
    key = content if gap else _id
    if not missing:
        first_at: dict[Any, int] = {}  # a stable tuple's key -> the row it first arrived on
        for row, (_, t) in enumerate(rows[:n], start=1):
            if t.kind is Kind.STABLE:
                first_at.setdefault(key(t), row)
        last = max(first_at[key(t)] for t in wanted)
        return Verdict("liveness", Status.VALID, (
            f"all {len(wanted)} results whose input came before the final heal held as "
            f"stable, the last from row {last} (arrived {ending.at(rows[last - 1][0])}); "
            f"{clock}"), subject)
    first = missing[0]
    what = (f"{len(missing)} of {len(wanted)} results whose input came before the final heal "
            f"not held as stable by the deadline; first {fmt_tuple(first)}")
    def arrived(t: Tuple) -> bool:  # ``first`` itself, or (gap) its content as stable
        return t.kind is Kind.STABLE and key(t) == key(first) if gap else t == first

    late = next(((row, a) for row, (a, t) in enumerate(rows, start=1) if row > n
                 and arrived(t)), None)
    if late is not None:
        return Verdict("liveness", Status.INVALID, (
            f"{what}: it arrived at row {late[0]}, {ending.at(late[1])}, after the {clock}"),
            subject)
    if ending.end < deadline:
        return Verdict("liveness", Status.UNKNOWN, (
            f"the run ended ({ending.at(ending.end)}) before the deadline: {what}; {clock}"),
            subject)
    return Verdict("liveness", Status.INVALID,
                   f"{what}: never received as stable; {clock}", subject)


# ---------------------------------------------------------------- a whole run
def _upstream(config: ClusterConfig) -> dict[str, set[str]]:
    """Every node -> the processes upstream of it: sources and replicas of earlier nodes."""
    up: dict[str, set[str]] = {}
    for node in config.nodes.values():
        procs: set[str] = set()
        for s in node.inputs:
            p = config.producer_of(s)
            if isinstance(p, NodeConfig):
                procs |= up.get(p.name, set()) | {r.name for r in p.replicas}
            else:
                procs.add(p.name)
        up[node.name] = procs
    return up


def _blocked(config: ClusterConfig, down: Mapping[str, str]) -> dict[str, str]:
    """Every node with an input no live producer serves at the end -> why."""
    out: dict[str, str] = {}
    for node in config.nodes.values():
        for s in node.inputs:
            p = config.producer_of(s)
            if isinstance(p, NodeConfig) and p.name in out:
                out[node.name] = out[p.name]
            elif isinstance(p, NodeConfig) and all(r.name in down for r in p.replicas):
                out[node.name] = f"every replica of {p.name} is down at the end"
            elif not isinstance(p, NodeConfig) and p.name in down:
                out[node.name] = f"its input {p.name} is down at the end ({down[p.name]})"
            else:
                continue
            break
    return out


def replica_states(events: Sequence[Event]) -> dict[str, list[tuple[int, str]]]:
    """The history's ``state`` events per replica, in time order."""
    out: dict[str, list[tuple[int, str]]] = {}
    for e in sorted((e for e in events if e["event"] == "state"), key=lambda e: e["t"]):
        out.setdefault(str(e["process"]), []).append((e["t"], str(e["state"])))
    return out


def liveness_verdicts(config: ClusterConfig, events: Sequence[Event], *,
                      states: Mapping[str, Sequence[tuple[int, str]]],
                      clients: Mapping[str, Sequence[tuple[int, Tuple]]],
                      sources: Mapping[str, Sequence[Tuple]],
                      reference: Mapping[str, Sequence[Tuple]] | None, why: str = "",
                      problems: Mapping[str, str] | None = None) -> list[Verdict]:
    """Property 6 for every replica, then every client of ``config`` (pure). ``states``:
    replica -> its state changes (the history's ``state`` events stand in for a replica
    missing here); ``clients``: client -> its log as ``(arrival, tuple)`` rows;
    ``reference``: the reference run's streams (None: unknown for the clients, ``why``);
    ``problems``: subject -> why its log is unusable (those verdicts are unknown)."""
    problems = problems or {}
    from_history = replica_states(events)
    states = {**from_history, **states}
    last = max([0, *(t for seq in states.values() for t, _ in seq),
                *(a for rows in clients.values() for a, _ in rows[-1:])])
    ending = ending_of(events, last)
    subjects = [(live_subject(r.name), r.name, node) for node in config.nodes.values()
                for r in node.replicas]
    judged = [(client_subject(c), c, p) for c in config.clients.values()
              if isinstance(p := config.producer_of(c.stream), NodeConfig)]
    out: list[Verdict] = []
    if isinstance(ending, str):
        every = [s for s, _, _ in subjects] + [s for s, _, _ in judged]
        return [Verdict("liveness", Status.UNKNOWN, problems.get(s, ending), s) for s in every]
    bounds = node_bounds(config, ending.longest)
    up = _upstream(config)
    blocked = _blocked(config, ending.down)
    starts = restart_starts(ending, states, sources)

    def start(procs: Iterable[str]) -> int:
        return max([ending.heal, *(t for p in procs if (t := starts.get(p)) is not None)])

    for subject, name, node in subjects:
        if subject in problems:
            out.append(Verdict("liveness", Status.UNKNOWN, problems[subject], subject))
        elif name in ending.down:
            why_ok = f"{name} is down at the end ({ending.down[name]}): excused"
            out.append(Verdict("liveness", Status.VALID, why_ok, subject))
        elif node.name in blocked:
            why_ok = f"excused: {blocked[node.name]}"
            out.append(Verdict("liveness", Status.VALID, why_ok, subject))
        elif name in starts and starts[name] is None:
            out.append(Verdict("liveness", Status.UNKNOWN, (
                f"{name} was restarted at {ending.at(max(ending.restarts[name]))} and logged no "
                "state since: its start-up is not judged"), subject))
        else:
            out.append(check_replica_liveness(name, states.get(name, ()), ending,
                                              start([name, *up[node.name]]), bounds[node.name]))
    for subject, c, producer in judged:  # (a client of a source's stream: no node to wait on)
        replicas = [r.name for r in producer.replicas]
        if subject in problems:
            out.append(Verdict("liveness", Status.UNKNOWN, problems[subject], subject))
        elif producer.name in blocked or all(r in ending.down for r in replicas):
            why_ok = blocked.get(producer.name, f"every replica of {producer.name} is down at "
                                                "the end")
            out.append(Verdict("liveness", Status.VALID, f"excused: {why_ok}", subject))
        elif reference is None or c.stream not in reference:
            out.append(Verdict("liveness", Status.UNKNOWN, f"no reference run: {why}", subject))
        else:
            bound = bounds[producer.name].for_client(bound_for(config, c.stream))
            out.append(check_client_liveness(
                subject, clients.get(c.name, ()), reference[c.stream], ending,
                start([*replicas, *up[producer.name]]), bound, stream_promise(config, c.stream)))
    return out
