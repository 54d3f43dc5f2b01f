"""The consistency manager of one replica: DPC's STABLE / UP_FAILURE / STABILIZATION machine.

Role (paper sections 3-4, DESIGN.md section 4, STYLE.md rule 3): every fault-tolerance
decision of a replica is made here, by one pure function, ``step(machine, event) ->
(machine, actions)``, over one transition table. Sans-IO: no asyncio, no clock. ``now``
(microseconds, the unit of tuple time) rides on every event; timers are the deadline that
:func:`next_deadline` returns, at which the runtime feeds ``Tick(now)``. The runtime turns
SUnion signals, replay progress and partner messages into events, and performs the actions
in list order, synchronously (no input is processed between two actions of one step).

Theory of operation
-------------------
*STABLE.* A checkpoint every ``checkpoint_interval`` (200 ms), only here, and one at once on
entering STABLE (the first ``Tick`` after :func:`start` takes checkpoint 0, so that
checkpoint/redo always has a pre-failure state). None is taken on entering UP_FAILURE: SUnion
signals UP_FAILURE in the same call that released the first tentative bucket, so the network
already holds tentative state then; a checkpoint of it would restore the failure, not undo
it. (The paper's "checkpoint when going into UP_FAILURE" means at the *start* of the alpha*X
wait, for which SUnion has no signal; the 200 ms checkpoints cover it, as in the paper's runs.)

*UP_FAILURE.* SUnion delays or processes (``SetSUnionMode``). Once every input is corrected
(``RecRequest``) the replica must reconcile. With STABILIZATION strategy SUSPEND it needs no
partner: it suspends new input and reconciles at once. Otherwise a partner replica must keep
serving fresh data meanwhile, so it asks permission (``AskPermission``, numbered), again
every ``permission_retry`` (500 ms) until a grant to its current *epoch* arrives.

*Permission.* Asked by a partner, a replica refuses while it reconciles, and refuses while
its own request is pending if it outranks the requester: the LOWER ``rank`` wins (rank = the
replica's index in the node's config). Otherwise it grants; granting is a promise to
postpone its own reconciliation, so a pending request of its own is withdrawn: its epoch ends
and a grant still in flight to it is stale (ignored), and it asks afresh one retry later.
While postponing in UP_FAILURE it is the replica downstream reads fresh data from, so its
SUnion runs in the STABILIZATION strategy's mode (the paper's "second version").

Why two replicas never reconcile at once (DELAY and PROCESS). Say A reconciles from rA on
B's grant sent at tB, which answers a request of A's epoch begun at sA (sA < tB < rA); and B
from rB on A's grant sent at tA (sB < tA < rB). A replica grants nothing while it reconciles,
nor while an epoch of its own is live (a grant ends it), so tA is not in [sA, rA] and tB is
not in [sB, rB]. If tA < sA, then sB < tA < sA < tB, so tB > rB: B's reconciliation was over
at tB, before A's began at rA > tB. If tA > rA, A's was over at tA, before B's began at
rB > tA. Rank plays no part in safety; it lets one of two crossed requests win.

*STABILIZATION.* ``Reconcile(method)``: checkpoint/redo (restore + SUnion.rewind/replay,
SOutput.rewind) or undo/redo (UNDO_START into the SUnions). It ends when the runtime reports
``ReconciliationProgress`` with every expected REC_DONE in and the current bucket less than
``catch_up_slack`` (200 ms) behind (:func:`is_caught_up`): ``SendRecDone`` (every SOutput's
``end_reconciliation``), then STABLE, or UP_FAILURE if a failure began meanwhile (SOutput
forces that REC_DONE itself if the first new tentative tuple comes first). A REC_REQUEST
arriving meanwhile (that new failure already healed) is kept and served on the way out.

Invariants
----------
* Checkpoints only in STABLE; ``Reconcile`` only on entering STABILIZATION; ``SendRecDone``
  only on leaving it. Without SUSPEND, two replicas of a node never both reconcile.
* ``step`` is pure and total over the table; an event absent from the table for the current
  state raises :class:`ConsistencyError` naming both (a runtime bug, never a peer's doing).
* Never stuck: in STABLE, and in UP_FAILURE while a reconciliation awaits permission,
  :func:`next_deadline` is not None. (STABILIZATION waits on the runtime's own replay, which
  reports ``ReconciliationProgress`` after every batch or timer it pushes.)

The runtime's side: with several SUnions it sends one ``RecRequest`` once all of them
signalled; with several partners it grants only when all granted. A node with no reachable
partner cannot be answered, so the runtime grants itself (the machine never times out).

Transition table (no arrow: the state stays; a pair not listed raises)::

  state          event                 guard                         actions -> next
  STABLE         Tick                  checkpoint due                TakeCheckpoint
  STABLE         UpFailure                                           -> UP_FAILURE
  STABLE         InputsStable                                        (none)
  STABLE         PermissionAsked                                     Grant
  STABLE         Granted / Refused                                   Log (stale)
  UP_FAILURE     Tick                  request pending, retry due    AskPermission
  UP_FAILURE     UpFailure                                           (none: same failure)
  UP_FAILURE     RecRequest            SUSPEND                       SuspendNewInput,
                                                                     Reconcile -> STABILIZATION
  UP_FAILURE     RecRequest            otherwise, first one          AskPermission
  UP_FAILURE     PermissionGranted     current epoch (else stale)    Reconcile -> STABILIZATION
  UP_FAILURE     PermissionRefused     current epoch (else stale)    Log
  UP_FAILURE     PermissionAsked       pending and we outrank        Refuse
  UP_FAILURE     PermissionAsked       otherwise                     Grant (withdraw ours)
  UP_FAILURE     InputsStable          no RecRequest (else raise)    -> STABLE
  STABILIZATION  Tick                                                (none)
  STABILIZATION  UpFailure, NewFailureDuringStabilization            Log (remember)
  STABILIZATION  RecRequest                                          (remember)
  STABILIZATION  ReconciliationProgress caught up, no REC_DONE due   SendRecDone [ResumeNewInput]
                                                                     -> STABLE | UP_FAILURE
  STABILIZATION  PermissionAsked                                     Refuse
  STABILIZATION  Granted / Refused                                   Log (stale)

After each step, ``SetSUnionMode`` is added whenever the wanted SUnion mode changed.

Over 400 lines: this docstring (table, theory, proof) and the one-field event and action
classes take half; the decisions themselves are the ~200 lines from ``start`` down.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from types import MappingProxyType
from typing import Any, TypeAlias

from node.errors import ConsistencyError

__all__ = [
    "TRANSITIONS", "Action", "AskPermission", "Event", "Grant",
    "InputsStable", "Log", "MachineState", "Method", "NewFailureDuringStabilization",
    "Permission", "PermissionAsked", "PermissionGranted", "PermissionRefused", "Policy",
    "RecRequest", "Reconcile", "ReconciliationProgress", "Refuse", "ResumeNewInput",
    "SendRecDone", "SetSUnionMode", "StabilizationStrategy", "State", "SuspendNewInput",
    "TakeCheckpoint", "Tick", "UpFailure", "UpFailureStrategy", "is_caught_up",
    "next_deadline", "start", "step",
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


class Permission(Enum):
    NONE = "none"
    ASKED = "asked"
    REFUSED = "refused"  # the current request was refused; asking again at next_ask_at
    POSTPONED = "postponed"  # we granted a partner and withdrew our request
    GRANTED = "granted"


@dataclass(frozen=True, slots=True)
class Policy:
    """A node's strategy and timing (times in microseconds), and this replica's rank."""

    up_failure: UpFailureStrategy = UpFailureStrategy.PROCESS
    stabilization: StabilizationStrategy = StabilizationStrategy.PROCESS
    method: Method = Method.CHECKPOINT
    checkpoint_interval: int = 200_000
    permission_retry: int = 500_000
    catch_up_slack: int = 200_000
    rank: int = 0  # lower outranks higher when two requests cross

    def __post_init__(self) -> None:
        # A zero period would tick without end; a zero slack would never let a replay end.
        for key in ("checkpoint_interval", "permission_retry", "catch_up_slack"):
            value = getattr(self, key)
            if type(value) is not int or value < 1:
                raise ConsistencyError(f"Policy.{key} must be an int >= 1 (us), got {value!r}")


def is_caught_up(policy: Policy, behind: int) -> bool:
    """The paper's catch-up rule: the current bucket is less than ``catch_up_slack`` behind."""
    return behind < policy.catch_up_slack


