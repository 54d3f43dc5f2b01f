"""The reference's stage 2: each node's query network as Spark DataFrame operations.

Role: :func:`plan_reference` gives one run's reference (the contract's ``reference``
table: run, stream, id, time, tmax, values) as a lazy DataFrame whose work spreads over
many tasks, where stage 1 (``ops_scripts/reconcile/reference.py``) runs the operators of
each run in one task. It must give exactly stage 1's rows; what it does not translate raises
:class:`Untranslatable` naming the operator and why, and the caller falls back to stage 1
for that run.

Theory of operation. The failure-free run (``ops_scripts/check/reference.py``) pushes each
node input stream whole (its STABLE tuples, in log order) and then
``BOUNDARY(END_OF_STREAM)``: every SUnion bucket is released stable, every window closes,
no tuple is ever late. So each operator is a function of its whole input sequence:

* sources: the ``sources`` rows of the run, STABLE ones, values parsed from their JSON
  text into one typed column per attribute, the types fixed by the config's generators
  (``arrow_types``); a node's output is typed already. ``__pos``: the log line (sources)
  or the id (node outputs): the order of arrival.
* SUnion: the union of its ports in ``(bucket, time, port, __pos)`` order
  (``operators/sunion.py``: buckets released in order, each sorted on time, ties in port
  then arrival order); filter and map through ``ops_scripts.reconcile.spark_expr`` (Python's
  semantics, with a column that is true where Python would raise); aggregate, join and
  union in :mod:`ops_scripts.reconcile.plans_ops`; SOutput passes its input.
* ids: SUnion, aggregate, join and union number their outputs 1, 2, ... in output order
  (``Operator.emit``); filter, map and SOutput keep their input's. Only the numbering
  operators whose ids reach an SOutput count them (:func:`plans_ops.number`).
* values: the JSON text of each output tuple is ``orjson.dumps`` of its typed values,
  ``spark_expr.json_text`` per value (floats by orjson itself, in a Python UDF).
* A runtime error of an operator (stage 1: "no reference", with the operator's message),
  a tentative or ill-typed source tuple: one aggregate over every error column, run before
  the plan is returned, raises :class:`Untranslatable` ("runtime error ...") naming it;
  stage 1 then gives the exact message.

Each node's output streams are local checkpoints (kept by the executors, computed by the
first job that needs them): later nodes and the result read them, so a chain of nodes does
not make a plan that grows with each node that reads the one before.

Invariants: nothing but the error flags (one row per check) is collected; every stream's
order key is unique; the result's columns are the contract's, ids in each stream 1..n.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from node.config.model import ClusterConfig, NodeConfig, SourceConfig
from node.errors import NodeError
from node.procs.generators import arrow_types
from operators.base import Operator
from operators.network import QueryNetwork
from operators.spec import OperatorSpec
from ops_scripts.errors import ReferenceJobError
from ops_scripts.reconcile import plans_ops
from ops_scripts.reconcile.plans_ops import Errors, Stream, wave
from ops_scripts.reconcile.spark_expr import (
    SparkType,
    Typed,
    Untranslatable,
    json_text,
    translate_filter,
    translate_map,
)
from ops_scripts.reconcile.tables import Tables

__all__ = ["Untranslatable", "plan_reference"]

_SQL_TYPES = {"int": "bigint", "float": "double", "str": "string", "bool": "boolean"}
_ARROW_TYPES: dict[pa.DataType, SparkType] = {pa.int64(): "int", pa.float64(): "float", pa.string(): "str",
                pa.large_string(): "str", pa.bool_(): "bool"}
_NUMBERING = ("sunion", "aggregate", "join", "union")
_ID_KEEPING = ("filter", "map")
_COLUMNS = ("run", "stream", "id", "time", "tmax", "values")


def plan_reference(spark: SparkSession, tables: Tables, run: str,
                   config: ClusterConfig) -> DataFrame:
    """Run ``run``'s reference (columns run, stream, id, time, tmax, values), lazily; or
    raise :class:`Untranslatable` (an operator, parameter or type not translated, or a
    runtime error: one Spark job checks for these before returning)."""
    if run not in tables.runs:
        raise ReferenceJobError(f"run {run!r} is not among the ingested runs "
                                f"({', '.join(tables.runs)})")
    rows = spark.read.parquet(str(tables.path("sources"))).where(F.col("run") == run)
    errors: Errors = []
    inputs = {name: _source(rows, src, errors) for name, src in config.sources.items()}
    outs: list[DataFrame] = []
    for node in config.nodes.values():
        for stream, s in _node(node, inputs, errors).items():
            outs.append(s.df.select(
                F.lit(run).alias("run"), F.lit(stream).alias("stream"),
                F.col("__id").alias("id"), F.col("__t").alias("time"),
                F.col("__tmax").alias("tmax"), _json_values(s.types).alias("values")))
            names = config.streams[stream]
            _check_names(f"stream {stream}", names)
            inputs[stream] = Stream(
                s.df.select("__t", "__tmax", F.col("__id").alias("__pos"),
                            *(F.col(a).alias(n) for a, n in zip(s.types, names, strict=True))),
                dict(zip(names, s.types.values(), strict=True)), None, -1, False)
    _raise_on_errors(run, errors)
    if not outs:
        return spark.createDataFrame(
            [], "run string, stream string, id bigint, time bigint, tmax bigint, `values` string")
    result = outs[0]
    for o in outs[1:]:
        result = result.unionByName(o)
    return result


# ---------------------------------------------------------------- sources
def _source(rows: DataFrame, src: SourceConfig, errors: Errors) -> Stream:
    """A source's STABLE tuples, typed; flags tentative tuples and ill-typed values."""
    types = _source_types(src)
    _check_names(f"source {src.name}", src.schema)
    mine = rows.where(F.col("stream") == src.name)
    errors.append((f"source {src.name}: a TENTATIVE tuple in its log",
                   F.col("kind") == "TENTATIVE", mine))
    arr = F.from_json("values", "array<string>")
    parsed = mine.where(F.col("kind") == "STABLE").select(
        F.col("time").alias("__t"), F.col("tmax").alias("__tmax"),
        F.col("line").alias("__pos"), F.size(arr).alias("__n"),
        *(F.try_element_at(arr, F.lit(i + 1)).try_cast(_SQL_TYPES[t]).alias(a)
          for i, (a, t) in enumerate(types.items())))
    bad = F.col("__n") != len(types)
    for a in types:
        bad = bad | F.col(a).isNull()  # null, or not of the static type
    errors.append((f"source {src.name}: a value that is not of its config's static type "
                   "(or null)", bad, parsed))
    return Stream(parsed.drop("__n"), types, None, -1, False)


