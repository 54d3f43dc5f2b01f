"""The fault vocabulary (node/faults/ops.py): each operation's ``POST /fault`` body, read back
to the same operation, and the refusals of a bad body (an ActionError naming what is wrong).
What a replica does with an operation is tested in test_fault_action.py."""

from __future__ import annotations

from typing import Any

import pytest

from node.errors import ActionError, NodeError
from node.faults.ops import (
    USAGE,
    Cut,
    CutKind,
    Direction,
    FaultOp,
    Heal,
    Shape,
    Stall,
    Unstall,
    checked_cut,
    from_body,
)

KNOWN = {"s1", "s2", "s3", "n1b", "c1"}

OPS_AND_BODIES: list[tuple[FaultOp, dict[str, Any]]] = [
    (Cut(("s3",)), {"cut": ["s3"]}),  # the defaults (both ways, blackhole) go unsaid
    (Cut(("s1", "s2"), Direction.IN), {"cut": ["s1", "s2"], "direction": "in"}),
    (Cut(("s1",), Direction.OUT), {"cut": ["s1"], "direction": "out"}),
    (Cut(("n1b",), kind=CutKind.RESET), {"cut": ["n1b"], "kind": "reset"}),
    (Cut(()), {"cut": []}),
    (Shape(("s1",), delay=0.1, bandwidth=2000.0), {"shape": ["s1"], "delay": 0.1, "bandwidth": 2000.0}),
    (Shape(("c1",), slow=0.01), {"shape": ["c1"], "slow": 0.01}),
    (Shape(("s2", "s3"), 0.2, 5e4, 0.01),
     {"shape": ["s2", "s3"], "delay": 0.2, "bandwidth": 5e4, "slow": 0.01}),
    (Heal(("s3", "n1b")), {"heal": ["s3", "n1b"]}),
    (Heal(), {"heal": "all"}),
    (Stall(), {"stall": "replay"}),
    (Unstall(), {"unstall": "replay"}),
]


@pytest.mark.parametrize(("op", "body"), OPS_AND_BODIES, ids=lambda x: str(x))
def test_each_operation_has_one_body_that_reads_back_to_it(op: FaultOp, body: dict[str, Any]) -> None:
    assert op.to_body() == body
    assert from_body(body, owner="n1a", known=KNOWN) == op
    assert from_body(op.to_body(), owner="n1a") == op  # known=None: any name


def test_optional_fields_read_as_their_defaults() -> None:
    both = {"cut": ["s3"], "direction": "both", "kind": "blackhole"}
    assert from_body(both, owner="n1a") == Cut(("s3",), Direction.BOTH, CutKind.BLACKHOLE)
    shape = from_body({"shape": ["s2"], "bandwidth": None, "slow": 1}, owner="n1a")
    assert shape == Shape(("s2",), 0.0, None, 1.0) and isinstance(shape, Shape)
    assert isinstance(shape.slow, float)  # checked values come back as floats


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ({}, USAGE),
        ({"cut": ["s3"], "heal": "all"}, USAGE),
        ({"delay": 1}, USAGE),
        ({"cut": "s3"}, "'cut': the names must be a list of process names, got 's3'"),
        ({"heal": None}, "'heal': the names must be a list of process names, got None"),
        ({"shape": ["s1", 2]}, "'shape': the names must be a list of process names"),
        ({"cut": ["nobody", "s3"]}, "unknown process(es) ['nobody']; known: ['c1', 'n1b', 's1',"),
        ({"cut": ["s3"], "delay": 1}, "unknown key(s) ['delay'] with 'cut': it takes "
                                      "['direction', 'kind']; send"),
        ({"heal": "all", "kind": "reset"}, "unknown key(s) ['kind'] with 'heal': it takes "
                                           "nothing else"),
        ({"cut": ["s3"], "direction": "up"},
         "cannot cut 'n1a': direction must be one of 'both', 'in', 'out', got 'up'"),
        ({"cut": ["s3"], "kind": None},
         "cannot cut 'n1a': kind must be one of 'blackhole', 'reset', got None"),
        ({"cut": ["s3"], "kind": "reset", "direction": "out"},
         "cannot cut 'n1a': a reset cuts both ways, so kind 'reset' takes direction 'both', "
         "got 'out'"),
        ({"shape": ["s3"]}, "cannot shape 'n1a': give a delay > 0, a bandwidth or a slow > 0"),
        ({"shape": ["s3"], "bandwidth": -5}, "cannot shape 'n1a': bandwidth must be a finite"),
        ({"shape": ["s3"], "delay": "1s"}, "delay must be a finite number of seconds >= 0, "
                                           "got '1s'"),
        ({"shape": ["s3"], "slow": True}, "slow must be a finite number of seconds >= 0"),
        ({"stall": "everything"}, 'send {"stall": "replay"} or {"unstall": "replay"}'),
        ({"unstall": True}, 'send {"stall": "replay"} or {"unstall": "replay"}'),
    ],
)
def test_a_bad_body_is_an_action_error_naming_what_is_wrong(body: dict[str, Any], why: str) -> None:
    with pytest.raises(ActionError) as caught:
        from_body(body, owner="n1a", known=KNOWN)
    assert why in str(caught.value)


def test_names_are_checked_before_values() -> None:
    """An unknown process is named first, as the replica always did."""
    with pytest.raises(ActionError, match=r"unknown process\(es\) \['nobody'\]"):
        from_body({"cut": ["nobody"], "direction": "up"}, owner="n1a", known=KNOWN)


def test_checked_cut_takes_members_or_values_and_refuses_a_one_way_reset() -> None:
    assert checked_cut("in", "blackhole", "cut 'a'") == (Direction.IN, CutKind.BLACKHOLE)
    assert checked_cut(Direction.BOTH, CutKind.RESET, "cut 'a'") == (Direction.BOTH, CutKind.RESET)
    with pytest.raises(NodeError, match=r"^cannot cut 'a': direction must be one of"):
        checked_cut("sideways", "blackhole", "cut 'a'")
    with pytest.raises(NodeError, match=r"takes direction 'both', got 'in'$"):
        checked_cut(Direction.IN, "reset", "cut 'a'")
