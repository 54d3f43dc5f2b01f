"""Fault schedules: what to break, when, and for how long (pure: no I/O, no clock).

Role: the one data model of faults shared by ``dpc run`` (real processes, ``runner.py``),
``dpc torture`` (random schedules on real processes) and ``dpc simulate`` (random schedules
in the deterministic simulation, ``simulate.py``). A :class:`Fault` is one TOML table of a
scenario's ``[[faults]]`` array; :func:`parse_faults` validates them against a cluster,
:func:`dump_faults` prints them back (what ``dpc simulate`` prints for a failing seed),
:func:`random_faults` draws a schedule from a seeded ``random.Random``.

Every fault has its heal, ``for`` seconds after it starts (Jepsen's nemeses: inject, then
always heal); a run also ends with a heal of everything and a quiet period. Kinds::

    partition  shape = "link"     between = [a, b], one_way = false (true: only a -> b)
               shape = "isolate"  process = p (cut from every other process)
               shape = "split"    sides = [[...], [...]] (the second side may be omitted:
                                  everyone else)
               shape = "bridge"   sides = [[...], [...]], bridge = p (p reaches both sides)
               shape = "source"   source = s, replicas = [...] (omitted: all its consumers)
               cut = "blackhole" (silence, the default) | "reset" (connections torn down)
    kill       process = replica or source (SIGKILL; healed by a restart: a replica with
               --recover, from a partner's state, or from its own CEC log where its
               node has checkpointing = "cec"; a source resumes from its own log)
    pause      process = replica or source (SIGSTOP; healed by SIGCONT)
    delay      between = [a, b], seconds = latency added each way
    bandwidth  between = [a, b], bytes_per_second = limit each way
    slow       reader = replica, writer = p, seconds = per message read (a slow reader)
    stall      process = replica (its reconciliations hold mid-replay: a fault that starts
               during STABILIZATION is one that starts while a stall lasts)
    skew       process = a source, replica or client, seconds = its clock's offset,
               + ahead or - behind (not 0): the clock fault (node/clock.py; healed by an
               offset of 0). Real processes only (``dpc simulate`` refuses it), never
               drawn at random (:data:`RANDOM_KINDS`): a skew is not a failure DPC's
               model masks.

Theory of operation. A partition resolves (:func:`cut_pairs`) to a set of directed pairs
``(a, b)``: messages from ``a`` to ``b`` vanish. Every connection of a cluster has a replica
at one end (node/faults/rules.py), so :func:`replica_rules` turns the pairs into per-replica cut
rules, made at *both* ends when both are replicas (a restarted replica has lost its own
rules; the other end still holds). Pairs between two non-replicas (a source and a client)
carry no connection and are dropped.

Invariants: :func:`parse_faults` refuses unknown kinds, shapes, keys and process names,
kills and pauses of a client (a stopped client would stall its producers
through back-pressure, which is not a failure DPC masks), a kill or pause of a process
that is down already, a skew of a process skewed already (its heal would end both), and
schedules that would leave a
node with no live replica to recover from (overlapping kills or pauses of all its
replicas), unless its replicas recover from their own disks (``checkpointing = "cec"``):
random schedules then draw kills of all of them at once on purpose.
``dump_faults(parse_faults(x))`` parses back to the same faults.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from node.config.model import ClusterConfig
from node.faults.ops import CutKind, Direction
from ops_scripts.errors import ScheduleError

__all__ = [
    "CUTS",
    "KINDS",
    "RANDOM_KINDS",
    "SHAPES",
    "Fault",
    "cut_pairs",
    "dump_faults",
    "impaired_pairs",
    "node_of",
    "parse_faults",
    "random_faults",
    "replica_rules",
]

KINDS = ("partition", "kill", "pause", "delay", "bandwidth", "slow", "stall", "skew")
#: What :func:`random_faults` draws (all but skew: random torture and simulation schedules
#: stay as they were, and a skewed clock is no failure the checkers' model knows).
RANDOM_KINDS = ("partition", "kill", "pause", "delay", "bandwidth", "slow", "stall")
SHAPES = ("link", "isolate", "split", "bridge", "source")
CUTS = tuple(kind.value for kind in CutKind)  # a partition's ``cut``: "blackhole", "reset"

# The keys each kind (and partition shape) takes, besides at / for / fault.
_KEYS: dict[str, set[str]] = {
    "link": {"shape", "between", "one_way", "cut"},
    "isolate": {"shape", "process", "cut"},
    "split": {"shape", "sides", "cut"},
    "bridge": {"shape", "sides", "bridge", "cut"},
    "source": {"shape", "source", "replicas", "cut"},
    "kill": {"process"},
    "pause": {"process"},
    "delay": {"between", "seconds"},
    "bandwidth": {"between", "bytes_per_second"},
    "slow": {"reader", "writer", "seconds"},
    "stall": {"process"},
    "skew": {"process", "seconds"},
}


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault: ``kind`` from ``at`` seconds after the start, healed ``duration`` later.
    ``params`` holds the kind's keys exactly as in TOML (lists as tuples)."""

    at: float
    duration: float
    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def heal_at(self) -> float:
        return self.at + self.duration

    def get(self, key: str, default: Any = None) -> Any:
        return self.params.get(key, default)

    def table(self) -> dict[str, Any]:
        """This fault as its TOML table (what ``parse_faults`` reads back, and what the
        history's ``fault`` event holds): tuples as lists."""
        def plain(v: Any) -> Any:
            return [plain(x) for x in v] if isinstance(v, tuple | list) else v
        return {"at": self.at, "for": self.duration, "fault": self.kind,
                **{k: plain(v) for k, v in self.params.items()}}

    def describe(self) -> str:
        """One line for progress output: ``partition isolate n1a (reset) for 2.0 s``."""
        p = self.params
        what = {
            "link": lambda: f"{p['between'][0]}{' ->' if p.get('one_way') else ' <->'} "
                            f"{p['between'][1]}",
            "isolate": lambda: str(p["process"]),
            "split": lambda: " | ".join(",".join(side) for side in p["sides"]),
            "bridge": lambda: f"{','.join(p['sides'][0])} | {','.join(p['sides'][1])} "
                              f"bridged by {p['bridge']}",
            "source": lambda: f"{p['source']} from {','.join(p.get('replicas') or ['all'])}",
        }
        if self.kind == "partition":
            shape = p["shape"]
            body = f"partition {shape} {what[shape]()} ({p.get('cut', 'blackhole')})"
        elif self.kind in ("delay", "bandwidth"):
            value = p.get("seconds", p.get("bytes_per_second"))
            body = f"{self.kind} {p['between'][0]} <-> {p['between'][1]} {value}"
        elif self.kind == "slow":
            body = f"slow reader {p['reader']} of {p['writer']} {p['seconds']} s/message"
        elif self.kind == "skew":
            body = f"skew {p['process']} {p['seconds']:+g} s"
        else:
            body = f"{self.kind} {p['process']}"
        return f"{body} for {self.duration:g} s"


