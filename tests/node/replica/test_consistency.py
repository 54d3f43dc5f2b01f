"""The consistency manager (node/replica/consistency.py): every entry of the transition table, the
illegal pairs, and a stateful model of a node's two replicas exchanging permission messages
in any order, with delays and losses, checking the protocol's invariants and liveness."""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Iterator
from dataclasses import replace
from typing import Any, TypeVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from node.errors import ConsistencyError, NodeError
from node.replica.consistency import (
    TRANSITIONS,
    Action,
    AskPermission,
    Event,
    Grant,
    InputsStable,
    Log,
    MachineState,
    Method,
    NewFailureDuringStabilization,
    Permission,
    PermissionAsked,
    PermissionGranted,
    PermissionRefused,
    Policy,
    Reconcile,
    ReconciliationProgress,
    RecRequest,
    Refuse,
    ResumeNewInput,
    SendRecDone,
    SetSUnionMode,
    StabilizationStrategy,
    State,
    SuspendNewInput,
    TakeCheckpoint,
    Tick,
    UpFailure,
    UpFailureStrategy,
    is_caught_up,
    next_deadline,
    start,
    step,
)

STABLE, UP, STAB = State.STABLE, State.UP_FAILURE, State.STABILIZATION
SUSPEND = StabilizationStrategy.SUSPEND
MS = 1000
ALL_EVENTS: list[type[Any]] = [
    Tick, UpFailure, RecRequest, PermissionGranted, PermissionRefused, PermissionAsked,
    ReconciliationProgress, NewFailureDuringStabilization, InputsStable,
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


def run(m: MachineState, *events: Event) -> tuple[MachineState, list[Action]]:
    out: list[Action] = []
    for e in events:
        m, actions = step(m, e)
        out += actions
    return m, out


def stable(policy: Policy | None = None, now: int = 0) -> MachineState:
    m, _ = run(start(policy or Policy(), now)[0], Tick(now))  # checkpoint 0 taken
    return m


def up_failure(policy: Policy | None = None, rec: bool = False) -> MachineState:
    m, _ = run(stable(policy), UpFailure(10 * MS))
    if rec:
        m, _ = run(m, RecRequest(20 * MS))  # asks request 1 at 20 ms
    return m


def stabilization(policy: Policy | None = None) -> MachineState:
    m = up_failure(policy, rec=True)
    if m.state is UP:
        m, _ = run(m, PermissionGranted(30 * MS, m.request))
    assert m.state is STAB
    return m


ASK = PermissionAsked(40 * MS, "r1", 1, 7)


# ----------------------------------------------------------------------------------- STABLE
@covers((STABLE, Tick))
def test_stable_tick_checkpoints_at_once_then_every_interval() -> None:
    m, actions = start(Policy(checkpoint_interval=200 * MS), 1000)
    assert actions == [SetSUnionMode(UpFailureStrategy.PROCESS)]
    assert next_deadline(m) == 1000  # checkpoint 0 is due at once
    m, actions = step(m, Tick(1000))
    assert actions == [TakeCheckpoint()] and m.last_checkpoint_at == 1000
    assert next_deadline(m) == 201_000
    m, actions = step(m, Tick(200_999))
    assert actions == [] and m.checkpoints == 1
    m, actions = step(m, Tick(201_000))
    assert actions == [TakeCheckpoint()] and m.checkpoints == 2


@covers((STABLE, UpFailure))
def test_up_failure_enters_up_failure_without_a_checkpoint() -> None:
    m, actions = step(stable(), UpFailure(50 * MS))
    assert (m.state, m.since) == (UP, 50 * MS)
    assert real(actions) == [] and "STABLE -> UP_FAILURE" in logs(actions)
    assert next_deadline(m) is None  # nothing to wait for until the inputs are corrected
    m, actions = step(m, Tick(10_000 * MS))
    assert actions == [] and m.checkpoints == 1  # never in UP_FAILURE


@covers((STABLE, InputsStable))
def test_inputs_stable_in_stable_changes_nothing() -> None:
    m = stable()
    assert step(m, InputsStable(5)) == (m, [])


@covers((STABLE, PermissionAsked))
def test_stable_grants_and_does_not_postpone_anything() -> None:
    m = stable(Policy(stabilization=StabilizationStrategy.DELAY))
    m2, actions = step(m, ASK)
    assert actions == [Grant("r1", 7)] and m2 == m


@covers((STABLE, PermissionGranted), (STABLE, PermissionRefused))
def test_stable_ignores_late_answers() -> None:
    m = stable()
    for e in (PermissionGranted(5, 1), PermissionRefused(5, "busy", 1)):
        m2, actions = step(m, e)
        assert m2 == m and real(actions) == [] and "stale" in logs(actions)


# ------------------------------------------------------------------------------- UP_FAILURE
@covers((UP, Tick))
def test_permission_is_asked_again_every_retry_period() -> None:
    m = up_failure(Policy(permission_retry=500 * MS), rec=True)
    assert next_deadline(m) == 520 * MS
    assert step(m, Tick(519 * MS)) == (m, [])
    m, actions = step(m, Tick(530 * MS))
    assert actions == [AskPermission(Method.CHECKPOINT, 2)] and next_deadline(m) == 1030 * MS
    assert m.permission is Permission.ASKED and m.asked_at == 530 * MS
    # Without a REC_REQUEST there is nothing to ask for.
    assert step(up_failure(), Tick(10**9))[1] == []


@covers((UP, UpFailure))
def test_another_sunions_up_failure_is_the_same_failure() -> None:
    m = up_failure(rec=True)
    assert step(m, UpFailure(99)) == (m, [])


@covers((UP, RecRequest))
def test_rec_request_asks_permission_once() -> None:
    m, actions = step(up_failure(Policy(method=Method.UNDO)), RecRequest(20 * MS))
    assert actions == [AskPermission(Method.UNDO, 1)] and m.rec_request and m.request_pending
    assert step(m, RecRequest(21 * MS)) == (m, [])  # a second SUnion's: already asked


def test_rec_request_with_suspend_reconciles_without_permission() -> None:
    m, actions = step(up_failure(Policy(stabilization=SUSPEND)), RecRequest(20 * MS))
    assert m.state is STAB and m.reconciliations == 1 and not m.rec_request
    assert real(actions) == [SuspendNewInput(), Reconcile(Method.CHECKPOINT)]


@covers((UP, PermissionGranted))
def test_grant_of_the_current_epoch_starts_reconciliation() -> None:
    m = up_failure(rec=True)
    m, _ = run(m, Tick(600 * MS))  # request 2, same epoch as request 1
    m2, actions = step(m, PermissionGranted(700 * MS, 1))  # a late answer to request 1 counts
    assert (m2.state, m2.since, m2.permission) == (STAB, 700 * MS, Permission.GRANTED)
    assert real(actions) == [Reconcile(Method.CHECKPOINT)] and m2.reconciliations == 1
    for bad in (0, 3):  # before our first request, or never sent
        m3, actions = step(m, PermissionGranted(700 * MS, bad))
        assert m3 == m and "stale" in logs(actions)


@covers((UP, PermissionRefused))
def test_refusal_is_counted_and_the_retry_stays_on_schedule() -> None:
    m = up_failure(rec=True)
    m2, actions = step(m, PermissionRefused(100 * MS, "reconciling", 1))
    assert m2.permission is Permission.REFUSED and m2.refusals == 1 and real(actions) == []
    assert next_deadline(m2) == next_deadline(m) == 520 * MS
    m3, actions = step(m2, PermissionRefused(100 * MS, "reconciling", 5))  # never asked
    assert m3 == m2 and "stale" in logs(actions)


@covers((UP, PermissionAsked))
def test_pending_request_refuses_a_lower_ranked_requester() -> None:
    m = up_failure(Policy(rank=0), rec=True)
    m2, actions = step(m, ASK)
    assert m2 == m and actions == [Refuse("r1", 7, "own request pending, rank 0 outranks 1")]


def test_pending_request_grants_a_higher_ranked_requester_and_withdraws() -> None:
    m = up_failure(Policy(rank=1), rec=True)
    m, actions = step(m, PermissionAsked(40 * MS, "r0", 0, 3))
    assert real(actions) == [Grant("r0", 3)] and m.permission is Permission.POSTPONED
    assert not m.request_pending and m.postponing and next_deadline(m) == 540 * MS
    # The grant to our withdrawn request is stale: we must not reconcile beside r0.
    m2, actions = step(m, PermissionGranted(50 * MS, 1))
    assert m2 == m and "stale" in logs(actions)
    # One retry period later we ask afresh, in a new epoch.
    m, actions = step(m, Tick(540 * MS))
    assert actions == [AskPermission(Method.CHECKPOINT, 2)] and m.epoch == 2
    assert step(m, PermissionGranted(600 * MS, 2))[0].state is STAB


def test_crossed_requests_with_a_grant_in_flight_never_both_reconcile() -> None:
    """r0 grants r1 before needing to reconcile itself, then asks; r1, outranked, grants
    too. Both grants were honest when sent; only r1's withdrawal keeps r1 out."""
    r0, r1 = up_failure(Policy(rank=0)), up_failure(Policy(rank=1))
    r1, asked = step(r1, RecRequest(20 * MS))
    r0, grant_to_r1 = step(r0, PermissionAsked(21 * MS, "r1", 1, 1))  # in flight
    r0, _ = step(r0, RecRequest(22 * MS))
    r1, grant_to_r0 = step(r1, PermissionAsked(23 * MS, "r0", 0, 1))
    assert asked[0] == AskPermission(Method.CHECKPOINT, 1) and grant_to_r1 == [Grant("r1", 1)]
    assert real(grant_to_r0) == [Grant("r0", 1)]
    r0, _ = step(r0, PermissionGranted(24 * MS, 1))
    r1, _ = step(r1, PermissionGranted(25 * MS, 1))  # the grant that was in flight: stale
    assert (r0.state, r1.state) == (STAB, UP)


def test_without_a_request_up_failure_grants() -> None:
    m, actions = step(up_failure(Policy(rank=0)), ASK)
    assert actions == [Grant("r1", 7)] and m.postponing and m.permission is Permission.NONE


def test_postponing_partner_runs_its_sunion_in_the_stabilization_mode() -> None:
    policy = Policy(up_failure=UpFailureStrategy.PROCESS, stabilization=StabilizationStrategy.DELAY)
    m = up_failure(policy)
    m, actions = step(m, ASK)
    assert actions == [Grant("r1", 7), SetSUnionMode(UpFailureStrategy.DELAY)]
    m, actions = run(m, RecRequest(50 * MS), PermissionGranted(60 * MS, 1))
    assert m.state is STAB and actions[-1] == SetSUnionMode(UpFailureStrategy.PROCESS)
    # SUSPEND has no serving partner: the mode never changes.
    m, actions = step(up_failure(Policy(stabilization=SUSPEND)), ASK)
    assert actions == [Grant("r1", 7)]


def test_equal_ranks_are_a_misconfiguration() -> None:
    with pytest.raises(ConsistencyError, match="ranks of one node's replicas must differ"):
        step(up_failure(Policy(rank=1)), ASK)


@covers((UP, InputsStable))
def test_inputs_stable_without_tentative_output_returns_to_stable() -> None:
    m, actions = step(up_failure(), InputsStable(70 * MS))
    assert m.state is STABLE and real(actions) == []
    assert next_deadline(m) == 70 * MS  # a fresh checkpoint at once
    with pytest.raises(ConsistencyError, match="must be reconciled first"):
        step(up_failure(rec=True), InputsStable(70 * MS))


# ---------------------------------------------------------------------------- STABILIZATION
@covers((STAB, Tick))
def test_stabilization_takes_no_checkpoint_and_asks_nothing() -> None:
    m = stabilization()
    assert next_deadline(m) is None
    assert step(m, Tick(10**9)) == (m, [])


@covers((STAB, UpFailure), (STAB, NewFailureDuringStabilization))
def test_new_failure_during_stabilization_ends_in_up_failure() -> None:
    for e in (UpFailure(40 * MS), NewFailureDuringStabilization(40 * MS)):
        m, actions = step(stabilization(), e)
        assert m.state is STAB and m.new_failure and len(actions) == 1
        assert step(m, e) == (m, [])  # once is enough
        m, actions = step(m, ReconciliationProgress(90 * MS, True, 0))
        assert m.state is UP and real(actions) == [SendRecDone()] and next_deadline(m) is None


@covers((STAB, RecRequest))
def test_rec_request_during_stabilization_is_served_on_the_way_out() -> None:
    m, actions = step(stabilization(), RecRequest(40 * MS))
    assert actions == [] and m.rec_request
    m, actions = step(m, ReconciliationProgress(90 * MS, True, 0))
    assert m.state is UP and real(actions) == [SendRecDone(), AskPermission(Method.CHECKPOINT, 2)]
    # With SUSPEND it reconciles again at once, input still held.
    m, _ = run(stabilization(Policy(stabilization=SUSPEND)), RecRequest(40 * MS))
    m, actions = step(m, ReconciliationProgress(90 * MS, True, 0))
    assert m.state is STAB and m.reconciliations == 2 and not m.rec_request
    assert real(actions) == [SendRecDone(), ResumeNewInput(), SuspendNewInput(),
                             Reconcile(Method.CHECKPOINT)]  # fmt: skip


@covers((STAB, ReconciliationProgress))
def test_stabilization_ends_when_caught_up_with_every_rec_done_in() -> None:
    m = stabilization()
    assert step(m, ReconciliationProgress(50 * MS, False, 0)) == (m, [])
    assert step(m, ReconciliationProgress(50 * MS, True, 2)) == (m, [])
    m, actions = step(m, ReconciliationProgress(60 * MS, True, 0))
    assert (m.state, m.since) == (STABLE, 60 * MS) and real(actions) == [SendRecDone()]
    assert next_deadline(m) == 60 * MS and step(m, Tick(60 * MS))[1] == [TakeCheckpoint()]
    with pytest.raises(ConsistencyError, match="rec_dones_pending must be >= 0"):
        step(stabilization(), ReconciliationProgress(60 * MS, True, -1))


def test_suspend_resumes_input_after_rec_done() -> None:
    m, actions = step(stabilization(Policy(stabilization=SUSPEND)), ReconciliationProgress(9, True, 0))
    assert m.state is STABLE and real(actions) == [SendRecDone(), ResumeNewInput()]


@covers((STAB, PermissionAsked))
def test_stabilization_refuses_everyone() -> None:
    m = stabilization(Policy(rank=5))
    assert step(m, ASK) == (m, [Refuse("r1", 7, "reconciling")])


@covers((STAB, PermissionGranted), (STAB, PermissionRefused))
def test_stabilization_ignores_answers_to_earlier_requests() -> None:
    m = stabilization()
    for e in (PermissionGranted(5, 1), PermissionRefused(5, "busy", 1)):
        m2, actions = step(m, e)
        assert m2 == m and "stale" in logs(actions)


# ------------------------------------------------------------------------- table and errors
ILLEGAL = {
    (STABLE, RecRequest), (STABLE, ReconciliationProgress), (STABLE, NewFailureDuringStabilization),
    (UP, ReconciliationProgress), (UP, NewFailureDuringStabilization), (STAB, InputsStable),
}  # fmt: skip
SAMPLE: dict[type[Any], Event] = {
    Tick: Tick(1), UpFailure: UpFailure(1), RecRequest: RecRequest(1),
    PermissionGranted: PermissionGranted(1, 1), PermissionRefused: PermissionRefused(1, "x", 1),
    PermissionAsked: ASK, ReconciliationProgress: ReconciliationProgress(1, True, 0),
    NewFailureDuringStabilization: NewFailureDuringStabilization(1), InputsStable: InputsStable(1),
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
                       ("checkpoint_interval", True), ("permission_retry", 1.5)],
)  # fmt: skip
def test_policy_rejects_bad_timings(key: str, value: Any) -> None:
    with pytest.raises(ConsistencyError, match=f"Policy.{key}"):
        Policy(**{key: value})


