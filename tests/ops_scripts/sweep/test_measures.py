"""The state figures of a sweep's row (ops_scripts/sweep/measures.py), on a hand-made
history: the switch, the longest reconciliation and the longest recovery."""

from __future__ import annotations

from ops_scripts.sweep.measures import _state_figures

S = 1_000_000


def test_switch_reconciliation_and_recovery_come_from_the_state_events() -> None:
    events = [
        {"event": "fault", "t": 10 * S},
        {"event": "state", "t": 12 * S, "process": "n1b", "state": "UP_FAILURE"},
        {"event": "state", "t": 13 * S, "process": "n1a", "state": "RECOVERING"},
        {"event": "heal", "t": 14 * S},
        {"event": "state", "t": 14 * S, "process": "n1b", "state": "STABILIZATION"},
        {"event": "state", "t": 14_500_000, "process": "n1b", "state": "STABLE"},
        {"event": "state", "t": 16 * S, "process": "n1a", "state": "STABLE"},
        {"event": "state", "t": 20 * S, "process": "n1b", "state": "RECOVERING"},
        {"event": "state", "t": 21 * S, "process": "n1b", "state": "UP_FAILURE"},
    ]
    out = _state_figures(events)
    assert out["switch_s"] == 2.0
    assert out["reconciliation_s"] == 0.5
    assert out["recovery_s"] == 3.0  # n1a: 13 -> 16; n1b's 20 -> 21 is shorter
    assert out["stable_after_heal_s"] == 2.0
