"""The fault vocabulary: the operations fault injection at a replica takes, and their wire form.

Role: the one home of *cut*, *shape*, *heal*, *stall* and *unstall*. An operation is plain,
typed data (:class:`Cut`, :class:`Shape`, :class:`Heal`, :class:`Stall`, :class:`Unstall`:
the union :data:`FaultOp`); whoever asks a replica for a fault builds one: ``dpc fault``,
``dpc inject`` and the nemesis of ``dpc run`` (through ``ops_scripts/harness/fault.py``,
over HTTP), the harness's model of the rules in force (``ops_scripts/harness/rules.py``) and
the simulation (``ops_scripts/harness/simulate.py``, in-process). All of them hand the
replica the same thing: :meth:`to_body`, the JSON body of its ``POST /fault``, which the
replica reads back with :func:`from_body` and applies (``Replica.apply_fault``). So the
simulation exercises exactly what ``dpc run`` sends.

The bodies (what ``to_body`` writes and ``from_body`` reads; one operation per body)::

    {"cut": [names], "direction": "both"|"in"|"out", "kind": "blackhole"|"reset"}
    {"shape": [names], "delay": s, "bandwidth": bytes_per_s, "slow": s}
    {"heal": [names]}  or  {"heal": "all"}
    {"stall": "replay"}  /  {"unstall": "replay"}

* a cut replaces the cut rules of those processes (direction and kind optional: "both",
  "blackhole"; a reset cuts both ways); what each does: ``node/faults/rules.py``;
* a shape replaces their shapes (each field optional, at least one in effect; what they
  mean: ``node/faults/shaping.py``);
* a heal removes their cuts and shapes; "all" removes every cut and shape and ends a stall;
* a stall holds the replica's reconciliations between two replay steps until an unstall
  or a heal of "all".

Invariants:

* ``to_body`` leaves the defaults unsaid (a cut both ways as a blackhole is plain
  ``{"cut": [names]}``, a shape names only the fields in effect); ``from_body`` reads them
  back: ``from_body(op.to_body(), ...) == op`` for every operation a replica takes.
* :func:`from_body` refuses a bad body with an :class:`~node.errors.ActionError` (the control
  plane's 400) naming what was wrong: no single operation, an unknown key, names that are
  not a list of strings, a process not in ``known``, a bad direction, kind or shape value.
  The checks of values are the ones :class:`~node.faults.rules.Faults` makes
  (:func:`checked_cut`, :meth:`~node.faults.shaping.LinkShape.checked`), with the same
  messages.
* Building an operation checks nothing: a replica checks what it reads (``from_body``), so
  what the harness builds is judged exactly as what a user sends.
* Nothing here does I/O or changes a replica: reading a body never applies it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from node.errors import ActionError, NodeError
from node.faults.shaping import LinkShape

__all__ = [
    "USAGE",
    "Cut",
    "CutKind",
    "Direction",
    "FaultOp",
    "Heal",
    "Shape",
    "Stall",
    "Unstall",
    "checked_cut",
    "from_body",
]


class Direction(Enum):
    """Which messages a blackhole cut drops, seen from the process that makes it."""

    BOTH = "both"
    IN = "in"  # from the peer
    OUT = "out"  # to the peer


class CutKind(Enum):
    BLACKHOLE = "blackhole"  # silence; connections stay open
    RESET = "reset"  # connections torn down, connects refused


_E = TypeVar("_E", bound=Enum)


def _choice(enum: type[_E], value: Any, key: str, action: str) -> _E:
    if isinstance(value, enum):
        return value
    try:
        return enum(value)
    except ValueError:
        allowed = ", ".join(repr(e.value) for e in enum)
        raise NodeError(f"cannot {action}: {key} must be one of {allowed}, got {value!r}") from None


def checked_cut(direction: Any, kind: Any, action: str) -> tuple[Direction, CutKind]:
    """A cut's direction and kind from untrusted values (an enum member or its value);
    raises :class:`~node.errors.NodeError` ("cannot ``action``: ...") for an unknown one,
    or a reset that is not both ways."""
    way, how = _choice(Direction, direction, "direction", action), _choice(CutKind, kind, "kind", action)
    if how is CutKind.RESET and way is not Direction.BOTH:
        raise NodeError(
            f"cannot {action}: a reset cuts both ways, so kind 'reset' takes direction "
            f"'both', got {way.value!r}"
        )
    return way, how


@dataclass(frozen=True, slots=True)
class Cut:
    """Cut the replica from ``peers`` (replacing their cut rules) until healed."""

    peers: tuple[str, ...]
    direction: Direction = Direction.BOTH
    kind: CutKind = CutKind.BLACKHOLE

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"cut": list(self.peers)}
        if self.direction is not Direction.BOTH:
            body["direction"] = self.direction.value
        if self.kind is not CutKind.BLACKHOLE:
            body["kind"] = self.kind.value
        return body


@dataclass(frozen=True, slots=True)
class Shape:
    """Shape the links between the replica and ``peers`` (replacing their shapes):
    ``delay`` seconds of one-way latency, at most ``bandwidth`` bytes/s each way (``None``:
    unlimited), one read of their messages per ``slow`` seconds at most."""

    peers: tuple[str, ...]
    delay: float = 0.0
    bandwidth: float | None = None
    slow: float = 0.0

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"shape": list(self.peers)}
        if self.delay:
            body["delay"] = self.delay
        if self.bandwidth is not None:
            body["bandwidth"] = self.bandwidth
        if self.slow:
            body["slow"] = self.slow
        return body


@dataclass(frozen=True, slots=True)
class Heal:
    """Remove the cuts and shapes of ``peers`` at the replica (``None``: of everyone, and
    end a stall)."""

    peers: tuple[str, ...] | None = None

    def to_body(self) -> dict[str, Any]:
        return {"heal": "all" if self.peers is None else list(self.peers)}


@dataclass(frozen=True, slots=True)
class Stall:
    """Hold the replica's reconciliations between two replay steps (until :class:`Unstall`
    or a heal of all)."""

    def to_body(self) -> dict[str, Any]:
        return {"stall": "replay"}


@dataclass(frozen=True, slots=True)
class Unstall:
    """Let the replica's reconciliations go on."""

    def to_body(self) -> dict[str, Any]:
        return {"unstall": "replay"}


