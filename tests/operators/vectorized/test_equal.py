"""The vectorized operators (operators/vectorized/) against the per-tuple ones.

Whatever the waves (SUnion-ordered buckets, each closed by its boundary), the operator's
state before them (warmed up by earlier waves) and the step they are cut into: the
vectorized filter, map, join, union and aggregate emit exactly the per-tuple operator's
tuples (ids, times, tmax, values bit for bit) and boundaries, wave by wave, and leave the
operator in exactly its state (``snapshot()``, undo log included), so that whatever follows
is the same too. And the fast path is really taken: these inputs never fall back; what
cannot be exact falls back, to the per-tuple result.
"""

from __future__ import annotations

import math
import random
import struct
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.base import Operator
from operators.errors import Fallback
from operators.registry import create
from operators.vectorized import aggregate as vectorized_aggregate
from operators.vectorized.aggregate import run_aggregate
from operators.vectorized.engine import run_operator, run_per_tuple
from operators.vectorized.flow import Flow
from protocol.tuples import Kind, Tuple, boundary, make_tuple

SCHEMA = ("key", "value", "x")
WIDTH = 10  # a bucket's length in tuple time
Waves = list[tuple[int, list[Tuple]]]


FLOATS = st.floats(-1e6, 1e6, allow_nan=False)


@st.composite
def waves(draw: st.DrawFn, n_waves: int, first_id: int = 1, str_keys: bool = False,
          xs: st.SearchStrategy[float] = FLOATS) -> Waves:
    """SUnion's output over ``n_waves`` buckets: in each, tuples in time order within the
    bucket, renumbered, then the bucket's boundary (waves may be empty of data); ``x``
    drawn from ``xs``."""
    out: Waves = []
    i = first_id
    for w in range(n_waves):
        times = sorted(draw(st.lists(st.integers(w * WIDTH, (w + 1) * WIDTH - 1),
                                     max_size=6)))
        batch = []
        for t in times:
            key = draw(st.integers(0, 3))
            batch.append(make_tuple(Kind.STABLE, i, t, t + draw(st.integers(0, 2)), (
                f"k{key}" if str_keys else key,
                draw(st.integers(-5, 100)),
                draw(xs))))
            i += 1
        batch.append(boundary((w + 1) * WIDTH))
        out.append((w, batch))
    return out


def bits(t: Tuple) -> tuple[Any, ...]:
    return (*t[:4], tuple(("f", struct.pack("<d", v)) if isinstance(v, float) else v
                          for v in t[4]))


def as_batches(flow: Flow | None, batches: Any) -> list[tuple[int, list[Any]]]:
    got = flow.to_waves() if flow is not None else batches
    return [(w, [bits(t) for t in b]) for w, b in got]


def shift(ws: Waves, by: int) -> Waves:
    return [(w + by, b) for w, b in ws]