# ---------------------------------------------------------------------------------- events
@dataclass(frozen=True, slots=True)
class Tick:
    now: int  # at next_deadline(), or any time: an early Tick does nothing


@dataclass(frozen=True, slots=True)
class UpFailure:
    now: int  # an SUnion signalled UP_FAILURE (it released tentative tuples)


@dataclass(frozen=True, slots=True)
class RecRequest:
    now: int  # every input corrected: REC_REQUEST from the SUnion(s) of the episode


@dataclass(frozen=True, slots=True)
class PermissionGranted:
    now: int
    request: int  # the number of the AskPermission answered


@dataclass(frozen=True, slots=True)
class PermissionRefused:
    now: int
    reason: str
    request: int


@dataclass(frozen=True, slots=True)
class PermissionAsked:
    now: int
    requester: str
    requester_rank: int
    request: int  # echoed in our Grant / Refuse


@dataclass(frozen=True, slots=True)
class ReconciliationProgress:
    now: int
    caught_up: bool  # is_caught_up(), and every SOutput is past its duplicates
    rec_dones_pending: int  # REC_DONEs still expected on corrected inputs


@dataclass(frozen=True, slots=True)
class NewFailureDuringStabilization:
    now: int  # e.g. the HA monitor saw an upstream fail again while we replay


