"""The process pair of the high-availability modes of Hwang et al. (ICDE 2005, section 2):
which of a node's two replicas is the primary, and when that changes. Pure (STYLE.md 3).

Each node in a process-pair mode (amnesia, passive standby, active standby, upstream backup)
has two replicas. The primary serves downstream; the secondary backs it up (by the mode's
means) and answers downstream's heartbeats with every output stream STANDBY, which the
upstream chooser never picks (node/streams/upstream.py). Each replica sends its partner
keep-alives (the paper's: every 100 ms, failed after 3 unanswered; the runtime feeds a
:class:`~node.streams.upstream.HeartbeatTracker`), and each answer says the partner's role.

Rules, one per event (:func:`start`, :func:`heard`, :func:`silent`):

* **Start.** A fresh start takes the config's order: the first replica is the primary. A
  restart after a crash (``--recover``) is a secondary: its partner served, or will take
  over, meanwhile (the paper: "once a failed node comes back to life, it assumes the role
  of the secondary").
* **Take-over.** A secondary whose partner is declared failed becomes the primary.
* **Both secondaries** (a primary restarted and rejoined before its partner noticed the
  crash; neither serves): the one that holds state serves at once, one that started
  without state (``recovered``, until :func:`holds_state`) waits ``patience`` answers for
  the partner to take over, and then the lower rank serves. A replica cannot see whether
  its partner holds state, and the restarted one must not win by rank: in passive standby
  its partner holds the checkpoints (``dpc simulate`` seed 420: a replica restarted
  within the detection time took over empty, by rank, and lost what its partner held).
* **Both primaries** (a partition between the two healed, or a stalled primary resumed;
  the paper leaves partitions out): one that serves without state steps down at once,
  else the higher rank after ``patience`` answers. Downstream moves between them by ids.
* **Silence** makes a secondary take over, unless it holds no state in a mode that needs
  it (passive standby, upstream backup): then it is the one cut off, one failure at a
  time, and it waits.

A takeover or a step-down is an action for the runtime (:class:`TakeOver`, :class:`StepDown`);
what the new role does (replay, flush a log, resubscribe upstream) is the mode's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

__all__ = ["Pair", "Role", "StepDown", "TakeOver", "heard", "holds_state", "silent", "start"]


class Role(Enum):
    PRIMARY = "primary"
    SECONDARY = "secondary"


@dataclass(frozen=True, slots=True)
class TakeOver:
    """Become the primary, and why."""

    reason: str


@dataclass(frozen=True, slots=True)
class StepDown:
    """Become the secondary, and why."""

    reason: str


Action = TakeOver | StepDown


@dataclass(frozen=True, slots=True)
class Pair:
    """One replica's view of its pair: its role, its rank (0: the config's first replica),
    its partner's name, whether it started without state and holds none yet
    (``recovered``), and how many answers in a row found the partner a secondary too
    (``waited``, against ``patience``)."""

    me: str
    partner: str
    rank: int
    role: Role
    recovered: bool = False
    waited: int = 0
    patience: int = 4
    #: Passive standby, upstream backup: serving needs state from the partner (a
    #: checkpoint), so a stateless secondary does not take over on silence alone.
    needs_state: bool = False


def start(me: str, partner: str, rank: int, *, recovered: bool, patience: int = 4,
          needs_state: bool = False) -> Pair:
    """The role a replica starts in (module docstring); ``patience``: the keep-alive
    answers a stateless replica waits for its partner to settle a conflict (misses + 1);
    ``needs_state``: the mode serves from its partner's checkpoints."""
    if rank not in (0, 1):
        raise ValueError(f"{me}: a process pair has ranks 0 and 1, not {rank}")
    primary = rank == 0 and not recovered
    return Pair(me, partner, rank, Role.PRIMARY if primary else Role.SECONDARY,
                recovered=recovered, patience=patience, needs_state=needs_state)


def holds_state(p: Pair) -> Pair:
    """The replica now holds its node's state (a copy of its partner's, a checkpoint)."""
    return replace(p, recovered=False) if p.recovered else p


def heard(p: Pair, partner_role: Role) -> tuple[Pair, list[Action]]:
    """The partner answered a keep-alive, in ``partner_role``."""
    if partner_role is not p.role:
        return (replace(p, waited=0) if p.waited else p), []
    if p.role is Role.SECONDARY:
        if not p.recovered:
            return replace(p, role=Role.PRIMARY, waited=0), [
                TakeOver(f"{p.partner} is a secondary too: this one holds the state, it serves")]
        waited = p.waited + 1
        if p.rank == 0 and waited >= p.patience:
            return replace(p, role=Role.PRIMARY, waited=0), [
                TakeOver(f"{p.partner} is a secondary too and did not take over: the lower "
                         "rank serves")]
        return replace(p, waited=waited), []
    if p.recovered:  # it serves without state (it took over when it could not do better)
        return replace(p, role=Role.SECONDARY, waited=0), [
            StepDown(f"{p.partner} is a primary too and this one holds no state")]
    waited = p.waited + 1
    if p.rank == 1 and waited >= p.patience:
        return replace(p, role=Role.SECONDARY, waited=0), [
            StepDown(f"{p.partner} is a primary too: the higher rank steps down")]
    return replace(p, waited=waited), []


def silent(p: Pair) -> tuple[Pair, list[Action]]:
    """The partner missed more keep-alives than allowed: declared failed. A stateless
    secondary of a mode that needs state does not take over: under one failure at a time
    its partner is alive and it is the one cut off (``dpc simulate``: a restarted replica
    isolated before its first checkpoint took over empty and served a gap)."""
    if p.role is Role.PRIMARY or (p.recovered and p.needs_state):
        return p, []
    return replace(p, role=Role.PRIMARY), [TakeOver(f"{p.partner} failed: taking over")]
