"""Unit tests of filter, map, union, aggregate and join: hand-computed outputs, spec
errors, runtime errors, state and snapshots. (The conformance suite covers snapshots,
replay and undo generically; here it is also run on more parameter variants.)"""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators import Operator, OperatorError, SpecError, create
from protocol.tuples import Kind, Tuple, boundary, make_tuple, undo

from .cases_relational import KV, script, values_kv
from .harness import Case, Step
from .test_conformance import (
    check_determinism,
    check_log_bounded,
    check_snapshots,
    check_undo_redo,
)

S, T = Kind.STABLE, Kind.TENTATIVE
B = boundary


def d(i: int, time: int, *values: Any, kind: Kind = S, tmax: int | None = None) -> Tuple:
    return make_tuple(kind, i, time, time if tmax is None else tmax, values)


def op(type_name: str, schemas: list[tuple[str, ...]], **params: Any) -> Operator:
    return create(type_name, "x", schemas, params)


def state(o: Operator) -> Any:
    return orjson.loads(orjson.dumps(o.snapshot()))["state"]


# ---------------------------------------------------------------------- filter / map
def test_filter_and_map_values() -> None:
    f = op("filter", [KV], where="value >= 10 and key in ('a', 'b')")
    run = [d(1, 1, "a", 10), d(2, 2, "b", 9), d(3, 3, "c", 50), d(4, 4, "b", 11), B(4)]
    assert f.process(0, run) == [run[0], run[3], B(4)]
    m = op("map", [KV], fields={"k": "key", "v2": "value * 2 - 1", "big": "value > 10"})
    assert m.output_schema == ("k", "v2", "big")
    assert m.process(0, run) == [
        d(1, 1, "a", 19, False), d(2, 2, "b", 17, False), d(3, 3, "c", 99, True),
        d(4, 4, "b", 21, True), B(4),
    ]  # fmt: skip


def test_filter_taint_and_undo_pass_through() -> None:
    f = op("filter", [KV], where="value > 0")
    run = [d(1, 1, "a", 1), d(2, 2, "a", 2, kind=T)]
    assert f.process(0, run) == run
    assert f.process(0, [d(3, 3, "a", 3)]) == [d(3, 3, "a", 3, kind=T)]  # sticky taint
    assert f.process(0, [undo(1), d(2, 2, "a", 5)]) == [undo(1), d(2, 2, "a", 5)]


@pytest.mark.parametrize(
    ("type_name", "params", "n_in", "fragment"),
    [
        ("filter", {}, 1, "missing required parameter 'where'"),
        ("filter", {"where": 5}, 1, "parameter 'where' must be a string, got 5"),
        ("filter", {"where": "value > 1", "wher": "x"}, 1, "unknown parameter(s) wher"),
        ("filter", {"where": "valu > 1"}, 1, "unknown attribute 'valu'"),
        ("map", {}, 1, "missing required parameter 'fields'"),
        ("map", {"fields": "value"}, 1, "'fields' must be a non-empty table"),
        ("map", {"fields": {}}, 1, "'fields' must be a non-empty table"),
        ("map", {"fields": {"a": 1}}, 1, "field 'a' must be an expression string, got 1"),
        ("map", {"fields": {"a": "value"}, "extra": 1}, 1, "unknown parameter(s) extra"),
        ("union", {"x": 1}, 2, "unknown parameter(s) x"),
    ],
)
def test_spec_errors(type_name: str, params: dict[str, Any], n_in: int, fragment: str) -> None:
    with pytest.raises(SpecError) as err:
        create(type_name, "bad", [KV] * n_in, params)
    assert f"operator 'bad' ({type_name})" in str(err.value)
    assert fragment in str(err.value)


@pytest.mark.parametrize(
    ("type_name", "n_in"), [("filter", 2), ("map", 0), ("join", 1), ("aggregate", 2)]
)
def test_wrong_number_of_inputs(type_name: str, n_in: int) -> None:
    with pytest.raises(OperatorError, match="input"):
        create(type_name, "bad", [KV] * n_in, {})


# ---------------------------------------------------------------------- union
def test_union_renumbers_in_arrival_order_and_min_boundary() -> None:
    u = op("union", [KV, KV])
    assert u.process(0, [d(1, 1, "a", 1), B(5)]) == [d(1, 1, "a", 1)]
    out = u.process(1, [d(1, 2, "b", 2), d(2, 6, "b", 3, tmax=9), B(3)])
    assert out == [d(2, 2, "b", 2), d(3, 6, "b", 3, tmax=9), B(3)]
    assert u.process(1, [B(7)]) == [B(5)]
    assert u.process(0, [d(2, 5, "c", 4)]) == [d(4, 5, "c", 4)]
    assert op("union", [KV]).process(0, [d(7, 1, "a", 1)]) == [d(1, 1, "a", 1)]


