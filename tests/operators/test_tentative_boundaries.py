"""Boundaries computed from tentative input are marked, taint, and never leave a node.

The failure this prevents (found while building SUnion): node A's SUnion releases a
tentative bucket; a filter drops all of its tuples but passes the bucket's boundary; if
that boundary left A as a plain promise, node B's SUnion would release its bucket STABLE
before A's corrections arrived, and would then have to drop them: eventual consistency lost.
"""

from __future__ import annotations

from typing import Any

from operators import QueryNetwork, create
from protocol.tuples import (
    TENTATIVE_BOUNDARY_ID,
    Kind,
    Tuple,
    boundary,
    make_tuple,
    tentative_boundary,
)

S, T = Kind.STABLE, Kind.TENTATIVE


def d(kind: Kind, i: int, t: int, v: int) -> Tuple:
    return make_tuple(kind, i, t, t, ("k", v))


def node_a() -> QueryNetwork:
    spec: dict[str, Any] = {
        "inputs": {"x": ["key", "v"], "y": ["key", "v"]},
        "operators": [
            {"name": "u", "type": "sunion", "inputs": ["x", "y"], "bucket": 10, "wait": 100},
            {"name": "big", "type": "filter", "inputs": ["u"], "where": "v > 50"},
            {"name": "out", "type": "soutput", "inputs": ["big"]},
        ],
        "outputs": ["out"],
    }
    return QueryNetwork(spec)


def test_tentative_boundary_never_leaves_the_node() -> None:
    a = node_a()
    a.push("x", [d(S, 1, 1, 1), boundary(10)], now=0)
    a.push("y", [d(S, 1, 2, 2), boundary(10)], now=0)
    # y is cut: x's bucket [10, 20) holds a small value the filter drops.
    a.push("x", [d(S, 2, 11, 3), boundary(20)], now=1)
    released = a.on_timer(200).outputs["out"]
    assert released == []  # the tentative bucket was filtered away, its boundary held back
    assert a.operator("u").in_failure  # type: ignore[attr-defined]


def test_downstream_sunion_ignores_a_tentative_boundary() -> None:
    b = create("sunion", "b", [("key", "v")], {"bucket": 10, "wait": 10**9})
    out = b.process(0, [d(S, 1, 5, 1), tentative_boundary(10)], now=0)
    assert out == []  # no promise: bucket [0, 10) is not stable-ready
    assert b.watermarks == [b.watermarks[0]] and b.watermarks[0] < 10
    out = b.process(0, [boundary(10)], now=1)
    assert [t.kind for t in out] == [S, Kind.BOUNDARY]


def test_tentative_boundary_taints_and_an_undo_clears_it() -> None:
    agg = create("aggregate", "a", [("key", "v")],
                 {"window": 10, "group_by": ["key"], "aggregates": [{"fn": "sum", "attr": "v", "as": "s"}]})
    out = agg.process(0, [d(S, 1, 1, 5), d(S, 2, 2, 6), tentative_boundary(10)])
    # The window closed on a tentative boundary: more corrected tuples might belong to it.
    assert [(t.kind, t.values) for t in out if t.kind is not Kind.BOUNDARY] == [(T, ("k", 11))]
    assert out[-1].kind is Kind.BOUNDARY and out[-1].id == TENTATIVE_BOUNDARY_ID
    # Correction: tuple 3 was missing from the window; the stable boundary follows.
    out = agg.process(0, [make_tuple(Kind.UNDO, 2, 0, 0, ()), d(S, 3, 3, 7), boundary(10)])
    assert [(t.kind, t.id, t.values) for t in out if t.kind is not Kind.BOUNDARY] == [
        (Kind.UNDO, 0, ()),
        (S, 1, ("k", 18)),
    ]
    assert out[-1] == boundary(10)


def test_filter_forwards_the_mark_and_rolls_it_back_on_undo() -> None:
    f = create("filter", "f", [("key", "v")], {"where": "v > 50"})
    assert f.process(0, [d(S, 1, 1, 99), boundary(10)]) == [d(S, 1, 1, 99), boundary(10)]
    assert f.process(0, [d(S, 2, 11, 3), tentative_boundary(20)]) == [tentative_boundary(20)]
    assert f.process(0, [d(S, 3, 12, 99)]) == [d(T, 3, 12, 99)]  # tainted by the boundary
    out = f.process(0, [make_tuple(Kind.UNDO, 2, 0, 0, ()), d(S, 3, 12, 99), boundary(20)])
    assert out == [make_tuple(Kind.UNDO, 2, 0, 0, ()), d(S, 3, 12, 99), boundary(20)]
