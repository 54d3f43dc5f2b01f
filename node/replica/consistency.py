"""The consistency manager of one replica: DPC's STABLE / UP_FAILURE / STABILIZATION machine.

Role (paper sections 3-4, DESIGN.md section 4, STYLE.md rule 3): every fault-tolerance
decision of a replica is made here, by one pure function, ``step(machine, event) ->
(machine, actions)``, over one transition table. Sans-IO: no asyncio, no clock. ``now`` (us)
rides on every event; timers are the deadline :func:`next_deadline` returns, at which the
runtime feeds ``Tick(now)``. The runtime (node/replica/manager.py) only turns what happens
into events (SUnion signals, replay progress, partners' answers, silences and requests) and
performs the actions in list order, with no input processed between two actions of a step.

Theory of operation
-------------------
*STABLE.* Checkpoints are taken only here, in one of two ways (``Policy.checkpointing``).
PERIODIC: one every ``checkpoint_interval`` (200 ms), and one at once on entering STABLE
(the first ``Tick`` after :func:`start` takes checkpoint 0: checkpoint/redo always has a
pre-failure state). ON_FAILURE: one right before the network call that may release an
SUnion's first tentative bucket (``EpisodeImminent``, fed by the runtime before that call:
the network is quiescent between calls, and all it holds is stable), the paper's
"checkpoint when going into UP_FAILURE" taken at the end of the alpha*X wait instead of its
start; the periodic ``Tick`` then only lets the SUnions forget what they released
(``ForgetReleased``), which no redo can need. Never a checkpoint *after* the first
tentative release: SUnion signals UP_FAILURE in the call that made it, so a checkpoint then
would restore the failure.

*UP_FAILURE on detection* (issue 46; paper section 3: "if one input stream becomes
unavailable or starts carrying tentative tuples, a node goes into the UP_FAILURE state").
``InputsChanged(down)`` carries the input streams that no upstream replica (or source)
offers alive and STABLE, by the heartbeat rule (node/streams/monitor.py ``cut_off``). In
STABLE a non-empty set moves the replica to UP_FAILURE at once, long before SUnion's first
tentative release (alpha*X later): the runtime's heartbeat answers then say UP_FAILURE for
the outputs those inputs feed, and downstream moves to a STABLE partner (masking: the
client sees neither the stall nor a tentative result). SUnion's wait does not change. Until
an SUnion releases a tentative tuple the network still holds only stable data
(``holds_only_stable``), so STABLE's checkpoint rules go on: PERIODIC takes one at once on
this entry (the paper's checkpoint "when going into UP_FAILURE") and more on its grid,
ON_FAILURE keeps forgetting released buckets and takes its checkpoint at
``EpisodeImminent``, right before the first tentative release, exactly as from STABLE. So
the checkpoint a reconciliation restores is still the last state before the first
tentative tuple, and SUnion's kept buckets (truncated at each checkpoint) hold every input
since it: the replay starts at the right point. If every input is back before a tentative
release (``InputsChanged`` with an empty set), the replica is STABLE again with nothing to
reconcile. After a reconciliation, a replica with an input still unavailable goes to
UP_FAILURE, not STABLE.

*UP_FAILURE.* SUnion delays or processes (``SetSUnionMode``). An SUnion that released
tentative tuples (``UpFailure(sunion)``) is *failing* until its REC_REQUEST (``RecRequest(
sunion)``: its inputs are corrected); once none is failing the replica must reconcile. With
STABILIZATION strategy SUSPEND it suspends new input and reconciles at once. Otherwise a
partner must serve fresh data meanwhile, so it asks permission (``AskPermission``, numbered),
again every ``permission_retry`` (500 ms) until a grant to its current *epoch* arrives.

*Permission.* The machine knows its partners by name (``Policy.partners``) and counts, for
each, our requests it left unanswered in a row: each request counts one more, an answer (to
any request) resets the count, a request that could not even be sent (``PartnerUnreachable``:
the connection was refused) puts it past the limit. A partner is *reachable* while its count
is at most ``self_grant_after`` (3); one that refused the connection or stayed silent for
more requests than that does not count until it answers again. Our latest request is
granted once every reachable partner granted it (decided by the grant that completes them,
or by the ``PartnerUnreachable`` that leaves only partners that granted), and refused by one
refusal; answers to older requests are ignored. With no partner, or none reachable when a
request is made, nobody can answer (nor serve downstream): the replica grants itself
(``SelfGrant``, ``Reconcile``). So a dead or unreachable partner never blocks a
reconciliation while another replica answers, and serves fresh data meanwhile (the paper
asks one replica to postpone). Asked by a partner, a replica refuses while it reconciles,
and while its own request is pending if it outranks the requester: the LOWER ``rank``
(index in the node's config) wins. Otherwise it grants, a promise to postpone its own
reconciliation: a pending request of its own is withdrawn (its epoch ends, a grant still in
flight to it is stale) and asked afresh one retry later. While postponing in UP_FAILURE it
is the replica downstream reads fresh data from, so its SUnion runs in the STABILIZATION
strategy's mode (the paper's second version).

Why two replicas that answer each other never reconcile at once (DELAY and PROCESS). Say A
reconciles from rA on a decision that counted B, so on B's grant sent at tB, which answers
a request of A's epoch begun at sA (sA < tB < rA); and B from rB on one that counted A, so
on A's grant sent at tA (sB < tA < rB). A replica grants nothing while it reconciles, nor
while an epoch of its own is live (a grant ends it), so tA is not in [sA, rA] and tB is not
in [sB, rB]. If tA < sA, then sB < tA < sA < tB, so tB > rB: B's reconciliation was over at
tB, before A's began at rA > tB. If tA > rA, A's was over at tA, before B's began at rB > tA.
The argument is about one pair: with three replicas it holds for each pair, whatever the
third granted. Rank plays no part in safety; it lets one of two crossed requests win. A
decision that did not count a partner (it refused the connection or was silent for
``self_grant_after`` requests: crashed, cut off, stopped), and a self-grant, are outside
this argument for that pair: the price of liveness. Every partner that did grant still
postpones its own reconciliation and serves fresh data meanwhile.

*STABILIZATION.* ``Reconcile(method)``: checkpoint/redo (restore + SUnion.rewind/replay,
SOutput.rewind) or undo/redo (UNDO_START into the SUnions); either ends every SUnion's
episode. It ends on ``ReconciliationProgress(caught_up)``: the replay is over and every
SOutput is past its duplicates. Then ``SendRecDone`` (SOutput's ``end_reconciliation``),
then STABLE, or UP_FAILURE if a failure began meanwhile (SOutput forces that REC_DONE itself
if a new tentative tuple comes first); a REC_REQUEST that came meanwhile is then served.

Invariants
----------
* Checkpoints only while the network holds only stable data (STABLE, or UP_FAILURE before
  the first tentative release); ``Reconcile`` only on entering STABILIZATION; ``SendRecDone``
  only on leaving it. Without SUSPEND, two replicas of a node never both reconcile where
  each one's decision counted the other's grant. No SUnion is failing in STABLE.
* ``step`` is pure and total over the table; an event absent from the table for the current
  state raises :class:`ConsistencyError` naming both (a runtime bug, never a peer's doing),
  and so does an answer from a replica that is not a partner.
* Never stuck: while only stable data is held, and in UP_FAILURE while a reconciliation awaits permission,
  :func:`next_deadline` is not None. (STABILIZATION waits on the runtime's own replay, which
  reports ``ReconciliationProgress`` after every batch or timer it pushes.)

Transition table (no arrow: the state stays; a pair not listed raises; a *deciding* answer
is a refusal of our latest request, or the grant of it that completes every reachable
partner's; *complete*: every partner still reachable granted our pending request)::

  state          event               guard                           actions -> next
  STABLE         Tick                checkpoint due                  TakeCheckpoint | ForgetReleased
  STABLE         InputsChanged       some input down (else record)   -> UP_FAILURE (checkpoint due)
  STABLE         EpisodeImminent     ON_FAILURE (else none)          TakeCheckpoint
  STABLE         UpFailure                                           -> UP_FAILURE
  STABLE         PermissionAsked                                     Grant
  STABLE         PartnerAnswered     deciding (else none)            Log (stale)
  STABLE         PartnerUnreachable                                  (none: no longer counts)
  UP_FAILURE     Tick                only stable held, cp. due       as STABLE's Tick
  UP_FAILURE     Tick                request pending, retry due      AskPermission | SelfGrant,
                                                                     Reconcile -> STABILIZATION
  UP_FAILURE     InputsChanged       none down, only stable held     -> STABLE
  UP_FAILURE     InputsChanged       otherwise                       (record)
  UP_FAILURE     EpisodeImminent     ON_FAILURE, only stable held    TakeCheckpoint
  UP_FAILURE     UpFailure                                           (none: same failure)
  UP_FAILURE     RecRequest          SUSPEND, none failing           SuspendNewInput,
                                                                     Reconcile -> STABILIZATION
  UP_FAILURE     RecRequest          otherwise, none failing, first  AskPermission | SelfGrant,
                                                                     Reconcile -> STABILIZATION
  UP_FAILURE     PartnerAnswered     deciding grant, current epoch   Reconcile -> STABILIZATION
  UP_FAILURE     PartnerAnswered     deciding refusal, current epoch Log
  UP_FAILURE     PartnerAnswered     deciding, epoch over            Log (stale)
  UP_FAILURE     PartnerUnreachable  complete without it             Reconcile -> STABILIZATION
  UP_FAILURE     PartnerUnreachable  otherwise                       (none: no longer counts)
  UP_FAILURE     PermissionAsked     pending and we outrank          Refuse
  UP_FAILURE     PermissionAsked     otherwise                       Grant (withdraw ours)
  STABILIZATION  Tick                                                (none)
  STABILIZATION  InputsChanged                                       (record)
  STABILIZATION  UpFailure                                           Log (remember)
  STABILIZATION  RecRequest          none failing                    (remember)
  STABILIZATION  ReconciliationProgress  caught up                   SendRecDone [ResumeNewInput]
                                                                     -> STABLE | UP_FAILURE
                                                                     (new failure or input down)
  STABILIZATION  PermissionAsked                                     Refuse
  STABILIZATION  PartnerAnswered     deciding (else none)            Log (stale)
  STABILIZATION  PartnerUnreachable                                  (none: no longer counts)

After each step, ``SetSUnionMode`` is added whenever the wanted SUnion mode changed.

The vocabulary (states, strategies, the policy, the events and the actions) is plain data
in ``vocabulary.py``; every name of it is re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, TypeAlias

from node.errors import ConsistencyError
from node.replica.vocabulary import (
    Action,
    AskPermission,
    Checkpointing,
    EpisodeImminent,
    Event,
    ForgetReleased,
    Grant,
    InputsChanged,
    Log,
    Method,
    PartnerAnswered,
    PartnerUnreachable,
    Permission,
    PermissionAsked,
    Policy,
    Reconcile,
    ReconciliationProgress,
    RecRequest,
    Refuse,
    ResumeNewInput,
    SelfGrant,
    SendRecDone,
    SetSUnionMode,
    StabilizationStrategy,
    State,
    SuspendNewInput,
    TakeCheckpoint,
    Tick,
    UpFailure,
    UpFailureStrategy,
)

__all__ = [
    "TRANSITIONS", "Action", "AskPermission", "Checkpointing", "EpisodeImminent", "Event",
    "ForgetReleased", "Grant", "InputsChanged", "Log", "MachineState",
    "Method", "PartnerAnswered", "PartnerUnreachable", "Permission",
    "PermissionAsked", "Policy", "RecRequest", "Reconcile", "ReconciliationProgress", "Refuse",
    "ResumeNewInput", "SelfGrant", "SendRecDone", "SetSUnionMode", "StabilizationStrategy",
    "State", "SuspendNewInput", "TakeCheckpoint", "Tick", "UpFailure", "UpFailureStrategy",
    "next_deadline", "reachable", "start", "step",
]


# ---------------------------------------------------------------------------- the machine
@dataclass(frozen=True, slots=True)
class MachineState:
    """All a replica's consistency manager knows: plain data (``/status`` can show it)."""

    policy: Policy
    state: State
    since: int  # when ``state`` was entered
    sunion_mode: UpFailureStrategy  # the mode last set on the SUnions
    last_checkpoint_at: int | None = None  # None: due at once (ON_FAILURE: last forget)
    permission: Permission = Permission.NONE
    next_ask_at: int | None = None  # when to ask (again), while a reconciliation awaits one
    request: int = 0  # number of our latest AskPermission
    epoch: int = 1  # first request of the current epoch; > request: none is pending
    rec_request: bool = False  # every SUnion corrected, not yet served by a Reconcile
    new_failure: bool = False  # in STABILIZATION: a failure began meanwhile
    postponing: bool = False  # in UP_FAILURE: we granted a partner its reconciliation
    failing: frozenset[str] = frozenset()  # SUnions in an episode, no REC_REQUEST yet
    down: frozenset[str] = frozenset()  # input streams unavailable (InputsChanged)
    granted: frozenset[str] = frozenset()  # partners that granted request ``request``
    unanswered: tuple[int, ...] = ()  # per partner (policy order): our requests, in a row
    checkpoints: int = 0
    reconciliations: int = 0
    refusals: int = 0  # refusals of our requests

    @property
    def request_pending(self) -> bool:
        """Our request is out and neither answered by a grant nor withdrawn."""
        return self.epoch <= self.request

    @property
    def holds_only_stable(self) -> bool:
        """The network holds only stable data: STABLE, or UP_FAILURE entered on detection
        (an input unavailable) before any SUnion released a tentative tuple. Checkpoints
        are taken only then, and a failure's first tentative release is announced
        (``EpisodeImminent``) only then."""
        if self.state is State.STABLE:
            return True
        return self.state is State.UP_FAILURE and not self.failing and not self.rec_request