def test_union_undo_on_one_input_maps_to_output_ids() -> None:
    u = op("union", [KV, KV])
    u.process(0, [d(1, 1, "a", 1)])
    assert u.process(1, [d(1, 2, "b", 99, kind=T)]) == [d(2, 2, "b", 99, kind=T)]
    assert u.process(0, [d(2, 3, "a", 2)]) == [d(3, 3, "a", 2, kind=T)]
    # Input 1's tuple goes; input 0's tuple is re-emitted stable with the freed id.
    assert u.process(1, [undo(0)]) == [undo(1), d(2, 3, "a", 2)]
    assert u.process(1, [d(1, 2, "b", 2)]) == [d(3, 2, "b", 2)]


def test_union_refuses_different_schemas() -> None:
    with pytest.raises(SpecError, match=r"input 0 has \(key, value\) but input 1 has \(key, v\)"):
        op("union", [KV, ("key", "v")])


# ---------------------------------------------------------------------- aggregate
def F(fn: str, attr: str | None, name: str) -> dict[str, str]:
    """One entry of an aggregate spec's ``aggregates`` list."""
    return {"fn": fn, "as": name} if attr is None else {"fn": fn, "attr": attr, "as": name}


AGGS = [F("count", None, "n"), F("sum", "value", "s"), F("avg", "value", "m")]
AGGS += [F("min", "value", "lo"), F("max", "value", "hi")]
COUNT, SUM_V = [F("count", None, "n")], [F("sum", "v", "s")]


def one(agg: Any, **params: Any) -> dict[str, Any]:
    return {"window": 10, "aggregates": [agg], **params}


def test_tumbling_group_by_all_functions() -> None:
    a = op("aggregate", [KV], window=10, group_by=["key"], aggregates=AGGS)
    assert a.output_schema == ("key", "n", "s", "m", "lo", "hi")
    run = [d(1, 1, "a", 4), d(2, 3, "b", 10), d(3, 5, "a", 6, tmax=8), d(4, 12, "a", 1)]
    assert a.process(0, [*run, d(5, 9, "b", 20)]) == []
    out = a.process(0, [B(10)])
    assert out[0] == d(1, 0, "a", 2, 10, 5.0, 4, 6, tmax=8)
    assert out[1:] == [d(2, 0, "b", 2, 30, 15.0, 10, 20, tmax=9), B(10)]
    assert a.process(0, [B(25)]) == [d(3, 10, "a", 1, 1, 1.0, 1, 1, tmax=12), B(20)]
    assert a.process(0, [B(27)]) == []
    assert a.process(0, [B(30)]) == [B(30)]  # empty window [20, 30): nothing


def test_sliding_window_without_groups() -> None:
    a = op("aggregate", [("v",)], window=10, slide=5, aggregates=COUNT + SUM_V)
    assert a.output_schema == ("n", "s")
    a.process(0, [d(1, 1, 1), d(2, 6, 2), d(3, 12, 4)])
    assert a.process(0, [B(10)]) == [d(1, -5, 1, 1, tmax=1), d(2, 0, 2, 3, tmax=6), B(5)]
    assert a.process(0, [B(20)]) == [d(3, 5, 2, 6, tmax=12), d(4, 10, 1, 4, tmax=12), B(15)]


def test_sliding_groups_in_first_appearance_order_across_panes() -> None:
    a = op("aggregate", [KV], window=10, slide=5, group_by=["key"], aggregates=AGGS[1:2])
    # Panes [0,5) and [5,10): "b" arrives first in a later pane, "a" both sides.
    a.process(0, [d(1, 7, "b", 1), d(2, 2, "a", 10), d(3, 8, "a", 100, tmax=30)])
    a.process(0, [d(4, 1, "c", 1000)])
    assert a.process(0, [B(10)]) == [
        d(1, -5, "a", 10, tmax=2), d(2, -5, "c", 1000, tmax=1),
        d(3, 0, "b", 1, tmax=7), d(4, 0, "a", 110, tmax=30), d(5, 0, "c", 1000, tmax=1), B(5),
    ]  # fmt: skip
    assert a.oldest_seq() == 0  # pane [5,10) is still in window [5,15)
    assert a.process(0, [B(15)]) == [d(6, 5, "b", 1, tmax=7), d(7, 5, "a", 100, tmax=30), B(10)]
    assert a.oldest_seq() is None
    # A group first seen in a later pane still comes first: "a" (t=18) before "b" (t=12).
    a.process(0, [d(5, 18, "a", 1), d(6, 12, "b", 2), d(7, 13, "a", 3)])
    assert a.process(0, [B(20)]) == [d(8, 10, "a", 4, tmax=18), d(9, 10, "b", 2, tmax=12), B(15)]


