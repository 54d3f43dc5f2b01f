"""The timeline both players follow (ops_scripts/harness/timeline.py): heals counted from the
injection, heals before starts at one time, and kills or pauses that wait for a partner
with a state, then give up."""

from __future__ import annotations

from ops_scripts.harness.schedule import Fault
from ops_scripts.harness.timeline import BLOCKED_LIMIT, RETRY, Timeline, blocked

NODE_OF = {"n1a": "n1", "n1b": "n1", "n2a": "n2"}


def test_heals_follow_the_injection_and_come_before_starts_at_one_time() -> None:
    t = Timeline([Fault(1.0, 2.0, "kill", {"process": "n1a"}),
                  Fault(3.5, 1.0, "stall", {"process": "n1b"})])
    assert t.next() == (1.0, 0, "fault")
    t.injected(0, 1.5)  # injected late: healed 2 s after that, at 3.5
    assert t.next() == (3.5, 0, "heal")  # before the start due at the same time
    assert t.next() == (3.5, 1, "fault")
    t.injected(1, 3.5)
    assert t.next() == (4.5, 1, "heal")
    assert not t


def test_a_blocked_fault_is_looked_at_again_until_the_limit() -> None:
    t = Timeline([Fault(1.0, 2.0, "kill", {"process": "n1a"})])
    assert t.next() == (1.0, 0, "fault")
    assert t.wait(0, 1.0)
    assert t.next() == (1.0 + RETRY, 0, "fault")
    assert not t.wait(0, 1.0 + BLOCKED_LIMIT)  # waited long enough: dropped
    assert not t


def test_a_kill_or_pause_waits_for_a_partner_with_a_state() -> None:
    states = {"n1a": "STABLE", "n1b": "RECOVERING", "n2a": "UP_FAILURE"}
    kill = Fault(0.0, 1.0, "kill", {"process": "n1a"})
    assert blocked(kill, NODE_OF, {}, states.get) == (
        "n1b is RECOVERING: n1a is the last replica of its node with a state")
    assert blocked(kill, NODE_OF, {"n1b": "killed"}, states.get) == (
        "n1b is killed: n1a is the last replica of its node with a state")
    assert blocked(kill, NODE_OF, {}, {"n1a": "STABLE"}.get) == (
        "n1b is unreachable: n1a is the last replica of its node with a state")
    assert blocked(kill, NODE_OF, {"n1a": "paused"}, states.get) == "n1a is still paused"
    states["n1b"] = "UP_FAILURE"  # a partner in a failure still holds a state
    assert blocked(kill, NODE_OF, {}, states.get) is None
    lone = Fault(0.0, 1.0, "pause", {"process": "n2a"})
    assert blocked(lone, NODE_OF, {}, states.get) == (
        "n2a is the only replica of its node: it could not recover")
    assert blocked(Fault(0.0, 1.0, "pause", {"process": "s1"}), NODE_OF, {}, states.get) is None
    assert blocked(Fault(0.0, 1.0, "stall", {"process": "n1a"}), NODE_OF, {"n1b": "killed"},
                   states.get) is None