@dataclass(frozen=True, slots=True)
class InputsStable:
    now: int  # every input STABLE again, nothing tentative produced: nothing to reconcile


Event: TypeAlias = (
    Tick | UpFailure | RecRequest | PermissionGranted | PermissionRefused | PermissionAsked
    | ReconciliationProgress | NewFailureDuringStabilization | InputsStable
)


# --------------------------------------------------------------------------------- actions
@dataclass(frozen=True, slots=True)
class TakeCheckpoint:
    """Snapshot the network, then ``SUnion.truncate()`` every SUnion."""


@dataclass(frozen=True, slots=True)
class AskPermission:
    method: Method
    request: int  # the answer must echo it


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
    TakeCheckpoint | AskPermission | Reconcile | SendRecDone | Grant | Refuse
    | SuspendNewInput | ResumeNewInput | SetSUnionMode | Log
)


# ---------------------------------------------------------------------------- the machine
@dataclass(frozen=True, slots=True)
class MachineState:
    """All a replica's consistency manager knows: plain data (``/status`` can show it)."""

    policy: Policy
    state: State
    since: int  # when ``state`` was entered
    sunion_mode: UpFailureStrategy  # the mode last set on the SUnions
    last_checkpoint_at: int | None = None  # None: one is due at once
    permission: Permission = Permission.NONE
    asked_at: int | None = None  # our latest AskPermission
    next_ask_at: int | None = None  # when to ask (again), while a reconciliation awaits one
    request: int = 0  # number of our latest AskPermission
    epoch: int = 1  # first request of the current epoch; > request: none is pending
    rec_request: bool = False  # a REC_REQUEST not yet served by a Reconcile
    new_failure: bool = False  # in STABILIZATION: a failure began meanwhile
    postponing: bool = False  # in UP_FAILURE: we granted a partner its reconciliation
    checkpoints: int = 0
    reconciliations: int = 0
    refusals: int = 0  # refusals of our requests

    @property
    def reconciling(self) -> bool:
        return self.state is State.STABILIZATION

    @property
    def request_pending(self) -> bool:
        """Our request is out and neither answered by a grant nor withdrawn."""
        return self.epoch <= self.request


Step: TypeAlias = tuple[MachineState, list[Action]]


def start(policy: Policy, now: int) -> Step:
    """A replica's machine at start-up, and the SUnion mode its policy wants."""
    m = MachineState(policy, State.STABLE, now, policy.up_failure)
    return m, [SetSUnionMode(policy.up_failure)]


def next_deadline(m: MachineState) -> int | None:
    """When the runtime must feed ``Tick``; None while only events can move the machine."""
    if m.state is State.STABLE:
        last = m.last_checkpoint_at
        return m.since if last is None else last + m.policy.checkpoint_interval
    if m.state is State.UP_FAILURE:
        return m.next_ask_at
    return None


