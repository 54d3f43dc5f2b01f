"""``filter`` / ``map`` expressions (operators/expr.py) as pyarrow compute, exactly or not at all.

Role: the vectorized ``filter`` and ``map`` evaluate their expressions over a whole record
batch at once. The result must be the compiled Python's (operators/expr.py), value for
value, of the same Python type, bit for bit for floats; where Python would raise on some
row, the operators raise naming it. So this module computes a batch only when it can prove
the result is Python's, and otherwise raises :class:`Fallback`: the caller then runs the
operators' own compiled Python over that batch's tuples (which also raises Python's error
where there is one). Exactness is by construction, speed is where the data allows it.

Theory of operation. The expression is checked by :func:`operators.expr.validate` (the
operators' own check: the same language, the same refusals); its tree (attribute names
rewritten to ``v[i]``) is walked once per batch. Every column has a static Python type from
its Arrow type (int64 int, float64 float, string str, bool bool; any other type, or a
column with nulls: fall back), so every node gets one, by Python's rules; a node whose
Python meaning is not exactly an Arrow kernel's falls back:

* int arithmetic uses the checked kernels (Python's ints do not overflow: an int64
  overflow falls back); ``//`` and ``%`` on ints floor toward minus infinity as Python
  does (Arrow's integer division truncates: corrected where the signs differ); any zero
  divisor falls back (Python raises).
* an int meets a float (arithmetic, ``/`` of two ints, comparisons) only within +-2**53,
  where the conversion is exact and IEEE arithmetic then gives Python's result; beyond it
  the batch falls back.
* comparisons of two ints, two floats (NaN compares false, as in Python), two strs (UTF-8
  byte order is code point order) or two bools; ``==`` / ``!=`` of a str with a number is
  constant, as in Python.
* truthiness (``not``, ``and``/``or`` in a filter, the conditional's test) by type; the
  value of ``and``/``or`` only over bools, where it is the boolean result.
* ``in`` over a set of constants of the left side's exact type (int, str or bool).
* calls: ``abs``, ``len(str)``, ``min``/``max`` of ints, ``round(float)`` (half to even,
  to an int), ``int(float)`` (truncated), ``float(int)``, ``str(int)``, and each of them on
  what is already of its result type.

Everything else falls back: floats with ``//``, ``%`` or ``round(x, n)``; ``str`` of a
float or a bool; bools in arithmetic; values of different types meeting in a
conditional, ``min``/``max`` or ``and``/``or``; ``in`` over non-constants or mixed types.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from operators.errors import Fallback, SpecError
from operators.expr import validate
from protocol.tuples import Schema

__all__ = ["Fallback", "VectorFilter", "VectorMap"]

_EXACT = 2**53  # ints within +-2**53 convert to float exactly
_I64 = (-(2**63), 2**63 - 1)
_ARROW_TYPES = {"int": pa.int64(), "float": pa.float64(), "str": pa.string(), "bool": pa.bool_()}
_CMP = {ast.Eq: pc.equal, ast.NotEq: pc.not_equal, ast.Lt: pc.less, ast.LtE: pc.less_equal,
        ast.Gt: pc.greater, ast.GtE: pc.greater_equal}
_CHECKED = {ast.Add: pc.add_checked, ast.Sub: pc.subtract_checked,
            ast.Mult: pc.multiply_checked}
_FLOAT_OPS = {ast.Add: pc.add, ast.Sub: pc.subtract, ast.Mult: pc.multiply}

#: A value: an Arrow array (or scalar, for constants) and its static Python type.
Value = tuple[Any, str]


def python_type(t: pa.DataType) -> str:
    """The Python type of a column's values, or :class:`Fallback`."""
    if pa.types.is_int64(t):
        return "int"
    if pa.types.is_float64(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    if pa.types.is_boolean(t):
        return "bool"
    raise Fallback(f"a column of Arrow type {t}")


class _Batch:
    """One evaluation over ``columns`` (the values columns, by position)."""

    def __init__(self, columns: Sequence[Any], n: int) -> None:
        self.columns = columns
        self.n = n

    # ------------------------------------------------------------------ values
    def value(self, node: ast.expr) -> Value:
        if isinstance(node, ast.Constant):
            return _constant(node.value)
        if isinstance(node, ast.Subscript):  # v[i]: an attribute (operators/expr.py)
            col = self.columns[node.slice.value]  # type: ignore[attr-defined]
            if col.null_count:
                raise Fallback("a column with None values")
            return col, python_type(col.type)
        if isinstance(node, ast.BinOp):
            return self.binop(node.op, self.value(node.left), self.value(node.right))
        if isinstance(node, ast.UnaryOp):
            return self.unary(node)
        if isinstance(node, ast.BoolOp):
            values = [self.value(v) for v in node.values]
            if any(t != "bool" for _, t in values):
                raise Fallback("the value of and/or over non-bools")
            fn = pc.and_kleene if isinstance(node.op, ast.And) else pc.or_kleene
            return _reduce(fn, [x for x, _ in values]), "bool"
        if isinstance(node, ast.Compare):
            return self.compare(node), "bool"
        if isinstance(node, ast.IfExp):
            test = self.truth(node.test)
            (body, tb), (orelse, to) = self.value(node.body), self.value(node.orelse)
            if tb != to:
                raise Fallback("a conditional whose branches differ in type")
            return pc.if_else(test, body, orelse), tb
        if isinstance(node, ast.Call):
            return self.call(node)
        raise Fallback(type(node).__name__)  # (validate() admits nothing else)

    def truth(self, node: ast.expr) -> Any:
        """Python's truthiness of ``node``, as a boolean array or scalar."""
        if isinstance(node, ast.BoolOp):
            fn = pc.and_kleene if isinstance(node.op, ast.And) else pc.or_kleene
            return _reduce(fn, [self.truth(v) for v in node.values])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return pc.invert(self.truth(node.operand))
        x, t = self.value(node)
        if t == "bool":
            return x
        if t in ("int", "float"):
            return pc.not_equal(x, 0)  # (-0.0 is false, NaN true: as Python)
        return pc.not_equal(x, "")

    def binop(self, op: ast.operator, left: Value, right: Value) -> Value:
        (a, ta), (b, tb) = left, right
        if "bool" in (ta, tb) or "str" in (ta, tb):
            if ta == tb == "str" and isinstance(op, ast.Add):
                return pc.binary_join_element_wise(a, b, ""), "str"
            raise Fallback("bools or strs in arithmetic")
        if isinstance(op, ast.Div):
            _nonzero(b)
            return pc.divide(_as_float(a, ta), _as_float(b, tb)), "float"
        if ta == tb == "int":
            if isinstance(op, ast.FloorDiv | ast.Mod):
                return _floor_div_mod(a, b, isinstance(op, ast.Mod)), "int"
            return _checked(_CHECKED[type(op)], a, b), "int"
        if isinstance(op, ast.FloorDiv | ast.Mod):
            raise Fallback("float // or %")
        return _FLOAT_OPS[type(op)](_as_float(a, ta), _as_float(b, tb)), "float"

    def unary(self, node: ast.UnaryOp) -> Value:
        if isinstance(node.op, ast.Not):
            return pc.invert(self.truth(node.operand)), "bool"
        x, t = self.value(node.operand)
        if t not in ("int", "float"):
            raise Fallback("unary +/- of a non-number")
        if isinstance(node.op, ast.UAdd):
            return x, t
        return (_checked(pc.negate_checked, x) if t == "int" else pc.negate(x)), t

    def compare(self, node: ast.Compare) -> Any:
        result = None
        left = self.value(node.left)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, ast.In | ast.NotIn):
                part = _membership(left, comparator)
                if isinstance(op, ast.NotIn):
                    part = pc.invert(part)
                right = left
            else:
                right = self.value(comparator)
                part = _compare(op, left, right, self.n)
            result = part if result is None else pc.and_kleene(result, part)
            left = right
        return result

    def call(self, node: ast.Call) -> Value:
        name = node.func.id  # type: ignore[attr-defined]
        args = [self.value(a) for a in node.args]
        (x, t) = args[0]
        if name == "len" and t == "str":
            return pc.cast(pc.utf8_length(x), pa.int64()), "int"
        if name == "abs" and t in ("int", "float"):
            return (_checked(pc.abs_checked, x) if t == "int" else pc.abs(x)), t
        if name in ("min", "max") and len(args) > 1 and all(u == "int" for _, u in args):
            fn = pc.min_element_wise if name == "min" else pc.max_element_wise
            return fn(*(a for a, _ in args)), "int"
        if len(args) == 1:
            if (name, t) in (("int", "int"), ("round", "int"), ("float", "float"),
                             ("str", "str")):
                return x, t
            if name in ("round", "int") and t == "float":
                _finite_int64(x)
                whole = pc.round(x, 0, round_mode="half_to_even") if name == "round" else pc.trunc(x)
                return pc.cast(whole, pa.int64()), "int"
            if name == "float" and t == "int":
                return _as_float(x, t), "float"
            if name == "str" and t == "int":
                return pc.cast(x, pa.string()), "str"
        raise Fallback(f"{name}() of {', '.join(u for _, u in args)}")

    def column(self, node: ast.expr) -> tuple[pa.Array, str]:
        """``node``'s value as an array of the batch's length."""
        x, t = self.value(node)
        if isinstance(x, pa.Scalar):
            x = pa.array([x.as_py()] * self.n, _ARROW_TYPES[t])
        return x, t


