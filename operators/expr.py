"""A small, safe expression language for ``filter`` and ``map`` specs.

Expressions are strings in the spec (TOML-friendly), over the attribute names of the
input schema, e.g. ``"value > 10 and key != 'x'"``, ``"price * qty"``,
``"abs(a - b) if a > 0 else 0"``, ``"sym in ('IBM', 'MSFT')"``.

The language (everything else is a :class:`SpecError` naming the operator, the expression
and the offending piece):

* names: attributes of the input schema (never a dunder name);
* constants: int, float, str, bool, None;
* arithmetic ``+ - * / // %`` (no ``**``: one typo away from a huge integer), unary
  ``-``, ``+`` and ``not``;
* comparisons ``== != < <= > >=``, chained (``0 < x < 10``), and ``in`` / ``not in``
  whose right side is a tuple or list literal;
* ``and`` / ``or``, and the conditional ``a if cond else b``;
* calls, positional only, to ``abs min max round int float str len``.

How it runs, and why this is safe: the string is parsed with ``ast.parse(mode="eval")``
and the *whole* tree is checked against the whitelist above before anything else happens.
Only then is the validated tree rewritten (attribute names become ``v[i]``, ``v`` being the
positional values tuple) and spliced into a fixed template: a list comprehension over a
run of tuples. That tree is compiled to Python bytecode and evaluated with
``{"__builtins__": {}}`` plus the whitelisted functions as its only globals. This is not
``eval`` of user text: user text never reaches the compiler unchecked, and the checked
language has no attribute access, subscripts, lambdas, comprehensions, imports or
assignments, so it cannot reach any object beyond the tuple's values and the eight
functions. It is also much faster than interpreting the tree with a tree of closures:
the predicate or the projection runs inline in one comprehension per run, with no Python
call per tuple (about 40 ns per tuple for a two-clause filter).

Invariants: the compiled functions are pure functions of the tuples they get; a runtime
failure (division by zero, a type error, ...) is reported by the operator as an
:class:`OperatorError` naming the operator, the expression and the tuple id
(:func:`runtime_error`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from typing import Any

from protocol.tuples import Schema, Tuple, Value

from .errors import OperatorError, SpecError

__all__ = [
    "FUNCTIONS",
    "compile_filter",
    "compile_map",
    "compile_scalar",
    "runtime_error",
    "validate",
]

#: The only functions an expression may call, with their allowed positional arity.
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "min": min,
    "max": max,
    "round": round,
    "int": int,
    "float": float,
    "str": str,
    "len": len,
}
_ARITY: dict[str, tuple[int, int]] = {
    "abs": (1, 1),
    "min": (1, 255),
    "max": (1, 255),
    "round": (1, 2),
    "int": (1, 2),
    "float": (1, 1),
    "str": (1, 1),
    "len": (1, 1),
}

_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod)
_UNARYOPS = (ast.USub, ast.UAdd, ast.Not)
_CMPOPS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn)
_CONST_TYPES = (int, float, str, bool, type(None))

# The name of the values tuple inside compiled code. Attribute names never survive
# validation as names (they become ``v[i]``), so they cannot shadow it.
_V = "v"


class _Checker:
    """Walks a parsed expression, refusing anything outside the whitelist, and rewrites
    attribute names into ``v[i]`` subscripts (in place)."""

    def __init__(self, owner: str, source: str, schema: Schema) -> None:
        self.owner = owner
        self.source = source
        self.positions = {name: i for i, name in enumerate(schema)}
        self.schema = schema

    def fail(self, node: ast.AST, what: str, hint: str = "") -> SpecError:
        piece = ast.get_source_segment(self.source, node) or type(node).__name__
        return SpecError(
            f"{self.owner}: expression {self.source!r}: {what} is not allowed: {piece!r}{hint}"
        )

    def check(self, node: ast.expr) -> ast.expr:
        """Validate ``node`` and return it with attribute names rewritten."""
        if isinstance(node, ast.Constant):
            if not isinstance(node.value, _CONST_TYPES):
                raise self.fail(node, f"a {type(node.value).__name__} constant")
            return node
        if isinstance(node, ast.Name):
            return self.name(node)
        if isinstance(node, ast.BinOp):
            if not isinstance(node.op, _BINOPS):
                raise self.fail(node, f"the operator {type(node.op).__name__}")
            node.left = self.check(node.left)
            node.right = self.check(node.right)
            return node
        if isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, _UNARYOPS):
                raise self.fail(node, f"the operator {type(node.op).__name__}")
            node.operand = self.check(node.operand)
            return node
        if isinstance(node, ast.BoolOp):
            node.values = [self.check(v) for v in node.values]
            return node
        if isinstance(node, ast.Compare):
            return self.compare(node)
        if isinstance(node, ast.IfExp):
            node.test = self.check(node.test)
            node.body = self.check(node.body)
            node.orelse = self.check(node.orelse)
            return node
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Attribute):
            raise self.fail(node, "attribute access")
        if isinstance(node, ast.Subscript):
            raise self.fail(node, "subscripting")
        if isinstance(node, ast.Tuple | ast.List):
            raise self.fail(node, "a tuple or list outside 'in (...)'")
        raise self.fail(node, f"a {type(node).__name__} expression")

    def name(self, node: ast.Name) -> ast.expr:
        if node.id.startswith("__"):
            raise self.fail(node, "a dunder name")
        i = self.positions.get(node.id)
        if i is None:
            raise SpecError(
                f"{self.owner}: expression {self.source!r}: unknown attribute '{node.id}'; "
                f"the input has {', '.join(self.schema) or 'no attributes'}"
            )
        sub = ast.Subscript(
            value=ast.Name(id=_V, ctx=ast.Load()), slice=ast.Constant(value=i), ctx=ast.Load()
        )
        return ast.copy_location(sub, node)

    def compare(self, node: ast.Compare) -> ast.expr:
        node.left = self.check(node.left)
        comparators: list[ast.expr] = []
        for op, right in zip(node.ops, node.comparators, strict=True):
            if not isinstance(op, _CMPOPS):
                raise self.fail(node, f"the comparison {type(op).__name__}")
            if isinstance(op, ast.In | ast.NotIn):
                if not isinstance(right, ast.Tuple | ast.List):
                    raise self.fail(
                        right, "'in' over a non-literal", " ('in' needs a tuple or list literal)"
                    )
                comparators.append(self.literal_collection(right))
            else:
                comparators.append(self.check(right))
        node.comparators = comparators
        return node

    def literal_collection(self, node: ast.Tuple | ast.List) -> ast.expr:
        elts = [self.check(e) for e in node.elts]
        if elts and all(isinstance(e, ast.Constant) for e in elts):
            # All constants: a frozenset constant, so membership is one hash lookup.
            return ast.copy_location(ast.Set(elts=elts), node)
        return ast.copy_location(ast.Tuple(elts=elts, ctx=ast.Load()), node)

    def call(self, node: ast.Call) -> ast.expr:
        func = node.func
        if not isinstance(func, ast.Name):
            self.check(func)  # names what is wrong with it (attribute access, ...)
        if not isinstance(func, ast.Name) or func.id not in FUNCTIONS:
            raise self.fail(func, "a call", f" (only {', '.join(FUNCTIONS)} may be called)")
        if node.keywords:
            raise self.fail(node, "a keyword argument")
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise self.fail(node, "a starred argument")
        lo, hi = _ARITY[func.id]
        if not lo <= len(node.args) <= hi:
            raise self.fail(node, f"{func.id}() with {len(node.args)} argument(s)")
        node.args = [self.check(a) for a in node.args]
        return node


def validate(owner: str, source: str, schema: Schema) -> ast.expr:
    """Parse and check ``source``; return the tree with names rewritten to ``v[i]``."""
    if not source.strip():
        raise SpecError(f"{owner}: expression is empty")
    try:
        tree = ast.parse(source.strip(), mode="eval")
        return _Checker(owner, source.strip(), schema).check(tree.body)
    except SyntaxError as e:
        raise SpecError(f"{owner}: expression {source!r} is not valid: {e.msg}") from None
    except (RecursionError, MemoryError):
        raise SpecError(f"{owner}: expression {source[:60]!r}... is too deeply nested") from None


# Templates: fixed code with a placeholder the validated expression is spliced into.
_SCALAR = "lambda v: __EXPR__"
_FILTER = "lambda run: [t for t in run for v in (t[4],) if __EXPR__]"
_MAP = "lambda run: [_new(_T, (t[0], t[1], t[2], t[3], __EXPR__)) for t in run for v in (t[4],)]"


class _Splice(ast.NodeTransformer):
    def __init__(self, expr: ast.expr) -> None:
        self.expr = expr

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return self.expr if node.id == "__EXPR__" else node


def _build(template: str, expr: ast.expr, owner: str) -> Callable[..., Any]:
    tree = _Splice(expr).visit(ast.parse(template, mode="eval"))
    try:
        code = compile(ast.fix_missing_locations(tree), f"<expression of {owner}>", "eval")
    except (RecursionError, MemoryError):
        raise SpecError(f"{owner}: an expression is too deeply nested to compile") from None
    env: dict[str, Any] = {"__builtins__": {}, "_new": tuple.__new__, "_T": Tuple, **FUNCTIONS}
    fn: Callable[..., Any] = eval(code, env)  # the validated template, see module docstring
    return fn


def compile_scalar(owner: str, source: str, schema: Schema) -> Callable[[tuple[Value, ...]], Value]:
    """``source`` as a function of one values tuple (slow path, error reports, tests)."""
    return _build(_SCALAR, validate(owner, source, schema), owner)


def compile_filter(
    owner: str, source: str, schema: Schema
) -> Callable[[Sequence[Tuple]], list[Tuple]]:
    """A function mapping a run of tuples to those (the same objects) where ``source`` holds."""
    return _build(_FILTER, validate(owner, source, schema), owner)


def compile_map(
    owner: str, sources: Sequence[str], schema: Schema
) -> Callable[[Sequence[Tuple]], list[Tuple]]:
    """A function mapping a run of tuples to tuples with the same kind, id, time and tmax
    and values ``(source_0, source_1, ...)`` computed from the input values."""
    elts = [validate(owner, s, schema) for s in sources]
    return _build(_MAP, ast.Tuple(elts=elts, ctx=ast.Load()), owner)


def runtime_error(
    owner: str, sources: Sequence[str], schema: Schema, run: Sequence[Tuple], cause: Exception
) -> OperatorError:
    """The OperatorError for a run where evaluating one of ``sources`` raised ``cause``:
    re-evaluates tuple by tuple (the slow path) to name the expression and the tuple."""
    scalars = [(s, compile_scalar(owner, s, schema)) for s in sources]
    for t in run:
        for source, fn in scalars:
            try:
                fn(t[4])
            # A user's expression may raise anything: catching it all is the point (the
            # error names the expression and the tuple).
            except Exception as e:  # noqa: BLE001
                return OperatorError(
                    f"{owner}: expression {source!r} failed on tuple id {t[1]} "
                    f"(time {t[2]}, values {t[4]!r}): {type(e).__name__}: {e}"
                )
    return OperatorError(
        f"{owner}: expressions {list(sources)!r} failed on a run of {len(run)} tuple(s) "
        f"(ids {run[0][1] if run else '-'}..{run[-1][1] if run else '-'}): "
        f"{type(cause).__name__}: {cause}"
    )
