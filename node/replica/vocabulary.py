"""The consistency machine's vocabulary (node/replica/consistency.py): its states, the
node's strategies and a replica's :class:`Policy`, the events the runtime feeds it and the
actions it returns.

Pure data: frozen dataclasses and Enums, no behaviour beyond the policy's own checks. The
machine (``consistency.py``) re-exports every name here, so that the runtime and the tests
speak of ``cm.Tick`` or ``cm.Reconcile`` through one module; what each event means to each
state is the machine's transition table, not this file's.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TypeAlias

from node.errors import ConsistencyError

__all__ = [
    "Action", "AskPermission", "Checkpointing", "EpisodeImminent", "Event", "ForgetReleased",
    "Grant", "Log", "Method", "PartnerAnswered",
    "PartnerUnreachable", "Permission", "PermissionAsked", "Policy", "RecRequest", "Reconcile",
    "ReconciliationProgress", "Refuse", "ResumeNewInput", "SelfGrant", "SendRecDone",
    "SetSUnionMode", "StabilizationStrategy", "State", "SuspendNewInput", "TakeCheckpoint",
    "Tick", "UpFailure", "UpFailureStrategy",
]


class State(Enum):
    STABLE = "STABLE"
    UP_FAILURE = "UP_FAILURE"
    STABILIZATION = "STABILIZATION"


class UpFailureStrategy(Enum):
    """New tuples during UP_FAILURE. The values are SUnion's ``mode`` parameter."""

    DELAY = "delay"
    PROCESS = "process"


class StabilizationStrategy(Enum):
    """New tuples while reconciling: held (SUSPEND), or served by a partner that delays or
    processes them (the partner's SUnion mode)."""

    SUSPEND = "suspend"
    DELAY = "delay"
    PROCESS = "process"


class Method(Enum):
    CHECKPOINT = "checkpoint"  # restore the last checkpoint, replay SUnions' buffered input
    UNDO = "undo"  # UNDO_START into the SUnions: operators rebuild from their input logs


class Checkpointing(Enum):
    """When a replica checkpoints for checkpoint/redo.

    PERIODIC: every ``checkpoint_interval`` in STABLE (the paper's runs). ON_FAILURE: once,
    right before the network call that may release a failure episode's first tentative
    bucket (``EpisodeImminent``): the paper's "checkpoint when entering UP_FAILURE", at the
    end of the alpha*X wait rather than its start, which is the same state (nothing was
    released meanwhile but stable buckets, which the redo then replays too). It costs
    nothing while no failure happens, and a redo replays the failure only (no half
    interval of stable input before it)."""

    PERIODIC = "periodic"
    ON_FAILURE = "on_failure"
    #: Fault tolerance off (``fault_tolerance = false``): no checkpoint ever; the SUnions
    #: forget as with ON_FAILURE; a reconciliation fails (the runtime raises).
    OFF = "off"


class Permission(Enum):
    NONE = "none"
    ASKED = "asked"
    REFUSED = "refused"  # the current request was refused; asking again at next_ask_at
    POSTPONED = "postponed"  # we granted a partner and withdrew our request
    GRANTED = "granted"


@dataclass(frozen=True, slots=True)
class Policy:
    """A node's strategy and timing (times in microseconds), this replica's rank, and its
    partners (the names of the node's other replicas)."""

    up_failure: UpFailureStrategy = UpFailureStrategy.PROCESS
    stabilization: StabilizationStrategy = StabilizationStrategy.PROCESS
    method: Method = Method.CHECKPOINT
    checkpointing: Checkpointing = Checkpointing.PERIODIC
    #: PERIODIC: between two checkpoints; ON_FAILURE: between two ``ForgetReleased``.
    checkpoint_interval: int = 200_000
    permission_retry: int = 500_000
    #: How close to now a recovered replica's SUnions must release before it rejoins
    #: (node/replica/recovery.py, step 4).
    catch_up_slack: int = 200_000
    rank: int = 0  # lower outranks higher when two requests cross
    partners: tuple[str, ...] = ()
    #: Requests a partner may leave unanswered in a row and still count: past it (or once a
    #: connection to it was refused) its grant is not needed until it answers again, and
    #: with no partner counting the replica grants itself.
    self_grant_after: int = 3

    def __post_init__(self) -> None:
        # A zero period would tick without end; a zero slack would never let a replica rejoin.
        for key in ("checkpoint_interval", "permission_retry", "catch_up_slack",
                    "self_grant_after"):
            value = getattr(self, key)
            if type(value) is not int or value < 1:
                raise ConsistencyError(f"Policy.{key} must be an int >= 1, got {value!r}")
        if len(set(self.partners)) != len(self.partners):
            raise ConsistencyError(f"Policy.partners must be distinct, got {self.partners!r}")