def check_equal(make: Any, inputs: Sequence[Waves], ports: Sequence[int], warm: int,
                schemas: Sequence[tuple[str, ...]], cuts: Sequence[int] | None = None) -> None:
    """Warm two operators up on the first ``warm`` waves per tuple, then run the rest
    per tuple on one and vectorized on the other, in steps starting at the waves ``cuts``
    (default: two halves): same output, same state."""
    a, b = make(), make()
    early = [[x for x in ws if x[0] < warm] for ws in inputs]
    late = [[x for x in ws if x[0] >= warm] for ws in inputs]
    for op in (a, b):
        run_per_tuple(op, early, ports)
    assert a.snapshot() == b.snapshot()
    expected = run_per_tuple(a, late, ports)
    if cuts is None:
        cuts = [warm + (max((w for ws in late for w, _ in ws), default=warm) - warm) // 2 + 1]
    bounds = [warm, *cuts, 10**9]
    got: list[tuple[int, list[Any]]] = []
    for lo, hi in pairwise(bounds):
        step = [Flow.from_waves(s, [x for x in ws if lo <= x[0] < hi])
                for s, ws in zip(schemas, late, strict=True)]
        flow, batches = run_operator(b, step, ports)
        assert flow is not None, "the vectorized path fell back"
        got += as_batches(flow, batches)
    assert merge(got) == as_batches(None, expected)
    assert b.snapshot() == a.snapshot()
    assert b.last_id == a.last_id


def merge(batches: list[tuple[int, list[Any]]]) -> list[tuple[int, list[Any]]]:
    out: list[tuple[int, list[Any]]] = []
    for w, b in batches:
        if out and out[-1][0] == w:
            out[-1][1].extend(b)
        elif b:
            out.append((w, list(b)))
    return out


FILTERS = ["value > 40", "key == 2 or value < 10", "x >= 0.0 and value % 3 == 1", "True"]
MAPS = [{"key": "key", "twice": "value * 2", "y": "x / 4.0"},
        {"s": "x + value", "k": "key"}, {"c": "7"}]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_filter_and_map_equal_the_per_tuple_operators(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 8))
    ws = data.draw(waves(n))
    warm = data.draw(st.integers(0, n))
    where = data.draw(st.sampled_from(FILTERS))
    check_equal(lambda: create("filter", "f", [SCHEMA], {"where": where}), [ws], [0], warm,
                [SCHEMA])
    fields = data.draw(st.sampled_from(MAPS))
    check_equal(lambda: create("map", "m", [SCHEMA], {"fields": fields}), [ws], [0], warm,
                [SCHEMA])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_join_equals_the_per_tuple_join(data: st.DataObject) -> None:
    """Both sides' boundaries move together (one SUnion upstream) or one side lags; the
    band spans several buckets or none; the ports come in either order in a wave."""
    n = data.draw(st.integers(1, 8))
    str_keys = data.draw(st.booleans())
    left = data.draw(waves(n, 1, str_keys))
    right = data.draw(waves(n, 1000, str_keys))
    if data.draw(st.booleans()):  # the right side lags a wave behind
        right = [(w, b) for w, b in shift(right, 1) if w < n]
    band = data.draw(st.sampled_from([0, 3, WIDTH, 2 * WIDTH + 5]))
    ports = data.draw(st.sampled_from([[0, 1], [1, 0]]))
    on = [["key", "key"]] + ([["value", "value"]] if data.draw(st.booleans()) else [])
    warm = data.draw(st.integers(0, n))
    keep_log = data.draw(st.booleans())

    def make() -> Operator:
        op = create("join", "j", [SCHEMA, SCHEMA], {"on": on, "band": band})
        op.keeps_undo_log = keep_log
        return op

    check_equal(make, [left, right], ports, warm, [SCHEMA, SCHEMA])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_union_equals_the_per_tuple_union(data: st.DataObject) -> None:
    """Two or three inputs, one lagging a wave or not, in any port order, undo log or not."""
    n = data.draw(st.integers(1, 8))
    k = data.draw(st.integers(2, 3))
    inputs = [data.draw(waves(n, 1000 * p)) for p in range(k)]
    if data.draw(st.booleans()):
        inputs[-1] = [(w, b) for w, b in shift(inputs[-1], 1) if w < n]
    ports = data.draw(st.permutations(range(k)))
    warm = data.draw(st.integers(0, n))
    keep_log = data.draw(st.booleans())

    def make() -> Operator:
        op = create("union", "u", [SCHEMA] * k, {})
        op.keeps_undo_log = keep_log
        return op

    check_equal(make, inputs, ports, warm, [SCHEMA] * k)


AGGREGATES = [{"fn": "count", "as": "n"},
              *({"fn": fn, "attr": attr, "as": f"{fn}_{attr}"}
                for fn in ("sum", "avg", "min", "max") for attr in ("value", "x"))]
# (window, slide): tumbling within a bucket, over buckets, not aligned to them; sliding
# with panes of the slide or of gcd(window, slide) smaller than it.
WINDOWS = [(10, 10), (7, 7), (25, 25), (30, 10), (20, 5), (15, 6), (10, 4), (40, 25)]
# Ties of -0.0 and 0.0 (a min or max keeps the first), magnitudes a sum's order changes.
XS = st.one_of(FLOATS, st.sampled_from([0.0, -0.0, 0.1, 1e16, -1e16, 3.0]))


def aggregate(window: int, slide: int, group_by: list[str], aggregates: list[Any],
              keep_log: bool = True) -> Any:
    def make() -> Operator:
        op = create("aggregate", "a", [SCHEMA], {"window": window, "slide": slide,
                                                 "group_by": group_by,
                                                 "aggregates": aggregates})
        op.keeps_undo_log = keep_log
        return op
    return make


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_aggregate_equals_the_per_tuple_aggregate(data: st.DataObject) -> None:
    """Tumbling and sliding windows, group-by on no, one or two attributes (int or str
    keys), the five functions over an int and a float attribute, undo log or not; some
    buckets' boundaries missing or repeated (a boundary that moves nothing); warmed up per
    tuple, the rest cut into steps at random."""
    n = data.draw(st.integers(1, 10))
    ws = data.draw(waves(n, 1, data.draw(st.booleans()), XS))
    ends = data.draw(st.lists(st.sampled_from([1, 1, 0, 2]), min_size=n, max_size=n))
    ws = [(w, batch[:-1] + batch[-1:] * end) for (w, batch), end in zip(ws, ends, strict=True)]
    window, slide = data.draw(st.sampled_from(WINDOWS))
    group_by = data.draw(st.sampled_from([[], ["key"], ["key", "value"]]))
    aggregates = data.draw(st.lists(st.sampled_from(AGGREGATES), min_size=1,
                                    unique_by=lambda a: str(a["as"])))
    warm = data.draw(st.integers(0, n))
    cuts = sorted(data.draw(st.sets(st.integers(warm + 1, n))) if warm < n else [])
    check_equal(aggregate(window, slide, group_by, aggregates, data.draw(st.booleans())),
                [ws], [0], warm, [SCHEMA], cuts)