def test_sliding_window_slide_not_dividing_window() -> None:
    a = op("aggregate", [("v",)], window=7, slide=5, aggregates=COUNT)
    a.process(0, [d(1, 3, 0), d(2, 6, 0), d(3, 8, 0), d(4, 11, 0)])
    # windows [0,7) {3,6}, [5,12) {6,8,11}, [10,17) {11}
    out = [d(1, 0, 2, tmax=6), d(2, 5, 3, tmax=11), d(3, 10, 1, tmax=11), B(95)]
    assert a.process(0, [B(100)]) == out


def test_multi_key_groups_first_appearance_order_and_snapshot() -> None:
    def make() -> Operator:
        return op("aggregate", [("k1", "k2", "v")], window=10, group_by=["k2", "k1"],
                  aggregates=[F("max", "v", "top")])  # fmt: skip

    a = make()
    a.process(0, [d(1, 1, "x", 1, 5), d(2, 2, "y", 1, 7), d(3, 3, "x", 2, 1), d(4, 4, "x", 1, 9)])
    snap = orjson.loads(orjson.dumps(a.snapshot()))
    # One pane [0, 10); accumulators [tmax, count, first seq, max].
    assert snap["state"]["panes"] == [
        [0, 0, [[[1, "x"], [4, 2, 0, 9]], [[1, "y"], [2, 1, 1, 7]], [[2, "x"], [3, 1, 2, 1]]]]
    ]
    b = make()
    b.restore(snap)
    more = [d(5, 5, "y", 1, 8), B(10)]
    expected = [d(1, 0, 1, "x", 9, tmax=4), d(2, 0, 1, "y", 8, tmax=5), d(3, 0, 2, "x", 1, tmax=3)]
    expected.append(B(10))
    assert a.process(0, more) == expected
    assert b.process(0, more) == expected


def test_late_tuples_skip_closed_windows() -> None:
    a = op("aggregate", [("v",)], window=10, slide=5, aggregates=SUM_V)
    assert a.process(0, [d(1, 12, 1), B(10)]) == [B(5)]
    # t=7 belongs to [0,10) (closed at watermark 10: ignored) and [5,15) (open).
    a.process(0, [d(2, 7, 100)])
    assert a.process(0, [B(30)]) == [d(1, 5, 101, tmax=12), d(2, 10, 1, tmax=12), B(25)]
    t = op("aggregate", [("v",)], window=10, aggregates=SUM_V)
    assert t.process(0, [B(10), d(1, 5, 1)]) == [B(10)]
    assert state(t)["panes"] == []  # not even kept
    assert t.process(0, [d(2, 15, 2), B(20)]) == [d(1, 10, 2, tmax=15), B(20)]


def test_aggregate_state_is_trimmed_and_oldest_seq() -> None:
    a = op("aggregate", [("v",)], window=10, aggregates=COUNT)
    a.process(0, [d(1, 1, 0), d(2, 11, 0)])
    assert a.oldest_seq() == 0 and a.oldest_time() < 0
    a.process(0, [B(10)])
    assert a.oldest_seq() == 1 and a.oldest_time() == 10
    a.process(0, [B(20)])
    assert a.oldest_seq() is None and state(a)["panes"] == []


