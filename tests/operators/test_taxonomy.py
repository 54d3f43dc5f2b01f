"""The operator taxonomy of Hwang et al. (operators/taxonomy.py): every operator declares its
class, a network is as general as its most general operator, and the declared classes hold:
restarted from an empty state on the same input from a later point, a repeatable network
reproduces the tuples it produced (some missing at the start, none new), a convergent-capable
one may start with different tuples, then produces the same."""

from __future__ import annotations

import random
from typing import Any

import pytest

from operators import OPERATORS, NetworkSpec, QueryNetwork
from operators.network import network_class
from operators.taxonomy import (
    RecoveryClass,
    RecoveryType,
    promised_recovery,
    replicas_share_state,
)
from protocol.tuples import Kind, Tuple, boundary, make_tuple

BUCKET = 100
SCHEMA = ("key", "value")


def test_every_operator_declares_its_class() -> None:
    undeclared = [name for name, cls in OPERATORS.items()
                  if not any("recovery_class" in vars(k) for k in cls.__mro__[:-1]
                             if k.__name__ != "Operator")]
    assert not undeclared, f"operators without a recovery_class of their own: {undeclared}"


def test_the_classes_are_ordered_by_containment() -> None:
    order = [RecoveryClass.REPEATABLE, RecoveryClass.CONVERGENT_CAPABLE,
             RecoveryClass.DETERMINISTIC, RecoveryClass.ARBITRARY]
    assert sorted(order) == order
    assert [c.label for c in order] == ["repeatable", "convergent-capable", "deterministic",
                                        "arbitrary"]


def _spec(middle: list[dict[str, Any]], last: str) -> NetworkSpec:
    return NetworkSpec.from_dict({
        "inputs": {"s1": list(SCHEMA)},
        "operators": [{"name": "u", "type": "sunion", "inputs": ["s1"], "bucket": BUCKET,
                       "wait": 10**12}, *middle,
                      {"name": "out", "type": "soutput", "inputs": [last]}],
        "outputs": ["out"],
    })


FILTER = [{"name": "f", "type": "filter", "inputs": ["u"], "where": "value >= 20"}]
MAP = [{"name": "m", "type": "map", "inputs": ["u"],
        "fields": {"key": "key", "double": "value * 2"}}]
JOIN = [{"name": "lo", "type": "filter", "inputs": ["u"], "where": "value < 50"},
        {"name": "hi", "type": "filter", "inputs": ["u"], "where": "value >= 50"},
        {"name": "j", "type": "join", "inputs": ["lo", "hi"], "on": [["key", "key"]],
         "band": 150}]
UNION = [{"name": "lo", "type": "filter", "inputs": ["u"], "where": "value < 50"},
         {"name": "hi", "type": "filter", "inputs": ["u"], "where": "value >= 50"},
         {"name": "both", "type": "union", "inputs": ["lo", "hi"]}]
AGGREGATE = [{"name": "a", "type": "aggregate", "inputs": ["u"], "window": 4 * BUCKET,
              "group_by": ["key"], "aggregates": [{"fn": "count", "as": "n"}]}]
