"""The reference's stage 2, per operator: aggregate, join and union as DataFrame operations.

Role: the operator translations of :mod:`ops_scripts.reconcile.plans` that hold state
across tuples (``operators/aggregate.py``, ``operators/join.py``, ``operators/union.py``),
each written to give exactly the tuples, order and floats the operator gives in the
failure-free run that ``ops_scripts/check/reference.py`` plays (every input pushed whole,
then ``BOUNDARY(END_OF_STREAM)``, so every window closes and no input is ever late).

Theory of operation. A node's stream is a :class:`Stream`: a DataFrame with the tuple's
``__t`` (time), ``__tmax``, ``__o`` (the order key, ``array<bigint>``, compared
lexicographically: the operator's emission order; unique within the stream; its first
element is coarse, a bucket or a window start, which :func:`number` counts by), maybe
``__id``, and one typed column per attribute, named as the attribute.

* The network runs its SUnion's release one bucket (a *wave*) at a time through the whole
  downstream DAG, operators in topological order (``operators/network.py``). A stream whose
  tuples keep a time inside the bucket that released them (SUnion, filter, map, join,
  union output: ``width`` set) therefore knows each tuple's wave, ``floor(time /
  width)``; a multi-input operator sees a wave's chunks in the order of their producers'
  topological index (then port), so its input tuples are processed in the order of the
  key ``(wave, producer index, port, __o)`` (:func:`proc_key`). An aggregate's outputs
  come out in later waves than the bucket of their times: a join or union over them is
  not translated.
* Aggregate: pane accumulators (pane = gcd(window, slide)) folded in arrival order, then
  merged per window in pane order, exactly the operator's two-level fold; float sums,
  mins and maxes are folded with ``aggregate`` over arrays sorted by the arrival key,
  integer sums are exact decimals. Windows close in start order; groups in the order of
  their first tuple in the window: ``__o = [start] ++ min(__o)``.
* Join: every pair with equal keys and ``|dt| <= band`` (found by an equi-join on the keys
  and on time buckets of ``band + 1``); the pair is emitted when its later-processed tuple
  is, after the pairs of earlier-processed tuples: ``__o`` = the later tuple's processing
  key, then the earlier's.

Invariants: nothing is collected; what is not translated raises
:class:`Untranslatable` naming the operator and why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import gcd
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from operators.aggregate import Aggregate
from operators.join import Join
from ops_scripts.reconcile.spark_expr import SparkType, Untranslatable

__all__ = ["Errors", "Stream", "Untranslatable", "aggregate", "join", "number", "proc_key",
           "union", "wave"]

#: Error checks: (what, a boolean Column true where the operator would raise, its frame).
Errors = list[tuple[str, Column, DataFrame]]


@dataclass(frozen=True)
class Stream:
    """One stream of a node, as the module docstring says: ``df``; ``types``: attribute ->
    its static type, in schema order; ``width``: the releasing SUnion's bucket when every
    tuple's time lies in the bucket that released it (else None); ``producer``: the
    topological index of the operator that emits it; ``has_id``: ``__id`` is there."""

    df: DataFrame
    types: dict[str, SparkType]
    width: int | None
    producer: int
    has_id: bool


def wave(width: int) -> Column:
    """The SUnion bucket (the wave) of a tuple of a stream aligned on ``width``."""
    return F.expr(f"(__t - pmod(__t, {width})) div {width}")

_KEY_TYPES = ("int", "str", "bool")  # float keys: Python's ==/hash on 0.0, -0.0, NaN
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_EXACT = 2**53  # ints up to this convert to a double exactly


def number(df: DataFrame) -> DataFrame:
    """``__id``: 1, 2, ... in ``__o`` order, without one task seeing the whole stream: a
    row number and a row count per coarse key (``__o[0]``: few distinct values), and each
    key's offset, the counts of the keys before it. Both branches read one shuffle (Spark
    reuses the exchange), so ``df`` is computed once."""
    within = Window.partitionBy("__g").orderBy("__o")
    ranked = (df.withColumn("__g", F.element_at("__o", 1))
              .withColumn("__r", F.row_number().over(within))
              .withColumn("__n", F.count(F.lit(1)).over(
                  within.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing))))
    before = Window.orderBy("__g").rowsBetween(Window.unboundedPreceding, -1)
    offsets = ranked.where(F.col("__r") == 1).select(
        "__g", F.coalesce(F.sum("__n").over(before), F.lit(0)).alias("__off"))
    return (ranked.join(offsets, "__g").withColumn("__id", F.col("__off") + F.col("__r"))
            .drop("__g", "__r", "__n", "__off"))


def proc_key(s: Stream, port: int, what: str) -> Column:
    """When a multi-input operator processes the stream's tuples on ``port`` (see the
    module docstring): ``[wave, producer index, port] ++ __o``."""
    if s.width is None:
        raise Untranslatable(f"{what}: input {port} comes from an aggregate (its output waves "
                             "are not translated)")
    return F.concat(F.array(wave(s.width), F.lit(s.producer), F.lit(port)), F.col("__o"))


def _fold(items: Column, field: str, step: Any) -> Column:
    """Python's ``a = first; for x in rest: a = step(a, x)`` over a sorted array of structs."""
    return F.aggregate(F.slice(items, 2, F.size(items)), items[0][field],
                       lambda a, e: step(a, e[field]))


