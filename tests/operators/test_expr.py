"""The expression language of filter and map (operators/expr.py): what it accepts and
computes, what it refuses (and how it says so), and runtime failures."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators import OperatorError, SpecError, create
from operators.expr import compile_filter, compile_map, compile_scalar
from protocol.tuples import Kind, Tuple, make_tuple

SCHEMA = ("key", "value", "price", "qty", "a", "b", "sym", "flag", "x")
ROW = ("k", 12, 2.5, 4, 7, 3, "IBM", False, None)


def ev(source: str, row: tuple[Any, ...] = ROW, schema: tuple[str, ...] = SCHEMA) -> Any:
    return compile_scalar("test", source, schema)(row)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("value > 10 and key != 'x'", True),
        ("value > 12 or key == 'k'", True),
        ("price * qty", 10.0),
        ("abs(a - b) if a > 0 else 0", 4),
        ("abs(b - a) if a < 0 else -1", -1),
        ("sym in ('IBM', 'MSFT')", True),
        ("sym not in ['IBM', 'MSFT']", False),
        ("a in (b, 7)", True),  # non-constant members
        ("0 < b < a <= 7", True),
        ("0 < a < b", False),
        ("-a + +b", -4),
        ("not flag", True),
        ("a // b", 2),
        ("a % b", 1),
        ("a / 2", 3.5),
        ("-a // 2", -4),
        ("round(a / 3, 2)", 2.33),
        ("round(price)", 2),
        ("min(a, b, 5)", 3),
        ("max(a, b)", 7),
        ("min(sym)", "B"),
        ("int('7') + 1", 8),
        ("int(price)", 2),
        ("float(a)", 7.0),
        ("str(a) + key", "7k"),
        ("len(sym)", 3),
        ("x == None", True),
        ("None", None),
        ("True", True),
        ("'it''s'", "its"),
        ("1.5e1", 15.0),
    ],
)
def test_expressions_compute_like_python(source: str, expected: Any) -> None:
    assert ev(source) == expected


def test_membership_keeps_python_equality() -> None:
    # Constant members become a frozenset: equality must still be Python's.
    assert ev("value in (12.0, 'z')") is True
    assert ev("flag in (0,)") is True
    assert ev("x in (None, 1)") is True
    assert ev("key in ()") is False


def test_attribute_names_cannot_shadow_the_compiled_code() -> None:
    schema = ("v", "t", "run", "_new", "_T", "abs")
    row = (1, 2, 3, 4, 5, -6)
    assert ev("v + t + run + _new + _T", row, schema) == 15
    assert ev("abs(abs)", row, schema) == 6
    select = compile_filter("test", "run > v", schema)
    ts = [make_tuple(Kind.STABLE, 1, 0, 0, row)]
    assert select(ts) == ts


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("__import__('os')", "a call is not allowed: '__import__'"),
        ("x.__class__", "attribute access is not allowed: 'x.__class__'"),
        ("().__class__.__bases__", "attribute access"),
        ("[i for i in y]", "ListComp"),
        ("{i for i in a}", "SetComp"),
        ("(i for i in a)", "GeneratorExp"),
        ("lambda: 1", "Lambda"),
        ("open('f')", "a call is not allowed: 'open'"),
        ("key.upper()", "attribute access"),
        ("(lambda: 1)()", "Lambda"),
        ("a(1)", "a call is not allowed: 'a'"),
        ("a ** 2", "the operator Pow"),
        ("a & b", "the operator BitAnd"),
        ("a << b", "the operator LShift"),
        ("~a", "the operator Invert"),
        ("sym[0]", "subscripting is not allowed: 'sym[0]'"),
        ("abs(x=a)", "a keyword argument"),
        ("max(*a)", "a starred argument"),
        ("abs(a, b)", "abs() with 2 argument(s)"),
        ("len()", "len() with 0 argument(s)"),
        ("f'{a}'", "JoinedStr"),
        ("(y := 1)", "NamedExpr"),
        ("a is None", "the comparison Is"),
        ("a in sym", "'in' over a non-literal"),
        ("(a, b)", "a tuple or list outside 'in (...)'"),
        ("{1: a}", "Dict"),
        ("{a}", "Set"),
        ("b'x'", "a bytes constant"),
        ("1j", "a complex constant"),
        ("...", "a ellipsis constant"),
        ("__class__", "a dunder name"),
        ("__builtins__", "a dunder name"),
        ("nope + 1", "unknown attribute 'nope'; the input has key, value"),
        ("a if", "is not valid"),
        ("a = 1", "is not valid"),
        ("   ", "expression is empty"),
    ],
)
def test_unsafe_or_unknown_expressions_are_spec_errors(source: str, fragment: str) -> None:
    with pytest.raises(SpecError) as err:
        create("filter", "f1", [SCHEMA], {"where": source})
    msg = str(err.value)
    assert "operator 'f1' (filter)" in msg
    assert fragment in msg
    if source.strip() and "not valid" not in fragment:
        assert repr(source.strip()) in msg  # the expression itself is named


@pytest.mark.parametrize("source", ["-" * 5000 + "a", " + ".join(["a"] * 20000)])
def test_absurdly_nested_expressions_are_spec_errors(source: str) -> None:
    with pytest.raises(
        SpecError, match=r"operator 'f' \(filter\): expression .* too deeply nested"
    ):
        create("filter", "f", [SCHEMA], {"where": source})


def test_map_names_the_bad_field_expression() -> None:
    with pytest.raises(SpecError, match=r"operator 'm' \(map\): expression 'qty\.real'"):
        create("map", "m", [SCHEMA], {"fields": {"ok": "a + 1", "bad": "qty.real"}})


def _run(*rows: tuple[Any, ...], kind: Kind = Kind.STABLE) -> list[Tuple]:
    return [make_tuple(kind, i + 1, 10 * i, 10 * i + 1, r) for i, r in enumerate(rows)]


def test_runtime_error_in_filter_names_operator_expression_and_tuple() -> None:
    op = create("filter", "f2", [("a", "b")], {"where": "a / b > 1"})
    with pytest.raises(OperatorError) as err:
        op.process(0, _run((4, 2), (3, 0), (1, 1)))
    msg = str(err.value)
    assert "operator 'f2' (filter)" in msg
    assert "'a / b > 1'" in msg
    assert "tuple id 2" in msg
    assert "ZeroDivisionError" in msg


def test_runtime_type_error_in_map_names_the_failing_field() -> None:
    op = create("map", "m2", [("a", "b")], {"fields": {"s": "a + 1", "t": "b + 1"}})
    with pytest.raises(OperatorError) as err:
        op.process(0, _run((1, 2), (2, "x")))
    msg = str(err.value)
    assert "operator 'm2' (map)" in msg and "'b + 1'" in msg and "tuple id 2" in msg
    assert "TypeError" in msg


def test_filter_passes_the_same_objects() -> None:
    op = create("filter", "f", [("a", "b")], {"where": "a > b"})
    run = _run((2, 1), (1, 2), (5, 0))
    out = op.process(0, run)
    assert [id(t) for t in out] == [id(run[0]), id(run[2])]
    assert op.output_schema == ("a", "b")


def test_map_keeps_kind_id_time_tmax() -> None:
    op = create("map", "m", [("a", "b")], {"fields": {"sum": "a + b", "a": "a", "c": "'c'"}})
    assert op.output_schema == ("sum", "a", "c")
    run = _run((2, 1), (1, 2), kind=Kind.TENTATIVE)
    assert op.process(0, run) == [
        make_tuple(Kind.TENTATIVE, 1, 0, 1, (3, 2, "c")),
        make_tuple(Kind.TENTATIVE, 2, 10, 11, (3, 1, "c")),
    ]


# Reference semantics: the same expression as a Python function of (a, b).
CASES: list[tuple[str, Callable[[int, int], Any]]] = [
    ("a + b * 2 - 7", lambda a, b: a + b * 2 - 7),
    ("a // b if b != 0 else -1", lambda a, b: a // b if b != 0 else -1),
    ("a % 5 == 0 or b < 0", lambda a, b: a % 5 == 0 or b < 0),
    ("-10 < a <= b", lambda a, b: -10 < a <= b),
    ("abs(a - b) > 3 and not a in (1, 2, 3)", lambda a, b: abs(a - b) > 3 and a not in (1, 2, 3)),
    ("max(a, b, 0) - min(a, -b)", lambda a, b: max(a, b, 0) - min(a, -b)),
]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-50, 50), st.integers(-50, 50)), max_size=30))
def test_batch_templates_agree_with_python(rows: list[tuple[int, int]]) -> None:
    run = _run(*rows)
    schema = ("a", "b")
    for source, ref in CASES:
        select = compile_filter("t", source, schema)
        assert select(run) == [t for t in run if ref(*t.values)]
        project = compile_map("t", [source, "a"], schema)
        assert project(run) == [t._replace(values=(ref(*t.values), t.values[0])) for t in run]