CASES = {"filter": (FILTER, "f", RecoveryClass.REPEATABLE),
         "map": (MAP, "m", RecoveryClass.REPEATABLE),
         "join": (JOIN, "j", RecoveryClass.REPEATABLE),
         "union": (UNION, "both", RecoveryClass.REPEATABLE),
         "aggregate": (AGGREGATE, "a", RecoveryClass.CONVERGENT_CAPABLE)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_network_is_as_general_as_its_most_general_operator(case: str) -> None:
    middle, last, cls = CASES[case]
    got = network_class(_spec(middle, last))
    assert got.cls is cls
    if cls is RecoveryClass.REPEATABLE:
        assert got.operator is None and "every operator is repeatable" in str(got)
    else:
        assert got.operator == last and str(got).startswith(f"{cls.label} (aggregate '{last}'")


def test_an_unknown_operator_type_counts_as_arbitrary() -> None:
    spec = _spec([{"name": "x", "type": "mystery", "inputs": ["u"]}], "x")
    assert network_class(spec).cls is RecoveryClass.ARBITRARY  # (building it refuses it)


def _batches(seed: int, buckets: int = 24) -> list[list[Tuple]]:
    rng, out, i = random.Random(seed), [], 0
    for b in range(buckets):
        batch = []
        for t in sorted(rng.randrange(b * BUCKET, (b + 1) * BUCKET) for _ in range(8)):
            i += 1
            batch.append(make_tuple(Kind.STABLE, i, t, t, (rng.randrange(3), rng.randrange(100))))
        out.append([*batch, boundary((b + 1) * BUCKET)])
    return out


def _run(spec: NetworkSpec, batches: list[list[Tuple]]) -> list[tuple[Any, ...]]:
    """The output's data tuples as (time, values): ids are stream positions, not content."""
    net, got = QueryNetwork(spec), []
    for batch in batches:
        out = net.push("s1", batch, batch[-1][2])
        got += [(t[2], t[4]) for t in out.outputs["out"] if t[0] is Kind.STABLE]
    return got


def _is_subsequence(part: list[Any], whole: list[Any]) -> bool:
    it = iter(whole)
    return all(any(x == y for y in it) for x in part)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("seed", range(3))
def test_the_declared_class_holds_on_a_restart(case: str, seed: int) -> None:
    """A fresh network fed the same input from bucket 6 on (mid-window for the aggregate)."""
    middle, last, cls = CASES[case]
    spec = _spec(middle, last)
    batches = _batches(seed)
    whole, restarted = _run(spec, batches), _run(spec, batches[6:])
    assert whole and restarted
    # Both: the restart ends as the failure-free run does (it converges).
    tail = [x for x in restarted if x[0] >= 12 * BUCKET]
    assert tail and whole[-len(tail):] == tail
    new = [x for x in restarted if x not in whole]
    if cls is RecoveryClass.REPEATABLE:  # nothing new, in the same order
        assert not new and _is_subsequence(restarted, whole)
    else:  # the window the restart cut into comes out different
        assert new and all(x[0] < 8 * BUCKET for x in new)


# ---------------------------------------------------------------- Table 2: what a mode promises
P, D, G = RecoveryType.PRECISE, RecoveryType.DIVERGENT, RecoveryType.GAP
#: Our Table 2 (operators/taxonomy.py), written out again: ha -> repeatable,
#: convergent-capable, deterministic, arbitrary.
TABLE_2 = {
    "dpc": (P, P, P, P),
    "active_standby": (P, P, P, D),
    "passive_standby": (P, P, P, D),
    "upstream_backup": (P, P, D, D),
    "amnesia": (G, G, G, G),
}


@pytest.mark.parametrize("ha", sorted(TABLE_2))
def test_each_mode_promises_its_row_of_table_2(ha: str) -> None:
    assert tuple(promised_recovery(ha, cls) for cls in RecoveryClass) == TABLE_2[ha]


def test_an_unknown_mode_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"unknown high-availability mode ha = 'hot' "
                                         r"\(known: 'dpc', "):
        promised_recovery("hot", RecoveryClass.REPEATABLE)
    with pytest.raises(ValueError, match=r"ha = 'hot'"):
        replicas_share_state("hot")


def test_the_recovery_types_are_ordered_weakest_last_and_the_checker_sees_the_same() -> None:
    from ops_scripts.check.recovery import RecoveryType as Reexported

    assert Reexported is RecoveryType
    assert max(RecoveryType) is RecoveryType.GAP and min(RecoveryType) is RecoveryType.PRECISE
    assert [t.label for t in RecoveryType] == ["precise", "repeating", "convergent",
                                               "divergent", "gap"]


def test_only_modes_whose_replicas_all_process_share_their_state() -> None:
    assert {ha for ha in TABLE_2 if replicas_share_state(ha)} == {"dpc", "active_standby"}
