"""The consistency manager (node/replica/consistency.py), example by example: every entry of
the transition table (STABLE, UP_FAILURE, STABILIZATION), the illegal pairs, the counting of
SUnions and partners, the ranks of crossed permission requests, and the policy's checks. The
replicas of a node exchanging permission messages in any order are in
test_consistency_model.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

import pytest

from node.errors import ConsistencyError, NodeError
from node.replica.consistency import (
    TRANSITIONS,
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
    next_deadline,
    reachable,
    start,
    step,
)
from tests.node.replica.consistency_world import (
    ASK,
    MS,
    STAB,
    STABLE,
    SUSPEND,
    UP,
    U,
    granted,
    policy,
    refused,
    run,
    stabilization,
    stable,
    up_failure,
)

NOBODY = "no partner reachable: each refused the connection or left 3 requests unanswered"
ALL_EVENTS: list[type[Any]] = [
    Tick, InputsChanged, EpisodeImminent, UpFailure, RecRequest, PartnerAnswered, PartnerUnreachable,
    PermissionAsked, ReconciliationProgress,
]  # fmt: skip

# ---------------------------------------------------------------------------------- helpers
COVERED: set[tuple[State, type[Any]]] = set()
F = TypeVar("F", bound=Callable[..., Any])


def covers(*keys: tuple[State, type[Any]]) -> Callable[[F], F]:
    """Mark a test as the one for these table entries (test_every_entry_is_tested checks)."""
    COVERED.update(keys)
    return lambda f: f


def real(actions: list[Action]) -> list[Action]:
    """The actions without the logs."""
    return [a for a in actions if not isinstance(a, Log)]


def logs(actions: list[Action]) -> str:
    return " / ".join(a.message for a in actions if isinstance(a, Log))


# ----------------------------------------------------------------------------------- STABLE
@covers((STABLE, Tick))
def test_stable_tick_checkpoints_at_once_then_every_interval() -> None:
    m, actions = start(policy(checkpoint_interval=200 * MS), 1000)
    assert actions == [SetSUnionMode(UpFailureStrategy.PROCESS)]
    assert next_deadline(m) == 1000  # checkpoint 0 is due at once
    m, actions = step(m, Tick(1000))
    assert actions == [TakeCheckpoint()] and m.last_checkpoint_at == 1000
    assert next_deadline(m) == 201_000
    m, actions = step(m, Tick(200_999))
    assert actions == [] and m.checkpoints == 1
    m, actions = step(m, Tick(201_000))
    assert actions == [TakeCheckpoint()] and m.checkpoints == 2


@covers((STABLE, EpisodeImminent))
def test_on_failure_checkpoints_right_before_an_episode_and_only_forgets_on_ticks() -> None:
    on_failure = policy(checkpointing=Checkpointing.ON_FAILURE, checkpoint_interval=200 * MS)
    m, _ = start(on_failure, 1000)
    assert next_deadline(m) == 1000  # never stuck: the forgetting is periodic
    m, actions = step(m, Tick(1000))
    assert actions == [ForgetReleased()] and m.checkpoints == 0
    assert next_deadline(m) == 201_000 and step(m, Tick(200_999))[1] == []
    m, actions = step(m, EpisodeImminent(150 * MS))
    assert actions == [TakeCheckpoint()] and m.checkpoints == 1 and m.state is STABLE
    m, actions = step(m, EpisodeImminent(160 * MS))  # a false alarm before: another one
    assert actions == [TakeCheckpoint()] and m.checkpoints == 2
    assert step(m, Tick(201_000))[1] == [ForgetReleased()]
    # PERIODIC: the 200 ms checkpoints cover the episode; nothing more to do.
    m = stable()
    assert step(m, EpisodeImminent(50 * MS)) == (m, [])
    # OFF (fault tolerance off): never a checkpoint; the SUnions forget all the same.
    m, _ = start(policy(checkpointing=Checkpointing.OFF), 0)
    m, actions = step(m, Tick(0))
    assert actions == [ForgetReleased()]
    assert step(m, EpisodeImminent(10 * MS)) == (m, []) and m.checkpoints == 0


@covers((STABLE, UpFailure))
def test_up_failure_enters_up_failure_without_a_checkpoint() -> None:
    m, actions = step(stable(), UpFailure(50 * MS, U))
    assert (m.state, m.since) == (UP, 50 * MS)
    assert real(actions) == [] and "STABLE -> UP_FAILURE" in logs(actions)
    assert next_deadline(m) is None  # nothing to wait for until the inputs are corrected
    m, actions = step(m, Tick(10_000 * MS))
    assert actions == [] and m.checkpoints == 1  # never in UP_FAILURE


@covers((STABLE, PermissionAsked))
def test_stable_grants_and_does_not_postpone_anything() -> None:
    m = stable(policy(stabilization=StabilizationStrategy.DELAY))
    m2, actions = step(m, ASK)
    assert actions == [Grant("r1", 7)] and m2 == m


@covers((STABLE, PartnerAnswered))
def test_stable_ignores_late_answers() -> None:
    m, _ = run(stabilization(), ReconciliationProgress(60 * MS, True))
    assert m.state is STABLE and m.request == 1
    for e in (granted(70 * MS, 1), refused(70 * MS, 1, "busy")):
        m2, actions = step(m, e)
        assert m2 == m and real(actions) == [] and "stale" in logs(actions)
    # An answer to an older request is not even stale: it only says the partner is alive.
    assert step(m, granted(70 * MS, 0)) == (m, [])


@covers((STABLE, PartnerUnreachable), (UP, PartnerUnreachable), (STAB, PartnerUnreachable))
def test_an_unreachable_partner_counts_as_silent_in_every_state() -> None:
    for m in (stable(), up_failure(rec=True), stabilization()):
        m2, actions = step(m, PartnerUnreachable(50 * MS, "r1"))
        assert actions == [] and m2 == replace(m, unanswered=(4,))  # past self_grant_after


# ------------------------------------------------------------------------------- UP_FAILURE
@covers((UP, Tick))
def test_permission_is_asked_again_every_retry_period() -> None:
    m = up_failure(policy(permission_retry=500 * MS), rec=True)
    assert next_deadline(m) == 520 * MS
    assert step(m, Tick(519 * MS)) == (m, [])
    m, actions = step(m, Tick(530 * MS))
    assert actions == [AskPermission(Method.CHECKPOINT, 2)] and next_deadline(m) == 1030 * MS
    assert m.permission is Permission.ASKED
    # Without a REC_REQUEST there is nothing to ask for.
    assert step(up_failure(), Tick(10**9))[1] == []


@covers((UP, UpFailure))
def test_another_sunions_up_failure_is_the_same_failure() -> None:
    m = up_failure(rec=True)
    m2, actions = step(m, UpFailure(99, "v"))
    assert actions == [] and m2 == replace(m, failing=frozenset({"v"}))


@covers((UP, RecRequest))
def test_rec_request_asks_permission_once() -> None:
    m, actions = step(up_failure(policy(method=Method.UNDO)), RecRequest(20 * MS, U))
    assert actions == [AskPermission(Method.UNDO, 1)] and m.rec_request and m.request_pending
    assert step(m, RecRequest(21 * MS, "v")) == (m, [])  # a second SUnion's: already asked


def test_permission_is_asked_once_every_failing_sunion_is_corrected() -> None:
    m, _ = run(stable(), UpFailure(10 * MS, "a"), UpFailure(11 * MS, "b"))
    assert m.state is UP and m.failing == {"a", "b"}
    m, actions = step(m, RecRequest(20 * MS, "a"))
    assert actions == [] and not m.rec_request and m.failing == {"b"}
    m, actions = step(m, RecRequest(21 * MS, "b"))
    assert actions == [AskPermission(Method.CHECKPOINT, 1)] and m.rec_request and not m.failing
    # During stabilization too: a new failure of two SUnions is corrected once both are.
    m = stabilization()
    assert not m.failing  # reconciling ended every SUnion's episode
    m, _ = run(m, UpFailure(40 * MS, "a"), UpFailure(41 * MS, "b"), RecRequest(42 * MS, "a"))
    assert m.new_failure and not m.rec_request and m.failing == {"b"}
    m, _ = step(m, RecRequest(43 * MS, "b"))
    assert m.rec_request and not m.failing
    m, actions = step(m, ReconciliationProgress(90 * MS, True))
    assert m.state is UP and real(actions) == [SendRecDone(), AskPermission(Method.CHECKPOINT, 2)]


def test_rec_request_with_suspend_reconciles_without_permission() -> None:
    m, actions = step(up_failure(policy(stabilization=SUSPEND)), RecRequest(20 * MS, U))
    assert m.state is STAB and m.reconciliations == 1 and not m.rec_request
    assert real(actions) == [SuspendNewInput(), Reconcile(Method.CHECKPOINT)]


@covers((UP, PartnerAnswered))
def test_grant_of_the_latest_request_starts_reconciliation() -> None:
    m = up_failure(rec=True)
    m, _ = run(m, Tick(600 * MS))  # request 2, same epoch as request 1
    assert m.unanswered == (2,)
    m2, actions = step(m, granted(700 * MS, 2))
    assert (m2.state, m2.since, m2.permission) == (STAB, 700 * MS, Permission.GRANTED)
    assert real(actions) == [Reconcile(Method.CHECKPOINT)] and m2.reconciliations == 1
    assert "partner granted request 2" in logs(actions) and m2.unanswered == (0,)
    for bad in (0, 1, 3):  # before our first request, an older one, or never sent
        m3, actions = step(m, granted(700 * MS, bad))
        assert m3 == replace(m, unanswered=(0,)) and actions == []  # the partner is alive


def test_refusal_is_counted_and_the_retry_stays_on_schedule() -> None:
    m = up_failure(rec=True)
    m2, actions = step(m, refused(100 * MS, 1, "reconciling"))
    assert m2.permission is Permission.REFUSED and m2.refusals == 1 and real(actions) == []
    assert "request 1 refused (r1: reconciling)" in logs(actions)
    assert next_deadline(m2) == next_deadline(m) == 520 * MS
    m3, actions = step(m2, refused(100 * MS, 5, "reconciling"))  # never asked
    assert m3 == m2 and actions == []


def test_every_partner_that_answers_must_grant_and_one_refusal_refuses() -> None:
    m = up_failure(policy(partners=("r1", "r2")), rec=True)
    m2, actions = step(m, granted(30 * MS, 1, "r1"))
    assert actions == [] and m2.granted == {"r1"} and m2.state is UP
    assert step(m2, granted(31 * MS, 1, "r1"))[0] == m2  # twice is once
    m3, actions = step(m2, granted(32 * MS, 1, "r2"))
    assert m3.state is STAB and real(actions) == [Reconcile(Method.CHECKPOINT)]
    assert not m3.granted and m3.unanswered == (0, 0)
    # One refusal refuses, whatever the others said; the retry asks afresh.
    m4, actions = step(m2, refused(33 * MS, 1, "busy", "r2"))
    assert m4.permission is Permission.REFUSED and "refused (r2: busy)" in logs(actions)
    m5, actions = step(m4, Tick(520 * MS))
    assert actions == [AskPermission(Method.CHECKPOINT, 2)] and not m5.granted
    m6, actions = step(m5, granted(530 * MS, 1, "r2"))  # a grant of the older request
    assert m6.state is UP and not m6.granted and actions == []


def test_silent_partners_lead_to_a_self_grant_after_self_grant_after_requests() -> None:
    m = up_failure(policy(self_grant_after=3), rec=True)  # request 1: r1 silent once
    for request in (2, 3):
        m, actions = step(m, Tick(m.next_ask_at or 0))
        assert actions == [AskPermission(Method.CHECKPOINT, request)]
        assert m.unanswered == (request,)
    m, actions = step(m, Tick(m.next_ask_at or 0))  # request 4: r1 left 4 > 3 unanswered
    assert real(actions) == [SelfGrant(4, NOBODY),
                             Reconcile(Method.CHECKPOINT)]  # fmt: skip
    assert m.state is STAB and m.reconciliations == 1 and "granted request 4 itself" in logs(actions)
    # An answer, even a refusal, says the partner is alive: the count starts again.
    m, _ = run(up_failure(rec=True), Tick(520 * MS), Tick(1020 * MS))
    m, _ = step(m, refused(1030 * MS, 3, "reconciling"))
    m, actions = step(m, Tick(1520 * MS))
    assert actions == [AskPermission(Method.CHECKPOINT, 4)] and m.unanswered == (1,)


def test_a_self_grant_only_when_every_partner_is_silent_or_unreachable() -> None:
    m = up_failure(policy(partners=("r1", "r2")), rec=True)
    for request in (2, 3, 4, 5):  # r2 answers every request, r1 none
        m, _ = step(m, refused(0, request - 1, "reconciling", "r2"))
        m, actions = step(m, Tick(m.next_ask_at or 0))
        assert actions == [AskPermission(Method.CHECKPOINT, request)]
    m, _ = step(m, PartnerUnreachable(0, "r2"))
    m, actions = step(m, Tick(m.next_ask_at or 0))
    assert real(actions) == [SelfGrant(6, NOBODY),
                             Reconcile(Method.CHECKPOINT)]  # fmt: skip
    # An unreachable partner alone: silent past the limit at the very next request.
    m, _ = step(up_failure(rec=True), PartnerUnreachable(25 * MS, "r1"))
    m, actions = step(m, Tick(520 * MS))
    assert real(actions)[0] == SelfGrant(2, NOBODY)


def test_every_reachable_partner_must_grant_an_unreachable_one_does_not_count() -> None:
    """Issue 13, defect 3: with three replicas, a dead partner (its port refuses the
    connection) must not block the reconciliation that the live one grants, whichever of
    the grant and the failed connect comes first."""
    m = up_failure(policy(partners=("r1", "r2")), rec=True)  # request 1 to r1 and r2
    m2, actions = run(m, PartnerUnreachable(25 * MS, "r2"), granted(30 * MS, 1, "r1"))
    assert m2.state is STAB and real(actions) == [Reconcile(Method.CHECKPOINT)]
    assert "partner granted request 1" in logs(actions)
    m3, actions = step(m, granted(30 * MS, 1, "r1"))  # r2 still counts: not yet
    assert m3.state is UP and actions == [] and m3.granted == {"r1"}
    m3, actions = step(m3, PartnerUnreachable(31 * MS, "r2"))
    assert m3.state is STAB and real(actions) == [Reconcile(Method.CHECKPOINT)]
    assert "every reachable partner granted request 1 ('r2' is unreachable)" in logs(actions)
    assert m3.unanswered == (0, 4) and not m3.granted
    # Unreachable with no grant in hand decides nothing (nobody reachable: the next request
    # is a self-grant); nor without a pending request (none yet, or ours withdrawn).
    m4, actions = run(m, PartnerUnreachable(25 * MS, "r1"), PartnerUnreachable(26 * MS, "r2"))
    assert m4.state is UP and actions == []
    assert step(m4, Tick(520 * MS))[1][0] == SelfGrant(2, NOBODY)
    m5, _ = step(up_failure(policy(partners=("r1", "r2"))), granted(30 * MS, 0, "r1"))
    assert step(m5, PartnerUnreachable(31 * MS, "r2"))[1] == []


def test_a_silent_partner_stops_counting_after_self_grant_after_requests() -> None:
    m = up_failure(policy(partners=("r1", "r2"), self_grant_after=3), rec=True)
    for request in (1, 2, 3):  # r1 grants every request, r2 is silent: r2 still counts
        m, actions = step(m, granted(0, request, "r1"))
        assert actions == [] and m.state is UP
        m, actions = step(m, Tick(m.next_ask_at or 0))
        assert actions == [AskPermission(Method.CHECKPOINT, request + 1)]
    assert m.unanswered == (1, 4) and reachable(m) == {"r1"}  # r2 left 4 > 3 unanswered
    m2, actions = step(m, granted(0, 4, "r1"))
    assert m2.state is STAB and real(actions) == [Reconcile(Method.CHECKPOINT)]
    # An answer, to any request, makes it count again: r1's grant alone is not enough.
    m3, _ = run(m, refused(0, 2, "reconciling", "r2"), granted(0, 4, "r1"))
    assert m3.state is UP and reachable(m3) == {"r1", "r2"} and m3.granted == {"r1"}
    m3, actions = step(m3, granted(0, 4, "r2"))
    assert m3.state is STAB and real(actions) == [Reconcile(Method.CHECKPOINT)]


def test_a_node_without_partners_grants_itself_at_once() -> None:
    m, actions = step(up_failure(policy(partners=())), RecRequest(20 * MS, U))
    assert real(actions) == [SelfGrant(1, "the node has no other replica"),
                             Reconcile(Method.CHECKPOINT)]  # fmt: skip
    assert m.state is STAB and m.request == 1 and m.permission is Permission.GRANTED


def test_an_answer_from_a_replica_that_is_no_partner_raises() -> None:
    with pytest.raises(ConsistencyError, match="'r9' is not a partner"):
        step(up_failure(rec=True), granted(30 * MS, 1, "r9"))
    with pytest.raises(ConsistencyError, match="'r9' is not a partner"):
        step(stable(), PartnerUnreachable(30 * MS, "r9"))


@covers((UP, PermissionAsked))
def test_pending_request_refuses_a_lower_ranked_requester() -> None:
    m = up_failure(policy(rank=0), rec=True)
    m2, actions = step(m, ASK)
    assert m2 == m and actions == [Refuse("r1", 7, "own request pending, rank 0 outranks 1")]


def test_pending_request_grants_a_higher_ranked_requester_and_withdraws() -> None:
    m = up_failure(policy(rank=1, partners=("r0",)), rec=True)
    m, actions = step(m, PermissionAsked(40 * MS, "r0", 0, 3))
    assert real(actions) == [Grant("r0", 3)] and m.permission is Permission.POSTPONED
    assert not m.request_pending and m.postponing and next_deadline(m) == 540 * MS
    # The grant to our withdrawn request is stale: we must not reconcile beside r0.
    m2, actions = step(m, granted(50 * MS, 1, "r0"))
    assert m2 == replace(m, unanswered=(0,)) and "stale" in logs(actions)
    # One retry period later we ask afresh, in a new epoch.
    m, actions = step(m, Tick(540 * MS))
    assert actions == [AskPermission(Method.CHECKPOINT, 2)] and m.epoch == 2
    assert step(m, granted(600 * MS, 2, "r0"))[0].state is STAB


def test_crossed_requests_with_a_grant_in_flight_never_both_reconcile() -> None:
    """r0 grants r1 before needing to reconcile itself, then asks; r1, outranked, grants
    too. Both grants were honest when sent; only r1's withdrawal keeps r1 out."""
    r0, r1 = up_failure(policy(rank=0)), up_failure(policy(rank=1, partners=("r0",)))
    r1, asked = step(r1, RecRequest(20 * MS, U))
    r0, grant_to_r1 = step(r0, PermissionAsked(21 * MS, "r1", 1, 1))  # in flight
    r0, _ = step(r0, RecRequest(22 * MS, U))
    r1, grant_to_r0 = step(r1, PermissionAsked(23 * MS, "r0", 0, 1))
    assert asked[0] == AskPermission(Method.CHECKPOINT, 1) and grant_to_r1 == [Grant("r1", 1)]
    assert real(grant_to_r0) == [Grant("r0", 1)]
    r0, _ = step(r0, granted(24 * MS, 1))
    r1, _ = step(r1, granted(25 * MS, 1, "r0"))  # the grant that was in flight: stale
    assert (r0.state, r1.state) == (STAB, UP)


