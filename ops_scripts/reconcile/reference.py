"""The reference as a Spark job: stage 1, each run in one task, and the dispatch to stage 2
(docs/reconcile.md).

Which stage: a run of at least :data:`STAGE2_MIN_ROWS` source rows goes to stage 2
(``plans.py``: its query networks as Spark plans, many tasks for one run), unless a plan
says :class:`~ops_scripts.reconcile.spark_expr.Untranslatable` (an operator it does not
translate, or a runtime problem whose exact words only the operators give); every other
run goes to stage 1, below. Both write the same rows (test_plans.py, test_reference.py).

Role: the "expected" side of ``dpc reconcile``: for every run ingested
(``ops_scripts/reconcile/tables.py``), the STABLE tuples a failure-free run emits on every
node output stream. Stage 1 computes them with the operators themselves, by the very
function ``dpc check`` uses (``ops_scripts.check.reference.reference_outputs``), so the
reference is exact by construction; Spark spreads the runs over the executors.

Theory of operation. The driver makes a DataFrame of the run labels and directories
(``Tables.runs``: one row per run, tiny) and places run i in partition i mod P (an
explicit partitioner, not a hash: no task is empty, and the runs are spread evenly), P =
the runs, at most :data:`RUNS_PER_CORE` times the session's default parallelism: a task
costs Spark about 0.15 s however small its run (a torture or a test session's hundred
runs spent 30 s in one task each), and a task's runs are computed one after another, so
its memory is one run's. Then ``mapInArrow`` runs :func:`_runs_task` once per partition.
``mapInArrow`` rather than ``mapInPandas``: the task reads Arrow (the ``sources`` table,
with pyarrow) and writes Arrow; pandas in between would only convert, and would turn int64
columns with nulls into floats. In its task, a run's rows of ``sources`` are read from its
own files of that table (the driver lists them from the files' footers,
``tables.run_files``: a scan of the whole table per run grew with the square of the runs),
batch by batch, into tuples per stream, put in log order (incarnation, then line: the
order in which ``dpc check``'s ``read_source_log`` returns them; every source of the
config starts with no tuples, as a readable empty log gives ``dpc check``); the run's
config is loaded from ``<run dir>/config.toml`` (executors must see the run directories,
as they see the tables); ``reference_outputs`` runs; its streams are yielded in Arrow
batches, values as ``orjson.dumps(list(values))`` (the text every table uses).

A run whose reference cannot be computed does not kill the job: like ``dpc check``
(``compose._reference``), any exception of ``reference_outputs`` (a
:class:`~ops_scripts.errors.CheckError`, or a crash) means "no reference", with the text
``"<ExceptionName>: <message>"`` that ``dpc check`` puts in its verdicts' evidence; the task
yields one row for the run with ``problem`` set and no tuple. A table that contradicts
its config (a stream the config has no source of, lines missing or repeated) or a config
that will not load is not a property of the run but a broken input: the task raises,
naming the run, and the job fails.

:func:`reference` runs the job once (one Spark action over a persisted result) and writes
two tables beside the ingested ones: ``reference`` (run, stream, id, time, tmax, values:
the contract's) and ``reference_problems`` (run, problem); it returns the first, read back.
:func:`reference_problems` reads the second (run -> why there is no reference).

Invariants: no source row and no reference row is collected to the driver (only the
problems, at most one per run); a run's reference rows come from exactly one task; each
stream's rows are in id order, streams in config order; the executors' Python is the
driver's (:func:`reference_job` refuses a local session whose Python is another one).
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from node.config.load import load_config
from ops_scripts.check.reference import reference_outputs
from ops_scripts.errors import ReferenceJobError
from ops_scripts.reconcile.tables import Tables, run_files
from protocol.errors import DPCError
from protocol.tuples import Kind, Tuple, make_tuple

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["ROWS_PER_BATCH", "STAGE2_MIN_ROWS", "ReferenceJobError", "reference", "reference_job",
           "reference_problems"]

#: Rows per Arrow batch a task yields.
ROWS_PER_BATCH = 8192
#: Stage 1's tasks per core at most (Spark's advice: 2-4 per core; more tasks, more even
#: runs' load, more per-task overhead).
RUNS_PER_CORE = 4
#: Source rows from which a run's reference is computed by stage 2 (many tasks) rather
#: than stage 1 (one task): below it, one task is done before a plan's jobs have started.
STAGE2_MIN_ROWS = 200_000

_S, _I64 = pa.string(), pa.int64()
#: What each task yields: the reference's columns, and ``problem`` (set on the one row of
#: a run without a reference).
JOB_SCHEMA = pa.schema([("run", _S), ("stream", _S), ("id", _I64), ("time", _I64),
                        ("tmax", _I64), ("values", _S), ("problem", _S)])
#: The same, as Spark is told it (``values`` is an SQL keyword: quoted).
_JOB_DDL = ", ".join(f"`{f.name}` {'string' if f.type == _S else 'bigint'}" for f in JOB_SCHEMA)
_PROBLEMS_SCHEMA = pa.schema([("run", _S), ("problem", _S)])
_SOURCE_COLUMNS = ["stream", "incarnation", "line", "kind", "id", "time", "tmax", "values"]


# ---------------------------------------------------------------- driver side
def reference_job(spark: SparkSession, tables: Tables, only: Collection[str] | None = None,
                  *, max_tasks: int | None = None,
                  files: Mapping[str, list[tuple[Path, int]]] | None = None) -> DataFrame:
    """The job, lazily: the runs (of ``only``, default every run) in ``min(runs,
    max_tasks)`` partitions (tasks; default ``RUNS_PER_CORE * defaultParallelism``), each
    run in one, :data:`JOB_SCHEMA`'s columns. ``files``: ``run_files(tables, "sources")``,
    if the caller has it already."""
    _require_driver_python(spark)
    if files is None:
        files = run_files(tables, "sources")  # each task reads its runs' files only
    runs = [(str(label), str(path), [str(f) for f, _ in files.get(label, [])])
            for label, path in tables.runs.items() if only is None or label in only]
    if not runs:
        raise ReferenceJobError("no run to compute a reference for")
    # Key i -> partition i mod P: no empty task (a hash partitioning could leave one).
    sc = spark.sparkContext
    parts = min(len(runs), max_tasks or RUNS_PER_CORE * max(1, sc.defaultParallelism))
    placed = (sc.parallelize(list(enumerate(runs)), parts)
              .partitionBy(parts, lambda i: i % parts).values())
    labels = spark.createDataFrame(placed, "run string, path string, files array<string>")
    task = functools.partial(_runs_task, sources_dir=str(tables.path("sources")))
    return labels.mapInArrow(task, _JOB_DDL)


def reference(spark: SparkSession, tables: Tables, *, stage2_min_rows: int = STAGE2_MIN_ROWS,
              progress: Callable[[str], None] | None = None) -> DataFrame:
    """Compute the reference of every run (once), write the tables ``reference`` and
    ``reference_problems``, and return ``reference``: run, stream, id, time, tmax, values.
    A run without a reference has no row in it (see :func:`reference_problems`). Runs of
    at least ``stage2_min_rows`` source rows go through stage 2 (Spark plans,
    ``plans.py``: parallel within the run); the others, and any run stage 2 does not
    translate (``progress`` says why), through stage 1 (each run in one task)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    # An earlier computation's problems must not outlive a failure of this one.
    shutil.rmtree(tables.path("reference_problems"), ignore_errors=True)
    out = str(tables.path("reference"))
    files = run_files(tables, "sources")
    planned = _stage2(spark, tables, files, stage2_min_rows, progress or (lambda _line: None))
    rest = [run for run in tables.runs if run not in planned]
    rows = []
    mode = "overwrite"
    if rest:
        job = reference_job(spark, tables, rest, files=files).persist(
            StorageLevel.MEMORY_AND_DISK)
        try:
            (job.where(F.col("problem").isNull()).drop("problem")
             .write.mode(mode).parquet(out))
            # At most one row per run, from the persisted result: no second computation.
            rows = job.where(F.col("problem").isNotNull()).select("run", "problem").collect()
        finally:
            job.unpersist()
        mode = "append"
    for df in planned.values():
        df.select(*(n for n in JOB_SCHEMA.names if n != "problem")).write.mode(mode).parquet(out)
        mode = "append"
    _write_problems(tables, {r["run"]: r["problem"] for r in rows})
    return spark.read.parquet(out)