def test_caught_up_means_less_than_the_slack_behind() -> None:
    p = Policy(catch_up_slack=200 * MS)
    assert is_caught_up(p, 199_999) and not is_caught_up(p, 200_000)
    assert is_caught_up(replace(p, catch_up_slack=1), 0)


# -------------------------------------------------------- two replicas of one node, a model
NAMES = ("r0", "r1")
Message = tuple[int, str, int, str]  # (to, "ask" | "Grant" | "Refuse", request, reason)


class Node:
    """Replicas r0 (rank 0) and r1 (rank 1) of one node sharing a policy, the permission
    messages in flight between them (``net``: delivered in any order, late, or never), and
    what their runtimes know. Every step is checked against the protocol's invariants."""

    def __init__(self, policy: Policy) -> None:
        self.m = [start(replace(policy, rank=i), 0)[0] for i in (0, 1)]
        self.now = 0
        self.net: list[Message] = []
        self.awaiting = [False, False]  # a RecRequest not yet followed by a Reconcile
        self.seen = [[0, 0], [0, 0]]  # TakeCheckpoint and Reconcile actions, per replica
        self.suspended = [False, False]
        # The SUnions' failure episode, as the runtime sees it: None, "open" (UP_FAILURE
        # signalled) or "corrected" (REC_REQUEST signalled, once: it is never repeated).
        self.episode: list[str | None] = [None, None]
        self.exclusive = policy.stabilization is not SUSPEND

    def copy(self) -> Node:
        new = copy.copy(self)
        new.m, new.net, new.awaiting = list(self.m), list(self.net), list(self.awaiting)
        new.seen, new.suspended = [list(x) for x in self.seen], list(self.suspended)
        new.episode = list(self.episode)
        return new

    def key(self) -> Hashable:
        return (*self.m, tuple(sorted(self.net)), self.now, *self.awaiting, *self.suspended,
                *self.episode)  # fmt: skip

    def feed(self, i: int, event: Event) -> None:
        before = self.m[i]
        after, actions = step(before, event)
        self.m[i] = after
        if isinstance(event, RecRequest):
            self.awaiting[i] = True
            self.episode[i] = "corrected"
        elif isinstance(event, UpFailure | NewFailureDuringStabilization) and not self.episode[i]:
            self.episode[i] = "open"
        elif isinstance(event, InputsStable):
            self.episode[i] = None
        for a in actions:
            if isinstance(a, TakeCheckpoint):
                assert before.state is STABLE and after.state is STABLE, "checkpoint outside STABLE"
                self.seen[i][0] += 1
            elif isinstance(a, Reconcile):
                assert after.state is STAB, "Reconcile without entering STABILIZATION"
                assert isinstance(event, PermissionGranted) or not self.exclusive, "no permission"
                self.awaiting[i] = False
                self.episode[i] = None  # reconciliation ends the SUnions' episode
                self.seen[i][1] += 1
            elif isinstance(a, SendRecDone):
                assert before.state is STAB, "REC_DONE from outside STABILIZATION"
            elif isinstance(a, SuspendNewInput | ResumeNewInput):
                assert self.suspended[i] is isinstance(a, ResumeNewInput)
                self.suspended[i] = not self.suspended[i]
            elif isinstance(a, AskPermission):
                self.net.append((1 - i, "ask", a.request, ""))
            elif isinstance(a, Grant | Refuse):
                to = NAMES.index(a.requester)
                self.net.append((to, type(a).__name__, a.request, getattr(a, "reason", "")))
        self.check()

    def deliver(self, k: int) -> None:
        to, kind, request, reason = self.net.pop(k)
        event: Event
        if kind == "ask":
            event = PermissionAsked(self.now, NAMES[1 - to], 1 - to, request)
        elif kind == "Grant":
            event = PermissionGranted(self.now, request)
        else:
            event = PermissionRefused(self.now, reason, request)
        self.feed(to, event)

    def tick_at_deadline(self, i: int) -> None:
        d = next_deadline(self.m[i])
        if d is not None:
            self.now = max(self.now, d)
            self.feed(i, Tick(self.now))

    def check(self) -> None:
        if self.exclusive:
            assert not all(m.state is STAB for m in self.m), "both replicas reconcile at once"
        for m, episode, seen in zip(self.m, self.episode, self.seen, strict=True):
            waits_for_partner = m.state is UP and m.rec_request and self.exclusive
            if m.state is STABLE or waits_for_partner:
                assert next_deadline(m) is not None, f"stuck without a deadline: {m}"
            assert not m.request_pending or m.state is UP
            assert m.state is not STABLE or episode is None, f"STABLE in an episode: {m}"
            assert [m.checkpoints, m.reconciliations] == seen

    def heal(self) -> None:
        """Liveness: let everything flow (reliable delivery, ticks at deadlines, corrected
        inputs, caught-up replays); both replicas must get back to STABLE, and every
        REC_REQUEST must have led to a Reconcile."""
        for _ in range(30):
            while self.net:
                self.deliver(0)
            for i in (0, 1):
                if self.m[i].state is STAB:
                    self.feed(i, ReconciliationProgress(self.now, True, 0))
                elif self.episode[i] == "open":
                    self.feed(i, RecRequest(self.now))
            if not self.net and all(m.state is STABLE for m in self.m):
                break
            waiting = [i for i in (0, 1) if self.m[i].state is UP]
            for i in sorted(waiting, key=lambda i: next_deadline(self.m[i]) or 0):
                self.tick_at_deadline(i)
        assert all(m.state is STABLE for m in self.m), f"stuck: {self.m}, {self.net}"
        assert self.awaiting == [False, False], "a RecRequest never led to Reconcile"
        assert self.suspended == [False, False]


