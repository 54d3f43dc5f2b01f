"""A query network's reconciliation replay, vectorized (QueryNetwork.set_engine) or not.

Random input on two streams, a failure (one stream stops; SUnion releases tentative
buckets), the stream's data coming back late, then checkpoint/redo: rewind, the replay in
steps, REC_DONE. With the engine ``vectorized`` every call returns exactly what it returns
with ``inproc``, and the operators end in exactly the same state, whatever the network
(filters into a band join, then a map and a sliding aggregate; or a map into a tumbling
aggregate of floats grouped by two attributes) and the step.
"""

from __future__ import annotations

import random
import tempfile
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators import OperatorError, QueryNetwork
from protocol.tuples import Kind, Tuple, boundary, make_tuple

BUCKET = 100


#: Operators that run vectorized in each replay step, by kind of network (all, SOutput too).
VECTORIZED = {"join": 5, "map-aggregate": 7, "aggregate": 4}
FUNCTIONS = [{"fn": "count", "as": "n"},
             *({"fn": fn, "attr": attr, "as": f"{fn}_{attr}"}
               for fn in ("sum", "avg", "min", "max") for attr in ("value", "f"))]


def spec(kind: str, band: int) -> dict[str, Any]:
    sunion = {"name": "u", "type": "sunion", "inputs": ["s1", "s2"], "bucket": BUCKET,
              "wait": 50}
    below: list[dict[str, Any]] = [
        {"name": "m", "type": "map", "inputs": ["u"],
         "fields": {"key": "key", "odd": "value % 2", "value": "value", "f": "value / 7.0"}},
        {"name": "a", "type": "aggregate", "inputs": ["m"], "window": 150,
         "group_by": ["key", "odd"], "aggregates": FUNCTIONS},
    ] if kind == "aggregate" else [
        {"name": "lo", "type": "filter", "inputs": ["u"], "where": "value < 50"},
        {"name": "hi", "type": "filter", "inputs": ["u"], "where": "value >= 40"},
        {"name": "j", "type": "join", "inputs": ["lo", "hi"], "on": [["key", "key"]],
         "band": band},
    ]
    if kind == "map-aggregate":  # (below the join)
        below += [{"name": "m", "type": "map", "inputs": ["j"],
                   "fields": {"key": "key", "d": "value - right_value"}},
                  {"name": "a", "type": "aggregate", "inputs": ["m"], "window": 300,
                   "slide": 100, "group_by": ["key"],
                   "aggregates": [{"fn": "sum", "attr": "d", "as": "total"}]}]
    last = below[-1]["name"]
    return {"inputs": {"s1": ["key", "value"], "s2": ["key", "value"]},
            "operators": [sunion, *below, {"name": "out", "type": "soutput", "inputs": [last]}],
            "outputs": ["out"]}


def bucket_tuples(rng: random.Random, first_id: int, lo: int, hi: int) -> list[Tuple]:
    times = sorted(rng.randrange(lo * BUCKET, hi * BUCKET) for _ in range(rng.randint(1, 40)))
    return [make_tuple(Kind.STABLE, first_id + k, t, t, (rng.randint(0, 4), rng.randint(0, 99)))
            for k, t in enumerate(times)] + [boundary(hi * BUCKET)]


def scenario(net: QueryNetwork, seed: int, step: int | None) -> list[Any]:
    rng = random.Random(seed)
    calls: list[Any] = []
    net.set_replay_step(step)
    for s in ("s1", "s2"):
        calls.append(net.push(s, bucket_tuples(rng, 1 if s == "s1" else 10**6, 0, 3), 0))
    point = net.checkpoint()
    calls.append(net.push("s1", bucket_tuples(rng, 1000, 3, 9), 10))
    calls.append(net.on_timer(10**6))  # s2 is silent: the pending buckets go tentative
    assert net.in_failure
    calls.append(net.push("s2", bucket_tuples(rng, 2 * 10**6, 3, 9), 10**6 + 1))
    calls.append(net.rewind(point, 10**6 + 2))
    while net.replaying:
        calls.append(net.replay(10**6 + 3))
    calls.append(net.end_reconciliation(10**6 + 4))
    return [(c.outputs, c.signals) for c in calls]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.sampled_from([None, 1, 4]),
       st.sampled_from(list(VECTORIZED)), st.sampled_from([0, 150, 400]),
       st.sampled_from([None, 0, 2000]))
def test_a_vectorized_replay_equals_the_per_tuple_replay(seed: int, step: int | None,
                                                        kind: str, band: int,
                                                        spill: int | None) -> None:
    """``spill``: the memory bound (bytes) on what SUnion keeps, None for no bound: the
    vectorized replay reads the spilled buckets as Arrow tables."""
    inproc, vectorized = QueryNetwork(spec(kind, band)), QueryNetwork(spec(kind, band))
    vectorized.set_engine("vectorized")
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        if spill is not None:
            inproc.set_spill(a, spill)
            vectorized.set_spill(b, spill)
        expected = scenario(inproc, seed, step)
        assert scenario(vectorized, seed, step) == expected
        assert vectorized.snapshot() == inproc.snapshot()
        if spill == 0:  # (how much the undo logs spill may differ: runtime, not state)
            assert vectorized.spill_stats().written_tuples > 0
            # Every release was built from the spilled segments, not from tuples, and
            # every operator ran vectorized.
            steps = len(expected[5:-1])  # the rewind and the replay calls
            assert vectorized.replay_runs["vectorized"] == steps * VECTORIZED[kind]
    # The operators ran vectorized (a step holding tentative buckets goes per tuple).
    assert vectorized.replay_runs["vectorized"] >= 4 and inproc.replay_runs == {
        "vectorized": 0, "per_tuple": 0}


def test_the_scenario_replays_corrections() -> None:
    """What the property test compares is not empty: the replay (the calls after the
    tentative input's correction) emits stable results, vectorized."""
    net = QueryNetwork(spec("join", 400))
    net.set_engine("vectorized")
    calls = scenario(net, 1, None)
    replayed = [t for outputs, _ in calls[5:] for t in outputs["out"]]
    assert sum(t.kind is Kind.STABLE for t in replayed) > 10
    assert net.replay_runs["vectorized"] == 5  # u, lo, hi, j, out (one step: all at once)


def test_an_unknown_engine_is_refused_by_name() -> None:
    with pytest.raises(OperatorError, match=r"unknown replay engine 'spark2'.*inproc, vectorized"):
        QueryNetwork(spec("join", 0)).set_engine("spark2")
