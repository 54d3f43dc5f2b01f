"""The vectorized expressions (operators/vectorized/expr.py) against the operators' Python.

Whatever the expression and the rows: a batch computed in Arrow holds exactly what the
compiled Python (operators/expr.py) computes, row by row, of the same Python type, floats
bit for bit, and a batch on which Python raises for some row is never computed (it falls
back, and the Python path raises). The common expressions of the examples never fall back:
the fast path is really taken.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

from operators.errors import OperatorError
from operators.expr import compile_filter, compile_map
from operators.vectorized.expr import Fallback, VectorFilter, VectorMap
from protocol.tuples import Kind, Tuple
from tests.operators.expr_strategies import TypeName, expression_cases

ARROW = {"int": pa.int64(), "float": pa.float64(), "str": pa.string(), "bool": pa.bool_()}


def columns(types: Mapping[str, TypeName], rows: Sequence[tuple[Any, ...]]) -> list[pa.Array]:
    return [pa.array([r[i] for r in rows], ARROW[t]) for i, t in enumerate(types.values())]


def exact(v: Any) -> Any:
    return ("float", struct.pack("<d", v)) if isinstance(v, float) else (type(v).__name__, v)


def python(expr: str, names: tuple[str, ...], rows: Sequence[tuple[Any, ...]], filt: bool
           ) -> list[Any] | None:
    """Per row, the compiled Python's answer; None if it raises on any row."""
    out = []
    for values in rows:
        t = Tuple(Kind.STABLE, 1, 0, 0, values)
        try:
            if filt:
                out.append(bool(compile_filter("f", expr, names)([t])))
            else:
                out.append(compile_map("m", [expr], names)([t])[0][4][0])
        except (ArithmeticError, TypeError, ValueError, OperatorError):
            return None
    return out


def vectorized(expr: str, names: tuple[str, ...], cols: list[pa.Array], n: int, filt: bool
               ) -> list[Any] | None:
    """The Arrow answer per row; None if the batch falls back."""
    try:
        if filt:
            return list(VectorFilter("f", expr, names).mask(cols, n).to_pylist())
        return list(VectorMap("m", [expr], names).columns(cols, n)[0].to_pylist())
    except Fallback:
        return None


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=expression_cases())
def test_a_computed_batch_is_what_python_computes(case: Any) -> None:
    types, rows, exprs, filt = case
    names = tuple(types)
    cols = columns(types, rows)
    for expr in exprs:
        want = python(expr, names, rows, filt)
        got = vectorized(expr, names, cols, len(rows), filt)
        if got is None:
            continue  # fell back: the Python path decides (and raises where it raises)
        assert want is not None, f"{expr!r} on {rows}: Python raises, Arrow computed {got}"
        assert list(map(exact, got)) == list(map(exact, want)), (expr, rows, got, want)


COMMON = {  # what the example configs and the docs write
    "filter": ["value < 50", "value >= 90", "key != 3 and value > 10", "not (value > 5)",
               "key in (1, 2, 3)", "name != 'x'", "len(name) > 2", "price > 1.5",
               "value + key > price", "0 < value <= 80"],
    "map": ["value * 2 + key", "price / 2", "value // 7", "value % 7", "value / key",
            "round(price)", "int(price)", "float(value)", "str(key) + name", "abs(key - value)",
            "max(key, value)", "min(key, value, 5)", "value if value > key else key",
            "price * value", "-value", "len(name)", "value > 10 and key < 50"],
}


def test_the_common_expressions_are_computed_in_arrow() -> None:
    names = ("key", "value", "price", "name")
    rows = [(k, v, v / 3 + 0.25, f"n{k}") for k, v in [(1, 0), (2, 55), (3, 99), (7, -12)]]
    cols = columns({"key": "int", "value": "int", "price": "float", "name": "str"}, rows)
    for kind, exprs in COMMON.items():
        for expr in exprs:
            got = vectorized(expr, names, cols, len(rows), kind == "filter")
            assert got is not None, f"{kind} {expr!r} fell back"
            want = python(expr, names, rows, kind == "filter")
            assert want is not None and list(map(exact, got)) == list(map(exact, want)), expr


@pytest.mark.parametrize(("expr", "rows"), [
    ("a / b", [(1, 2), (3, 0)]),  # a zero divisor: Python raises ZeroDivisionError
    ("a // b", [(1, 0)]),
    ("a * b", [(2**62, 4)]),  # int64 overflow: Python's int goes on
    ("a + 0.5", [(2**53 + 1, 0)]),  # an int no float holds exactly
])
def test_what_arrow_cannot_do_as_python_falls_back(expr: str, rows: list[tuple[int, int]]) -> None:
    cols = columns({"a": "int", "b": "int"}, rows)
    with pytest.raises(Fallback):
        VectorMap("m", [expr], ("a", "b")).columns(cols, len(rows))


def test_none_values_fall_back() -> None:
    cols = [pa.array([1, None], pa.int64())]
    with pytest.raises(Fallback, match="None"):
        VectorFilter("f", "a > 0", ("a",)).mask(cols, 2)
