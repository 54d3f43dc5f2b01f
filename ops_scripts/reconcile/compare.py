"""Final streams against the reference: the differences, and ``dpc check``'s verdicts.

Role: the judgement of ``dpc reconcile`` (docs/reconcile.md, "Verdicts"). :func:`compare`
gives, per run, the same *eventual-consistency* verdict per client and
*replica-convergence* verdict per replica and output stream as ``dpc check``
(``ops_scripts/check/properties.py``: ``check_client``, ``check_replica``,
``check_recovered_replica``), under the same subject names, and a DataFrame of every
difference behind them (:data:`DIFFERENCE_COLUMNS`), one row per tuple.

Theory of operation. ``final.py`` applies the UNDO rule to every log and marks what
applying found wrong. A log here is one of a subject's: a client's log, or each
incarnation of a replica's output log, the current one last; which logs a subject has,
and the id each begins after, come from the run directory as ``tables.py`` reads them
(:func:`~ops_scripts.reconcile.tables.replica_logs`), so that an empty log (no row in
``logs``) is still judged. The differences, by ``what``:

* ``"duplicate"`` / ``"out-of-order"`` (line: the tuple's) and ``"undone-stable"`` (line:
  the UNDO's; id: the stable tuple taken back): applying is checked, in every incarnation;
* ``"tentative"``: a tentative tuple still in force at the end of a client's or a
  replica's current log (an earlier incarnation's tentative tail is the next one's to
  correct: allowed, as ``check_recovered_replica`` allows it);
* the stable tuples in force against the reference of the stream, joined on id:
  ``"missing"`` (expected, no line), ``"extra"`` (got), ``"differs"`` (values, as text:
  bit-exact for floats) or ``"differs-time"`` (same values, another time or tmax; expected
  and got then say ``{"time": .., "tmax": ..}``). An earlier incarnation must be a prefix of
  the reference: only the reference's ids up to its highest stable id are expected, and
  its tuples above the reference's last id are not extra (``dpc check`` compares the
  shorter length only);
* ``"restore-point"``: a replica's current log begins after an id the reference lacks.

Agreement with ``dpc check``: the checker stops at its first violation, and final.py's
first problem is that one (final.py's docstring); without one, both semantics agree on
every tuple in force, and two id-sorted streams without a repeated id are equal exactly
when the join on id finds no missing, extra or differing tuple. So a subject is invalid
here exactly when the checker says invalid. Its evidence names the differences in the
checker's order (per incarnation: violations, tentative tuples, then the comparison),
the first few with id, row and values.

Scale: the differences are computed in one Spark action that writes them as Parquet
(:func:`write_differences`: the final streams, which every kind of difference derives
from, persisted for that action only), and everything after reads that table, which is
small unless the run is far off: one job's worth of per-subject counts and the first
:data:`EVIDENCE` rows of each subject and kind reach the driver; the heads (one row per
log) are built on the driver: they are few.

Invariants: a run the reference could not be computed for (``reference_problems``) has
its verdicts ``unknown`` with the reason, and no differences; every subject of every run
gets one verdict, in ``dpc check``'s order (clients, then replicas by node, replica and
stream, as the config lists them).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, Window
from pyspark.sql import functions as F

from node.config.load import load_config
from node.config.model import ClusterConfig
from node.procs.rundir import RunDir
from node.procs.runlog import iter_log
from operators.taxonomy import RecoveryType, replicas_share_state
from ops_scripts.check.paths import stream_promise
from ops_scripts.check.properties import client_subject, replica_subject
from ops_scripts.reconcile.final import LOG_KEY, final_streams
from ops_scripts.reconcile.model import Verdict
from ops_scripts.reconcile.tables import Tables, replica_logs
from protocol.tuples import DATA_KINDS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["DIFFERENCE_COLUMNS", "EVIDENCE", "Head", "compare", "differences", "heads_of",
           "write_differences"]

#: The columns of the differences: ``incarnation`` tells a replica's logs apart (0 for a
#: client; a replica's k, as in the ``logs`` table), ``line`` is the row of that log.
DIFFERENCE_COLUMNS = ("run", "subject", "what", "id", "line", "expected", "got", "incarnation")
#: How many differences a verdict's evidence names.
EVIDENCE = 3

_HEADS = ("run string, process string, stream string, incarnation int, role string, "
          "after bigint, current boolean, property string, subject string")
#: Per incarnation, the order in which dpc check meets the differences.
_RANK = {"duplicate": 0, "out-of-order": 0, "undone-stable": 0, "restore-point": 0,
         "tentative": 1}


@dataclass(frozen=True, slots=True)
class Head:
    """One log of a subject: ``after`` is the id it begins after (None: the start)."""

    run: str
    process: str
    stream: str
    incarnation: int
    role: str
    after: int | None
    current: bool
    property: str
    subject: str
    #: The stream's path promises only a gap (an amnesia node on it): who promises it.
    gap: str | None = None
    #: A process pair's secondary that has emitted nothing since it restarted.
    idle: bool = False


def heads_of(tables: Tables) -> list[Head]:
    """Every log of every subject of every run, in ``dpc check``'s order: each client's,
    then each replica's on each output stream (its earlier incarnations first)."""
    heads: list[Head] = []
    for run, path in tables.runs.items():
        rd = RunDir(path)
        config = load_config(rd.config)
        for c in config.clients.values():
            heads.append(Head(run, c.name, c.stream, 0, "client", None, True,
                              "eventual-consistency", client_subject(c),
                              gap=_gap(config, c.stream)))
        for node in config.nodes.values():
            for r in node.replicas:
                for stream in node.outputs:
                    logs = replica_logs(rd, r.name, stream)
                    idle = (not replicas_share_state(node.settings.ha)
                            and node.settings.ha != "amnesia" and logs[-1][1] is None
                            and not _emitted(logs[-1][2]))
                    heads += [Head(run, r.name, stream, k, "replica", after, k == len(logs),
                                   "replica-convergence", replica_subject(r.name, stream),
                                   gap=_gap(config, stream), idle=idle and k == len(logs))
                              for k, after, _ in logs]
    return heads


