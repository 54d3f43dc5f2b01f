"""The world of the consistency manager's tests (test_consistency_transitions.py,
test_consistency_model.py): a replica's policy, its partners' answers, and one replica's
machine driven into each state (STABLE, UP_FAILURE with or without a REC_REQUEST,
STABILIZATION)."""

from __future__ import annotations

from typing import Any

from node.replica.consistency import (
    Action,
    Event,
    MachineState,
    PartnerAnswered,
    PermissionAsked,
    Policy,
    RecRequest,
    StabilizationStrategy,
    State,
    Tick,
    UpFailure,
    start,
    step,
)

STABLE, UP, STAB = State.STABLE, State.UP_FAILURE, State.STABILIZATION
SUSPEND = StabilizationStrategy.SUSPEND
MS = 1000
U = "u"  # the node's SUnion


def policy(**kw: Any) -> Policy:
    """A policy of a replica whose one partner is r1 (unless ``partners`` says otherwise)."""
    return Policy(**{"partners": ("r1",), **kw})


def granted(now: int, request: int, partner: str = "r1") -> PartnerAnswered:
    return PartnerAnswered(now, partner, request, True)


def refused(now: int, request: int, reason: str, partner: str = "r1") -> PartnerAnswered:
    return PartnerAnswered(now, partner, request, False, reason)


def run(m: MachineState, *events: Event) -> tuple[MachineState, list[Action]]:
    out: list[Action] = []
    for e in events:
        m, actions = step(m, e)
        out += actions
    return m, out


def stable(policy: Policy | None = None, now: int = 0) -> MachineState:
    m, _ = run(start(policy or POLICY, now)[0], Tick(now))  # checkpoint 0 taken
    return m


def up_failure(policy: Policy | None = None, rec: bool = False) -> MachineState:
    m, _ = run(stable(policy), UpFailure(10 * MS, U))
    if rec:
        m, _ = run(m, RecRequest(20 * MS, U))  # asks request 1 at 20 ms
    return m


def stabilization(policy: Policy | None = None) -> MachineState:
    m = up_failure(policy, rec=True)
    if m.state is UP:
        m, _ = run(m, granted(30 * MS, m.request))
    assert m.state is STAB
    return m


ASK = PermissionAsked(40 * MS, "r1", 1, 7)
POLICY = policy()
