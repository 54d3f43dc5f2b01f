"""The ``filter``/``map`` expression language as Spark Columns, with Python's semantics.

Role: reference stage 2 (docs/reconcile.md) translates query networks into Spark plans;
this module translates the expressions of ``filter`` and ``map`` operators
(:mod:`operators.expr`) into Spark Columns that compute, row by row, exactly what the
compiled Python computes on the tuple's values: the same value, of the same Python type,
with the same JSON text, and an ``error`` flag on the rows where Python would raise.

Theory of operation. The expression is first checked by :func:`operators.expr.validate`
(the very check the operators run: same language, same refusals), then its tree is walked
once. Every input attribute has a static type (``types``), so every node gets one too;
Python's run-time type rules (int/float promotion, bool as int, ``and``/``or`` returning an
operand) are applied statically. A node whose Python type would depend on the row (``x if
c else 1.5`` with ``x`` int, ``max(i, f)``) or which always raises TypeError is refused
with :class:`Untranslatable`, naming the piece and why; so is what is not translated
(listed below). Each node yields ``(value, type, error)``; errors compose in Python's
evaluation order: operands before the operation, short circuits (``and``, ``or``, the
conditional, chained comparisons) count the errors of the branch actually evaluated only.
Python semantics that Spark does not share are spelled out: floor ``//`` and ``%`` taking
the divisor's sign (CPython's ``_float_div_mod`` for floats), true division of ints
correctly rounded, exact comparison of int with float, NaN comparing False (Spark orders
NaN last and equal to itself), int64 overflow flagged (Python's ints are unbounded).

Floats as text: Java 17's ``Double.toString`` (Spark's cast) is not always the shortest
round-trip text, and no Spark function is, so ``str(float)``, the JSON text of a float
(:func:`json_text`), ``round(float, n)`` and the true division of ints beyond 2**53 are
computed by small Python UDFs calling Python itself (exact by construction; evaluated by
the executors' Python workers, like stage 1's tasks).

Not translated (:class:`Untranslatable`): None as a value (only ``== None``/``!= None``
and ``in`` are), ``%`` on str (formatting), ``str * n`` but for a constant
``n <= 10000``, ``int(str)``, ``float(str)``, ``int(x, base)``, ``round(x, n)`` on
ints with ``n`` not a constant or below -18, one-argument ``min``/``max``, ``min``/``max``
and the value of ``and``/``or``/conditionals over operands of different types (in a
truth context, a filter's ``where`` or a test, they are translated), ``in`` over
non-constant floats with a float left side (Python's identity test makes ``nan in (x,)``
true), int constants beyond int64, statically ill-typed operations.

Invariants: a translated Column never makes Spark raise, whatever the row (ANSI mode or
not): divisors, casts and overflows are guarded, so errors are data; ``error`` is never
null and is None only when no row can raise; where ``error`` is false the value is not
null and is Python's; input columns are non-null, ``int`` LongType, ``float`` DoubleType,
``str`` StringType, ``bool`` BooleanType; an int result outside int64 is an error (the
only deliberate difference from Python, which would go on with a big int).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

import orjson
from pyspark.sql import Column
from pyspark.sql import functions as F

from operators.errors import SpecError
from operators.expr import validate
from ops_scripts.errors import Untranslatable

__all__ = ["SparkType", "Typed", "Untranslatable", "json_text", "translate",
           "translate_filter", "translate_map"]

SparkType = Literal["int", "float", "str", "bool"]
_TYPES: frozenset[str] = frozenset(get_args(SparkType))
_NONE = "none"  # internal type of the constant None: never a column's type
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_EXACT = 2**53  # ints within +-2**53 convert to float exactly
_MAX_REPEAT = 10_000


@dataclass(frozen=True)
class Typed:
    """A translated expression: ``column`` the value, ``type`` its static Python type,
    ``error`` a boolean Column true on the rows where Python raises (None: never)."""

    column: Column
    type: SparkType
    error: Column | None


@dataclass(frozen=True)
class _V:
    """A translated node; ``const`` holds the Python constant of a literal node.
    ``light``: column and error are leaves (attributes, constants, lambda variables), cheap
    to repeat; ``packed``: the struct (v, e) that column and error are fields of."""

    column: Column
    type: str
    error: Column | None
    const: Any = None
    is_const: bool = False
    light: bool = False
    packed: Column | None = None


# ---------------------------------------------------------------- public API


def translate(expr: str, types: Mapping[str, SparkType]) -> Typed:
    """``expr`` over columns named as the attributes (``F.col(name)``) typed ``types``."""
    tr = _Translator(expr, types)
    v = tr.value(tr.tree)
    if v.type == _NONE:
        raise Untranslatable(f"expression {expr!r}: its value is None, which has no column type")
    return _public(v)


def translate_filter(where: str, types: Mapping[str, SparkType]) -> Typed:
    """The predicate of a ``filter``: the Python truthiness of ``where`` (type ``bool``)."""
    tr = _Translator(where, types)
    return _public(tr.truth(tr.tree))


def translate_map(spec_params: Mapping[str, Any], types: Mapping[str, SparkType]
                  ) -> list[tuple[str, Typed]]:
    """The output attributes of a ``map`` with these spec parameters (its ``fields``
    table: output name -> expression), in order, as :mod:`operators.map` defines them."""
    fields = spec_params.get("fields")
    if not isinstance(fields, Mapping) or not fields:
        raise Untranslatable(f"map: parameter 'fields' must be a non-empty table, got {fields!r}")
    out: list[tuple[str, Typed]] = []
    for name, source in fields.items():
        if not isinstance(name, str) or not name or not isinstance(source, str):
            raise Untranslatable(f"map: field {name!r} = {source!r} is not name = expression")
        out.append((name, translate(source, types)))
    return out


def json_text(t: Typed) -> Column:
    """The value as ``orjson.dumps`` writes it (``2.0`` -> ``2.0``, ``1e16`` -> ``1e+16``,
    nan/inf -> ``null``, ``True`` -> ``true``, strings JSON-escaped as orjson does)."""
    c = t.column
    if t.type == "int":
        return c.cast("string")
    if t.type == "bool":
        return F.when(c, F.lit("true")).otherwise(F.lit("false"))
    if t.type == "float":
        return _udf("json")(c)
    if t.type == "str":
        return F.concat(F.lit('"'), _json_escape(c), F.lit('"'))
    raise ValueError(f"json_text: unknown type {t.type!r}")


def _public(v: _V) -> Typed:
    # coalesce: a null error would be a bug of composition; count it as an error, loudly
    # visible in the property test, rather than as a value.
    err = None if v.error is None else F.coalesce(v.error, F.lit(True))
    return Typed(v.column, cast(SparkType, v.type), err)


# ---------------------------------------------------------------- Python UDFs


def _py_json(x: float | None) -> str | None:
    return None if x is None else orjson.dumps(x).decode()


def _py_repr(x: float | None) -> str | None:
    return None if x is None else repr(x)


def _py_truediv(a: int | None, b: int | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _py_round(x: float | None, n: int | None) -> float | None:
    if x is None or n is None:
        return None
    try:
        return round(x, n)
    except OverflowError:  # Python raises it too: the caller flags the row
        return None


_UDFS: dict[str, tuple[Callable[..., Any], str]] = {
    "json": (_py_json, "string"), "repr": (_py_repr, "string"),
    "truediv": (_py_truediv, "double"), "round": (_py_round, "double"),
}


_UDF_USES = [0]  # how many UDF calls were built: a Python UDF must not sit in a lambda


def _udf(name: str) -> Callable[..., Column]:
    # built per use (cheap), not cached: a UDF object holds on to its SparkContext
    _UDF_USES[0] += 1
    fn, rtype = _UDFS[name]
    # a lambda without annotations: PySpark would otherwise read the hints, and warn
    return cast(Callable[..., Column], F.udf(lambda *args: fn(*args), rtype))


# ---------------------------------------------------------------- column helpers


def _or(*errs: Column | None) -> Column | None:
    present = [e for e in errs if e is not None]
    if not present:
        return None
    out = present[0]
    for e in present[1:]:
        out = out | e
    return out


def _and(cond: Column, err: Column | None) -> Column | None:
    """``err``, counted only where ``cond`` (a short circuit that evaluated it)."""
    return None if err is None else (cond & err)


def _long(v: int) -> Column:
    return F.lit(v).cast("long")


def _dbl(x: float) -> Column:
    return F.lit(float(x)).cast("double")


def _as_double(v: _V) -> Column:
    return v.column if v.type == "float" else v.column.cast("double")


def _as_long(v: _V) -> Column:
    return v.column.cast("long") if v.type == "bool" else v.column


def _nan(c: Column) -> Column:
    return F.isnan(c)


def _sign_bit(c: Column) -> Column:
    """Whether a (non-NaN) double has its sign bit set, -0.0 included: its text says so
    (Spark's atan2 and comparisons treat -0.0 as 0.0)."""
    return (c < 0) | ((c == 0) & c.cast("string").startswith("-"))


def _copysign0(c: Column) -> Column:
    # a zero computed from the row: Spark's optimizer folds literals into the branches and
    # then takes -0.0 and 0.0 for equal
    zero = F.least(F.abs(c), _dbl(0.0))
    return F.when(_sign_bit(c), -zero).otherwise(zero)


def _floor_d(c: Column) -> Column:
    """math.floor as a double (Spark's floor returns a long): rint, then step down."""
    r = F.rint(c)
    return F.when(_pycmp_d("Gt", r, c), r - 1.0).otherwise(r)


def _pycmp_d(op: str, a: Column, b: Column) -> Column:
    """Python's comparison of two doubles: False with a NaN (True for !=)."""
    plain = _SPARK_CMP[op](a, b)
    return F.when(_nan(a) | _nan(b), F.lit(op == "NotEq")).otherwise(plain)


_SPARK_CMP: dict[str, Callable[[Column, Column], Column]] = {
    "Eq": lambda a, b: a == b, "NotEq": lambda a, b: a != b,
    "Lt": lambda a, b: a < b, "LtE": lambda a, b: a <= b,
    "Gt": lambda a, b: a > b, "GtE": lambda a, b: a >= b,
}


def _sign3(a: Column, b: Column) -> Column:
    return F.when(a < b, -1).when(a > b, 1).otherwise(0)


def _cmp_int_float(op: str, a: Column, f: Column) -> Column:
    """Python compares an int with a float exactly. Within 2**53 the int converts
    exactly; beyond, its nearest double ``d`` differs from ``f`` in the same direction as
    the int does, and when ``d == f``, ``f`` is an integer (or 2**63) to compare as long."""
    d = a.cast("double")
    small = (a <= _EXACT) & (a >= -_EXACT)
    f_long = F.when((f < 2.0**63) & (f >= -(2.0**63)), f).otherwise(_dbl(0.0)).cast("long")
    exact = F.when(f >= 2.0**63, F.lit(-1)).otherwise(_sign3(a, f_long))
    s = F.when(small | (d != f), _sign3(d, f)).otherwise(exact)
    return F.when(_nan(f), F.lit(op == "NotEq")).otherwise(_SPARK_CMP[op](s, F.lit(0)))


def _json_escape(c: Column) -> Column:
    """orjson's string escapes: backslash, quote, \\b \\t \\n \\f \\r, other controls
    as \\u00XX; everything else (non-ASCII included) as is."""
    short = {8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r"}
    out = F.replace(c, F.lit("\\"), F.lit("\\\\"))
    out = F.replace(out, F.lit('"'), F.lit('\\"'))
    for code in range(32):
        out = F.replace(out, F.lit(chr(code)), F.lit(short.get(code, f"\\u{code:04x}")))
    # the replaces only where needed: most strings have nothing to escape
    return F.when(c.rlike('[\\x00-\\x1f"\\\\]'), out).otherwise(c)


# ---------------------------------------------------------------- the translator


class _Translator:
    """Walks one validated expression tree (names rewritten to ``v[i]``)."""

    def __init__(self, source: str, types: Mapping[str, SparkType]) -> None:
        bad = {n: t for n, t in types.items() if t not in _TYPES}
        if bad:
            raise ValueError(f"spark_expr: attribute types must be one of {sorted(_TYPES)}, "
                             f"got {bad}")
        self.source = source
        self.memo: dict[tuple[int, str], _V] = {}
        self.names = tuple(types)
        self.types = dict(types)
        try:
            self.tree = validate("spark_expr", source, self.names)
        except SpecError as e:
            raise Untranslatable(f"not in the expression language: {e}") from e

    def fail(self, node: ast.AST, why: str) -> Untranslatable:
        piece = ast.unparse(node) if isinstance(node, ast.expr) else type(node).__name__
        for i, name in enumerate(self.names):  # show attribute names, not v[i]
            piece = piece.replace(f"v[{i}]", name)
        return Untranslatable(f"expression {self.source!r}: {piece!r}: {why}")

    # ---- values

    # ---- sharing: each node's operands are bound once (see _let), not copied per use

    def value(self, node: ast.expr) -> _V:
        hit = self.memo.get((id(node), "v"))
        if hit is not None:
            return hit
        if isinstance(node, ast.Constant | ast.Subscript):
            return self._value(node)
        return self.bound(node, "v", self._value)

    def truth(self, node: ast.expr) -> _V:
        hit = self.memo.get((id(node), "t"))
        if hit is not None:
            return hit
        if isinstance(node, ast.BoolOp | ast.IfExp) or (
                isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
            return self.bound(node, "t", self._truth)
        return self.truthy(self.value(node))

    @staticmethod
    def children(node: ast.expr, mode: str) -> list[tuple[ast.expr, str]]:
        """The operands the builder of ``node`` asks for, each with its mode."""
        if isinstance(node, ast.BoolOp):
            return [(x, mode) for x in node.values]
        if isinstance(node, ast.IfExp):
            return [(node.test, "t"), (node.body, mode), (node.orelse, mode)]
        if isinstance(node, ast.UnaryOp):
            return [(node.operand, "t" if isinstance(node.op, ast.Not) else "v")]
        if isinstance(node, ast.BinOp):
            return [(node.left, "v"), (node.right, "v")]
        if isinstance(node, ast.Call):
            return [(a, "v") for a in node.args]
        if isinstance(node, ast.Compare):
            out = [(node.left, "v")]
            for op, comp in zip(node.ops, node.comparators, strict=True):
                if isinstance(op, ast.In | ast.NotIn) and isinstance(comp, ast.Set | ast.Tuple | ast.List):
                    out += [(e, "v") for e in comp.elts]
                else:
                    out.append((comp, "v"))
            return out
        return []

    def bound(self, node: ast.expr, mode: str, build: Callable[[ast.expr], _V]) -> _V:
        """``build(node)`` with its heavy operands bound once by a lambda (each operand's
        tree appears once, whatever the builder repeats); built directly when the
        builder calls a Python UDF (not allowed inside a lambda)."""
        kids = {(id(c), m): (self.truth(c) if m == "t" else self.value(c))
                for c, m in self.children(node, mode)}
        heavy = [k for k, v in kids.items() if not v.light]
        if not heavy:
            return self.with_memo(kids, build, node)
        uses, built = _UDF_USES[0], []

        def body(s: Column) -> Column:
            light = dict(kids)
            for i, k in enumerate(heavy):
                v, f = kids[k], s[f"k{i}"]
                light[k] = _V(f["v"], v.type, None if v.error is None else f["e"],
                              v.const, v.is_const, light=True)
            r = self.with_memo(light, build, node)
            built.append(r)
            return F.struct(r.column.alias("v"), _no_null(r.error).alias("e"))

        packed = _let([_pack(kids[k]).alias(f"k{i}") for i, k in enumerate(heavy)], body)
        if _UDF_USES[0] != uses:
            return self.with_memo(kids, build, node)
        r = built[0]
        return _V(packed["v"], r.type, None if r.error is None else packed["e"], r.const,
                  r.is_const, packed=packed)

    def with_memo(self, kids: dict[tuple[int, str], _V], build: Callable[[ast.expr], _V],
                  node: ast.expr) -> _V:
        saved = dict(self.memo)
        self.memo.update(kids)
        try:
            return build(node)
        finally:
            self.memo = saved

    # ---- values

    def _value(self, node: ast.expr) -> _V:
        if isinstance(node, ast.Constant):
            return self.constant(node)
        if isinstance(node, ast.Subscript):
            name = self.names[cast(int, cast(ast.Constant, node.slice).value)]
            return _V(F.col(name), self.types[name], None, light=True)
        if isinstance(node, ast.BinOp):
            return self.binop(node, self.value(node.left), self.value(node.right))
        if isinstance(node, ast.UnaryOp):
            return self.unary(node)
        if isinstance(node, ast.BoolOp):
            return self.boolop(node)
        if isinstance(node, ast.Compare):
            return self.compare(node)
        if isinstance(node, ast.IfExp):
            test, a, b = self.truth(node.test), self.value(node.body), self.value(node.orelse)
            if a.type != b.type:
                raise self.fail(node, f"the branches are {a.type} and {b.type}: the type of the "
                                "value would depend on the row")
            col = F.when(test.column, a.column).otherwise(b.column)
            err = _or(test.error, _branch(test.column, a.error, b.error))
            return _V(col, a.type, err)
        if isinstance(node, ast.Call):
            return self.call(node)
        raise self.fail(node, "not translated")

    def constant(self, node: ast.Constant) -> _V:
        x = node.value
        if x is None:
            return _V(F.lit(None), _NONE, None, None, True, light=True)
        if isinstance(x, bool):
            return _V(F.lit(x), "bool", None, x, True, light=True)
        if isinstance(x, int):
            if not _I64_MIN <= x <= _I64_MAX:
                raise self.fail(node, "an int constant beyond int64")
            return _V(_long(x), "int", None, x, True, light=True)
        if isinstance(x, float):
            return _V(_dbl(x), "float", None, x, True, light=True)
        return _V(F.lit(x), "str", None, x, True, light=True)

    # ---- truthiness (filter, not, tests, and/or in a truth context)

    def _truth(self, node: ast.expr) -> _V:
        if isinstance(node, ast.BoolOp):
            parts = [self.truth(v) for v in node.values]
            col, err = parts[-1].column, parts[-1].error
            for p in reversed(parts[:-1]):
                go_on = p.column if isinstance(node.op, ast.And) else ~p.column
                err = _or(p.error, _and(go_on, err))
                col = F.when(go_on, col).otherwise(p.column)
            return _V(col, "bool", err)
        if isinstance(node, ast.IfExp):
            test, a, b = self.truth(node.test), self.truth(node.body), self.truth(node.orelse)
            col = F.when(test.column, a.column).otherwise(b.column)
            return _V(col, "bool", _or(test.error, _branch(test.column, a.error, b.error)))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = self.truth(node.operand)
            return _V(~inner.column, "bool", inner.error)
        raise AssertionError(f"_truth of {type(node).__name__}")  # truth() routes the rest

    @staticmethod
    def truthy(v: _V) -> _V:
        c = v.column
        col = {"bool": c, "int": c != 0, "float": c != 0.0, "str": F.length(c) > 0,
               _NONE: F.lit(False)}[v.type]  # NaN is truthy: Spark's NaN != 0.0 holds
        return _V(col, "bool", v.error)

    def boolop(self, node: ast.BoolOp) -> _V:
        parts = [self.value(v) for v in node.values]
        kinds = {p.type for p in parts}
        if len(kinds) != 1:
            raise self.fail(node, f"and/or return an operand, here of types {sorted(kinds)}: "
                            "the type of the value would depend on the row")
        col, err = parts[-1].column, parts[-1].error
        for p in reversed(parts[:-1]):
            t = self.truthy(p).column
            go_on = t if isinstance(node.op, ast.And) else ~t
            err = _or(p.error, _and(go_on, err))
            col = F.when(go_on, col).otherwise(p.column)
        return _V(col, parts[0].type, err)

    # ---- arithmetic

    def unary(self, node: ast.UnaryOp) -> _V:
        if isinstance(node.op, ast.Not):
            inner = self.truth(node.operand)
            return _V(~inner.column, "bool", inner.error)
        v = self.value(node.operand)
        if v.is_const and v.type in ("int", "float", "bool"):  # -7 is a constant to Python's eyes
            c = -v.const if isinstance(node.op, ast.USub) else +v.const
            col = _dbl(c) if isinstance(c, float) else _long(c)
            return _V(col, "float" if isinstance(c, float) else "int", None, c, True, light=True)
        if v.type not in ("int", "float", "bool"):
            raise self.fail(node, f"unary {'-' if isinstance(node.op, ast.USub) else '+'} "
                            f"of a {v.type} raises TypeError")
        if isinstance(node.op, ast.UAdd):
            return _V(_as_long(v), "int", v.error) if v.type == "bool" else v
        if v.type == "float":
            return _V(-v.column, "float", v.error)
        neg = F.try_subtract(_long(0), _as_long(v))  # -(-2**63) overflows: null
        return _V(neg, "int", _or(v.error, neg.isNull()))

    def binop(self, node: ast.BinOp, a: _V, b: _V) -> _V:
        op = type(node.op).__name__
        if "str" in (a.type, b.type) or _NONE in (a.type, b.type):
            return self.str_binop(node, op, a, b)
        errs = _or(a.error, b.error)
        if a.type == "float" or b.type == "float":
            x, y = _as_double(a), _as_double(b)
            if op in ("Add", "Sub", "Mult"):
                col = {"Add": x + y, "Sub": x - y, "Mult": x * y}[op]
                return _V(col, "float", errs)
            zero = y == 0.0
            ys = F.when(zero, _dbl(1.0)).otherwise(y)  # never divide by zero: errors are data
            err = _or(errs, zero)
            if op == "Div":
                return _V(x / ys, "float", err)
            return _V(_float_divmod(x, ys, op), "float", err)
        x, y = _as_long(a), _as_long(b)
        if op in ("Add", "Sub", "Mult"):
            fn = {"Add": F.try_add, "Sub": F.try_subtract, "Mult": F.try_multiply}[op]
            col = fn(x, y)  # null on int64 overflow
            return _V(col, "int", _or(errs, col.isNull()))
        zero = y == 0
        if op == "Div":
            ys = F.when(zero, _long(1)).otherwise(y)
            small = (x <= _EXACT) & (x >= -_EXACT) & (ys <= _EXACT) & (ys >= -_EXACT)
            quick = x.cast("double") / ys.cast("double")
            col = F.when(small, quick).otherwise(_udf("truediv")(x, ys))
            return _V(col, "float", _or(errs, zero))
        over = (x == _I64_MIN) & (y == -1)  # -2**63 // -1 == 2**63
        ys = F.when(zero | over, _long(1)).otherwise(y)

        def floor(s: Column) -> Column:
            q, r, w = s["q"], s["r"], s["w"]  # q truncated toward zero, r of the dividend's sign
            adjust = (r != 0) & ((r < 0) != (w < 0))
            if op == "FloorDiv":
                return F.when(adjust, F.try_subtract(q, _long(1))).otherwise(q)
            return F.when(adjust, r + w).otherwise(r)

        col = _let([F.call_function("div", x, ys).alias("q"), (x % ys).alias("r"), ys.alias("w")],
                   floor)
        return _V(col, "int", _or(errs, zero, over) if op == "FloorDiv" else _or(errs, zero))

    def str_binop(self, node: ast.BinOp, op: str, a: _V, b: _V) -> _V:
        if op == "Add" and a.type == b.type == "str":
            return _V(F.concat(a.column, b.column), "str", _or(a.error, b.error))
        if op == "Mult" and {a.type, b.type} in ({"str", "int"}, {"str", "bool"}):
            s, n = (a, b) if a.type == "str" else (b, a)
            if not n.is_const or int(n.const) > _MAX_REPEAT:
                raise self.fail(node, f"str * n is translated for a constant n <= "
                                f"{_MAX_REPEAT} only (Python may run out of memory)")
            count = max(0, int(n.const))  # a negative count repeats nothing, as in Python
            return _V(F.repeat(s.column, count), "str", _or(a.error, b.error))
        if op == "Mod" and a.type == "str":
            raise self.fail(node, "str % ... is string formatting: not translated")
        raise self.fail(node, f"{a.type} {op} {b.type} raises TypeError")

    # ---- comparisons

    def compare(self, node: ast.Compare) -> _V:
        left = self.value(node.left)
        steps: list[tuple[Column, Column | None]] = []
        prev = left
        for k, (op, comp) in enumerate(zip(node.ops, node.comparators, strict=True)):
            if isinstance(op, ast.In | ast.NotIn):
                if k != len(node.ops) - 1:
                    raise self.fail(node, "a comparison chained after 'in' compares a tuple")
                col, err = self.membership(node, prev, comp)
                steps.append((~col if isinstance(op, ast.NotIn) else col, err))
            else:
                right = self.value(comp)
                steps.append((self.cmp(node, type(op).__name__, prev, right), right.error))
                prev = right
        col, err = steps[-1]
        for c, e in reversed(steps[:-1]):  # a < b < c: c is evaluated only if a < b
            err = _or(e, _and(c, err))
            col = F.when(c, col).otherwise(F.lit(False))
        return _V(col, "bool", _or(left.error, err))

    def cmp(self, node: ast.AST, op: str, a: _V, b: _V) -> Column:
        order = op not in ("Eq", "NotEq")
        if _NONE in (a.type, b.type) or ("str" in (a.type, b.type) and a.type != b.type):
            if order:
                raise self.fail(node, f"ordering {a.type} against {b.type} raises TypeError")
            same = a.type == b.type  # None == None; str never equals a number
            return F.lit(same == (op == "Eq"))
        if a.type == b.type == "str":
            return _SPARK_CMP[op](a.column, b.column)  # UTF-8 bytes order = code points order
        if a.type == "float" and b.type == "float":
            return _pycmp_d(op, a.column, b.column)
        if a.type == "float":
            return _cmp_int_float(_FLIP[op], _as_long(b), a.column)
        if b.type == "float":
            return _cmp_int_float(op, _as_long(a), b.column)
        return _SPARK_CMP[op](_as_long(a), _as_long(b))

    def membership(self, node: ast.Compare, x: _V, comp: ast.expr) -> tuple[Column, Column | None]:
        elts = comp.elts if isinstance(comp, ast.Set | ast.Tuple | ast.List) else []
        values = [self.value(e) for e in elts]
        if x.type == "float" and any(v.type == "float" and not v.is_const for v in values):
            raise self.fail(node, "'in' over non-constant floats tests identity first, "
                            "so nan in (x,) may hold: not translated")
        col: Column = F.lit(False)
        for v in values:
            col = col | self.cmp(node, "Eq", x, v)
        return col, _or(*(v.error for v in values))

    # ---- calls

    def call(self, node: ast.Call) -> _V:
        name = cast(ast.Name, node.func).id
        args = [self.value(a) for a in node.args]
        errs = _or(*(a.error for a in args))
        kinds = [a.type for a in args]
        if name in ("min", "max"):
            if len(args) < 2 or len(set(kinds)) != 1 or kinds[0] == _NONE:
                raise self.fail(node, f"{name}() is translated over 2+ arguments of one type, "
                                f"not {kinds} (Python returns the winner with its own type)")
            beats = "Gt" if name == "max" else "Lt"
            m = args[0]
            for v in args[1:]:  # Python keeps the first winner: replace on strictly better
                m = _V(F.when(self.cmp(node, beats, v, m), v.column).otherwise(m.column), m.type, None)
            return _V(m.column, kinds[0], errs)
        if len(args) == 2 and name == "round":
            return self.round_n(node, args[0], args[1], errs)
        if len(args) != 1:
            raise self.fail(node, f"{name}() with {len(args)} arguments is not translated")
        v, t = args[0], kinds[0]
        fn = getattr(self, f"fn_{name}")
        return cast(_V, fn(node, v, t, errs))

    def fn_abs(self, node: ast.AST, v: _V, t: str, errs: Column | None) -> _V:
        if t == "float":
            return _V(F.abs(v.column), "float", errs)
        if t in ("int", "bool"):
            x = _as_long(v)
            col = F.when(x < 0, F.try_subtract(_long(0), x)).otherwise(x)
            return _V(col, "int", _or(errs, col.isNull()))
        raise self.fail(node, f"abs() of a {t} raises TypeError")

    def fn_int(self, node: ast.AST, v: _V, t: str, errs: Column | None) -> _V:
        if t in ("int", "bool"):
            return _V(_as_long(v), "int", errs)
        if t == "float":
            return _float_to_int(v.column, errs)
        raise self.fail(node, f"int() of a {t} is not translated (Python's parsing rules)")

    def fn_round(self, node: ast.AST, v: _V, t: str, errs: Column | None) -> _V:
        if t in ("int", "bool"):
            return _V(_as_long(v), "int", errs)
        if t == "float":
            return _float_to_int(F.rint(v.column), errs)  # rint: half to even, like Python
        raise self.fail(node, f"round() of a {t} raises TypeError")

    def fn_float(self, node: ast.AST, v: _V, t: str, errs: Column | None) -> _V:
        if t in ("int", "bool", "float"):
            return _V(_as_double(v), "float", errs)
        raise self.fail(node, f"float() of a {t} is not translated (Python's parsing rules)")

    def fn_str(self, node: ast.AST, v: _V, t: str, errs: Column | None) -> _V:
        c = v.column
        col = {"str": c, "int": c.cast("string"),
               "bool": F.when(c, F.lit("True")).otherwise(F.lit("False")),
               "float": _udf("repr")(c), _NONE: F.lit("None")}[t]
        return _V(col, "str", errs)

    def fn_len(self, node: ast.AST, v: _V, t: str, errs: Column | None) -> _V:
        if t != "str":
            raise self.fail(node, f"len() of a {t} raises TypeError")
        return _V(F.char_length(v.column).cast("long"), "int", errs)  # code points, as Python

    def round_n(self, node: ast.AST, v: _V, n: _V, errs: Column | None) -> _V:
        if n.type not in ("int", "bool"):
            raise self.fail(node, f"round() with {n.type} digits raises TypeError")
        if v.type == "float":
            col = _udf("round")(v.column, _as_long(n))  # Python's correctly rounded decimal
            return _V(col, "float", _or(errs, col.isNull()))
        if v.type not in ("int", "bool"):
            raise self.fail(node, f"round() of a {v.type} raises TypeError")
        if not n.is_const or int(n.const) < -18:
            raise self.fail(node, "round(int, n) is translated for a constant n >= -18 only")
        x = _as_long(v)
        if int(n.const) >= 0:
            return _V(x, "int", errs)
        m = 10 ** -int(n.const)
        q = F.call_function("div", x, _long(m))
        r = x % m
        q = F.when(r < 0, q - 1).otherwise(q)  # floor, and r in [0, m)
        r = F.when(r < 0, r + m).otherwise(r)
        up = (r * 2 > m) | ((r * 2 == m) & (q % 2 != 0))  # half to even, as int.__round__
        col = F.try_multiply(F.when(up, q + 1).otherwise(q), _long(m))
        return _V(col, "int", _or(errs, col.isNull()))


_FLIP = {"Eq": "Eq", "NotEq": "NotEq", "Lt": "Gt", "LtE": "GtE", "Gt": "Lt", "GtE": "LtE"}


def _no_null(err: Column | None) -> Column:
    return F.lit(False) if err is None else err


def _pack(v: _V) -> Column:
    return v.packed if v.packed is not None else F.struct(
        v.column.alias("v"), _no_null(v.error).alias("e"))


def _let(values: list[Column], body: Callable[[Column], Column]) -> Column:
    """``body`` of a struct of ``values``, each evaluated once: Spark has no let, but a
    lambda over a one-element array binds its element (a lambda variable is a leaf)."""
    return F.transform(F.array(F.struct(*values)), body)[0]


def _branch(test: Column, a: Column | None, b: Column | None) -> Column | None:
    if a is None and b is None:
        return None
    return F.when(test, a if a is not None else F.lit(False)).otherwise(
        b if b is not None else F.lit(False))


def _float_to_int(d: Column, errs: Column | None) -> _V:
    """A float's integer part as an int64 (int() truncates): nan raises ValueError, inf
    OverflowError, and beyond int64 is this module's overflow error."""
    ok = ~_nan(d) & (d >= -(2.0**63)) & (d < 2.0**63)
    col = F.when(ok, d).otherwise(_dbl(0.0)).cast("long")
    return _V(col, "int", _or(errs, ~ok))


def _float_divmod(x: Column, w: Column, op: str) -> Column:
    """CPython's ``_float_div_mod`` for a non-zero divisor ``w``: x // w (op "FloorDiv")
    or x % w; intermediate values bound once (_let)."""

    def step1(s: Column) -> Column:
        x, w, mod0 = s["x"], s["w"], s["m"]
        nonzero = _nan(mod0) | (mod0 != 0.0)  # C truth: NaN is true
        adjust = nonzero & ((w < 0) != (mod0 < 0))  # Spark's NaN < 0 is false, as C's
        if op != "FloorDiv":
            return F.when(nonzero, F.when(adjust, mod0 + w).otherwise(mod0)).otherwise(_copysign0(w))
        div0 = (x - mod0) / w
        div = F.when(adjust, div0 - 1.0).otherwise(div0)
        return _let([div.alias("d"), (x / w).alias("q")], step2)

    def step2(s: Column) -> Column:
        div = s["d"]
        fl = _let([_floor_d(div).alias("f")], lambda t: t["f"])
        snapped = _let([fl.alias("f"), div.alias("d")], lambda t: F.when(
            _pycmp_d("Gt", t["d"] - t["f"], _dbl(0.5)), t["f"] + 1.0).otherwise(t["f"]))
        return F.when(_nan(div) | (div != 0.0), snapped).otherwise(_copysign0(s["q"]))

    return _let([x.alias("x"), w.alias("w"), (x % w).alias("m")], step1)  # Java's % is fmod