def test_without_a_request_up_failure_grants() -> None:
    m, actions = step(up_failure(policy(rank=0)), ASK)
    assert actions == [Grant("r1", 7)] and m.postponing and m.permission is Permission.NONE


def test_postponing_partner_runs_its_sunion_in_the_stabilization_mode() -> None:
    m = up_failure(policy(up_failure=UpFailureStrategy.PROCESS,
                          stabilization=StabilizationStrategy.DELAY))
    m, actions = step(m, ASK)
    assert actions == [Grant("r1", 7), SetSUnionMode(UpFailureStrategy.DELAY)]
    m, actions = run(m, RecRequest(50 * MS, U), granted(60 * MS, 1))
    assert m.state is STAB and actions[-1] == SetSUnionMode(UpFailureStrategy.PROCESS)
    # SUSPEND has no serving partner: the mode never changes.
    m, actions = step(up_failure(policy(stabilization=SUSPEND)), ASK)
    assert actions == [Grant("r1", 7)]


def test_equal_ranks_are_a_misconfiguration() -> None:
    with pytest.raises(ConsistencyError, match="ranks of one node's replicas must differ"):
        step(up_failure(policy(rank=1)), ASK)


# ---------------------------------------------------------------------------- STABILIZATION
@covers((STAB, Tick))
def test_stabilization_takes_no_checkpoint_and_asks_nothing() -> None:
    m = stabilization()
    assert next_deadline(m) is None
    assert step(m, Tick(10**9)) == (m, [])


