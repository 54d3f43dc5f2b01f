"""Availability per client and per failure, in Spark (docs/reconcile.md, ``availability.py``).

Role: from the ``logs`` and ``history`` tables, :func:`new_results` gives every client's
new results (the rows the report plots) and :func:`per_failure` summarises what each
client saw during each fault of a run's history (:class:`~ops_scripts.reconcile.model.
Availability`, the report's per-failure table). Only those summaries reach the driver, and
the history's fault and heal events (a few per run); client logs stay in Spark.

Theory of operation.

* **New results** are the checker's (``ops_scripts.check.availability.new_results``): a
  data tuple (STABLE or TENTATIVE) is new iff its tmax exceeds the tmax of every data tuple
  before it in the client's log. In Spark: a running maximum of the data tuples' tmax over
  the rows *before* each row (window per run and client, ordered by ``line``: one client log
  per partition, sorted), compared with the row's own tmax.
* **Failures** are the history's ``fault`` events, each ended by its ``heal`` or a
  ``heal_all`` (``ops_scripts.check.paths.fault_spans``, the checker's reading of the
  history). The faults cut a run's timeline into *segments*: fault i's segment runs from
  its start to the start of the next fault that starts later (else the end of the log). A
  client row belongs to the failure whose segment holds its arrival.
* For one client and one failure (times from the fault's start, ``began``):
  the **first tentative** is the first TENTATIVE of the segment; the **UNDO** is the first
  UNDO after it in the log, the **REC_DONE** the first after that UNDO (without an UNDO:
  after the tentative). A failure that caused a tentative result looks for them anywhere
  after it (its correction may end after the next fault began); one that did not, within
  its segment only (a later UNDO corrects another fault). The failure's **span** runs
  from ``began`` to that REC_DONE (exclusive, in log order), else to the segment's end
  (the model's docstring says "else the heal": the brief's rule is kept, since tentative
  results may go on after a heal that no REC_DONE closes): ``n_tentative`` counts the
  TENTATIVE rows in it, ``delays_ms`` are the nearest-rank p50 and p99 and the max of the
  delays of the new results in it (``ops_scripts.check.availability.percentile``'s rule).

Invariants: rows are ordered by ``line`` (the log's order), never by arrival alone; a run
without a history, or without a fault in it, gives no :class:`Availability`; every client
of a run that has a log gets one per failure of that run, even if it saw nothing then.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from ops_scripts.check.paths import fault_spans
from ops_scripts.reconcile.model import Availability
from ops_scripts.reconcile.tables import Tables
from protocol.tuples import DATA_KINDS, Kind

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["NEVER", "Failure", "failures", "new_results", "per_failure"]

#: The end of a segment that no later fault ends: later than any time on the run's clock.
NEVER = 2**63 - 1

_DATA = sorted(k.name for k in DATA_KINDS)
_KEY = ["run", "client", "fault"]
_TENT, _UNDO, _REC = Kind.TENTATIVE.name, Kind.UNDO.name, Kind.REC_DONE.name
_SPAN_SCHEMA = "run string, client string, fault int, began long, until long, rec_line long"


@dataclass(frozen=True, slots=True)
class Failure:
    """One fault of a run's history: its index in start order, ``describe`` text, start,
    heal (None: never healed) and its segment's end (:data:`NEVER`: the last segment)."""

    run: str
    fault: int
    describe: str
    began: int
    healed: int | None
    until: int


def _client_rows(spark: SparkSession, tables: Tables) -> DataFrame:
    from pyspark.sql import functions as F

    logs = spark.read.parquet(str(tables.path("logs")))
    return (logs.where(F.col("role") == "client")
            .select("run", F.col("process").alias("client"), "line", "arrival", "kind", "id",
                    "tmax"))