def _source_types(src: SourceConfig) -> dict[str, SparkType]:
    try:
        found = arrow_types(src)
    except NodeError as e:
        raise Untranslatable(f"source {src.name}: no static types: {e}") from None
    types: dict[str, SparkType] = {}
    for a, t in zip(src.schema, found, strict=True):
        if t not in _ARROW_TYPES:
            raise Untranslatable(f"source {src.name}: attribute {a!r} is of type {t}")
        types[a] = _ARROW_TYPES[t]
    return types


# ---------------------------------------------------------------- one node
def _node(node: NodeConfig, inputs: Mapping[str, Stream], errors: Errors) -> dict[str, Stream]:
    """The node's output streams (global name -> stream with ``__id``)."""
    for stream in node.network.inputs:
        if stream not in inputs:
            raise Untranslatable(f"node {node.name}: input stream {stream!r} is neither a "
                                 "source nor an earlier node's output")
    net = QueryNetwork(node.network)  # the operators parse and check their own parameters
    specs = {o.name: o for o in node.network.operators}
    counted = _counted(specs)
    made: dict[str, Stream] = {}
    for idx, op in enumerate(net.operators):  # topological order
        o = specs[op.name]
        _check_names(op.describe(), op.output_schema)
        s = _operator(idx, op, o, node, inputs, made, errors)
        if op.name in counted and not s.has_id:
            s = dataclasses.replace(s, df=plans_ops.number(s.df), has_id=True)
        made[op.name] = s
    # Materialized (in the executors, never the driver): the next nodes and the result
    # read it, and a plan over whole chains of nodes would grow with every reader.
    return {g: dataclasses.replace(made[name], df=made[name].df.localCheckpoint(eager=False))
            for g, name in node.outputs.items()}


def _counted(specs: Mapping[str, OperatorSpec]) -> set[str]:
    """The numbering operators whose ids reach an SOutput through filters and maps."""
    out = set()
    for o in specs.values():
        if o.type != "soutput":
            continue
        src = specs.get(o.inputs[0])
        while src is not None and src.type in _ID_KEEPING:
            src = specs.get(src.inputs[0])
        if src is not None and src.type in _NUMBERING:
            out.add(src.name)
    return out


