"""The vectorized operators (operators/vectorized/) against the per-tuple ones.

Whatever the waves (SUnion-ordered buckets, each closed by its boundary), the operator's
state before them (warmed up by earlier waves) and the step they are cut into: the
vectorized filter, map, join and union emit exactly the per-tuple operator's tuples (ids, times,
tmax, values bit for bit) and boundaries, wave by wave, and leave the operator in exactly
its state (``snapshot()``, undo log included), so that whatever follows is the same too.
And the fast path is really taken: these inputs never fall back.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.base import Operator
from operators.errors import Fallback
from operators.registry import create
from operators.vectorized.engine import run_operator, run_per_tuple
from operators.vectorized.flow import Flow
from protocol.tuples import Kind, Tuple, boundary, make_tuple

SCHEMA = ("key", "value", "x")
WIDTH = 10  # a bucket's length in tuple time
Waves = list[tuple[int, list[Tuple]]]


@st.composite
def waves(draw: st.DrawFn, n_waves: int, first_id: int = 1, str_keys: bool = False) -> Waves:
    """SUnion's output over ``n_waves`` buckets: in each, tuples in time order within the
    bucket, renumbered, then the bucket's boundary (waves may be empty of data)."""
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
                draw(st.floats(-1e6, 1e6, allow_nan=False)))))
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
                schemas: Sequence[tuple[str, ...]]) -> None:
    """Warm two operators up on the first ``warm`` waves per tuple, then run the rest
    per tuple on one and vectorized (in two steps) on the other: same output, same state."""
    a, b = make(), make()
    early = [[x for x in ws if x[0] < warm] for ws in inputs]
    late = [[x for x in ws if x[0] >= warm] for ws in inputs]
    for op in (a, b):
        run_per_tuple(op, early, ports)
    assert a.snapshot() == b.snapshot()
    expected = run_per_tuple(a, late, ports)
    mid = warm + (max((w for ws in late for w, _ in ws), default=warm) - warm) // 2 + 1
    got: list[tuple[int, list[Any]]] = []
    for lo, hi in ((warm, mid), (mid, 10**9)):
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