def _flag_new(rows: DataFrame) -> DataFrame:
    """``rows`` with ``new`` (bool): a data tuple whose tmax exceeds every earlier data
    tuple's in its client's log (a window per run and client, in line order)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    is_data = F.col("kind").isin(_DATA)
    before = (Window.partitionBy("run", "client").orderBy("line")
              .rowsBetween(Window.unboundedPreceding, -1))
    newest = F.max(F.when(is_data, F.col("tmax"))).over(before)  # max ignores the nulls
    return rows.withColumn("new", is_data & F.coalesce(F.col("tmax") > newest, F.lit(True)))


def new_results(spark: SparkSession, tables: Tables) -> DataFrame:
    """Per run and client, the new data tuples (module docstring): columns ``run``,
    ``client``, ``line``, ``kind``, ``id``, ``tmax``, ``arrival``, ``delay`` (µs,
    ``arrival - tmax``), one row per new result."""
    from pyspark.sql import functions as F

    return (_flag_new(_client_rows(spark, tables)).where(F.col("new"))
            .select("run", "client", "line", "kind", "id", "tmax", "arrival",
                    (F.col("arrival") - F.col("tmax")).alias("delay")))


def failures(run: str, events: Iterable[Mapping[str, Any]]) -> list[Failure]:
    """The faults of one run's history events, with their segments (module docstring)."""
    spans = fault_spans(events)
    starts = sorted({f.span.start for f in spans})
    out = []
    for i, f in enumerate(spans):
        later = [s for s in starts if s > f.span.start]
        out.append(Failure(run, i, f.describe, f.span.start, f.span.end,
                           later[0] if later else NEVER))
    return out


def _history_failures(spark: SparkSession, tables: Tables) -> list[Failure]:
    """Every run's failures: only fault and heal events are collected (a few per run)."""
    from pyspark.sql import functions as F

    history = spark.read.parquet(str(tables.path("history")))
    wanted = (history.where(F.col("event").isin("fault", "heal", "heal_all"))
              .select("run", "line", "body").orderBy("run", "line").collect())
    by_run: dict[str, list[dict[str, Any]]] = {}
    for row in wanted:
        by_run.setdefault(row["run"], []).append(orjson.loads(row["body"]))
    return [f for run, events in by_run.items() for f in failures(run, events)]


def _marks(spark: SparkSession, rows: DataFrame, fails: DataFrame) -> list[Any]:
    """Per run, client and failure (with rows then): the first tentative, the UNDO, the
    REC_DONE as ``(line, arrival)`` structs. One aggregation: each group holds its first
    tentative and the UNDO and REC_DONE rows after its start (a few per correction); the
    rules (module docstring) pick from those with higher-order functions."""
    from pyspark.sql import functions as F

    kind = F.col("kind")
    picked = (rows.where(kind.isin(_TENT, _UNDO, _REC)).join(fails, "run")
              .where((F.col("arrival") >= F.col("began"))
                     & ((kind != _TENT) | (F.col("arrival") < F.col("until"))))
              .groupBy(*_KEY, "until")
              .agg(F.min(F.when(kind == _TENT, F.struct("line", "arrival"))).alias("ft"),
                   F.collect_list(F.when(kind != _TENT, F.struct("line", "arrival", "kind")))
                   .alias("ctl")))

    def first(which: str, after: Column) -> Column:
        """The first control row of kind ``which`` after line ``after`` (null: any), reached
        by the failure: within its segment, or anywhere if it caused a tentative result."""
        def cond(x: Column) -> Column:
            reach = F.col("ft").isNotNull() | (x["arrival"] < F.col("until"))
            return (x["kind"] == which) & reach & (x["line"] > F.coalesce(after, F.lit(0)))
        return F.array_min(F.filter("ctl", cond))

    return (picked.withColumn("undo", first(_UNDO, F.col("ft.line")))
            .withColumn("rec", first(_REC, F.coalesce(F.col("undo.line"), F.col("ft.line"))))
            .select(*_KEY, "ft", "undo", "rec").collect())