# ---------------------------------------------------------------------------------- events
@dataclass(frozen=True, slots=True)
class Tick:
    now: int  # at next_deadline(), or any time: an early Tick does nothing


@dataclass(frozen=True, slots=True)
class UpFailure:
    now: int
    sunion: str  # this SUnion signalled UP_FAILURE (it released tentative tuples)


@dataclass(frozen=True, slots=True)
class InputsChanged:
    """The set of this replica's input streams that are *unavailable* changed: no upstream
    replica (or source) of each is alive and STABLE by the heartbeat rule
    (``UpstreamMonitor.cut_off``). ``down`` is the whole set now (empty: all are back)."""

    now: int
    down: frozenset[str]


@dataclass(frozen=True, slots=True)
class EpisodeImminent:
    """The network call about to run at ``now`` may release an SUnion's first tentative
    bucket (``QueryNetwork.episode_may_begin``); fed before it, while the network holds
    only stable data (``MachineState.holds_only_stable``)."""

    now: int


@dataclass(frozen=True, slots=True)
class RecRequest:
    now: int
    sunion: str  # this SUnion signalled REC_REQUEST: every one of its inputs is corrected


@dataclass(frozen=True, slots=True)
class PartnerAnswered:
    now: int
    partner: str
    request: int  # the number of the AskPermission answered
    granted: bool
    reason: str = ""  # why it refused


@dataclass(frozen=True, slots=True)
class PartnerUnreachable:
    now: int
    partner: str  # a request could not even be sent to it


@dataclass(frozen=True, slots=True)
class PermissionAsked:
    now: int
    requester: str
    requester_rank: int
    request: int  # echoed in our Grant / Refuse


@dataclass(frozen=True, slots=True)
class ReconciliationProgress:
    now: int
    caught_up: bool  # the replay is over and every SOutput is past its duplicates


Event: TypeAlias = (
    Tick | InputsChanged | EpisodeImminent | UpFailure | RecRequest | PartnerAnswered
    | PartnerUnreachable | PermissionAsked | ReconciliationProgress
)


# --------------------------------------------------------------------------------- actions
@dataclass(frozen=True, slots=True)
class TakeCheckpoint:
    """Snapshot the network, then truncate every SUnion's kept buckets."""


@dataclass(frozen=True, slots=True)
class ForgetReleased:
    """ON_FAILURE checkpointing, in STABLE: truncate every SUnion's kept buckets without a
    checkpoint. What they hold was released stable, and no episode begins without a
    checkpoint taken after it (``EpisodeImminent``), so no redo will replay it."""


@dataclass(frozen=True, slots=True)
class AskPermission:
    method: Method
    request: int  # every partner is asked; the answers must echo it


@dataclass(frozen=True, slots=True)
class SelfGrant:
    """No partner can answer request ``request`` (``why``): the replica grants it itself.
    The runtime logs it as a warning and counts it; ``Reconcile`` follows."""

    request: int
    why: str


@dataclass(frozen=True, slots=True)
class Reconcile:
    """CHECKPOINT: restore the last checkpoint with ``SUnion.rewind`` / ``SOutput.rewind``
    instead of restore, then ``SUnion.replay``. UNDO: UNDO_START into every SUnion."""

    method: Method


@dataclass(frozen=True, slots=True)
class SendRecDone:
    """``SOutput.end_reconciliation`` on every output stream."""


@dataclass(frozen=True, slots=True)
class Grant:
    requester: str
    request: int


@dataclass(frozen=True, slots=True)
class Refuse:
    requester: str
    request: int
    reason: str


@dataclass(frozen=True, slots=True)
class SuspendNewInput:
    """SUSPEND strategy: hold new input batches until ``ResumeNewInput``."""


@dataclass(frozen=True, slots=True)
class ResumeNewInput:
    """Let held input in again (after the REC_DONEs went out)."""


@dataclass(frozen=True, slots=True)
class SetSUnionMode:
    mode: UpFailureStrategy  # ``mode.value`` is SUnion's ``mode``


@dataclass(frozen=True, slots=True)
class Log:
    message: str


Action: TypeAlias = (
    TakeCheckpoint | ForgetReleased | AskPermission | SelfGrant | Reconcile | SendRecDone | Grant
    | Refuse | SuspendNewInput | ResumeNewInput | SetSUnionMode | Log
)