# ---------------------------------------------------------------- processes of a config
def _replicas(config: ClusterConfig) -> list[str]:
    return [r.name for n in config.nodes.values() for r in n.replicas]


def _processes(config: ClusterConfig) -> list[str]:
    return [*config.sources, *_replicas(config), *config.clients]


def _links(config: ClusterConfig) -> list[tuple[str, str]]:
    """Every ``(producer, consumer)`` pair that has a connection: data streams (a source or
    a replica to a replica or client that reads it) and partners (replica to replica)."""
    pairs: list[tuple[str, str]] = []
    for node in config.nodes.values():
        for stream in node.inputs:
            producer = config.producer_of(stream)
            writers = ([stream] if stream in config.sources
                       else [r.name for r in producer.replicas])  # type: ignore[union-attr]
            pairs += [(w, r.name) for w in writers for r in node.replicas]
        names = [r.name for r in node.replicas]
        pairs += [(a, b) for a in names for b in names if a < b]
    for c in config.clients.values():
        pairs += [(r.name, c.name) for r in config.producer_of(c.stream).replicas]  # type: ignore[union-attr]
    return pairs


def node_of(config: ClusterConfig) -> dict[str, str]:
    """Each replica's node."""
    return {r.name: n.name for n in config.nodes.values() for r in n.replicas}


# ---------------------------------------------------------------- parsing
def _err(i: int, msg: str) -> ScheduleError:
    return ScheduleError(f"faults[{i}]: {msg}")


def _name(i: int, key: str, value: Any, allowed: Sequence[str], what: str) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise _err(i, f"{key} = {value!r} is not {what}; known: {', '.join(allowed)}")
    return value


def _names(i: int, key: str, value: Any, allowed: Sequence[str], what: str) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not value:
        raise _err(i, f"{key} must be a non-empty list of names, got {value!r}")
    return tuple(_name(i, key, v, allowed, what) for v in value)