def _stats(spark: SparkSession, rows: DataFrame, spans: list[tuple[Any, ...]]) -> list[Any]:
    """Per span ``(run, client, fault, began, until, rec_line)``: ``n_tentative`` and the
    nearest-rank p50, p99 and max delay (µs) of the new results in it."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spans_df = F.broadcast(spark.createDataFrame(spans, _SPAN_SCHEMA))
    in_span = (F.col("arrival") >= F.col("began")) & F.when(
        F.col("rec_line").isNull(), F.col("arrival") < F.col("until")).otherwise(
        F.col("line") < F.col("rec_line"))
    delay = F.when(F.col("new"), F.col("arrival") - F.col("tmax"))
    group = Window.partitionBy(*_KEY)
    ranked = (_flag_new(rows).where((F.col("kind") == _TENT) | F.col("new"))
              .join(spans_df, ["run", "client"]).where(in_span)
              .withColumn("delay", delay)
              .withColumn("rank", F.row_number().over(group.orderBy(F.asc_nulls_last("delay"))))
              .withColumn("n", F.count("delay").over(group)))

    def nearest(p: int) -> Column:  # the ceil(p/100 * n)-th smallest, 1-based (percentile())
        k = F.greatest(F.lit(1), F.ceil(F.col("n") * p / 100))
        return F.max(F.when(F.col("rank") == k, F.col("delay")))

    return (ranked.groupBy(*_KEY)
            .agg(F.count(F.when(F.col("kind") == _TENT, 1)).alias("n_tentative"),
                 nearest(50).alias("p50"), nearest(99).alias("p99"),
                 F.max("delay").alias("pmax"))
            .collect())


def per_failure(spark: SparkSession, tables: Tables) -> list[Availability]:
    """Each client's :class:`Availability` during each failure of each run's history, in
    run, fault and client order (module docstring for what is measured)."""
    from pyspark.sql import functions as F

    found = _history_failures(spark, tables)
    if not found:
        return []
    fails = F.broadcast(spark.createDataFrame(
        [(f.run, f.fault, f.began, f.until) for f in found],
        "run string, fault int, began long, until long"))
    rows = _client_rows(spark, tables).where(F.col("run").isin(sorted({f.run for f in found})))
    clients = rows.select("run", "client").distinct().collect()
    marks = {(m["run"], m["client"], m["fault"]): m for m in _marks(spark, rows, fails)}
    keys = sorted(((c["run"], c["client"], f) for c in clients for f in found
                   if f.run == c["run"]), key=lambda k: (k[0], k[2].fault, k[1]))
    spans = []
    for run, client, f in keys:
        m = marks.get((run, client, f.fault))
        rec_line = None if m is None or m["rec"] is None else m["rec"]["line"]
        spans.append((run, client, f.fault, f.began, f.until, rec_line))
    stats = {(s["run"], s["client"], s["fault"]): s for s in _stats(spark, rows, spans)}
    return [_availability(f, client, marks.get((run, client, f.fault)),
                          stats.get((run, client, f.fault)))
            for run, client, f in keys]


def _ms(began: int, mark: Any) -> float | None:
    return None if mark is None else (mark["arrival"] - began) / 1000


def _availability(f: Failure, client: str, marks: Any, stats: Any) -> Availability:
    def mark(name: str) -> float | None:
        return None if marks is None else _ms(f.began, marks[name])

    delays = None
    if stats is not None and stats["pmax"] is not None:
        delays = (stats["p50"] / 1000, stats["p99"] / 1000, stats["pmax"] / 1000)
    return Availability(
        run=f.run, client=client, failure=f.describe, began_us=f.began, healed_us=f.healed,
        first_tentative_ms=mark("ft"), undo_ms=mark("undo"), rec_done_ms=mark("rec"),
        n_tentative=0 if stats is None else stats["n_tentative"], delays_ms=delays)