Step: TypeAlias = tuple[MachineState, list[Action]]


def start(policy: Policy, now: int) -> Step:
    """A replica's machine at start-up, and the SUnion mode its policy wants."""
    m = MachineState(policy, State.STABLE, now, policy.up_failure,
                     unanswered=(0,) * len(policy.partners))
    return m, [SetSUnionMode(policy.up_failure)]


def next_deadline(m: MachineState) -> int | None:
    """When the runtime must feed ``Tick``; None while only events can move the machine."""
    if m.holds_only_stable:
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
    m = replace(m, request=request, permission=Permission.ASKED,
                next_ask_at=now + m.policy.permission_retry, granted=frozenset(),
                unanswered=tuple(n + 1 for n in m.unanswered))
    if not m.policy.partners:
        return _self_grant(m, now, "the node has no other replica")
    if not reachable(m):
        return _self_grant(m, now, "no partner reachable: each refused the connection or left "
                                   f"{m.policy.self_grant_after} requests unanswered")
    return m, [AskPermission(m.policy.method, request)]


def _self_grant(m: MachineState, now: int, why: str) -> Step:
    m, actions = _reconcile(m, now, f"granted request {m.request} itself")
    return m, [SelfGrant(m.request, why), *actions]


def _reconcile(m: MachineState, now: int, why: str) -> Step:
    suspend = m.policy.stabilization is StabilizationStrategy.SUSPEND
    m, actions = _enter(m, State.STABILIZATION, now, why)
    # Reconciling ends every SUnion's failure episode.
    m = replace(m, reconciliations=m.reconciliations + 1, failing=frozenset(),
                permission=Permission.NONE if suspend else Permission.GRANTED)
    return m, [*actions, *([SuspendNewInput()] if suspend else []), Reconcile(m.policy.method)]