@covers((STAB, UpFailure))
def test_new_failure_during_stabilization_ends_in_up_failure() -> None:
    e = UpFailure(40 * MS, U)
    m, actions = step(stabilization(), e)
    assert m.state is STAB and m.new_failure and len(actions) == 1 and m.failing == {U}
    assert step(m, e) == (m, [])  # once is enough
    m, actions = step(m, ReconciliationProgress(90 * MS, True))
    assert m.state is UP and real(actions) == [SendRecDone()] and next_deadline(m) is None
    assert m.failing == {U}  # its REC_REQUEST is still to come


@covers((STAB, RecRequest))
def test_rec_request_during_stabilization_is_served_on_the_way_out() -> None:
    m, actions = step(stabilization(), RecRequest(40 * MS, U))
    assert actions == [] and m.rec_request
    m, actions = step(m, ReconciliationProgress(90 * MS, True))
    assert m.state is UP and real(actions) == [SendRecDone(), AskPermission(Method.CHECKPOINT, 2)]
    # With SUSPEND it reconciles again at once, input still held.
    m, _ = run(stabilization(policy(stabilization=SUSPEND)), RecRequest(40 * MS, U))
    m, actions = step(m, ReconciliationProgress(90 * MS, True))
    assert m.state is STAB and m.reconciliations == 2 and not m.rec_request
    assert real(actions) == [SendRecDone(), ResumeNewInput(), SuspendNewInput(),
                             Reconcile(Method.CHECKPOINT)]  # fmt: skip


