"""When each fault of a schedule starts and heals: the one timeline that ``dpc run``
(runner.py, on the wall clock) and ``dpc simulate`` (simulate.py, on virtual time) play.

Role: the rules of playing a schedule, in one place, so that a seed that fails in the
simulation replays the same way on real processes.

* A fault starts at its ``at`` (seconds after schedule time 0) and heals ``for`` seconds
  after it was *injected*; heals come before starts at one time.
* A kill or pause waits while it would leave a node with no replica holding a state
  (:func:`blocked`), looked at again every ``RETRY`` seconds, for at most
  ``BLOCKED_LIMIT`` seconds (then the player reports it as not injected). DPC tolerates
  n - 1 simultaneous failures of a node's n replicas (paper section 2), and a restarted
  replica is still failed until it has rebuilt its state from a partner's and rejoined
  (node/replica/recovery.py): killing its partner meanwhile would fail the whole node for good,
  since neither replica would have a state to give the other. "Both replicas of a node in
  turn" is therefore one after the other has recovered. Not so for a replica that
  recovers from its own disk (``checkpointing = "cec"``, node/replica/cec.py: its
  :func:`recovers_alone`): it may be killed whatever its partners do, all at once.

Invariants: the timeline is a pure data structure (the players own the clock and the
cluster); a fault is started at most once and healed once, after it started.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Mapping, Sequence

from node.config.model import ClusterConfig
from ops_scripts.harness.schedule import Fault

__all__ = ["BLOCKED_LIMIT", "RETRY", "Timeline", "blocked", "recovers_alone"]

RETRY = 0.25  # seconds between two looks at a blocked fault
BLOCKED_LIMIT = 60.0  # seconds a kill or pause may wait for a partner with a state

_HEAL, _START = 0, 1  # heals before starts at one time


def recovers_alone(config: ClusterConfig) -> frozenset[str]:
    """The replicas that recover from their own CEC log, needing no partner."""
    return frozenset(r.name for n in config.nodes.values() if n.settings.checkpointing == "cec"
                     and n.settings.fault_tolerance for r in n.replicas)


def blocked(fault: Fault, node_of: Mapping[str, str], down: Mapping[str, str],
            state_of: Callable[[str], str | None],
            alone: Collection[str] = ()) -> str | None:
    """Why ``fault`` must wait, if it must: a kill or pause of a process that is still
    down (an earlier kill or pause of it was held up), or of a replica while no other
    replica of its node is up with a state (every other one down or RECOVERING).

    ``node_of`` maps each replica to its node, ``down`` each process killed or paused to
    "killed" / "paused", ``state_of`` gives a live replica's state (None: it does not
    answer), and ``alone`` names the replicas that :func:`recovers_alone`."""
    if fault.kind not in ("kill", "pause"):
        return None
    me = fault.params["process"]
    if me in down:  # a kill or pause that started late may outlast its schedule
        return f"{me} is still {down[me]}"
    if me not in node_of or me in alone:
        return None
    partners = [r for r, n in node_of.items() if n == node_of[me] and r != me]
    if not partners:  # a restart recovers from a partner's state (node/replica/recovery.py)
        return f"{me} is the only replica of its node: it could not recover"
    why = []
    for r in partners:
        if r in down:
            why.append(f"{r} is {down[r]}")
            continue
        state = state_of(r)
        if state is not None and state != "RECOVERING":
            return None
        why.append(f"{r} is {'unreachable' if state is None else 'RECOVERING'}")
    return "; ".join(why) + f": {me} is the last replica of its node with a state"


class Timeline:
    """The pending starts and heals of ``faults``, in the order they are due (times in
    seconds after schedule time 0)."""

    def __init__(self, faults: Sequence[Fault]) -> None:
        self.faults = list(faults)
        self._due: list[tuple[float, int, int]] = [(f.at, _START, i)
                                                   for i, f in enumerate(self.faults)]
        heapq.heapify(self._due)

    def __bool__(self) -> bool:
        return bool(self._due)

    def next(self) -> tuple[float, int, str]:
        """The next thing due: (its time, fault id, "fault" or "heal")."""
        at, what, fid = heapq.heappop(self._due)
        return at, fid, "heal" if what == _HEAL else "fault"

    def wait(self, fid: int, now: float) -> bool:
        """Fault ``fid`` is blocked at ``now``: look at it again ``RETRY`` s later; False
        (and dropped) once it has waited ``BLOCKED_LIMIT`` s."""
        if now - self.faults[fid].at >= BLOCKED_LIMIT:
            return False
        heapq.heappush(self._due, (now + RETRY, _START, fid))
        return True

    def injected(self, fid: int, now: float) -> None:
        """Fault ``fid`` was injected at ``now``: its heal is due ``for`` seconds later."""
        heapq.heappush(self._due, (now + self.faults[fid].duration, _HEAL, fid))