def test_a_float_sum_is_folded_in_arrival_order() -> None:
    """One pane of 4000 floats whose sum depends on the order of the additions (numpy's
    pairwise ``sum`` and ``math.fsum`` give other results), and a window of several
    panes: the vectorized sum and avg are Python's left fold, bit for bit."""
    rng = random.Random(7)
    xs = [rng.choice([1e16, -1e16, 1.0, 0.1, -3.3, 2.0**-30]) * rng.random()
          for _ in range(4000)]
    assert sum(xs) != math.fsum(xs) and sum(xs) != float(np.sum(xs))
    rows = [make_tuple(Kind.STABLE, i + 1, i // 200, i // 200, (i % 2, i, x))
            for i, x in enumerate(xs)]
    ws: Waves = [(0, [*rows[:2000], boundary(10)]), (1, [*rows[2000:], boundary(100)])]
    sums = [{"fn": "sum", "attr": "x", "as": "s"}, {"fn": "avg", "attr": "x", "as": "a"}]
    for window, slide in ((100, 100), (20, 5)):
        for group_by in ([], ["key"]):
            check_equal(aggregate(window, slide, group_by, sums), [ws], [0], 0, [SCHEMA])
    flow, _ = run_operator(aggregate(100, 100, [], sums)(), [Flow.from_waves(SCHEMA, ws)], [0])
    assert flow is not None and flow.data.column("v0").to_pylist() == [sum(xs)]


def test_an_int_avg_past_2_53_divides_as_python() -> None:
    """An int sum past 2**53 is no exact double: Python's int division is correctly
    rounded, a double division of it would round twice (here 2**60 + 32 over 3)."""
    big = [2**58, 2**58, 2**59 + 32]
    assert float(sum(big)) / 3 != sum(big) / 3
    ws: Waves = [(0, [make_tuple(Kind.STABLE, i + 1, i, i, (1, v, 0.5))
                      for i, v in enumerate(big)] + [boundary(10)])]
    avg = [{"fn": "avg", "attr": "value", "as": "a"}, {"fn": "sum", "attr": "value", "as": "s"}]
    check_equal(aggregate(10, 10, ["key"], avg), [ws], [0], 0, [SCHEMA])


def row(i: int, time: int, key: Any, value: Any, x: Any) -> Tuple:
    return make_tuple(Kind.STABLE, i, time, time, (key, value, x))


ALL = [AGGREGATES[0], {"fn": "sum", "attr": "value", "as": "s"},
       {"fn": "max", "attr": "x", "as": "m"}]
EARLY: Waves = [(0, [row(1, 1, 1, 5, 0.5), row(2, 3, 2, 6, 1.5), boundary(5)])]


@pytest.mark.parametrize(("why", "group_by", "aggregates", "early", "late"), [
    ("behind its input's watermark", ["key"], ALL, EARLY,
     [(1, [row(3, 2, 1, 1, 2.5), row(4, 12, 1, 1, 2.5), boundary(20)])]),
    ("'x' holds double,", ["x"], ALL, [], [(1, [row(3, 6, 1, 1, 2.5), boundary(20)])]),
    ("'key' holds int64 and None", ["key"], ALL, [],
     [(1, [row(3, 6, None, 1, 2.5), row(4, 7, 1, 1, 2.5), boundary(20)])]),
    ("'x' holds double and None", ["key"], ALL, [],
     [(1, [row(3, 6, 3, 1, None), row(4, 7, 4, 1, 2.5), boundary(20)])]),
    ("'value' holds bool,", ["key"], ALL, [],  # Python sums them to ints
     [(1, [row(3, 16, 3, True, 2.5), row(4, 17, 3, True, 2.5), boundary(20)])]),
    ("'value' holds string,", ["key"], [{"fn": "min", "attr": "value", "as": "m"}],
     [], [(1, [row(3, 16, 3, "b", 2.5), row(4, 17, 3, "a", 2.5), boundary(20)])]),
    ("'x' holds a NaN", ["key"], ALL, [],  # (a boundary more: no snapshot holds a NaN)
     [(1, [row(3, 16, 3, 1, math.nan), boundary(20)]), (2, [boundary(30)])]),
    ("'value' held int64 values, the step brings double", ["key"],
     [{"fn": "sum", "attr": "value", "as": "s"}], EARLY,
     [(1, [row(3, 6, 1, 0.25, 2.5), boundary(20)])]),
    ("a sum of 'value' could leave int64", ["key"], ALL, [],
     [(1, [row(3, 16, 3, 2**62, 2.5), row(4, 17, 3, 2**62, 2.5), boundary(20)])]),
])
def test_an_aggregate_that_cannot_be_exact_falls_back(why: str, group_by: list[str],
                                                      aggregates: list[Any], early: Waves,
                                                      late: Waves) -> None:
    """Each Fallback of operators/vectorized/aggregate.py (for the reason ``why``, before
    the operator is touched): the engine runs the per-tuple aggregate instead, with its
    output (bit for bit) and state."""
    make = aggregate(10, 10, group_by, aggregates)
    a, b = make(), make()
    for op in (a, b):
        run_per_tuple(op, [early], [0])
    before = b.snapshot()
    with pytest.raises(Fallback, match=why):
        run_aggregate(b, [Flow.from_waves(SCHEMA, late)], [0])
    assert b.snapshot() == before
    expected = run_per_tuple(a, [late], [0])
    flow, batches = run_operator(b, [Flow.from_waves(SCHEMA, late)], [0])
    assert flow is None
    assert as_batches(None, batches) == as_batches(None, expected) and expected
    assert b.snapshot() == a.snapshot()


def test_a_tainted_aggregate_falls_back() -> None:
    make = aggregate(10, 10, ["key"], ALL)
    a, b = make(), make()
    early: Waves = [(0, [make_tuple(Kind.TENTATIVE, 1, 1, 1, (1, 5, 0.5)), boundary(5)])]
    late: Waves = [(1, [row(2, 6, 1, 1, 2.5), boundary(20)])]
    for op in (a, b):
        run_per_tuple(op, [early], [0])
    expected = run_per_tuple(a, [late], [0])
    assert run_operator(b, [Flow.from_waves(SCHEMA, late)], [0]) == (None, expected)
    assert b.snapshot() == a.snapshot()


@pytest.mark.parametrize(("limit", "value"), [("MAX_PAIRS", 1), ("CODE_LIMIT", 2)])
def test_an_aggregate_too_wide_for_its_arrays_falls_back(monkeypatch: pytest.MonkeyPatch,
                                                         limit: str, value: int) -> None:
    """(window, pane group) pairs past MAX_PAIRS, codes past CODE_LIMIT (in practice
    billions of rows), lowered here to what a small step reaches."""
    monkeypatch.setattr(vectorized_aggregate, limit, value)
    make = aggregate(20, 10, ["key"], ALL)
    ws: Waves = [(0, [row(1, 1, 1, 5, 0.5), row(2, 13, 2, 6, 1.5), boundary(40)])]
    a, b = make(), make()
    expected = run_per_tuple(a, [ws], [0])
    assert run_operator(b, [Flow.from_waves(SCHEMA, ws)], [0]) == (None, expected)
    assert b.snapshot() == a.snapshot() and len(expected[0][1]) == 5  # 4 outputs, 1 boundary


def test_what_cannot_be_exact_falls_back_to_the_per_tuple_result() -> None:
    """A filter over a column with None (the vectorized expressions refuse nulls): the
    engine runs the per-tuple filter, with its result and state."""
    ws = [(0, [make_tuple(Kind.STABLE, 1, 1, 1, (1, None, 0.5)),
               make_tuple(Kind.STABLE, 2, 2, 2, (2, 1, 0.5)), boundary(10)])]
    a, b = (create("filter", "f", [SCHEMA], {"where": "value == 1"}) for _ in range(2))
    expected = run_per_tuple(a, [ws], [0])
    flow, batches = run_operator(b, [Flow.from_waves(SCHEMA, ws)], [0])
    assert flow is None and batches == expected and b.snapshot() == a.snapshot()
    assert [t[1] for t in expected[0][1]] == [2, 0]  # tuple 2, then the boundary


def test_a_column_of_mixed_types_is_no_flow() -> None:
    with pytest.raises(Fallback, match="types int, str"):
        Flow.from_waves(SCHEMA, [(0, [make_tuple(Kind.STABLE, 1, 1, 1, (1, 2, 0.5)),
                                      make_tuple(Kind.STABLE, 2, 2, 2, ("a", 3, 0.5))])])


def test_a_tuple_of_the_wrong_arity_is_no_flow() -> None:
    """(The per-tuple operator then says what is wrong with it.) Tuples of two arities
    once escaped as a ValueError from the transposition."""
    for rows in ([make_tuple(Kind.STABLE, 1, 1, 1, (1, 2))],
                 [make_tuple(Kind.STABLE, 1, 1, 1, (1, 2, 0.5)),
                  make_tuple(Kind.STABLE, 2, 2, 2, (1, 2))]):
        with pytest.raises(Fallback, match="arity"):
            Flow.from_waves(SCHEMA, [(0, rows)])