def _enter(m: MachineState, state: State, now: int, why: str) -> Step:
    """Leave ``m.state`` for ``state``: any pending request is over (its grants go stale)."""
    old = m.state
    m = replace(
        m, state=state, since=now, permission=Permission.NONE, next_ask_at=None,
        epoch=m.request + 1, new_failure=False, postponing=False,
        # A REC_REQUEST kept during STABILIZATION is served in the UP_FAILURE that follows.
        rec_request=m.rec_request and state is State.UP_FAILURE,
        last_checkpoint_at=None if state is State.STABLE else m.last_checkpoint_at,
    )
    return m, [Log(f"{old.name} -> {state.name}: {why}")]


def _ask(m: MachineState, now: int) -> Step:
    request = m.request + 1  # after a withdrawal epoch == request: a new epoch begins
    m = replace(m, request=request, permission=Permission.ASKED, asked_at=now,
                next_ask_at=now + m.policy.permission_retry)
    return m, [AskPermission(m.policy.method, request)]


def _reconcile(m: MachineState, now: int, why: str) -> Step:
    suspend = m.policy.stabilization is StabilizationStrategy.SUSPEND
    m, actions = _enter(m, State.STABILIZATION, now, why)
    m = replace(m, reconciliations=m.reconciliations + 1,
                permission=Permission.NONE if suspend else Permission.GRANTED)
    return m, [*actions, *([SuspendNewInput()] if suspend else []), Reconcile(m.policy.method)]


def _serve_rec_request(m: MachineState, now: int) -> Step:
    if m.policy.stabilization is StabilizationStrategy.SUSPEND:
        return _reconcile(m, now, "inputs corrected; SUSPEND needs no partner's permission")
    return _ask(m, now)


def _in_epoch(m: MachineState, request: int) -> bool:
    return m.epoch <= request <= m.request


# ------------------------------------------------------------------------------- handlers
def _nothing(m: MachineState, e: Any) -> Step:
    return m, []


def _stale(m: MachineState, e: PermissionGranted | PermissionRefused) -> Step:
    what = "grant" if isinstance(e, PermissionGranted) else "refusal"
    return m, [Log(f"ignored a stale {what} of request {e.request} in {m.state.name}")]


def _checkpoint_if_due(m: MachineState, e: Tick) -> Step:
    last = m.last_checkpoint_at
    if last is not None and e.now < last + m.policy.checkpoint_interval:
        return m, []
    return replace(m, last_checkpoint_at=e.now, checkpoints=m.checkpoints + 1), [TakeCheckpoint()]


def _fail(m: MachineState, e: UpFailure) -> Step:
    return _enter(m, State.UP_FAILURE, e.now, "an SUnion released tentative tuples")


def _answer(m: MachineState, e: PermissionAsked) -> Step:
    me = m.policy.rank
    if e.requester_rank == me:
        raise ConsistencyError(f"replica {e.requester!r} asks permission with our own rank {me}:"
                               " ranks of one node's replicas must differ")
    if m.state is State.STABILIZATION:
        return m, [Refuse(e.requester, e.request, "reconciling")]
    if m.request_pending and me < e.requester_rank:
        return m, [Refuse(e.requester, e.request, f"own request pending, rank {me} outranks "
                                                  f"{e.requester_rank}")]
    actions: list[Action] = [Grant(e.requester, e.request)]
    if m.request_pending:  # postpone ours: its grants now in flight must not count
        m = replace(m, epoch=m.request + 1, permission=Permission.POSTPONED,
                    next_ask_at=e.now + m.policy.permission_retry)
        actions.append(Log(f"postponed request {m.request} for {e.requester!r}"))
    return replace(m, postponing=m.postponing or m.state is State.UP_FAILURE), actions


def _retry_if_due(m: MachineState, e: Tick) -> Step:
    if m.next_ask_at is None or e.now < m.next_ask_at:
        return m, []
    return _ask(m, e.now)


def _corrected(m: MachineState, e: RecRequest) -> Step:
    if m.rec_request:
        return m, []  # already served or awaiting permission
    return _serve_rec_request(replace(m, rec_request=True), e.now)


def _granted(m: MachineState, e: PermissionGranted) -> Step:
    if not _in_epoch(m, e.request):
        return _stale(m, e)
    return _reconcile(m, e.now, f"partner granted request {e.request}")