def _gap(config: ClusterConfig, stream: str) -> str | None:
    """Who promises ``stream`` only a gap (ops_scripts/check/paths.py), or None."""
    promise = stream_promise(config, stream)
    return promise.who() if promise.type is RecoveryType.GAP else None


def _emitted(path: Path) -> bool:
    """Whether a replica's output log holds a data tuple (read on the driver: the log of a
    secondary is empty or nearly so; a long one has data)."""
    if not path.exists():
        return False
    if path.stat().st_size > 1_000_000:
        return True
    return any(t.kind in DATA_KINDS for batch in iter_log(path) for t in batch.tuples())


def _diff(what: Column | str, line: Column | None, expected: Column | None,
          got: Column | None) -> list[Column]:
    def text(c: Column | None) -> Column:
        return c if c is not None else F.lit(None).cast("string")
    columns = [F.col("run"), F.col("subject"), F.lit(what) if isinstance(what, str) else what,
               F.col("id"), line if line is not None else F.lit(None).cast("long"),
               text(expected), text(got), F.col("incarnation")]
    return [c.alias(name) for c, name in zip(columns, DIFFERENCE_COLUMNS, strict=True)]


def _timing(prefix: str) -> Column:
    return F.to_json(F.struct(F.col(f"{prefix}time").alias("time"),
                              F.col(f"{prefix}tmax").alias("tmax")))


def _comparison(final: DataFrame, heads: DataFrame, reference: DataFrame) -> DataFrame:
    """The stable tuples in force against the reference, joined on id, per log."""
    got = final.where(F.col("in_force") & (F.col("kind") == "STABLE"))
    top = got.groupBy(*LOG_KEY).agg(F.max("id").alias("top"))
    last = reference.groupBy("run", "stream").agg(F.max("id").alias("last"))
    ref = reference.select("run", "stream", "id", F.col("time").alias("ref_time"),
                           F.col("tmax").alias("ref_tmax"), F.col("values").alias("ref_values"))
    logs = (heads.join(top, on=list(LOG_KEY), how="left")
            .join(last, on=["run", "stream"], how="left"))
    expected = (F.broadcast(logs).join(ref, on=["run", "stream"])
                .where(F.col("current") | (F.col("id") <= F.col("top")))
                .select(*LOG_KEY, "id", "ref_time", "ref_tmax", "ref_values"))
    both = (got.select(*LOG_KEY, "id", "line", "prefix", "time", "tmax", "values")
            .join(expected, on=[*LOG_KEY, "id"], how="full_outer")
            .join(F.broadcast(logs.select(*LOG_KEY, "current", "subject", "last")),
                  on=list(LOG_KEY)))
    line = F.when(~F.col("prefix"), F.col("line"))
    same_values = F.col("values") == F.col("ref_values")
    what = (F.when(F.col("values").isNull(), F.lit("missing"))
            .when(F.col("ref_values").isNull(), F.lit("extra"))
            .when(~same_values, F.lit("differs"))
            .when((F.col("time") != F.col("ref_time")) | (F.col("tmax") != F.col("ref_tmax")),
                  F.lit("differs-time")))
    timed = F.col("ref_values").isNotNull() & same_values
    exempt = (~F.col("current") & F.col("ref_values").isNull()
              & (F.col("last").isNull() | (F.col("id") > F.col("last"))))
    return (both.withColumn("what", what).where(F.col("what").isNotNull() & ~exempt)
            .select(*_diff(F.col("what"), line,
                           F.when(timed, _timing("ref_")).otherwise(F.col("ref_values")),
                           F.when(timed, _timing("")).otherwise(F.col("values")))))