# ---------------------------------------------------------------------- helpers
def _constant(c: Any) -> Value:
    t = {int: "int", float: "float", str: "str", bool: "bool"}.get(type(c))
    if t is None:
        raise Fallback("the constant None")
    if t == "int" and not _I64[0] <= c <= _I64[1]:
        raise Fallback("an int constant beyond int64")
    return pa.scalar(c, _ARROW_TYPES[t]), t


def _reduce(fn: Callable[..., Any], xs: list[Any]) -> Any:
    out = xs[0]
    for x in xs[1:]:
        out = fn(out, x)
    return out


def _checked(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except pa.ArrowInvalid as e:  # overflow: Python's int would go on growing
        raise Fallback(str(e)) from None


def _bounds(x: Any) -> tuple[Any, Any]:
    if isinstance(x, pa.Scalar):
        v = x.as_py()
        return v, v
    mm = pc.min_max(x)
    return mm["min"].as_py(), mm["max"].as_py()


def _as_float(x: Any, t: str) -> Any:
    if t == "float":
        return x
    lo, hi = _bounds(x)
    if lo is not None and not (lo >= -_EXACT and hi <= _EXACT):
        raise Fallback("an int beyond 2**53 meets a float")
    return pc.cast(x, pa.float64())


def _nonzero(x: Any) -> None:
    zero = pc.equal(x, 0)
    if (zero.as_py() if isinstance(zero, pa.Scalar) else pc.any(zero).as_py()):
        raise Fallback("a zero divisor")


def _finite_int64(x: Any) -> None:
    lo, hi = _bounds(x)
    if lo is not None and not (math.isfinite(lo) and math.isfinite(hi)
                               and lo >= -(2.0**63) and hi < 2.0**63):
        raise Fallback("a float that is no int64 (inf, nan or too large)")
    if not isinstance(x, pa.Scalar) and pc.any(pc.is_nan(x)).as_py():
        raise Fallback("nan")


def _floor_div_mod(a: Any, b: Any, mod: bool) -> Any:
    """Python's ``a // b`` or ``a % b`` of int64 values: Arrow's division truncates toward
    zero; where the remainder is not zero and its sign differs from the divisor's, the
    quotient goes one down and the remainder takes the divisor's sign."""
    _nonzero(b)
    q = _checked(pc.divide_checked, a, b)
    r = _checked(pc.subtract_checked, a, _checked(pc.multiply_checked, q, b))
    adjust = pc.and_(pc.not_equal(r, 0), pc.not_equal(pc.less(r, 0), pc.less(b, 0)))
    if mod:
        return pc.if_else(adjust, _checked(pc.add_checked, r, b), r)
    return pc.if_else(adjust, _checked(pc.subtract_checked, q, 1), q)


def _compare(op: ast.cmpop, left: Value, right: Value, n: int) -> Any:
    (a, ta), (b, tb) = left, right
    if ta == tb:
        return _CMP[type(op)](a, b)
    numbers = ("int", "float")
    if ta in numbers and tb in numbers:
        return _CMP[type(op)](_as_float(a, ta), _as_float(b, tb))
    if isinstance(op, ast.Eq | ast.NotEq) and "str" in (ta, tb) and "bool" not in (ta, tb):
        # A str never equals a number: Python answers without looking at the values.
        return pa.scalar(isinstance(op, ast.NotEq))
    raise Fallback(f"{ta} compared with {tb}")


def _membership(left: Value, right: ast.expr) -> Any:
    x, t = left
    if not isinstance(right, ast.Set) or t not in ("int", "str", "bool"):
        raise Fallback("'in' over non-constants or floats")
    elts = [e.value for e in right.elts]  # type: ignore[attr-defined]
    if any(type(e) is not {"int": int, "str": str, "bool": bool}[t] for e in elts):
        raise Fallback("'in' over values of other types")
    if isinstance(x, pa.Scalar):
        return pa.scalar(x.as_py() in elts)
    return pc.is_in(x, value_set=pa.array(elts, _ARROW_TYPES[t]))


# ---------------------------------------------------------------------- public API
class VectorFilter:
    """``filter``'s predicate over a batch's values columns: a boolean mask."""

    def __init__(self, owner: str, source: str, schema: Schema) -> None:
        self.owner, self.source = owner, source
        self._tree = validate(owner, source, schema)

    def mask(self, columns: Sequence[Any], n: int) -> Any:
        """The rows (of ``n``) where the predicate holds, or :class:`Fallback`."""
        try:
            truth = _Batch(columns, n).truth(self._tree)
        except pa.ArrowException as e:  # no kernel for it: Python decides
            raise Fallback(str(e)) from None
        if isinstance(truth, pa.Scalar):
            return pa.array([truth.as_py()] * n, pa.bool_())
        return truth


class VectorMap:
    """``map``'s fields over a batch's values columns: one array per field."""

    def __init__(self, owner: str, sources: Sequence[str], schema: Schema) -> None:
        if not sources:
            raise SpecError(f"{owner}: a map needs at least one field")
        self.owner, self.sources = owner, tuple(sources)
        self._trees = [validate(owner, s, schema) for s in sources]

    def columns(self, columns: Sequence[Any], n: int) -> list[pa.Array]:
        """The fields' values over ``n`` rows, or :class:`Fallback`."""
        batch = _Batch(columns, n)
        try:
            return [batch.column(tree)[0] for tree in self._trees]
        except pa.ArrowException as e:  # no kernel for it: Python decides
            raise Fallback(str(e)) from None