def _serve_rec_request(m: MachineState, now: int) -> Step:
    if m.policy.stabilization is StabilizationStrategy.SUSPEND:
        return _reconcile(m, now, "inputs corrected; SUSPEND needs no partner's permission")
    return _ask(m, now)


def _in_epoch(m: MachineState, request: int) -> bool:
    return m.epoch <= request <= m.request


def _heard(m: MachineState, partner: str, unanswered: int = 0) -> MachineState:
    """Set ``partner``'s count of our requests it left unanswered in a row."""
    if partner not in m.policy.partners:
        raise ConsistencyError(f"consistency manager (rank {m.policy.rank}): {partner!r} is "
                               f"not a partner; partners: {m.policy.partners}")
    i = m.policy.partners.index(partner)
    return replace(m, unanswered=(*m.unanswered[:i], unanswered, *m.unanswered[i + 1:]))


def reachable(m: MachineState) -> frozenset[str]:
    """The partners whose grant our request needs: all but those that refused the connection
    or left more than ``self_grant_after`` requests in a row unanswered (until they answer)."""
    limit = m.policy.self_grant_after
    return frozenset(p for p, n in zip(m.policy.partners, m.unanswered, strict=True) if n <= limit)


def _complete(m: MachineState) -> tuple[MachineState, bool]:
    """True (and the grants cleared) if every reachable partner granted our latest request."""
    needed = reachable(m)
    if not needed or not needed <= m.granted:
        return m, False  # nobody reachable is the next request's self-grant, not a grant
    return replace(m, granted=frozenset()), True