def differences(spark: SparkSession, tables: Tables, reference: DataFrame,
                heads: list[Head]) -> DataFrame:
    """Every difference of every subject of ``heads`` (lazy; :data:`DIFFERENCE_COLUMNS`).
    Acting on it more than once recomputes the final streams each time: :func:`compare`
    writes it once instead."""
    hd = _heads_frame(spark, heads)
    return _differences(_final(spark, tables, reference, hd), hd, reference)


def _heads_frame(spark: SparkSession, heads: list[Head]) -> DataFrame:
    return spark.createDataFrame([_row(h) for h in heads], _HEADS)


def _final(spark: SparkSession, tables: Tables, reference: DataFrame,
           hd: DataFrame) -> DataFrame:
    """The final streams of the logs of ``hd``, each row with its log's ``current`` and
    ``subject``."""
    logs = spark.read.parquet(str(tables.path("logs")))
    return final_streams(logs, reference, hd).join(
        F.broadcast(hd.select(*LOG_KEY, "current", "subject")), on=list(LOG_KEY))


def _differences(final: DataFrame, hd: DataFrame, reference: DataFrame) -> DataFrame:
    """The differences from the final streams (five branches over ``final``: the caller
    persists it when it acts, or each branch recomputes it from the logs)."""
    line = F.when(~F.col("prefix"), F.col("line"))
    applying = final.where(F.col("order").isNotNull()).select(
        *_diff(F.col("order"), line, None, F.col("values")))
    undone = final.where((F.col("kind") == "STABLE") & F.col("undone_line").isNotNull()).select(
        *_diff("undone-stable", F.col("undone_line"), F.col("values"), None))
    tentative = final.where(F.col("in_force") & (F.col("kind") == "TENTATIVE")
                            & F.col("current")).select(
        *_diff("tentative", line, None, F.col("values")))
    restored = (hd.where(F.col("current") & (F.col("after") > 0))
                .withColumn("id", F.col("after"))
                .join(reference.select("run", "stream", "id"), on=["run", "stream", "id"],
                      how="left_anti")
                .select(*_diff("restore-point", None, None, None)))
    return (applying.unionByName(undone).unionByName(tentative)
            .unionByName(_comparison(final, hd, reference)).unionByName(restored))


def write_differences(spark: SparkSession, tables: Tables, reference: DataFrame,
                      heads: list[Head], path: Path) -> DataFrame:
    """Compute the differences of ``heads`` once, write them to ``path`` (a Parquet
    dataset, replaced) and return them read back from there.

    One Spark action: the final streams feed five branches of the plan (violations,
    stable tuples taken back, tentative tuples, the comparison and its per-log maxima), so
    they are persisted for that action and dropped after it; unpersisted, every branch
    would re-read and re-judge every log (measured on a 10^6-row run: most of the time
    of ``dpc reconcile``)."""
    from pyspark import StorageLevel

    hd = _heads_frame(spark, heads)
    final = _final(spark, tables, reference, hd).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        _differences(final, hd, reference).write.mode("overwrite").parquet(str(path))
    finally:
        final.unpersist()
    return spark.read.parquet(str(path))


def _row(h: Head) -> tuple[Any, ...]:
    return (h.run, h.process, h.stream, h.incarnation, h.role, h.after, h.current,
            h.property, h.subject)


def _evidence_rows(diffs: DataFrame, limit: int) -> list[Any]:
    """Per (run, subject, what): its count and its first ``limit`` rows (one job)."""
    per_what = Window.partitionBy("run", "subject", "what")
    order = per_what.orderBy("incarnation", F.col("line").asc_nulls_last(), "id")
    return (diffs.withColumn("n", F.count(F.lit(1)).over(per_what))
            .withColumn("k", F.row_number().over(order))
            .where(F.col("k") <= limit).collect())