@covers((STAB, ReconciliationProgress))
def test_stabilization_ends_when_caught_up() -> None:
    m = stabilization()
    assert step(m, ReconciliationProgress(50 * MS, False)) == (m, [])
    m, actions = step(m, ReconciliationProgress(60 * MS, True))
    assert (m.state, m.since) == (STABLE, 60 * MS) and real(actions) == [SendRecDone()]
    assert next_deadline(m) == 60 * MS and step(m, Tick(60 * MS))[1] == [TakeCheckpoint()]


def test_suspend_resumes_input_after_rec_done() -> None:
    m, actions = step(stabilization(policy(stabilization=SUSPEND)), ReconciliationProgress(9, True))
    assert m.state is STABLE and real(actions) == [SendRecDone(), ResumeNewInput()]


@covers((STAB, PermissionAsked))
def test_stabilization_refuses_everyone() -> None:
    m = stabilization(policy(rank=5))
    assert step(m, ASK) == (m, [Refuse("r1", 7, "reconciling")])


@covers((STAB, PartnerAnswered))
def test_stabilization_ignores_answers_to_earlier_requests() -> None:
    m = stabilization()
    for e in (granted(5, 1), refused(5, 1, "busy")):
        m2, actions = step(m, e)
        assert m2 == m and "stale" in logs(actions)