def test_aggregate_runtime_errors() -> None:
    a = op("aggregate", [KV], window=10, aggregates=AGGS[3:4])
    with pytest.raises(OperatorError, match=r"operator 'x' \(aggregate\).*tuple id 2.*TypeError"):
        a.process(0, [d(1, 1, "a", 1), d(2, 2, "a", "z")])
    m = op("aggregate", [KV], window=10, aggregates=[F("avg", "key", "m")])
    m.process(0, [d(1, 1, "a", 1)])
    with pytest.raises(OperatorError, match=r"cannot finish window 0 group None.*TypeError"):
        m.process(0, [B(10)])


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"aggregates": AGGS}, "missing required parameter 'window'"),
        ({"window": 0, "aggregates": AGGS}, "'window' must be an integer >= 1, got 0"),
        ({"window": "10", "aggregates": AGGS}, "'window' must be an integer"),
        (one(COUNT[0], slide=11), "'slide' must be <= window (10), got 11"),
        (one(COUNT[0], slide=0), "'slide' must be an integer >= 1"),
        (one(COUNT[0], group_by="key"), "'group_by' must be a list"),
        (one(COUNT[0], group_by=["kee"]), "unknown group_by attribute 'kee'"),
        (one(COUNT[0], group_by=["key", "key"]), "names an attribute twice"),
        ({"window": 10}, "missing required parameter 'aggregates'"),
        ({"window": 10, "aggregates": []}, "'aggregates' must be a non-empty list"),
        (one("count"), "aggregates[0]: must be a table"),
        (
            one(F("median", "value", "m")),
            "'fn' must be one of count, sum, avg, min, max, got 'median'",
        ),
        (one(F("sum", None, "s")), "aggregates[0]: sum needs 'attr'"),
        (one(F("sum", "valu", "s")), "aggregates[0]: unknown attribute 'valu'"),
        (one(F("count", "value", "n")), "count takes no 'attr'"),
        (one({"fn": "count"}), "'as' must be a non-empty output name"),
        (one({"fn": "count", "as": "n", "where": 1}), "unknown key(s) where"),
        (one(F("count", None, "key"), group_by=["key"]), "output name 'key' is used twice"),
        ({"window": 10, "aggregates": AGGS, "size": 3}, "unknown parameter(s) size"),
    ],
)
def test_aggregate_spec_errors(params: dict[str, Any], fragment: str) -> None:
    with pytest.raises(SpecError) as err:
        create("aggregate", "agg", [KV], params)
    assert "operator 'agg' (aggregate)" in str(err.value)
    assert fragment in str(err.value)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_aggregate_is_batch_invariant(data: st.DataObject) -> None:
    """Floats included: however the input is cut into batches, the output is identical."""
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    steps = script(rng, 1, lambda r, p: (r.choice("ab"), r.randint(0, 999) / 10), n_steps=20)
    tuples = [t for s in steps for t in s.batch]
    params = {
        "window": data.draw(st.integers(1, 12)),
        "group_by": ["key"],
        "aggregates": [{"fn": f, "attr": "value", "as": f} for f in ("sum", "avg", "min")],
    }
    params["slide"] = data.draw(st.integers(1, params["window"]))
    one = create("aggregate", "a", [KV], params)
    expected = [o for t in tuples for o in one.process(0, [t])]
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(tuples) - 1)), max_size=8)))
    other = create("aggregate", "a", [KV], params)
    got: list[Tuple] = []
    for lo, hi in zip([0, *cuts], [*cuts, len(tuples)], strict=True):
        got += other.process(0, tuples[lo:hi])
    assert got == expected


# ---------------------------------------------------------------------- join
L, R = ("key", "lv"), ("key", "rv")


def test_join_matches_band_edges_and_eviction() -> None:
    j = op("join", [L, R], on=[["key", "key"]], band=3)
    assert j.output_schema == ("key", "lv", "right_key", "rv")
    assert j.process(0, [d(1, 10, "a", 1)]) == []
    assert j.process(1, [d(1, 13, "a", 100, tmax=20), d(2, 14, "a", 101), d(3, 12, "b", 102)]) == [
        d(1, 13, "a", 1, "a", 100, tmax=20)
    ]  # |13-10| = 3 matches, |14-10| = 4 does not
    assert j.process(0, [d(2, 11, "a", 2)]) == [
        d(2, 13, "a", 2, "a", 100, tmax=20),
        d(3, 14, "a", 2, "a", 101),
    ]
    # Right watermark 14: left tuples older than 14 - 3 = 11 can no longer match.
    assert j.process(1, [B(14)]) == []
    assert [e[0] for e in state(j)[0]] == [11]
    assert j.process(1, [d(4, 14, "a", 103)]) == [d(4, 14, "a", 2, "a", 103)]
    assert j.process(0, [B(20)]) == [B(14)]
    assert state(j)[1] == []  # right tuples older than 20 - 3 are gone
    # Stored only if a future left tuple can still match: 17 = 20 - 3 is, 16 is not.
    j.process(1, [d(5, 16, "a", 104), d(6, 17, "a", 105)])
    assert [e[0] for e in state(j)[1]] == [17]
    assert j.process(0, [d(3, 20, "a", 3)]) == [d(5, 20, "a", 3, "a", 105)]
    assert j.oldest_seq() is not None


