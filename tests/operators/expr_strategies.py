"""Random well-typed expressions of the filter/map language, and rows to run them on.

Shared by the tests that hold a translation of the language equal to the operators' own
compiled Python (operators/expr.py): Spark's (ops_scripts/reconcile/spark_expr.py) and
pyarrow's (operators/vectorized/expr.py). :func:`expression_cases` draws the column types,
rows of values (int64 edges, NaN, infinities, -0.0, non-ASCII text), six expressions and
whether they are a filter's predicate or a map's fields.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from hypothesis import strategies as st

__all__ = ["TYPE_NAMES", "TypeName", "expression_cases", "expressions"]

TypeName = Literal["int", "float", "str", "bool"]
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
NAN, INF = math.nan, math.inf

TYPE_NAMES: list[TypeName] = ["int", "float", "str", "bool"]
_INT_CONSTS = [0, 1, 2, 3, 7, 10, 100, 2**31, 2**53 + 1, 2**62, I64_MAX]
_FLOAT_CONSTS = [0.0, 0.5, 1.5, 2.5, 0.1, 3.0, 1e16, 1.5e-7, 1e300, 1e-300, INF]
_STR_CONSTS = ["", "a", "B", "é", 'x"y', "\t", "\U0001f600"]


def _const(draw: st.DrawFn, t: str) -> str:
    if t == "bool":
        return repr(draw(st.booleans()))
    if t == "str":
        return repr(draw(st.sampled_from(_STR_CONSTS)))
    x = draw(st.sampled_from(_INT_CONSTS if t == "int" else _FLOAT_CONSTS))
    text = "1e400" if x == INF else repr(x)
    return f"(-{text})" if draw(st.booleans()) and x != 0 else text


@st.composite
def expressions(draw: st.DrawFn, t: str, attrs: Mapping[str, list[str]], depth: int) -> str:
    """A well-typed expression of Python type ``t``, fully parenthesised."""
    if depth == 0 or draw(st.integers(0, 4)) == 0:
        use_attr: bool = draw(st.booleans())
        if attrs[t] and use_attr:
            return str(draw(st.sampled_from(attrs[t])))
        return _const(draw, t)
    def sub(u: str) -> str:
        return str(draw(expressions(u, attrs, depth - 1)))

    num = st.sampled_from(["int", "float", "bool"])
    kind = draw(st.integers(0, 9))
    if kind == 0:  # the conditional, same type on both sides
        return f"({sub(t)} if {sub(draw(st.sampled_from(TYPE_NAMES)))} else {sub(t)})"
    if kind == 1:  # and / or over one type
        return f"({sub(t)} {draw(st.sampled_from(['and', 'or']))} {sub(t)})"
    if kind == 2 and t != "bool":  # min / max over one type
        n = draw(st.integers(2, 3))
        return f"{draw(st.sampled_from(['min', 'max']))}({', '.join(sub(t) for _ in range(n))})"
    if t == "int":
        match draw(st.integers(0, 7)):
            case 0 | 1:
                lt, rt = draw(st.sampled_from([("int", "int"), ("bool", "int"), ("bool", "bool")]))
                return f"({sub(lt)} {draw(st.sampled_from(['+', '-', '*', '//', '%']))} {sub(rt)})"
            case 2:
                return f"({draw(st.sampled_from(['-', '+']))}{sub(draw(st.sampled_from(['int', 'bool'])))})"
            case 3:  # abs keeps its argument's type (abs(0.5) is a float): ints only
                f = draw(st.sampled_from(['abs', 'int', 'round']))
                arg = draw(st.sampled_from(['int', 'bool']) if f == 'abs' else num)
                return f"{f}({sub(arg)})"
            case 4:
                return f"len({sub('str')})"
            case 5:
                return f"round({sub('int')}, {draw(st.integers(-18, 2))})"
            case _:
                return f"({sub('int')} {draw(st.sampled_from(['+', '*', '//', '%']))} {sub('int')})"
    if t == "float":
        match draw(st.integers(0, 5)):
            case 0 | 1:
                lt, rt = draw(st.sampled_from([("float", "float"), ("int", "float"),
                                             ("float", "int"), ("float", "bool")]))
                return f"({sub(lt)} {draw(st.sampled_from(['+', '-', '*', '/', '//', '%']))} {sub(rt)})"
            case 2:
                return f"({sub(draw(num))} / {sub(draw(st.sampled_from(['int', 'bool'])))})"
            case 3:
                return f"{draw(st.sampled_from(['abs', 'float', '-', '+']))}({sub('float')})"
            case 4:
                return f"float({sub(draw(num))})"
            case _:
                return f"round({sub('float')}, {sub('int') if draw(st.booleans()) else '2'})"
    if t == "str":
        match draw(st.integers(0, 3)):
            case 0:
                return f"({sub('str')} + {sub('str')})"
            case 1:
                return f"str({sub(draw(st.sampled_from(TYPE_NAMES)))})"
            case 2:
                return f"({sub('str')} * {draw(st.integers(-1, 3))})"
            case _:
                return sub("str")
    match draw(st.integers(0, 4)):  # bool
        case 0:
            lt, rt = draw(st.sampled_from([("int", "int"), ("int", "float"), ("float", "float"),
                                         ("str", "str"), ("bool", "int"), ("float", "bool")]))
            ops = ["==", "!=", "<", "<=", ">", ">="]
            return f"({sub(lt)} {draw(st.sampled_from(ops))} {sub(rt)})"
        case 1:
            lt, m, rt = (draw(num) for _ in range(3))
            return f"({sub(lt)} < {sub(m)} <= {sub(rt)})"
        case 2:
            u = draw(st.sampled_from(TYPE_NAMES))
            elts = [_const(draw, draw(st.sampled_from(TYPE_NAMES))) for _ in range(draw(st.integers(0, 3)))]
            if u != "float" and draw(st.booleans()):
                elts.append(sub(u))  # a non-constant element (not with a float left side)
            neg = draw(st.sampled_from(["in", "not in"]))
            return f"({sub(u)} {neg} ({', '.join(elts)}{',' if len(elts) == 1 else ''}))"
        case 3:
            return f"(not {sub(draw(st.sampled_from(TYPE_NAMES)))})"
        case _:
            u = draw(st.sampled_from(["str", "int"]))
            return f"({sub(u)} {draw(st.sampled_from(['==', '!=']))} {sub('str')})"


_INTS = st.one_of(st.sampled_from([0, 1, -1, 2, -7, 3, 2**53 + 1, -(2**53) - 3, 2**62, I64_MIN,
                                   I64_MAX]), st.integers(-1000, 1000), st.integers(I64_MIN, I64_MAX))
_FLOATS = st.one_of(st.sampled_from([0.0, -0.0, 0.5, 2.5, -1.5, 0.1, 1e16, NAN, INF, -INF,
                                     2.0**63, 1e300]),
                    st.floats(-1e6, 1e6), st.floats(allow_nan=True, allow_infinity=True))
_STRS = st.one_of(st.sampled_from(["", "a", "é", 'q"\\', "\n"]),
                  st.text(st.characters(exclude_categories=["Cs"]), max_size=4))
_VALUES = {"int": _INTS, "float": _FLOATS, "str": _STRS, "bool": st.booleans()}


@st.composite
def expression_cases(draw: st.DrawFn) -> tuple[dict[str, TypeName], list[tuple[Any, ...]], list[str], bool]:
    kinds = draw(st.lists(st.sampled_from(TYPE_NAMES), min_size=1, max_size=5))
    types: dict[str, TypeName] = {f"x{i}": k for i, k in enumerate(kinds)}
    attrs: dict[str, list[str]] = {t: [n for n, k in types.items() if k == t] for t in TYPE_NAMES}
    filt = draw(st.booleans())
    exprs = [draw(expressions(draw(st.sampled_from(TYPE_NAMES)), attrs, 3)) for _ in range(6)]
    rows = draw(st.lists(st.tuples(*(_VALUES[k] for k in kinds)), min_size=1, max_size=10))
    return types, rows, exprs, filt