# ------------------------------------------------------------- UP_FAILURE on detection (#46)
S3 = frozenset({"s3"})


@covers((STABLE, InputsChanged))
def test_an_unavailable_input_enters_up_failure_at_once_with_a_checkpoint_due() -> None:
    m = stable(policy(checkpoint_interval=200 * MS))
    m, actions = step(m, InputsChanged(30 * MS, S3))
    assert (m.state, m.since, m.down) == (UP, 30 * MS, S3) and real(actions) == []
    assert "STABLE -> UP_FAILURE: input unavailable: s3" in logs(actions)
    # The network holds only stable data: the paper's checkpoint on entering UP_FAILURE
    # is due at once, and the periodic ones go on until the first tentative release.
    assert m.holds_only_stable and next_deadline(m) == 30 * MS
    m, actions = step(m, Tick(30 * MS))
    assert actions == [TakeCheckpoint()] and next_deadline(m) == 230 * MS
    m, actions = step(m, UpFailure(60 * MS, U))
    assert m.state is UP and not m.holds_only_stable and "released tentative" in logs(actions)
    assert step(m, Tick(10_000 * MS))[1] == []  # no checkpoint after a tentative release
    # An empty set in STABLE only records.
    m, actions = step(stable(), InputsChanged(1, frozenset()))
    assert m.state is STABLE and actions == []