Move = tuple[str, str, int]  # (budget it spends or "free", what, replica or message index)


def moves(node: Node, budget: dict[str, int]) -> Iterator[Move]:
    """Every move the world can make next, each kind at most ``budget[kind]`` times a run."""
    for i, m in enumerate(node.m):
        if m.state is STABLE and budget["failures"]:
            yield "failures", "fail", i
        if m.state is STAB and not m.new_failure and budget["failures"]:
            yield "failures", "fail again", i
        if node.episode[i] == "open":
            yield "free", "correct", i
        if m.state is STAB:
            yield "free", "catch up", i
        if m.state is UP and next_deadline(m) is not None and budget["ticks"]:
            yield "ticks", "tick", i
    for msg in set(node.net):  # equal messages lead to equal states
        yield "free", "deliver", node.net.index(msg)
        if budget["losses"]:
            yield "losses", "lose", node.net.index(msg)


def play(n: Node, what: str, x: int) -> None:
    if what == "deliver":
        n.deliver(x)
    elif what == "lose":
        n.net.pop(x)
    elif what == "tick":
        n.tick_at_deadline(x)
    elif what == "fail":
        n.feed(x, UpFailure(n.now))
    elif what == "fail again":
        n.feed(x, NewFailureDuringStabilization(n.now))
    elif what == "correct":
        n.feed(x, RecRequest(n.now))
    else:
        assert what == "catch up"
        n.feed(x, ReconciliationProgress(n.now, True, 0))