def _hear(m: MachineState, e: PartnerAnswered) -> tuple[MachineState, bool]:
    """Record a partner's answer; True if it decides the current request: a refusal of it,
    or the grant that completes every reachable partner's."""
    m = _heard(m, e.partner)
    if e.request != m.request:
        return m, False  # an answer to an older request: our epochs would drop it too
    if not e.granted:
        return m, True
    return _complete(replace(m, granted=m.granted | {e.partner}))


def _sunion_corrected(m: MachineState, e: RecRequest) -> tuple[MachineState, bool]:
    """Record an SUnion's REC_REQUEST; True once no SUnion is failing any more."""
    m = replace(m, failing=m.failing - {e.sunion})
    return m, not m.failing


# ------------------------------------------------------------------------------- handlers
def _nothing(m: MachineState, e: Any) -> Step:
    return m, []


def _stale(m: MachineState, e: PartnerAnswered) -> Step:
    what = "grant" if e.granted else "refusal"
    return m, [Log(f"ignored a stale {what} of request {e.request} in {m.state.name}")]


def _checkpoint_if_due(m: MachineState, e: Tick) -> Step:
    last = m.last_checkpoint_at
    if last is not None and e.now < last + m.policy.checkpoint_interval:
        return m, []
    if m.policy.checkpointing is not Checkpointing.PERIODIC:
        return replace(m, last_checkpoint_at=e.now), [ForgetReleased()]
    return replace(m, last_checkpoint_at=e.now, checkpoints=m.checkpoints + 1), [TakeCheckpoint()]