def _describe(r: Any, current: Mapping[tuple[str, str], int]) -> str:
    where = f"row {r['line']}: " if r["line"] is not None else ""
    if r["incarnation"] and r["incarnation"] != current.get((r["run"], r["subject"])):
        where = f"incarnation {r['incarnation']} (before a crash), {where}"
    what = f"{where}{r['what']} id={r['id']}"
    if r["got"] is not None:
        what += f" got {r['got']}"
    if r["expected"] is not None:
        what += f"{',' if r['got'] is not None else ''} expected {r['expected']}"
    return what


def _verdict(head: Head, rows: list[Any], current: Mapping[tuple[str, str], int],
             stats: Mapping[tuple[str, str], int], limit: int) -> Verdict:
    if head.gap is not None:
        # dpc check aligns a gap stream with its reference by content (difflib), which is
        # not distributed here: said, not guessed (docs/reconcile.md). What applying the
        # UNDOs found wrong is wrong whatever the promise.
        rows = [r for r in rows if r["what"] in _RANK and r["what"] != "restore-point"]
        if not rows:
            why = (f"gap recovery, as {head.gap} promises: judged by dpc check only (an "
                   "alignment by content, not distributed here)")
            return Verdict(head.run, head.property, head.subject, "unknown", why)
    if head.idle:
        # A pair's secondary that emitted nothing since its restart: its earlier lives
        # must be correct prefixes (dpc check's check_idle_replica); the current log is
        # expected to hold nothing of the reference.
        rows = [r for r in rows if r["incarnation"] != head.incarnation]
        if not rows:
            why = "a secondary in this incarnation: emitted nothing"
            return Verdict(head.run, head.property, head.subject, "valid", why)
    if not rows:
        n = stats.get((head.run, head.stream), 0)
        why = f"{n} stable tuples equal the reference; no tentative tuple remains"
        return Verdict(head.run, head.property, head.subject, "valid", why)
    counts = Counter({r["what"]: r["n"] for r in rows})
    total = sum(counts.values())
    rows.sort(key=lambda r: (r["incarnation"], _RANK.get(r["what"], 2), r["line"] is None,
                             r["line"] or 0,
                             r["id"] if r["id"] is not None else 0))
    kinds = ", ".join(f"{n} {what}" for what, n in counts.most_common())
    shown = "; ".join(_describe(r, current) for r in rows[:limit])
    more = "; ..." if total > limit else ""
    why = f"{total} difference(s) ({kinds}): {shown}{more}"
    return Verdict(head.run, head.property, head.subject, "invalid", why)


def compare(spark: SparkSession, tables: Tables, reference_df: DataFrame, *,
            reference_problems: Mapping[str, str] | None = None,
            limit: int = EVIDENCE, out: Path | None = None) -> tuple[list[Verdict], DataFrame]:
    """The verdicts of every run of ``tables`` (collected: one per subject) and the
    differences behind them (:data:`DIFFERENCE_COLUMNS`), written once as Parquet to
    ``out`` (default: ``differences`` beside the tables' directory) and returned read back
    from there. ``reference_df``: the ``reference`` table (run, stream, id, time, tmax,
    values); ``reference_problems``: run -> why it has no reference (its verdicts:
    unknown)."""
    problems = dict(reference_problems or {})
    heads = heads_of(tables)
    path = Path(out) if out is not None else tables.root.parent / "differences"
    diffs = write_differences(spark, tables, reference_df,
                              [h for h in heads if h.run not in problems], path)
    found: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for r in _evidence_rows(diffs, limit):  # from the written table: no recomputation
        found[(r["run"], r["subject"])].append(r)
    current = {(h.run, h.subject): h.incarnation for h in heads if h.current}
    stats = {(r["run"], r["stream"]): r["n"] for r in
             reference_df.groupBy("run", "stream").agg(F.count(F.lit(1)).alias("n")).collect()}
    verdicts: list[Verdict] = []
    for h in heads:
        if not h.current:
            continue  # one verdict per subject: its current log's head stands for it
        if h.run in problems:
            why = f"no reference run: {problems[h.run]}"
            verdicts.append(Verdict(h.run, h.property, h.subject, "unknown", why))
        else:
            verdicts.append(_verdict(h, found.get((h.run, h.subject), []), current, stats,
                                     limit))
    return verdicts, diffs