# DELAY explores the same graph as PROCESS (only SetSUnionMode differs): not repeated.
@pytest.mark.parametrize(("stab", "states"), [(StabilizationStrategy.PROCESS, 17378), (SUSPEND, 66)])
def test_every_interleaving_of_a_bounded_failure(stab: StabilizationStrategy, states: int) -> None:
    """Exhaustive search where the random one below is thin (crossed requests with a grant
    still in flight need a precise order): three failures per node, each hitting either
    replica, in STABLE or during stabilization; every order of events and deliveries; one
    lost message; one retry. Every reachable state keeps the invariants (``Node.feed``
    checks them), and from every one of them ``heal`` gets both replicas back to STABLE."""
    seen: set[Hashable] = set()
    todo = [(Node(Policy(stabilization=stab)), {"failures": 3, "ticks": 1, "losses": 1})]
    while todo:
        node, budget = todo.pop()
        key = (node.key(), tuple(budget.values()))
        if key in seen:
            continue
        seen.add(key)
        node.copy().heal()
        for kind, what, x in moves(node, budget):
            nxt = node.copy()
            play(nxt, what, x)
            todo.append((nxt, budget if kind == "free" else {**budget, kind: budget[kind] - 1}))
    assert len(seen) == states  # the search space is the one meant (and it really branched)


