"""Each client's and replica's final stream: the UNDO rule applied in Spark (issue 16).

Role: the "got" side of ``dpc reconcile`` (docs/reconcile.md). :func:`final_streams` takes
the ``logs`` table (``ops_scripts/reconcile/tables.py``) and returns every data tuple of
every log (one log: a ``(run, process, stream, incarnation)``), each marked with whether
it is in force at the end and with what applying the UNDOs found wrong at it. What
``dpc check``'s ``apply_undos_checked`` (``ops_scripts/check/properties.py``) does one
tuple at a time, in a list, this does with set rules that Spark evaluates in parallel;
``ops_scripts/reconcile/compare.py`` turns the result into differences and verdicts.

Theory of operation. Control tuples never change which data an UNDO removes
(``protocol/undo_rule.py``), so a log is its data rows and its UNDO rows. Read it as a
*set* semantics: every data row is appended; ``UNDO(u)`` at line j removes every row in
force with id > u. Then

* **survival**: the data row at line i with id d is in force at the end iff no UNDO at a
  line j > i has u < d. (If one has, the row is removed at the first such j, or was
  already; if none has, each later UNDO removes ids above its u >= d only.) ``undone_line``
  / ``undone_to`` name the first such UNDO;
* **in force at line i**: the rows k < i whose first such UNDO (``undone_line``) is after
  the last UNDO line before i (call it the row's *segment*, ``seg``): the rows earlier in
  i's own segment, plus the rows of earlier segments that outlive i's segment start;
* **ordering** (``order``): the row at line i is a ``"duplicate"`` if the last row (by
  line) in force before it has id d, ``"out-of-order"`` if it has a higher one (the
  checker's "a duplicate of" / "out of order after" the tuple in force, ``kept[-1]``).
  That row is the one before i in its segment, or for a segment's first row the last of
  those carried in;
* **a stable row taken back**: a STABLE row with an ``undone_line`` (that UNDO's line is
  the evidence; the checker's "takes back the stable tuple").

Equivalence with the checker's list semantics (the one UNDO rule): while the data ids in
force increase, the list ``kept`` and the set in force are the same rows in the same order
(``undo_cut`` on an increasing ``kept`` cuts before its first id > u), so up to the first
line where either semantics finds a violation they agree row for row, and that first line
and its kind are the same in both: ``min(line)`` over the problems here is the line of
the checker's violation. After it the checker stops; this goes on in the set semantics,
each row judged against the one in force before it, so one slip is one problem, not a
cascade (a dropped UNDO: its tentative tuples stay in force, and only the first
correction is out of order). A test holds
both equal on hundreds of random logs, violations included (tests/.../test_final.py).

A replica log that begins after id ``after`` (a recovery restored that far:
``check_recovered_replica``) is judged as the checker judges it: preceded by the
reference's tuples with id <= ``after`` (``prefix`` rows, lines <= 0), so that an UNDO
reaching into the restored prefix, or a tuple repeating one of it, is a problem too.

Scale: the UNDOs of a log are few: they are gathered per log into one small array and
broadcast; each data row filters that array (no row is collected, no log is held whole).
The rows in force carried into each segment are reduced per (segment, end of life) before
they meet the segment starts, so that join is small too; the row before within a segment
is a ``lag`` over the log's rows in line order (sorted, spilled by Spark if large).

Invariants: every data row of ``logs`` appears once in the result (plus the prefix rows);
``in_force`` is ``undone_line IS NULL``; lines are the log's (1-based), prefix rows' are <= 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column, Window
from pyspark.sql import functions as F

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["DATA_KINDS", "FINAL_COLUMNS", "LOG_KEY", "final_streams"]

#: One log: a client's (incarnation 0) or one incarnation of a replica's output stream.
LOG_KEY = ("run", "process", "stream", "incarnation")
#: The data kinds, as the tables spell them (``protocol.tuples.Kind`` names).
DATA_KINDS = ("STABLE", "TENTATIVE")
#: The columns of :func:`final_streams`' result, in order.
FINAL_COLUMNS = (*LOG_KEY, "role", "after", "line", "prefix", "kind", "id", "time", "tmax",
                 "values", "in_force", "undone_line", "undone_to", "order")

_FIRST_SEGMENT = -(2**62)  # the segment before a log's first UNDO (lines are > this)


def _prefix_rows(heads: DataFrame, reference: DataFrame) -> DataFrame:
    """For each log that begins after id ``after`` > 0, the reference's tuples of its
    stream through that id, as STABLE rows before the log's first line."""
    heads = heads.where(F.col("after") > 0).select(*LOG_KEY, "role", "after")
    ref = reference.select("run", "stream", F.col("id").alias("ref_id"), "time", "tmax",
                           "values")
    joined = heads.join(ref, on=["run", "stream"]).where(F.col("ref_id") <= F.col("after"))
    return joined.select(
        *LOG_KEY, "role", "after",
        # Lines <= 0, in id order: the prefix comes before line 1, and no UNDO is among it.
        (F.col("ref_id") - F.col("after")).alias("line"),
        F.lit(True).alias("prefix"), F.lit("STABLE").alias("kind"),
        F.col("ref_id").alias("id"), "time", "tmax", "values")