def _stage2(spark: SparkSession, tables: Tables, files: Mapping[str, list[tuple[Path, int]]],
            min_rows: int, progress: Callable[[str], None]) -> dict[str, DataFrame]:
    """The runs big enough for stage 2 that it translates -> their plans (lazy)."""
    from ops_scripts.reconcile.plans import Untranslatable, plan_reference

    if min_rows <= 0:
        big = list(tables.runs)
    else:
        # From the files' footers: a Spark scan of every source row took 5 s for 100 tiny runs.
        big = [run for run, fs in files.items() if sum(n for _, n in fs) >= min_rows]
    planned = {}
    for run in big:
        try:
            planned[run] = plan_reference(spark, tables, run,
                                          load_config(tables.runs[run] / "config.toml"))
        except Untranslatable as exc:
            progress(f"run {run}: reference by stage 1 ({exc})")
        else:
            progress(f"run {run}: reference by stage 2 (Spark plans)")
    return planned


def reference_problems(tables: Tables) -> dict[str, str]:
    """Run label -> why it has no reference (``"<ExceptionName>: <message>"``, the text
    ``dpc check`` gives), as :func:`reference` recorded it; runs with one are absent."""
    path = _problems_path(tables)
    if not path.exists():
        raise ReferenceJobError(f"{path}: missing (compute the reference first)")
    table = pq.read_table(path, schema=_PROBLEMS_SCHEMA)
    return dict(zip(table.column("run").to_pylist(), table.column("problem").to_pylist(),
                    strict=True))


def _problems_path(tables: Tables) -> Path:
    return tables.path("reference_problems") / "part-000000.parquet"