def _checkpoint_before_episode(m: MachineState, e: EpisodeImminent) -> Step:
    if m.policy.checkpointing is not Checkpointing.ON_FAILURE:
        return m, []  # PERIODIC: its checkpoints cover it; OFF: none ever
    return replace(m, checkpoints=m.checkpoints + 1), [TakeCheckpoint()]


def _fail(m: MachineState, e: UpFailure) -> Step:
    m = replace(m, failing=m.failing | {e.sunion})
    return _enter(m, State.UP_FAILURE, e.now, "an SUnion released tentative tuples")


def _another_failure(m: MachineState, e: UpFailure) -> Step:
    first = m.holds_only_stable  # in UP_FAILURE on detection: the first tentative release
    m = replace(m, failing=m.failing | {e.sunion})  # else the same failure, another SUnion
    return m, [Log(f"{e.sunion} released tentative tuples")] if first else []


def _names(streams: frozenset[str]) -> str:
    return ", ".join(sorted(streams))


def _inputs_changed(m: MachineState, e: InputsChanged) -> Step:
    """STABLE: an input is unavailable: UP_FAILURE at once, before any tentative release,
    so that the heartbeat answers say it and downstream moves to a STABLE partner. The
    network still holds only stable data: with PERIODIC checkpointing one is taken at
    once (the paper's checkpoint "when going into UP_FAILURE"), and more follow on the
    grid until the first tentative release."""
    m = replace(m, down=e.down)
    if m.state is not State.STABLE or not e.down:
        return m, []
    m, actions = _enter(m, State.UP_FAILURE, e.now, f"input unavailable: {_names(e.down)} "
                        "(no upstream replica alive and STABLE)")
    return replace(m, last_checkpoint_at=None), actions


def _inputs_changed_failing(m: MachineState, e: InputsChanged) -> Step:
    """UP_FAILURE: every input is back before any tentative release: STABLE again, nothing
    to reconcile. After a tentative release the REC_REQUESTs decide, as before."""
    m = replace(m, down=e.down)
    if e.down or not m.holds_only_stable:
        return m, []
    return _enter(m, State.STABLE, e.now, "inputs available again before any tentative "
                                          "release: nothing to reconcile")


def _record_inputs(m: MachineState, e: InputsChanged) -> Step:
    return replace(m, down=e.down), []