def _sorted_fold(key: str, value: Column, step: Any) -> Column:
    return _fold(F.array_sort(F.collect_list(F.struct(F.col(key).alias("k"),
                                                      value.alias("x")))), "x", step)


def _plus(a: Column, x: Column) -> Column:
    return a + x


def _less(a: Column, x: Column) -> Column:
    return F.when(x < a, x).otherwise(a)  # ties keep the first, as ``if x < a: a = x``


def _more(a: Column, x: Column) -> Column:
    return F.when(x > a, x).otherwise(a)


def aggregate(s: Stream, op: Aggregate, specs: Sequence[Mapping[str, Any]],
              errors: Errors) -> Stream:
    """The operator's windows over ``s`` (``specs``: its raw ``aggregates`` parameter)."""
    what = op.describe()
    for k in op.group_by:
        if s.types[k] not in _KEY_TYPES:
            raise Untranslatable(f"{what}: group_by attribute {k!r} is {s.types[k]}")
    window, slide = op.window, op.slide
    pane = gcd(window, slide)
    keys = [F.col(k) for k in op.group_by]
    # Per (pane, group): the operator's accumulator, folded in arrival (__o) order.
    per_pane: list[Column] = [F.count(F.lit(1)).alias("__n"), F.max("__tmax").alias("__tmax"),
                              F.min("__o").alias("__first")]
    per_window: list[Column] = [F.sum("__n").alias("__n"), F.max("__tmax").alias("__tmax"),
                                F.min("__first").alias("__first")]
    results: list[tuple[str, Column, SparkType]] = []
    for i, a in enumerate(specs):
        fn, name, slot = a["fn"], a["as"], f"__a{i}"
        if fn == "count":
            results.append((name, F.col("__n"), "int"))
            continue
        attr = a["attr"]
        typ, x = s.types[attr], F.col(attr)
        if fn in ("sum", "avg") and typ == "float":
            per_pane.append(_sorted_fold("__o", x, _plus).alias(slot))
            per_window.append(_sorted_fold("__ps", F.col(slot), _plus).alias(slot))
        elif fn in ("sum", "avg") and typ == "int":  # exact, as Python's ints
            per_pane.append(F.sum(x.cast("decimal(38,0)")).alias(slot))
            per_window.append(F.sum(slot).alias(slot))
        elif fn in ("min", "max") and typ == "float":
            step = _less if fn == "min" else _more
            per_pane.append(_sorted_fold("__o", x, step).alias(slot))
            per_window.append(_sorted_fold("__ps", F.col(slot), step).alias(slot))
            # Python's comparisons with NaN are all false; Spark orders NaN last.
            errors.append((f"{what}: NaN in {attr} ({fn} not translated)", F.isnan(x), s.df))
        elif fn in ("min", "max") and typ in ("int", "str"):
            agg = F.min if fn == "min" else F.max
            per_pane.append(agg(x).alias(slot))
            per_window.append(agg(slot).alias(slot))
        else:
            raise Untranslatable(f"{what}: {fn} of {typ} attribute {attr!r}")
        total = F.col(slot)
        if typ == "int" and fn == "sum":
            results.append((name, total.try_cast("bigint"), "int"))
        elif typ == "int" and fn == "avg":
            results.append((name, total.cast("double") / F.col("__n").cast("double"), "float"))
        elif fn == "avg":
            results.append((name, total / F.col("__n").cast("double"), "float"))
        else:
            results.append((name, total, typ))
    panes = s.df.withColumn("__ps", F.expr(f"__t - pmod(__t, {pane})"))
    acc = panes.groupBy("__ps", *keys).agg(*per_pane)
    # Each pane is in every window [w, w + window) (w a multiple of slide) that covers it.
    first = F.expr(f"(__ps - {window}) - pmod(__ps - {window}, {slide}) + {slide}")
    last = F.expr(f"__ps - pmod(__ps, {slide})")
    starts = acc.withColumn("__s", F.explode(F.sequence(first, last, F.lit(slide))))
    wins = starts.groupBy("__s", *keys).agg(*per_window)
    for i, a in enumerate(specs):
        if a["fn"] in ("sum", "avg") and s.types.get(a.get("attr", ""), "") == "int":
            limit = _EXACT if a["fn"] == "avg" else None
            bad = (F.abs(F.col(f"__a{i}")) > limit if limit is not None else
                   (F.col(f"__a{i}") < _LONG_MIN) | (F.col(f"__a{i}") > _LONG_MAX))
            errors.append((f"{what}: {a['fn']} of {a['attr']!r} beyond the exact range of "
                           "Spark's numbers", bad, wins))
    out = wins.select(
        F.col("__s").alias("__t"), "__tmax",
        F.concat(F.array("__s"), F.col("__first")).alias("__o"),
        *keys, *(c.alias(n) for n, c, _ in results))
    types = {k: s.types[k] for k in op.group_by} | {n: t for n, _, t in results}
    return Stream(out, types, None, s.producer, False)