def _operator(idx: int, op: Operator, o: OperatorSpec, node: NodeConfig,
              inputs: Mapping[str, Stream], made: Mapping[str, Stream],
              errors: Errors) -> Stream:
    kind, what = op.type_name, op.describe()
    if kind == "sunion":
        return _sunion(idx, op, o, node, inputs)
    ins = [made[i] for i in o.inputs]  # only an SUnion reads node inputs (the network checks)
    if kind in ("filter", "map"):
        return _expression(idx, op, o, ins[0], errors)
    if kind == "aggregate":
        s = plans_ops.aggregate(ins[0], op, o.params["aggregates"], errors)  # type: ignore[arg-type]
        return dataclasses.replace(s, producer=idx)
    if kind == "join":
        return plans_ops.join(ins[0], ins[1], op, idx)  # type: ignore[arg-type]
    if kind == "union":
        return plans_ops.union(ins, idx, what)
    if kind == "soutput":
        return dataclasses.replace(ins[0], producer=idx)
    raise Untranslatable(f"node {node.name}, {what}: operator type {kind!r} is not translated")


def _sunion(idx: int, op: Operator, o: OperatorSpec, node: NodeConfig,
            inputs: Mapping[str, Stream]) -> Stream:
    what = f"node {node.name}, {op.describe()}"
    width: int = op.width  # type: ignore[attr-defined]
    parts = []
    first: list[tuple[str, Any]] | None = None
    for port, stream in enumerate(o.inputs):
        if stream not in node.network.inputs:
            raise Untranslatable(f"{what}: reads {stream!r}, a stream inside the node")
        s = inputs[stream]
        if first is None:
            first = list(s.types.items())
        elif list(s.types.items()) != first:
            raise Untranslatable(f"{what}: input {port} ({stream}) has attribute types "
                                 f"{dict(s.types)}, input 0 {dict(first)}")
        key = F.array(wave(width), F.col("__t"), F.lit(port), F.col("__pos"))
        parts.append(s.df.select("__t", "__tmax", key.alias("__o"), *s.types))
    df = parts[0]
    for p in parts[1:]:
        df = df.unionByName(p)
    return Stream(df, dict(first or []), width, idx, False)


def _expression(idx: int, op: Operator, o: OperatorSpec, s: Stream, errors: Errors) -> Stream:
    what = op.describe()
    keep = ["__t", "__tmax", "__o", *(["__id"] if s.has_id else [])]
    if op.type_name == "filter":
        t = translate_filter(o.params["where"], s.types)
        if t.error is not None:
            errors.append((f"{what}: runtime error", t.error, s.df))
        return dataclasses.replace(s, df=s.df.where(t.column), producer=idx)
    fields = translate_map(o.params, s.types)
    for name, t in fields:
        if t.error is not None:
            errors.append((f"{what}: runtime error in field {name!r}", t.error, s.df))
    df = s.df.select(*keep, *(t.column.alias(name) for name, t in fields))
    return dataclasses.replace(s, df=df, types={n: t.type for n, t in fields}, producer=idx)


# ---------------------------------------------------------------- helpers
def _check_names(what: str, names: tuple[str, ...] | list[str]) -> None:
    """Attribute names become column names: plain, not ours (``__``), and distinct even
    to Spark, which compares column names without case."""
    for n in names:
        if not n.isidentifier() or n.startswith("__"):
            raise Untranslatable(f"{what}: attribute name {n!r} is not a plain identifier")
    if len({n.lower() for n in names}) != len(names):
        raise Untranslatable(f"{what}: attribute names differ only in case: {list(names)}")


def _json_values(types: Mapping[str, SparkType]) -> Column:
    """The tuple's values as stage 1 writes them, ``orjson.dumps(list(values))``: each
    one's text by ``spark_expr.json_text`` (floats by orjson itself), comma-separated."""
    texts = [json_text(Typed(F.col(n), t, None)) for n, t in types.items()]
    return F.concat(F.lit("["), F.concat_ws(",", *texts), F.lit("]"))


def _raise_on_errors(run: str, errors: Errors) -> None:
    """One job over every error flag; raise :class:`Untranslatable` if any is set."""
    if not errors:
        return
    parts = [df.select(F.lit(i).alias("i"), F.coalesce(flag, F.lit(False)).alias("e"))
             for i, (_, flag, df) in enumerate(errors)]
    flags = parts[0]
    for p in parts[1:]:
        flags = flags.unionByName(p)
    hit = flags.where("e").select("i").distinct().collect()  # at most one row per check
    if hit:
        found = "; ".join(errors[r["i"]][0] for r in sorted(hit, key=lambda r: r["i"]))
        raise Untranslatable(f"runtime error in run {run}: {found} (stage 1 gives the message)")
