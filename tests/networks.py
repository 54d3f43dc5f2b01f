"""Random query networks below one SUnion, for the property tests that hold two
implementations of a network equal: the reference's Spark plans against the operators
(tests/ops_scripts/reconcile/test_plans.py), and the replay engines against each other
(tests/operators/vectorized/test_engines.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st

__all__ = ["networks"]


def _filter(draw: st.DrawFn, types: Mapping[str, str]) -> str:
    ints = [a for a, t in types.items() if t == "int"]
    floats = [a for a, t in types.items() if t == "float"]
    options = [f"{a} {draw(st.sampled_from(['<', '>=', '!=']))} {draw(st.integers(0, 9))}"
               for a in ints]
    options += [f"{a} % 2 == 0" for a in ints] + [f"{a} < 0.5" for a in floats]
    return draw(st.sampled_from(options)) if options else "True"


@st.composite
def networks(draw: st.DrawFn) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    """Operators after SUnion ``u`` over sources (k int key, v int, f float), ending in
    SOutput ``out``; and the source schema."""
    schema = draw(st.sampled_from([("k", "v"), ("k", "v", "f")]))
    types = {a: ("float" if a == "f" else "int") for a in schema}
    ops: list[dict[str, Any]] = []
    cur, aligned, n = "u", True, 0

    def add(op: dict[str, Any]) -> str:
        nonlocal n
        n += 1
        op["name"] = f"o{n}"
        ops.append(op)
        return str(op["name"])

    for _ in range(draw(st.integers(1, 3))):
        kinds = ["filter", "map", "aggregate"] + (["union"] if aligned else []) + (
            ["join"] if aligned and not any(a.startswith("right_") for a in types) else [])
        kind = draw(st.sampled_from(kinds))
        if kind == "filter":
            cur = add({"type": "filter", "inputs": [cur], "where": _filter(draw, types)})
        elif kind == "map":
            fields = {a: a for a in types}
            ints = [a for a, t in types.items() if t == "int"]
            if ints:
                fields["w"] = f"{draw(st.sampled_from(ints))} * 3 + 1"
            if "f" in types:
                fields["g"] = "f * 0.1 + 1"
            cur = add({"type": "map", "inputs": [cur], "fields": fields})
            types = {a: ("float" if a in ("f", "g") else "int") for a in fields}
        elif kind == "aggregate":
            window = draw(st.sampled_from([100_000, 200_000, 300_000]))
            slide = draw(st.sampled_from([d for d in (50_000, 100_000, 150_000, window)
                                          if d <= window]))
            keys = [a for a, t in types.items() if t == "int"]
            group_by = draw(st.lists(st.sampled_from(keys), max_size=2, unique=True)) if keys else []
            num = [a for a in types if a not in group_by]
            aggs: list[dict[str, Any]] = [{"fn": "count", "as": f"c{n}"}]  # names: new ones
            for i, a in enumerate(draw(st.lists(st.sampled_from(num), max_size=3)) if num else []):
                fn = draw(st.sampled_from(["sum", "avg", "min", "max"]))
                aggs.append({"fn": fn, "attr": a, "as": f"{fn}{n}_{i}"})
            cur = add({"type": "aggregate", "inputs": [cur], "window": window, "slide": slide,
                       "group_by": group_by, "aggregates": aggs})
            types = {g: types[g] for g in group_by} | {
                a["as"]: ("int" if a["fn"] == "count" or (a["fn"] != "avg" and types[a["attr"]]
                                                          == "int") else "float")
                for a in aggs}
            aligned = False
        else:
            left = add({"type": "filter", "inputs": [cur], "where": _filter(draw, types)})
            right = add({"type": "filter", "inputs": [cur], "where": _filter(draw, types)})
            if draw(st.booleans()):
                left, right = right, left  # the later producer on port 0
            if kind == "union":
                cur = add({"type": "union", "inputs": [left, right]})
                continue
            keys = [a for a, t in types.items() if t == "int"]
            key = draw(st.sampled_from(keys))
            cur = add({"type": "join", "inputs": [left, right], "on": [[key, key]],
                       "band": draw(st.sampled_from([0, 50_000, 150_000]))})
            types = types | {f"right_{a}": t for a, t in types.items()}
    ops.append({"name": "out", "type": "soutput", "inputs": [cur]})
    return ops, schema