@covers((UP, InputsChanged), (UP, EpisodeImminent))
def test_inputs_back_before_a_tentative_release_are_stable_again_with_nothing_to_do() -> None:
    on_failure = policy(checkpointing=Checkpointing.ON_FAILURE, checkpoint_interval=200 * MS)
    m, _ = run(stable(on_failure), InputsChanged(10 * MS, S3))
    assert m.state is UP
    assert step(m, Tick(10 * MS))[1] == [ForgetReleased()]  # as in STABLE
    m, actions = step(m, EpisodeImminent(20 * MS))  # ON_FAILURE: its checkpoint, as in STABLE
    assert actions == [TakeCheckpoint()] and m.checkpoints == 1
    m, actions = step(m, InputsChanged(40 * MS, frozenset()))
    assert (m.state, m.since, m.reconciliations) == (STABLE, 40 * MS, 0) and real(actions) == []
    assert "nothing to reconcile" in logs(actions)
    # After a tentative release, the inputs' return is only recorded: REC_REQUEST decides.
    m, _ = run(stable(), InputsChanged(10 * MS, S3), UpFailure(20 * MS, U))
    m, actions = step(m, InputsChanged(40 * MS, frozenset()))
    assert m.state is UP and actions == [] and m.down == frozenset()
    assert step(m, EpisodeImminent(50 * MS)) == (m, [])  # never fed then: no checkpoint
    m, actions = step(m, RecRequest(60 * MS, U))
    assert real(actions) == [AskPermission(Method.CHECKPOINT, 1)]