def _refused(m: MachineState, e: PermissionRefused) -> Step:
    if not _in_epoch(m, e.request):
        return _stale(m, e)
    m = replace(m, permission=Permission.REFUSED, refusals=m.refusals + 1)
    return m, [Log(f"request {e.request} refused ({e.reason}); asking again at {m.next_ask_at}")]


def _healed(m: MachineState, e: InputsStable) -> Step:
    if m.rec_request:
        raise ConsistencyError("InputsStable in UP_FAILURE after a RecRequest: tentative "
                               "output was produced and must be reconciled first")
    return _enter(m, State.STABLE, e.now, "inputs stable again, nothing to reconcile")


def _new_failure(m: MachineState, e: UpFailure | NewFailureDuringStabilization) -> Step:
    if m.new_failure:
        return m, []
    return replace(m, new_failure=True), [Log("a new failure began during stabilization")]


def _corrected_meanwhile(m: MachineState, e: RecRequest) -> Step:
    return replace(m, rec_request=True, new_failure=True), []  # implies a failure episode


def _progress(m: MachineState, e: ReconciliationProgress) -> Step:
    if e.rec_dones_pending < 0:
        raise ConsistencyError(f"ReconciliationProgress.rec_dones_pending must be >= 0, "
                               f"got {e.rec_dones_pending}")
    if not e.caught_up or e.rec_dones_pending:
        return m, []
    done: list[Action] = [SendRecDone()]  # before any new input is let in
    if m.policy.stabilization is StabilizationStrategy.SUSPEND:
        done.append(ResumeNewInput())
    if not (m.new_failure or m.rec_request):
        m, actions = _enter(m, State.STABLE, e.now, "reconciled and caught up")
        return m, done + actions
    m, actions = _enter(m, State.UP_FAILURE, e.now, "reconciled; a new failure is under way")
    done += actions
    if m.rec_request:
        m, actions = _serve_rec_request(m, e.now)
        done += actions
    return m, done


# ------------------------------------------------------------------------------ the table
_S, _U, _Z = State.STABLE, State.UP_FAILURE, State.STABILIZATION
Handler: TypeAlias = Callable[[MachineState, Any], Step]

#: (state, event type) -> handler, read-only. A pair that is absent is illegal.
TRANSITIONS: Mapping[tuple[State, type[Any]], Handler] = MappingProxyType({
    (_S, Tick): _checkpoint_if_due,
    (_S, UpFailure): _fail,
    (_S, InputsStable): _nothing,
    (_S, PermissionAsked): _answer,
    (_S, PermissionGranted): _stale,
    (_S, PermissionRefused): _stale,
    (_U, Tick): _retry_if_due,
    (_U, UpFailure): _nothing,
    (_U, RecRequest): _corrected,
    (_U, PermissionGranted): _granted,
    (_U, PermissionRefused): _refused,
    (_U, PermissionAsked): _answer,
    (_U, InputsStable): _healed,
    (_Z, Tick): _nothing,
    (_Z, UpFailure): _new_failure,
    (_Z, NewFailureDuringStabilization): _new_failure,
    (_Z, RecRequest): _corrected_meanwhile,
    (_Z, ReconciliationProgress): _progress,
    (_Z, PermissionAsked): _answer,
    (_Z, PermissionGranted): _stale,
    (_Z, PermissionRefused): _stale,
})


def _wanted_mode(m: MachineState) -> UpFailureStrategy:
    stab = m.policy.stabilization
    if m.postponing and stab is not StabilizationStrategy.SUSPEND:
        return UpFailureStrategy(stab.value)  # we are the partner serving fresh data
    return m.policy.up_failure


def step(m: MachineState, event: Event) -> Step:
    """Apply ``event``: the new machine state and the actions to perform, in order."""
    handler = TRANSITIONS.get((m.state, type(event)))
    if handler is None:
        legal = sorted(t.__name__ for s, t in TRANSITIONS if s is m.state)
        raise ConsistencyError(f"consistency manager (rank {m.policy.rank}): {event!r} is "
                               f"illegal in state {m.state.name}; legal: {', '.join(legal)}")
    m, actions = handler(m, event)
    mode = _wanted_mode(m)
    if mode is not m.sunion_mode:
        m = replace(m, sunion_mode=mode)
        actions = [*actions, SetSUnionMode(mode)]
    return m, actions