class TwoReplicas(RuleBasedStateMachine):
    """The same node, driven at random for longer runs: unbounded failures, any policy."""

    def __init__(self) -> None:
        super().__init__()
        self.node: Node | None = None

    @initialize(
        up=st.sampled_from(UpFailureStrategy), stab=st.sampled_from(StabilizationStrategy),
        method=st.sampled_from(Method),
    )  # fmt: skip
    def setup(self, up: UpFailureStrategy, stab: StabilizationStrategy, method: Method) -> None:
        self.node = Node(Policy(up, stab, method))

    @property
    def n(self) -> Node:
        assert self.node is not None
        return self.node

    def pick(self, data: st.DataObject, ok: Callable[[int], bool]) -> list[int]:
        """Some replicas for which ``ok`` holds, in either order: both replicas of a node
        read the same upstream, so failures and corrections tend to hit both at once,
        which is when their permission requests cross."""
        eligible = [i for i in (0, 1) if ok(i)]
        return data.draw(st.permutations(eligible).flatmap(
            lambda p: st.integers(1, len(p)).map(lambda n: p[:n])), label="replicas")  # fmt: skip

    def _failable(self, i: int) -> bool:
        return self.n.m[i].state is not UP and not self.n.m[i].new_failure

    def _open(self, i: int) -> bool:
        return self.n.episode[i] == "open"

    def _stabilizing(self, i: int) -> bool:
        return self.n.m[i].state is STAB

    # Each rule fires only where it means something, so that the steps go to the races.
    @rule(dt=st.integers(0, 700 * MS), i=st.integers(0, 1))
    def time_passes(self, dt: int, i: int) -> None:
        self.n.now += dt
        self.n.feed(i, Tick(self.n.now))  # early, late, or pointless: must all be harmless

    @rule(i=st.integers(0, 1))
    def tick_at_deadline(self, i: int) -> None:
        self.n.tick_at_deadline(i)

    @precondition(lambda self: any(map(self._failable, (0, 1))))
    @rule(data=st.data())
    def failure(self, data: st.DataObject) -> None:
        for i in self.pick(data, self._failable):
            new = self._stabilizing(i) and data.draw(st.booleans(), label="NewFailureDuring...")
            self.n.feed(i, NewFailureDuringStabilization(self.n.now) if new else UpFailure(self.n.now))

    @precondition(lambda self: any(map(self._open, (0, 1))))
    @rule(data=st.data())
    def failure_heals(self, data: st.DataObject) -> None:
        for i in self.pick(data, self._open):
            # Rarely without any tentative output (HA-driven, shorter than alpha*X).
            quiet = self.n.m[i].state is UP and data.draw(st.integers(0, 4), label="quiet") == 0
            self.n.feed(i, InputsStable(self.n.now) if quiet else RecRequest(self.n.now))

    @precondition(lambda self: any(map(self._stabilizing, (0, 1))))
    @rule(data=st.data(), caught_up=st.booleans(), pending=st.integers(0, 2))
    def replay_progress(self, data: st.DataObject, caught_up: bool, pending: int) -> None:
        for i in self.pick(data, self._stabilizing):
            self.n.feed(i, ReconciliationProgress(self.n.now, caught_up, pending))

    @precondition(lambda self: self.n.net)
    @rule(data=st.data())
    def deliver_one(self, data: st.DataObject) -> None:
        k = data.draw(st.integers(0, len(self.n.net) - 1), label="message")
        if data.draw(st.integers(0, 5), label="lost") == 0:
            self.n.net.pop(k)  # retries must make up for it
        else:
            self.n.deliver(k)

    @invariant()
    def protocol_invariants(self) -> None:
        if self.node is not None:
            self.node.check()

    def teardown(self) -> None:
        if self.node is not None:
            self.node.heal()


TestTwoReplicas = TwoReplicas.TestCase
TestTwoReplicas.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)