FaultOp = Cut | Shape | Heal | Stall | Unstall

USAGE = ('send {"cut": [names]} (optional "direction": "both"|"in"|"out", "kind": '
         '"blackhole"|"reset"), {"shape": [names], "delay": s, "bandwidth": '
         'bytes_per_s, "slow": s}, {"heal": [names] | "all"} or {"stall": "replay"} / '
         '{"unstall": "replay"}')
# Each operation's key in a body, and the other keys it takes.
_OPTIONS: dict[str, set[str]] = {
    "cut": {"direction", "kind"},
    "shape": {"delay", "bandwidth", "slow"},
    "heal": set(),
    "stall": set(),
    "unstall": set(),
}


def from_body(body: Mapping[str, Any], *, owner: str,
              known: Collection[str] | None = None) -> FaultOp:
    """The operation of a ``POST /fault`` body, as replica ``owner`` reads it: the names it
    gives must be among ``known`` (``None``: any name). Raises :class:`ActionError` naming
    what is wrong (the module docstring); refusals of a value name ``owner``, as ``Faults``
    does (``cannot cut 'n1a': ...``)."""
    actions = [key for key in body if key in _OPTIONS]
    if len(actions) != 1:
        raise ActionError(USAGE)
    action = actions[0]
    extra = sorted(set(body) - _OPTIONS[action] - {action})
    if extra:
        allowed = sorted(_OPTIONS[action]) or "nothing else"
        raise ActionError(f"unknown key(s) {extra} with {action!r}: it takes {allowed}; {USAGE}")
    if action in ("stall", "unstall"):
        if body[action] != "replay":
            raise ActionError('send {"stall": "replay"} or {"unstall": "replay"}')
        return Stall() if action == "stall" else Unstall()
    if action == "heal" and body["heal"] == "all":
        return Heal()
    names = body[action]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ActionError(f"{action!r}: the names must be a list of process names, got {names!r}")
    if known is not None:
        unknown = sorted(set(names) - set(known))
        if unknown:
            raise ActionError(f"unknown process(es) {unknown}; known: {sorted(known)}")
    peers = tuple(names)
    try:
        if action == "cut":
            direction, kind = checked_cut(body.get("direction", Direction.BOTH.value),
                                          body.get("kind", CutKind.BLACKHOLE.value),
                                          f"cut {owner!r}")
            return Cut(peers, direction, kind)
        if action == "shape":
            shape = LinkShape.checked(delay=body.get("delay", 0.0), bandwidth=body.get("bandwidth"),
                                      slow=body.get("slow", 0.0), action=f"shape {owner!r}")
            return Shape(peers, shape.delay, shape.bandwidth, shape.slow)
    except NodeError as exc:  # a bad value: the control plane's 400, with the same words
        raise ActionError(str(exc)) from None
    return Heal(peers)