@covers((STAB, InputsChanged))
def test_a_reconciliation_ends_in_up_failure_while_an_input_is_unavailable() -> None:
    m, actions = step(stabilization(), InputsChanged(40 * MS, S3))
    assert m.state is STAB and actions == [] and m.down == S3
    m, actions = step(m, ReconciliationProgress(90 * MS, True))
    assert m.state is UP and real(actions) == [SendRecDone()] and m.holds_only_stable
    assert "input unavailable: s3" in logs(actions)
    m, _ = step(m, InputsChanged(100 * MS, frozenset()))
    assert m.state is STABLE and m.reconciliations == 1


# ------------------------------------------------------------------------- table and errors
ILLEGAL = {(STABLE, RecRequest), (STABLE, ReconciliationProgress), (UP, ReconciliationProgress),
           (STAB, EpisodeImminent)}  # fmt: skip
SAMPLE: dict[type[Any], Event] = {
    Tick: Tick(1), InputsChanged: InputsChanged(1, frozenset({"s3"})), EpisodeImminent: EpisodeImminent(1), UpFailure: UpFailure(1, U), RecRequest: RecRequest(1, U),
    PartnerAnswered: granted(1, 1), PartnerUnreachable: PartnerUnreachable(1, "r1"),
    PermissionAsked: ASK, ReconciliationProgress: ReconciliationProgress(1, True),
}  # fmt: skip
IN_STATE = {STABLE: stable, UP: up_failure, STAB: stabilization}


def test_every_entry_is_tested_and_every_other_pair_is_illegal() -> None:
    assert set(TRANSITIONS) == COVERED
    assert {(s, e) for s in State for e in ALL_EVENTS} == set(TRANSITIONS) | ILLEGAL
    assert not set(TRANSITIONS) & ILLEGAL


@pytest.mark.parametrize(("state", "event"), sorted(ILLEGAL, key=str), ids=str)
def test_illegal_events_raise_naming_state_and_event(state: State, event: type[Any]) -> None:
    m = IN_STATE[state]()
    with pytest.raises(ConsistencyError) as info:
        step(m, SAMPLE[event])
    assert f"{event.__name__}(now=1" in str(info.value) and f"state {state.name}" in str(info.value)
    assert isinstance(info.value, NodeError)


@pytest.mark.parametrize(
    ("key", "value"), [("checkpoint_interval", 0), ("permission_retry", -5), ("catch_up_slack", 0),
                       ("checkpoint_interval", True), ("permission_retry", 1.5),
                       ("self_grant_after", 0), ("partners", ("r1", "r1"))],
)  # fmt: skip
def test_policy_rejects_bad_values(key: str, value: Any) -> None:
    with pytest.raises(ConsistencyError, match=f"Policy.{key}"):
        Policy(**{key: value})