def _number(i: int, key: str, value: Any, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or (
        positive and value == 0
    ):
        need = "a positive number" if positive else "a non-negative number"
        raise _err(i, f"{key} must be {need}, got {value!r}")
    return float(value)


def _parse_one(i: int, raw: Mapping[str, Any], config: ClusterConfig) -> Fault:
    if not isinstance(raw, Mapping):
        raise _err(i, f"expected a table, got {raw!r}")
    procs, replicas = _processes(config), _replicas(config)
    kind = raw.get("fault")
    if kind not in KINDS:
        raise _err(i, f"fault = {kind!r} is not a fault kind; known: {', '.join(KINDS)}")
    at = _number(i, "at", raw.get("at"), positive=False)
    duration = _number(i, "for", raw.get("for"))
    if kind == "partition":
        shape = raw.get("shape")
        if shape not in SHAPES:
            raise _err(i, f"shape = {shape!r} is not a partition shape; known: {', '.join(SHAPES)}")
        allowed = _KEYS[shape]
    else:
        allowed = _KEYS[kind]
    extra = sorted(set(raw) - allowed - {"at", "for", "fault"})
    if extra:
        raise _err(i, f"unknown key(s) {extra} for {kind}; expected {sorted(allowed)}")
    missing = sorted(allowed - set(raw) - {"one_way", "cut", "replicas", "sides"})
    if missing:
        raise _err(i, f"{kind}: missing key(s) {missing}")
    p: dict[str, Any] = {}
    if kind == "partition":
        p["shape"] = raw["shape"]
        cut = raw.get("cut", CutKind.BLACKHOLE.value)
        if cut not in CUTS:
            raise _err(i, f"cut = {cut!r}; expected one of {', '.join(CUTS)}")
        p["cut"] = cut
    if "between" in raw:
        pair = _names(i, "between", raw["between"], procs, "a process")
        if len(pair) != 2 or pair[0] == pair[1]:
            raise _err(i, f"between must name two different processes, got {list(pair)}")
        if kind in ("delay", "bandwidth") and not set(pair) & set(replicas):
            raise _err(i, f"between = {list(pair)}: one end must be a replica (the link is "
                          "shaped at a replica)")
        p["between"] = pair
    if "one_way" in raw:
        if not isinstance(raw["one_way"], bool):
            raise _err(i, f"one_way must be true or false, got {raw['one_way']!r}")
        if raw["one_way"] and p.get("cut") == CutKind.RESET.value:
            raise _err(i, "a reset tears a connection down both ways: one_way needs cut = "
                          "\"blackhole\"")
        p["one_way"] = raw["one_way"]
    if "process" in raw:
        allowed_procs = {"kill": [*config.sources, *replicas], "stall": replicas,
                         "pause": [*config.sources, *replicas]}.get(kind, procs)
        what = {"kill": "a replica or a source (a client's log is the run's evidence)",
                "stall": "a replica",
                "pause": "a replica or a source (a paused client would stall its producers)"}
        p["process"] = _name(i, "process", raw["process"], allowed_procs,
                             what.get(kind, "a process"))
    if "sides" in raw or (kind == "partition" and p["shape"] in ("split", "bridge")):
        sides = raw.get("sides")
        if not isinstance(sides, list | tuple) or len(sides) not in (1, 2):
            raise _err(i, f"sides must be one or two lists of names, got {sides!r}")
        a = _names(i, "sides", sides[0], procs, "a process")
        bridge = raw.get("bridge")
        if p["shape"] == "bridge":
            p["bridge"] = bridge = _name(i, "bridge", bridge, procs, "a process")
        b = (_names(i, "sides", sides[1], procs, "a process") if len(sides) == 2
             else tuple(x for x in procs if x not in a and x != bridge))
        if set(a) & set(b) or bridge in (*a, *b):
            raise _err(i, "the sides must not overlap (and the bridge is on neither side)")
        if not b:
            raise _err(i, "the second side is empty")
        p["sides"] = (a, b)
    if "source" in raw:
        p["source"] = _name(i, "source", raw["source"], list(config.sources), "a source")
        consumers = [r for r in replicas if r in _consumers(config, p["source"])]
        p["replicas"] = (_names(i, "replicas", raw["replicas"], consumers, "a consumer of it")
                         if "replicas" in raw else tuple(consumers))
    if "reader" in raw:
        p["reader"] = _name(i, "reader", raw["reader"], replicas, "a replica")
        p["writer"] = _name(i, "writer", raw["writer"], procs, "a process")
        if p["writer"] == p["reader"]:
            raise _err(i, "reader and writer must differ")
    if kind == "skew":
        p["seconds"] = _offset(i, raw["seconds"])
    elif "seconds" in raw:
        p["seconds"] = _number(i, "seconds", raw["seconds"])
    if "bytes_per_second" in raw:
        p["bytes_per_second"] = _number(i, "bytes_per_second", raw["bytes_per_second"])
    return Fault(at, duration, str(kind), p)


def _offset(i: int, value: Any) -> float:
    """A skew's ``seconds``: a finite number, negative (behind) or positive (ahead), not 0."""
    if (isinstance(value, bool) or not isinstance(value, int | float) or value == 0
            or not math.isfinite(value)):
        raise _err(i, f"seconds must be a clock offset, a non-zero number of seconds (+ ahead, "
                      f"- behind), got {value!r}")
    return float(value)


def _consumers(config: ClusterConfig, stream: str) -> set[str]:
    return {r.name for n in config.nodes.values() if stream in n.inputs for r in n.replicas}


def parse_faults(raw: Iterable[Mapping[str, Any]], config: ClusterConfig) -> list[Fault]:
    """Validate a scenario's ``[[faults]]`` against ``config``; sorted by start time."""
    faults = sorted((_parse_one(i, r, config) for i, r in enumerate(raw)), key=lambda f: f.at)
    _check_live_partner(faults, config)
    _check_one_skew(faults)
    return faults


def _check_one_skew(faults: Sequence[Fault]) -> None:
    """Refuse overlapping skews of one process: a process has one offset, and the first
    heal (an offset of 0) would end the other skew too."""
    skews = [f for f in faults if f.kind == "skew"]
    for i, f in enumerate(skews):
        for g in skews[i + 1:]:
            if g.params["process"] == f.params["process"] and g.at < f.heal_at:
                raise ScheduleError(
                    f"faults at {f.at:g} s and {g.at:g} s: {f.params['process']} is skewed "
                    "already when the second skew starts (one offset per process)")


#: Seconds after a process pair's killed replica is restarted before the schedule may kill
#: its partner (``_check_live_partner``): the restart comes up (about a second for a real
#: process), then copies its partner's state (active standby) or gets its first checkpoint
#: (passive standby, every ha_interval). The pairs' model is one failure at a time (Hwang et
#: al., section 2): the partner's crash before that is a second failure during the first's
#: recovery, after which no replica holds the node's state.
PAIR_RESYNC = 3.0


def _check_live_partner(faults: Sequence[Fault], config: ClusterConfig) -> None:
    """Refuse a kill or pause of a process already down, and overlapping kills/pauses of
    every replica of a node: a killed replica recovers from a live partner's state, so one
    replica of each node must stay up (for a process pair, until ``PAIR_RESYNC`` after the
    restart)."""
    stops = [f for f in faults if f.kind in ("kill", "pause")]
    for i, f in enumerate(stops):
        for g in stops[i + 1:]:
            if g.params["process"] == f.params["process"] and g.at < f.heal_at:
                raise ScheduleError(
                    f"faults at {f.at:g} s and {g.at:g} s: {f.params['process']} is "
                    f"{f.kind}ed already when the {g.kind} starts")
    nodes = node_of(config)
    pair_nodes = {n.name for n in config.nodes.values() if n.settings.ha != "dpc"}
    # A pair's replica isolated from everyone is down to its pair too (its partner takes
    # over; one failure at a time holds for it as for a kill).
    isolated = [f for f in faults if f.kind == "partition" and f.params.get("shape") == "isolate"
                and nodes.get(f.params.get("process", "")) in pair_nodes]
    down = [f for f in [*stops, *isolated] if f.params["process"] in nodes]

    def until(f: Fault) -> float:
        """When ``f``'s replica counts as back: a pair's restarted (or reconnected) replica
        only once it caught up with its partner (PAIR_RESYNC later: it copied the state, or
        got a checkpoint); its partner's failure before then is a double failure."""
        pair = nodes[f.params["process"]] in pair_nodes
        return f.heal_at + (PAIR_RESYNC if pair and f.kind in ("kill", "partition") else 0.0)

    for f in down:
        node = nodes[f.params["process"]]
        if _alone(config, node):
            continue  # its replicas recover from their own CEC logs
        at_once = {g.params["process"] for g in down if nodes.get(g.params["process"]) == node
                   and g.at < until(f) and f.at < until(g)}
        if len(at_once) == len(config.nodes[node].replicas) and (node in pair_nodes or any(
            g.kind == "kill" for g in down if g.params["process"] in at_once
        )):
            raise ScheduleError(
                f"faults at {f.at:g} s: every replica of node {node!r} is down at once "
                f"({', '.join(sorted(at_once))}) and one is killed: it could not recover "
                "(a restarted replica rebuilds from a live partner; a process pair's counts "
                f"as down until {PAIR_RESYNC:g} s after its restart)")


def _alone(config: ClusterConfig, node: str) -> bool:
    """Whether ``node``'s replicas recover from their own CEC logs (no partner needed)."""
    st = config.nodes[node].settings
    return st.checkpointing == "cec" and st.fault_tolerance


def dump_faults(faults: Sequence[Fault]) -> str:
    """The ``[[faults]]`` tables of ``faults`` as TOML text (parses back to them)."""
    out: list[str] = []
    for f in faults:
        out += ["[[faults]]", f"at = {_toml(round(f.at, 3))}", f"for = {_toml(round(f.duration, 3))}",
                f"fault = {_toml(f.kind)}"]
        out += [f"{k} = {_toml(v)}" for k, v in f.params.items()]
        out.append("")
    return "\n".join(out)


def _toml(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, int | float):
        return repr(float(v)) if isinstance(v, float) else str(v)
    return "[" + ", ".join(_toml(x) for x in v) + "]"


# ---------------------------------------------------------------- what a fault does
def cut_pairs(fault: Fault, config: ClusterConfig) -> set[tuple[str, str]]:
    """The directed pairs ``(a, b)`` a partition cuts (messages from a to b vanish)."""
    if fault.kind != "partition":
        return set()
    p = fault.params
    procs = _processes(config)

    def both(xs: Iterable[str], ys: Iterable[str]) -> set[tuple[str, str]]:
        return {pair for x in xs for y in ys if x != y for pair in ((x, y), (y, x))}

    match p["shape"]:
        case "link":
            a, b = p["between"]
            return {(a, b)} if p.get("one_way") else {(a, b), (b, a)}
        case "isolate":
            return both([p["process"]], procs)
        case "split" | "bridge":
            return both(*p["sides"])
        case "source":
            return both([p["source"]], p["replicas"])
    raise AssertionError(p["shape"])


def impaired_pairs(fault: Fault) -> set[tuple[str, str]]:
    """The links a shaping fault slows down (both directions): delay, bandwidth, slow."""
    if fault.kind in ("delay", "bandwidth"):
        a, b = fault.params["between"]
    elif fault.kind == "slow":
        a, b = fault.params["reader"], fault.params["writer"]
    else:
        return set()
    return {(a, b), (b, a)}


def replica_rules(pairs: Iterable[tuple[str, str]], config: ClusterConfig,
                  ) -> dict[str, dict[str, Direction]]:
    """Per replica: ``{peer: direction}`` (``IN``: from the peer, ``OUT``: to the peer, or
    ``BOTH``) that cuts ``pairs``, made at every replica end of each pair."""
    replicas = set(_replicas(config))
    cut = set(pairs)
    rules: dict[str, dict[str, Direction]] = {}
    for a, b in sorted(cut):
        for me, peer, way in ((a, b, Direction.OUT), (b, a, Direction.IN)):
            if me not in replicas:
                continue
            mine = rules.setdefault(me, {})
            mine[peer] = Direction.BOTH if (peer, me) in cut and (me, peer) in cut else way
    return rules


# ---------------------------------------------------------------- random schedules
def crashes_only(config: ClusterConfig) -> bool:
    """Whether the cluster has a process-pair node (``ha`` other than "dpc"): its schedules
    are then crashes of node replicas only. The pairs' model is fail-stop crashes over a
    reliable network (Hwang et al., section 2): such a node has no tentative results, so a
    partition, a slow link or a silent source upstream of it blocks it, and the availability
    bound of DPC would not hold through it (docs/ha-modes.md). (Isolations of a pair's
    replica, a stalled primary's look, are tested by hand: tests/ops_scripts/harness/
    test_simulate.py; drawn at random they still fail, see the session notes.)"""
    return any(n.settings.ha != "dpc" for n in config.nodes.values())


def random_faults(config: ClusterConfig, rng: random.Random, *, duration: float,
                  count: int, kinds: Sequence[str] = RANDOM_KINDS,
                  max_fault: float | None = None,
                  ) -> list[Fault]:
    """``count`` random, possibly overlapping faults within ``duration`` seconds, each of
    a kind in ``kinds`` (every shape and both cut kinds for partitions; kills of node
    replicas only where :func:`crashes_only`), drawn from ``rng`` only. Lengths go up to ``max_fault`` (default: 3 X of the slowest node), so that some
    outlast alpha*X and reconcile, and some stalls make the next fault start during
    STABILIZATION. Retries a draw that ``parse_faults`` would refuse. ``kinds`` outside
    :data:`RANDOM_KINDS` (a skew) are refused."""
    if unknown := sorted(set(kinds) - set(RANDOM_KINDS)):
        raise ScheduleError(f"random schedules draw {', '.join(RANDOM_KINDS)}; not {unknown}")
    procs, replicas, links = _processes(config), _replicas(config), _links(config)
    if crashes_only(config):
        kinds = ("kill",)
    x = max(n.settings.x for n in config.nodes.values()) / 1e6
    longest = max_fault if max_fault is not None else 3 * x
    faults: list[Fault] = []
    while len(faults) < count:
        kind = rng.choice(list(kinds))
        at = round(rng.uniform(0.0, max(duration - 0.5, 0.1)), 3)
        length = round(rng.uniform(0.2, longest), 3)
        raw: dict[str, Any] = {"at": at, "for": length, "fault": kind}
        if kind == "partition":
            raw.update(_random_partition(config, rng, procs, replicas, links))
        elif kind == "stall":
            raw["process"] = rng.choice(replicas)
        elif kind in ("kill", "pause"):
            raw["process"] = rng.choice(replicas if crashes_only(config)
                                        else [*config.sources, *replicas])
        elif kind in ("delay", "bandwidth"):
            raw["between"] = list(rng.choice(links))
            if kind == "delay":
                raw["seconds"] = round(rng.uniform(0.01, 0.3), 3)
            else:
                raw["bytes_per_second"] = float(rng.choice((20_000, 100_000, 500_000)))
        else:  # slow: a replica that reads a stream, or a partner's answers
            writer, reader = rng.choice([pair for pair in links if pair[1] in replicas])
            raw["reader"], raw["writer"] = reader, writer
            raw["seconds"] = round(rng.uniform(0.001, 0.02), 4)
        more = [raw]
        node = node_of(config).get(raw.get("process", ""))
        if kind == "kill" and node is not None and _alone(config, node) and rng.random() < 0.75:
            # The case CEC is for: every replica of the node killed at once (each partner's
            # kill starts while the first lasts).
            more += [{"at": round(at + rng.uniform(0.0, length / 2), 3), "fault": "kill",
                      "for": round(rng.uniform(0.2, longest), 3), "process": r.name}
                     for r in config.nodes[node].replicas if r.name != raw["process"]]
        try:
            faults = parse_faults([*(f.table() for f in faults), *more], config)
        except ScheduleError:
            continue  # e.g. both replicas of a node killed at once: draw again
    return faults


def _random_partition(config: ClusterConfig, rng: random.Random, procs: list[str],
                      replicas: list[str], links: list[tuple[str, str]]) -> dict[str, Any]:
    shape = rng.choice(SHAPES)
    out: dict[str, Any] = {"shape": shape, "cut": rng.choice(CUTS)}
    if shape == "link":
        out["between"] = list(rng.choice(links))
        if out["cut"] == CutKind.BLACKHOLE.value and rng.random() < 0.5:
            out["one_way"] = True
            if rng.random() < 0.5:
                out["between"].reverse()
    elif shape == "isolate":
        out["process"] = rng.choice(replicas)
    elif shape in ("split", "bridge"):
        shuffled = rng.sample(procs, len(procs))
        bridge = shuffled.pop() if shape == "bridge" else None
        k = rng.randint(1, len(shuffled) - 1)
        out["sides"] = [shuffled[:k], shuffled[k:]]
        if bridge is not None:
            out["bridge"] = bridge
    else:
        out["source"] = rng.choice(list(config.sources))
        consumers = sorted(_consumers(config, out["source"]))
        out["replicas"] = rng.sample(consumers, rng.randint(1, len(consumers)))
    return out