def test_join_multi_key_prefix_and_restore() -> None:
    def make() -> Operator:
        return op("join", [("k1", "k2", "x"), ("a", "b", "x")], on=[["k1", "a"], ["k2", "b"]],
                  band=0, right_prefix="r_")  # fmt: skip

    j = make()
    assert j.output_schema == ("k1", "k2", "x", "a", "b", "r_x")
    j.process(1, [d(1, 5, 1, 2, "R1"), d(2, 5, 1, 3, "R2"), d(3, 6, 1, 2, "R3")])
    k = make()
    k.restore(orjson.loads(orjson.dumps(j.snapshot())))
    for o in (j, k):
        assert o.process(0, [d(1, 5, 1, 2, "L1")]) == [d(1, 5, 1, 2, "L1", 1, 2, "R1")]
        o.process(0, [B(7)])  # right tuples older than 7 are evicted (after the restore too)
        assert [e[0] for e in state(o)[1]] == []


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"band": 3}, "missing required parameter 'on'"),
        (
            {"on": "key", "band": 3},
            "'on' must be a non-empty list of [left attribute, right attribute]",
        ),
        ({"on": [["key"]], "band": 3}, "'on' must be a non-empty list"),
        ({"on": [], "band": 3}, "'on' must be a non-empty list"),
        ({"on": [["kee", "key"]], "band": 3}, "unknown left join attribute 'kee'"),
        ({"on": [["key", "kee"]], "band": 3}, "unknown right join attribute 'kee'"),
        ({"on": [["key", "key"]]}, "missing required parameter 'band'"),
        ({"on": [["key", "key"]], "band": -1}, "'band' must be an integer >= 0, got -1"),
        ({"on": [["key", "key"]], "band": 1.5}, "'band' must be an integer"),
        ({"on": [["key", "key"]], "band": 1, "right_prefix": 3}, "'right_prefix' must be a string"),
        ({"on": [["key", "key"]], "band": 1, "right_prefix": ""}, "collide even with right_prefix"),
    ],
)
def test_join_spec_errors(params: dict[str, Any], fragment: str) -> None:
    with pytest.raises(SpecError) as err:
        create("join", "jn", [L, R], params)
    assert "operator 'jn' (join)" in str(err.value)
    assert fragment in str(err.value)


# ---------------------------------------------------------------------- more variants
def _kv(rng: random.Random) -> list[Step]:
    return script(rng, 1, values_kv, n_steps=40)


def _pairs(rng: random.Random) -> list[Step]:
    small = lambda r, p: (r.choice("ab"), r.randint(0, 3))  # noqa: E731
    return script(rng, 2, small, n_steps=40, jitter=1, advance=1)


TWO_KEYS = {"on": [["key", "key"], ["value", "value"]], "band": 0}
VARIANTS = [
    Case("aggregate", {"window": 10, "aggregates": AGGS[1:2]}, (KV,), _kv),
    Case("aggregate", one(COUNT[0], window=20, slide=10, group_by=["value", "key"]), (KV,), _kv),
    Case("join", TWO_KEYS, (KV, KV), _pairs, extra={"reference": "arrival"}),
]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("variant", range(len(VARIANTS)))
def test_conformance_on_more_parameters(variant: int, seed: int) -> None:
    c = VARIANTS[variant]
    steps = c.script(random.Random(seed))
    check_determinism(c, steps)
    check_snapshots(c, steps, random.Random(seed))
    rng = random.Random(seed + 1)
    for _ in range(3):
        check_undo_redo(c, steps, rng)
    if seed == 0:
        check_log_bounded(c, steps)


def test_a_state_holding_an_overflowed_float_is_refused_at_its_snapshot() -> None:
    """orjson writes inf as null: a checkpoint of a sum that overflowed would come back
    None (and the restored aggregate fail later, or differ). The snapshot says where it is;
    a state holding None values (the common case of null in the encoding) is taken."""
    op = create("aggregate", "a", [("key", "value")], {
        "window": 10, "group_by": ["key"], "aggregates": [{"fn": "sum", "attr": "value", "as": "s"}]})
    op.process(0, [make_tuple(Kind.STABLE, 1, 1, 1, (None, 1.5)),
                   make_tuple(Kind.STABLE, 2, 2, 2, (None, 2.5))])
    assert op.snapshot()["state"]["panes"][0][2] == [[[None], [2, 2, 0, 4.0]]]
    op.process(0, [make_tuple(Kind.STABLE, 3, 3, 3, ("k", 1e308)),
                   make_tuple(Kind.STABLE, 4, 4, 4, ("k", 1e308))])
    with pytest.raises(OperatorError, match=r"operator 'a' \(aggregate\): its state holds inf "
                                            r"at snapshot\['state'\]\['panes'\]\[0\]"):
        op.snapshot()