def _undos(logs: DataFrame) -> DataFrame:
    """Per log with UNDOs, its UNDOs as one array of ``(line, u)`` sorted by line."""
    return (logs.where(F.col("kind") == "UNDO")
            .groupBy(*LOG_KEY)
            .agg(F.sort_array(F.collect_list(F.struct(
                F.col("line").cast("long").alias("line"),
                F.col("id").cast("long").alias("u")))).alias("undos")))


def _first_undo_below(undos: Column) -> Column:
    """The first UNDO after this row whose u is below its id: ``struct(line, u)`` or null."""
    return F.array_min(F.filter(
        undos, lambda x: (x["line"] > F.col("line")) & (x["u"] < F.col("id"))))


def _segment(undos: Column) -> Column:
    """The line of the last UNDO before this row (:data:`_FIRST_SEGMENT` if none)."""
    last = F.array_max(F.transform(F.filter(undos, lambda x: x["line"] < F.col("line")),
                                   lambda x: x["line"]))
    return F.coalesce(last, F.lit(_FIRST_SEGMENT).cast("long"))


def _carried(rows: DataFrame, undos: DataFrame) -> DataFrame:
    """Per (log, segment start s): the id of the last row (by line) in force at s,
    ``carried_id``: of the rows of earlier segments whose first UNDO below their id, if
    any, is after s."""
    # max_by over (line, id) longs, not max(struct(line, id)): a struct maximum makes Spark
    # sort every row of every log to aggregate (SortAggregate); these stay hash aggregates.
    # Lines are unique within a log, so "the id at the highest line" is one row's.
    lives = (rows.groupBy(*LOG_KEY, "seg", "undone_line")  # at most (UNDOs + 1)^2 per log
             .agg(F.max("line").alias("top_line"), F.max_by("id", "line").alias("top_id")))
    starts = undos.select(*LOG_KEY, F.explode("undos").alias("x")).select(
        *LOG_KEY, F.col("x.line").alias("start"))
    alive = lives.join(starts, on=list(LOG_KEY)).where(
        (F.col("seg") < F.col("start"))
        & (F.col("undone_line").isNull() | (F.col("undone_line") > F.col("start"))))
    return alive.groupBy(*LOG_KEY, F.col("start").alias("seg")).agg(
        F.max_by("top_id", "top_line").alias("carried_id"))


def final_streams(logs: DataFrame, reference: DataFrame | None = None,
                  heads: DataFrame | None = None) -> DataFrame:
    """Every data row of ``logs`` (the ``logs`` table's columns; ``after`` may be absent
    or null: the log begins at the start), with the UNDO rule applied: the columns of
    :data:`FINAL_COLUMNS`, where ``in_force`` says the row is in force at the end,
    ``undone_line`` / ``undone_to`` name the UNDO that took it back (null: none did),
    ``order`` is null, ``"duplicate"`` or ``"out-of-order"`` (the row in force right before
    it has its id / a higher one), and ``prefix`` marks the reference rows a log that begins
    after id ``after`` > 0 is judged with (``reference``: run, stream, id, time, tmax,
    values; None: no prefix). ``heads``: one row per log, ``LOG_KEY``, ``role`` and
    ``after``, the logs with no row included (an empty log after a recovery is judged on
    its prefix alone); None: the logs' own rows say it. Lazy: nothing runs until the
    caller acts on the result."""
    if "after" not in logs.columns:
        logs = logs.withColumn("after", F.lit(None).cast("long"))
    data = logs.where(F.col("kind").isin(*DATA_KINDS)).select(
        *LOG_KEY, "role", "after", "line", F.lit(False).alias("prefix"), "kind", "id",
        "time", "tmax", "values")
    if reference is not None:
        if heads is None:
            heads = (logs.where(F.col("after") > 0).groupBy(*LOG_KEY)
                     .agg(F.first("role").alias("role"), F.max("after").alias("after")))
        data = data.unionByName(_prefix_rows(heads, reference))
    undos = _undos(logs)
    rows = (data.join(F.broadcast(undos), on=list(LOG_KEY), how="left")
            .withColumn("first_undo", _first_undo_below(F.col("undos")))
            .withColumn("seg", _segment(F.col("undos")))
            .withColumn("undone_line", F.col("first_undo.line"))
            .withColumn("undone_to", F.col("first_undo.u")))
    in_segment = Window.partitionBy(*LOG_KEY, "seg").orderBy("line")
    top = F.coalesce(F.lag("id").over(in_segment), F.col("carried_id"))
    judged = (rows.join(F.broadcast(_carried(rows, undos)), on=[*LOG_KEY, "seg"], how="left")
              .withColumn("top", top))
    order = (F.when(F.col("top") == F.col("id"), F.lit("duplicate"))
             .when(F.col("top") > F.col("id"), F.lit("out-of-order")))
    return judged.select(
        *LOG_KEY, "role", "after", "line", "prefix", "kind", "id", "time", "tmax", "values",
        F.col("undone_line").isNull().alias("in_force"), "undone_line", "undone_to",
        order.alias("order"))