def _write_problems(tables: Tables, problems: Mapping[str, str]) -> None:
    path = _problems_path(tables)
    shutil.rmtree(path.parent, ignore_errors=True)
    path.parent.mkdir(parents=True)
    runs = sorted(problems)
    pq.write_table(pa.table([runs, [problems[r] for r in runs]], schema=_PROBLEMS_SCHEMA), path)


def _require_driver_python(spark: SparkSession) -> None:
    """A local session's Python workers must be this interpreter: another one (PySpark's
    default is ``python3`` on the PATH) lacks this virtualenv's packages, and the job would
    fail in every task with an import error. A cluster's executors are beyond checking here:
    PYSPARK_PYTHON names their interpreter."""
    sc = spark.sparkContext
    if not (sc.master or "").startswith("local"):
        return
    exe = shutil.which(sc.pythonExec) or sc.pythonExec
    if os.path.abspath(exe) != os.path.abspath(sys.executable):
        raise ReferenceJobError(
            f"the Spark session's Python workers run {sc.pythonExec!r}, not this interpreter "
            f"({sys.executable}): set PYSPARK_PYTHON={sys.executable} before the session is "
            "built")


# ---------------------------------------------------------------- executor side
def _runs_task(batches: Iterator[pa.RecordBatch], sources_dir: str) -> Iterator[pa.RecordBatch]:
    """One task: the reference of each run in its partition, one after another."""
    for batch in batches:
        for run, path, files in zip(*(batch.column(c).to_pylist()
                                      for c in ("run", "path", "files")), strict=True):
            yield from _run_reference(run, Path(path), files, sources_dir)


def _run_reference(run: str, path: Path, files: list[str],
                   sources_dir: str) -> Iterator[pa.RecordBatch]:
    try:
        config = load_config(path / "config.toml")
    except DPCError as e:  # ConfigError: the file and key are in the message
        raise ReferenceJobError(f"run {run}: cannot load its config: {e}") from None
    sources = _source_tuples(run, files, sources_dir, list(config.sources))
    try:
        outputs = reference_outputs(config, sources)
    except Exception as e:  # noqa: BLE001  as dpc check: the reference crashing is "no
        # reference" for this run (its verdicts unknown), never the end of the other runs'
        yield pa.RecordBatch.from_pylist(
            [{"run": run, "problem": f"{type(e).__name__}: {e}"}], schema=JOB_SCHEMA)
        return
    for stream, tuples in outputs.items():
        for start in range(0, len(tuples), ROWS_PER_BATCH):
            yield _batch(run, stream, tuples[start:start + ROWS_PER_BATCH])


def _source_tuples(run: str, files: list[str], sources_dir: str,
                   names: Sequence[str]) -> dict[str, list[Tuple]]:
    """The run's source tuples per stream, in log order, from its rows of ``sources`` (in
    ``files``, the run's files of ``sources_dir``)."""
    rows: dict[str, list[tuple[int, int, Tuple]]] = {s: [] for s in names}
    dataset = ds.dataset(files, format="parquet") if files else None
    for batch in () if dataset is None else dataset.to_batches(
            columns=_SOURCE_COLUMNS, filter=pc.field("run") == run):
        for stream, inc, line, kind, ident, time, tmax, values in zip(
                *(c.to_pylist() for c in batch.columns), strict=True):
            if stream not in rows:
                raise ReferenceJobError(f"run {run}: {sources_dir} has rows of stream "
                                        f"{stream!r}, which its config has no source of")
            if kind not in Kind.__members__:
                raise ReferenceJobError(f"run {run}, source {stream}, line {line}: unknown "
                                        f"kind {kind!r} in {sources_dir}")
            rows[stream].append((inc, line, make_tuple(
                Kind[kind], ident, time, tmax, tuple(orjson.loads(values)))))
    out: dict[str, list[Tuple]] = {}
    for stream, got in rows.items():
        got.sort(key=lambda r: (r[0], r[1]))  # the files' order is not the scan's promise
        lines = [r[1] for r in got]
        if lines != list(range(1, len(got) + 1)):
            raise ReferenceJobError(f"run {run}, source {stream}: lines {_span(lines)} in "
                                    f"{sources_dir}, expected 1..{len(got)} once each")
        out[stream] = [r[2] for r in got]
    return out


def _span(lines: Sequence[int]) -> str:
    return f"{lines[:5]}...{lines[-5:]}" if len(lines) > 10 else str(lines)


def _batch(run: str, stream: str, tuples: Sequence[Tuple]) -> pa.RecordBatch:
    n = len(tuples)
    columns: list[Any] = [[run] * n, [stream] * n, [t.id for t in tuples],
                          [t.time for t in tuples], [t.tmax for t in tuples],
                          [orjson.dumps(list(t.values)).decode() for t in tuples], [None] * n]
    return pa.RecordBatch.from_arrays(
        [pa.array(c, f.type) for c, f in zip(columns, JOB_SCHEMA, strict=True)], schema=JOB_SCHEMA)
