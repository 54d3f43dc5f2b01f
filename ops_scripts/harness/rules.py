"""The rules that the faults in force put at each replica, and the requests that bring a
replica from the rules it holds to those it should hold (pure: no I/O, no clock).

Role: the one model of network faults of ``dpc run`` / ``dpc torture`` and ``dpc inject``
(both through ``nemesis.py``). Cuts and shapes are made at replicas (``POST /fault``), per
peer; a request to heal a peer at a replica removes *everything* that replica does to that
peer. Faults overlap: a partition and a delay on one link, two partitions that both cut
``s3 -> n1a``. So the model keeps two maps, replica -> peer -> :class:`LinkRule`:

* **desired**: what the faults in force (:meth:`ActiveRules.add` / :meth:`remove`) imply:
  partitions through ``schedule.replica_rules`` (made at every replica end), ``delay`` and
  ``bandwidth`` at each replica end of the link, ``slow`` at the reader for its writer;
* **held**: what each replica was last brought to (:meth:`ActiveRules.commit`).

:meth:`ActiveRules.plan` compares them and returns the requests for each reachable replica,
operations of the fault vocabulary (node/faults/ops.py: :data:`~node.faults.ops.FaultOp`):
nothing where they agree; a cut and/or a shape where the desired rule only adds to the held
one; otherwise a heal of that peer, then the whole desired rule again. So healing one of two
partitions that cut the same pair heals it and cuts it again at once, and a restarted
replica (:meth:`forget`: it holds nothing) gets back every rule of the faults still in
force. Stalls are counted the same way: a replica is stalled while any stall fault on it is
in force.

Combining rules on one (replica, peer): cut directions are united; a cut tears
connections down (``reset``) if any fault in force on the pair says so; delays add up (each
fault adds its latency), bandwidth limits take the tightest, slow-reader periods add up.
When both ends of a delayed link are replicas, each end adds half the delay (a message is
delayed once leaving one end and once reaching the other); a bandwidth limit is set at both
ends (two limiters of one rate in series pass that rate).

Invariants: requests are grouped per replica (heal, then cuts, then shapes, then stall),
one request per group of peers that get the same parameters; :meth:`plan` never names an
unreachable replica; after every request of a replica succeeded and :meth:`commit` was
called, ``plan`` returns nothing for it until the faults change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from node.config.model import ClusterConfig
from node.faults.ops import Cut, CutKind, Direction, FaultOp, Heal, Shape, Stall, Unstall
from ops_scripts.harness.schedule import Fault, cut_pairs, replica_rules

__all__ = ["NETWORK_KINDS", "ActiveRules", "LinkRule", "fault_rules"]

#: The fault kinds that are rules at replicas (the others stop processes).
NETWORK_KINDS = ("partition", "delay", "bandwidth", "slow")


@dataclass(frozen=True, slots=True)
class LinkRule:
    """What one replica does to its link with one peer (the empty rule: nothing)."""

    cut_in: bool = False  # messages from the peer vanish
    cut_out: bool = False  # messages to the peer vanish
    reset: bool = False  # the cut tears connections down (else: silence)
    delay: float = 0.0  # seconds added each way
    bandwidth: float | None = None  # bytes/s each way
    slow: float = 0.0  # seconds per message read from the peer

    @property
    def direction(self) -> Direction | None:
        if self.cut_in and self.cut_out:
            return Direction.BOTH
        return Direction.IN if self.cut_in else Direction.OUT if self.cut_out else None

    @property
    def kind(self) -> CutKind:
        return CutKind.RESET if self.reset else CutKind.BLACKHOLE

    @property
    def shaped(self) -> bool:
        return bool(self.delay or self.bandwidth is not None or self.slow)

    @property
    def empty(self) -> bool:
        return self.direction is None and not self.shaped

    def __add__(self, other: LinkRule) -> LinkRule:
        bw = [b for b in (self.bandwidth, other.bandwidth) if b is not None]
        return LinkRule(
            self.cut_in or other.cut_in, self.cut_out or other.cut_out,
            (self.reset and self.direction is not None) or (other.reset and other.direction is not None),
            self.delay + other.delay, min(bw) if bw else None, self.slow + other.slow)

    def extends(self, held: LinkRule) -> bool:
        """Whether requests for this rule, made over ``held``, give this rule (no heal
        needed): every cut direction and shaping field ``held`` has, this one has too."""
        return ((self.cut_in or not held.cut_in) and (self.cut_out or not held.cut_out)
                and (held.direction is None or self.reset == held.reset)
                and (self.delay > 0 or not held.delay) and (self.slow > 0 or not held.slow)
                and (self.bandwidth is not None or held.bandwidth is None))


Rules = dict[str, dict[str, LinkRule]]


def fault_rules(fault: Fault, config: ClusterConfig) -> Rules:
    """The rules ``fault`` alone puts at replicas: replica -> peer -> rule."""
    replicas = {r.name for n in config.nodes.values() for r in n.replicas}
    out: Rules = {}
    p = fault.params
    if fault.kind == "partition":
        kind_reset = p.get("cut") == CutKind.RESET.value
        for me, peers in replica_rules(cut_pairs(fault, config), config).items():
            out[me] = {peer: LinkRule(way is not Direction.OUT, way is not Direction.IN, kind_reset)
                       for peer, way in peers.items()}
    elif fault.kind in ("delay", "bandwidth"):
        a, b = p["between"]
        ends = [(x, y) for x, y in ((a, b), (b, a)) if x in replicas]
        for me, peer in ends:
            rule = (LinkRule(delay=p["seconds"] / len(ends)) if fault.kind == "delay"
                    else LinkRule(bandwidth=p["bytes_per_second"]))
            out.setdefault(me, {})[peer] = rule
    elif fault.kind == "slow":
        out[p["reader"]] = {p["writer"]: LinkRule(slow=p["seconds"])}
    return out


class ActiveRules:
    """Desired vs held rules at every replica (module docstring)."""

    def __init__(self, config: ClusterConfig) -> None:
        self._config = config
        self._faults: dict[int, Rules] = {}
        self._stalls: dict[int, str] = {}
        self.held: Rules = {}
        self.held_stalled: set[str] = set()

    def add(self, fid: int, fault: Fault) -> None:
        """Fault ``fid`` is in force (kinds that are not rules or stalls are ignored)."""
        if fault.kind == "stall":
            self._stalls[fid] = fault.params["process"]
        elif fault.kind in NETWORK_KINDS:
            self._faults[fid] = fault_rules(fault, self._config)

    def remove(self, fid: int) -> None:
        """Fault ``fid`` is healed (unknown ids are ignored)."""
        self._faults.pop(fid, None)
        self._stalls.pop(fid, None)

    def clear(self) -> None:
        """Everything healed everywhere (the caller heals "all" at every replica)."""
        self._faults.clear()
        self._stalls.clear()
        self.held.clear()
        self.held_stalled.clear()

    def forget(self, replica: str) -> None:
        """``replica`` holds nothing any more (restarted: a new process)."""
        self.held.pop(replica, None)
        self.held_stalled.discard(replica)

    def desired(self) -> Rules:
        total: Rules = {}
        for rules in self._faults.values():
            for me, peers in rules.items():
                mine = total.setdefault(me, {})
                for peer, rule in peers.items():
                    mine[peer] = mine.get(peer, LinkRule()) + rule
        return total

    @property
    def stalled(self) -> set[str]:
        return set(self._stalls.values())

    def plan(self, reachable: Iterable[str]) -> dict[str, list[FaultOp]]:
        """The operations that bring each reachable replica from held to desired."""
        desired, stalled = self.desired(), self.stalled
        plans: dict[str, list[FaultOp]] = {}
        for me in sorted(set(reachable)):
            ops = _link_ops(self.held.get(me, {}), desired.get(me, {}))
            if me in stalled and me not in self.held_stalled:
                ops.append(Stall())
            elif me not in stalled and me in self.held_stalled:
                ops.append(Unstall())
            if ops:
                plans[me] = ops
        return plans

    def commit(self, replica: str) -> None:
        """Every request :meth:`plan` gave for ``replica`` succeeded."""
        mine = self.desired().get(replica, {})
        if mine:
            self.held[replica] = dict(mine)
        else:
            self.held.pop(replica, None)
        if replica in self.stalled:
            self.held_stalled.add(replica)
        else:
            self.held_stalled.discard(replica)


def _link_ops(held: Mapping[str, LinkRule], desired: Mapping[str, LinkRule]) -> list[FaultOp]:
    heal: list[str] = []
    cuts: dict[tuple[Direction, CutKind], list[str]] = {}
    shapes: dict[tuple[float, float | None, float], list[str]] = {}
    for peer in sorted(set(held) | set(desired)):
        was, want = held.get(peer, LinkRule()), desired.get(peer, LinkRule())
        if was == want:
            continue
        if not want.extends(was):
            heal.append(peer)
            was = LinkRule()
        if want.direction is not None and (want.direction, want.reset) != (was.direction, was.reset):
            cuts.setdefault((want.direction, want.kind), []).append(peer)
        if want.shaped and replace(want, cut_in=False, cut_out=False, reset=False) != replace(
                was, cut_in=False, cut_out=False, reset=False):
            shapes.setdefault((want.delay, want.bandwidth, want.slow), []).append(peer)
    ops: list[FaultOp] = [Heal(tuple(heal))] if heal else []
    ops += [Cut(tuple(peers), d, k) for (d, k), peers in cuts.items()]
    ops += [Shape(tuple(peers), *params) for params, peers in shapes.items()]
    return ops