def join(left: Stream, right: Stream, op: Join, producer: int) -> Stream:
    """The band equi-join of ``left`` and ``right`` (see the module docstring)."""
    what = op.describe()
    lk, rk = proc_key(left, 0, what), proc_key(right, 1, what)
    if left.width != right.width:
        raise Untranslatable(f"{what}: inputs released by SUnions of different buckets")
    lnames, rnames = list(left.types), list(right.types)
    for a, b in op.on:
        if left.types[a] != right.types[b] or left.types[a] not in _KEY_TYPES:
            raise Untranslatable(f"{what}: join key {a!r} = {b!r} compares "
                                 f"{left.types[a]} with {right.types[b]}")
    band, cell = op.band, op.band + 1  # |dt| <= band: time cells of band+1 at most 1 apart
    ls = left.df.select(F.col("__t").alias("__lt"), F.col("__tmax").alias("__lx"),
                        lk.alias("__lk"), F.expr(f"__t div {cell}").alias("__c"),
                        *(F.col(n).alias(f"__l{i}") for i, n in enumerate(lnames)))
    rs = right.df.select(F.col("__t").alias("__rt"), F.col("__tmax").alias("__rx"),
                         rk.alias("__rk"),
                         F.explode(F.array(*(F.expr(f"__t div {cell} + {d}")
                                             for d in (-1, 0, 1)))).alias("__c"),
                         *(F.col(n).alias(f"__r{i}") for i, n in enumerate(rnames)))
    cond = [ls["__c"] == rs["__c"], F.abs(ls["__lt"] - rs["__rt"]) <= band]
    cond += [ls[f"__l{lnames.index(a)}"] == rs[f"__r{rnames.index(b)}"] for a, b in op.on]
    pairs = ls.join(rs, cond)
    later = F.col("__lk") > F.col("__rk")
    names = list(op.output_schema)
    out = pairs.select(
        F.greatest("__lt", "__rt").alias("__t"), F.greatest("__lx", "__rx").alias("__tmax"),
        F.when(later, F.concat("__lk", "__rk")).otherwise(F.concat("__rk", "__lk")).alias("__o"),
        *(F.col(f"__l{i}").alias(names[i]) for i in range(len(lnames))),
        *(F.col(f"__r{i}").alias(names[len(lnames) + i]) for i in range(len(rnames))))
    types = dict(zip(names, [*left.types.values(), *right.types.values()], strict=True))
    return Stream(out, types, left.width, producer, False)


def union(inputs: Sequence[Stream], producer: int, what: str) -> Stream:
    """Every input tuple, in processing order (the union renumbers them)."""
    first = inputs[0]
    for port, s in enumerate(inputs):
        if list(s.types.items()) != list(first.types.items()):
            raise Untranslatable(f"{what}: input {port}'s attribute types differ from input 0's")
    if len({s.width for s in inputs}) != 1:
        raise Untranslatable(f"{what}: inputs released by SUnions of different buckets")
    parts = [s.df.select("__t", "__tmax", proc_key(s, port, what).alias("__o"), *s.types)
             for port, s in enumerate(inputs)]
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return Stream(out, dict(first.types), first.width, producer, False)
