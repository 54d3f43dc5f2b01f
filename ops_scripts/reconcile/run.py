"""``dpc reconcile RUN_DIR...``: the whole job, from run directories to the report.

Role: the command's one entry (``ops_scripts/cli.py`` calls :func:`run_reconcile`); it
strings the parts of docs/reconcile.md together and owns what the user sees: progress
lines on stderr, one verdict line per run on stdout, the exit code.

Theory of operation: Java is checked first (no JVM stack trace for a missing Java: one
line, exit 2); the run directories are ingested into Parquet tables (``tables.py``); the
process's Spark session is built (``local[*]``, or ``--master`` / ``spark.master``; the
settings of the runs' ``[spark]`` config sections, then any ``--conf``, passed through);
the reference is computed (``reference.py``), the final streams compared with it (``compare.py``: verdicts, and the differences written as
Parquet), availability measured (``availability.py``), and the report written
(``report.py``). Exit 0 iff every run is valid; 1 if any is not; 2 on bad usage (an
argument, a directory that is not a run's, no Java).

Invariants: nothing but small per-run summaries reaches the driver; every run named
gets exactly one verdict line; a run without a reference is not valid (its verdicts are
"unknown", as ``dpc check`` says).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TextIO

from ops_scripts.reconcile.model import RunResult

__all__ = ["TOLERANCE_NOTE", "config_settings", "default_out", "parse_conf", "run_reconcile"]

#: What the report says of float comparisons (docs/reconcile.md: values compare as text).
TOLERANCE_NOTE = ("Values are compared exactly, floats bit for bit (as their shortest "
                  "round-trip text): the reference computes them as the operators do.")


def parse_conf(pairs: Sequence[str]) -> dict[str, str]:
    """``--conf KEY=VALUE`` arguments -> a dict; ValueError naming a malformed one."""
    conf: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--conf {pair!r}: expected KEY=VALUE (e.g. spark.executor.memory=2g)")
        conf[key.strip()] = value
    return conf


def config_settings(run_dirs: Sequence[Path], given: Collection[str] = ()) -> dict[str, str]:
    """The Spark settings of the runs' cluster configs (their ``[spark]`` sections) but the
    keys ``given`` (``--conf`` sets those), merged; ValueError when two runs set one key to
    different values, naming both. A config that does not load is the ingest's to report."""
    from node.config.load import load_config
    from node.errors import ConfigError

    merged: dict[str, tuple[str, Path]] = {}
    for d in run_dirs:
        try:
            settings = load_config(Path(d) / "config.toml").spark
        except ConfigError:
            continue
        for key, value in settings.items():
            seen = merged.setdefault(key, (value, Path(d)))
            if seen[0] != value and key not in given:
                raise ValueError(f"{key} is {seen[0]!r} in {seen[1]}/config.toml but {value!r} "
                                 f"in {d}/config.toml: say which with --conf {key}=VALUE")
    return {key: value for key, (value, _) in merged.items() if key not in given}


def default_out(run_dirs: Sequence[Path]) -> Path:
    """Where the report goes unless ``--out`` says: ``RUN_DIR/reconcile`` for one run,
    ``<common parent>/reconcile`` for several."""
    if len(run_dirs) == 1:
        return Path(run_dirs[0]) / "reconcile"
    return Path(os.path.commonpath([Path(d).resolve().parent for d in run_dirs])) / "reconcile"


def run_reconcile(run_dirs: Sequence[Path], *, master: str | None = None,
                  conf: Mapping[str, str] | None = None, out: Path | None = None,
                  stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """The command (module docstring). Returns the exit code. ``stdout`` / ``stderr``:
    where the verdicts / the progress and errors go (default: the process's, at call time)."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    from node.spark.session import java_problem

    problem = java_problem()
    if problem is not None:
        print(f"dpc reconcile: {problem}", file=stderr)
        return 2
    from node.spark.session import spark_session
    from ops_scripts.reconcile.availability import new_results, per_failure
    from ops_scripts.reconcile.compare import compare
    from ops_scripts.reconcile.reference import reference, reference_problems
    from ops_scripts.reconcile.report import verdict_line, write_report
    from ops_scripts.reconcile.tables import IngestError, ingest, run_labels

    started = time.perf_counter()

    def progress(line: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {line}", file=stderr, flush=True)

    try:
        run_labels(run_dirs)  # bad directories: a usage error, before any work
    except IngestError as exc:
        print(f"dpc reconcile: {exc}", file=stderr)
        return 2
    try:  # the configs' [spark] settings, --conf over them, --master over both
        conf = {**config_settings(run_dirs, given=conf or {}), **(conf or {})}
    except ValueError as exc:
        print(f"dpc reconcile: {exc}", file=stderr)
        return 2
    out = Path(out) if out is not None else default_out(run_dirs)
    tables = ingest(run_dirs, out, progress=progress)
    spark = spark_session(master, conf)
    used = spark.sparkContext.master or "?"  # Spark's word for where the job runs
    progress(f"Spark {spark.version} on {used}")
    ref = reference(spark, tables, progress=progress)
    missing = reference_problems(tables)
    progress(f"reference: {ref.count():,} tuples over {len(tables.runs)} run(s)"
             + (f"; no reference for {len(missing)}" if missing else ""))
    diff_path = out / "differences"
    verdicts, differences = compare(spark, tables, ref, reference_problems=missing,
                                    out=diff_path)  # written there once, read back
    diff_counts = {r["run"]: r["count"] for r in
                   differences.groupBy("run").count().collect()}
    progress(f"compared: {len(verdicts)} verdicts, {sum(diff_counts.values()):,} differences")
    results = {run: RunResult(run) for run in tables.runs}
    for v in verdicts:
        results[v.run].verdicts.append(v)
    for a in per_failure(spark, tables):
        results[a.run].availability.append(a)
    for run, n in diff_counts.items():
        results[run].differences = n
    report = write_report(out, list(results.values()), new_results(spark, tables), master=used,
                          differences_path=diff_path, tolerance_note=TOLERANCE_NOTE)
    progress(f"report: {report}")
    for r in results.values():
        print(verdict_line(r), file=stdout)
    bad = [r for r in results.values() if not r.valid]
    print(f"dpc reconcile: {len(results) - len(bad)} of {len(results)} run(s) valid -> "
          f"{'PASS' if not bad else 'FAIL'} (report: {report})", file=stdout)
    return 1 if bad else 0