def _tick_failing(m: MachineState, e: Tick) -> Step:
    if m.holds_only_stable:
        return _checkpoint_if_due(m, e)
    return _retry_if_due(m, e)


def _imminent_failing(m: MachineState, e: EpisodeImminent) -> Step:
    if m.holds_only_stable:
        return _checkpoint_before_episode(m, e)
    return m, []


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
    m, none_failing = _sunion_corrected(m, e)
    if not none_failing or m.rec_request:
        return m, []  # another SUnion is still failing, or already served or awaiting permission
    return _serve_rec_request(replace(m, rec_request=True), e.now)


def _answered(m: MachineState, e: PartnerAnswered) -> Step:
    m, decisive = _hear(m, e)
    if not decisive:
        return m, []
    if not _in_epoch(m, e.request):
        return _stale(m, e)
    if e.granted:
        return _reconcile(m, e.now, f"partner granted request {e.request}")
    m = replace(m, permission=Permission.REFUSED, refusals=m.refusals + 1)
    return m, [Log(f"request {e.request} refused ({e.partner}: {e.reason}); asking again at "
                   f"{m.next_ask_at}")]


def _answered_late(m: MachineState, e: PartnerAnswered) -> Step:
    m, decisive = _hear(m, e)
    return _stale(m, e) if decisive else (m, [])


def _unreachable(m: MachineState, e: PartnerUnreachable) -> Step:
    return _heard(m, e.partner, m.policy.self_grant_after + 1), []  # as silent as can be


def _unreachable_deciding(m: MachineState, e: PartnerUnreachable) -> Step:
    """The partner no longer counts: if every one that still does granted our pending
    request already, that decides it."""
    m, _ = _unreachable(m, e)
    if not m.request_pending:
        return m, []
    m, complete = _complete(m)
    if not complete:
        return m, []
    return _reconcile(m, e.now, f"every reachable partner granted request {m.request} "
                                f"({e.partner!r} is unreachable)")


def _new_failure(m: MachineState, e: UpFailure) -> Step:
    m = replace(m, failing=m.failing | {e.sunion})
    if m.new_failure:
        return m, []
    return replace(m, new_failure=True), [Log("a new failure began during stabilization")]


def _corrected_meanwhile(m: MachineState, e: RecRequest) -> Step:
    m, none_failing = _sunion_corrected(m, e)
    if not none_failing:
        return m, []
    return replace(m, rec_request=True, new_failure=True), []  # implies a failure episode


def _progress(m: MachineState, e: ReconciliationProgress) -> Step:
    if not e.caught_up:
        return m, []
    done: list[Action] = [SendRecDone()]  # before any new input is let in
    if m.policy.stabilization is StabilizationStrategy.SUSPEND:
        done.append(ResumeNewInput())
    if not (m.new_failure or m.rec_request or m.down):
        m, actions = _enter(m, State.STABLE, e.now, "reconciled and caught up")
        return m, done + actions
    why = ("a new failure is under way" if m.new_failure or m.rec_request
           else f"input unavailable: {_names(m.down)}")
    m, actions = _enter(m, State.UP_FAILURE, e.now, f"reconciled; {why}")
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
    (_S, InputsChanged): _inputs_changed,
    (_S, EpisodeImminent): _checkpoint_before_episode,
    (_S, UpFailure): _fail,
    (_S, PermissionAsked): _answer,
    (_S, PartnerAnswered): _answered_late,
    (_S, PartnerUnreachable): _unreachable,
    (_U, Tick): _tick_failing,
    (_U, InputsChanged): _inputs_changed_failing,
    (_U, EpisodeImminent): _imminent_failing,
    (_U, UpFailure): _another_failure,
    (_U, RecRequest): _corrected,
    (_U, PartnerAnswered): _answered,
    (_U, PartnerUnreachable): _unreachable_deciding,
    (_U, PermissionAsked): _answer,
    (_Z, Tick): _nothing,
    (_Z, InputsChanged): _record_inputs,
    (_Z, UpFailure): _new_failure,
    (_Z, RecRequest): _corrected_meanwhile,
    (_Z, ReconciliationProgress): _progress,
    (_Z, PermissionAsked): _answer,
    (_Z, PartnerAnswered): _answered_late,
    (_Z, PartnerUnreachable): _unreachable,
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
