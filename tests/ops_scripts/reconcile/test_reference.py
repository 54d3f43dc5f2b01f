"""The reference as a Spark job (ops_scripts/reconcile/reference.py), on simulated runs."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pytest

from node.config.load import load_config
from node.procs.generators import arrow_types
from node.procs.rundir import RunDir, read_source_log
from ops_scripts.check.compose import run_check
from ops_scripts.check.recorded import load_history
from ops_scripts.check.reference import reference_outputs
from ops_scripts.errors import CheckError
from ops_scripts.harness.simulate import DEFAULT_CLUSTER, simulate_one
from ops_scripts.reconcile.reference import (
    RUNS_PER_CORE,
    reference,
    reference_job,
    reference_problems,
)
from ops_scripts.reconcile.tables import Tables, ingest
from protocol.tuples import Kind, make_tuple
from state.tuplelog import TupleLogWriter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SEEDS = (3, 4, 5)
Row = tuple[int, int, int, str]  # id, time, tmax, values text


def expected(run_dir: Path) -> dict[str, list[Row]]:
    """``dpc check``'s reference of a run, computed in this process, as rows per stream."""
    config = load_config(run_dir / "config.toml")
    history = load_history(RunDir(run_dir), config)
    assert not history.problems.keys() & {f"source {s}" for s in config.sources}
    outputs = reference_outputs(config, history.sources)
    return {stream: [(t.id, t.time, t.tmax, orjson.dumps(list(t.values)).decode())
                     for t in tuples] for stream, tuples in outputs.items() if tuples}


def by_run(rows: list[Any]) -> dict[str, dict[str, list[Row]]]:
    """Collected reference rows -> run -> stream -> rows in id order."""
    out: dict[str, dict[str, list[Row]]] = {}
    for r in sorted(rows, key=lambda r: (r["run"], r["stream"], r["id"])):
        out.setdefault(r["run"], {}).setdefault(r["stream"], []).append(
            (r["id"], r["time"], r["tmax"], r["values"]))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    base = tmp_path_factory.mktemp("runs")
    config = load_config(DEFAULT_CLUSTER)
    for seed in SEEDS:
        simulate_one(config, seed, base / f"seed-{seed}")
    return [base / f"seed-{seed}" for seed in SEEDS]


@pytest.fixture(scope="module")
def tables(runs: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Tables:
    return ingest(runs, tmp_path_factory.mktemp("out"))


def test_each_runs_reference_is_dpc_checks(spark: SparkSession, runs: list[Path],
                                           tables: Tables) -> None:
    got = by_run(reference(spark, tables).collect())  # small: three short simulated runs
    assert set(got) == {f"seed-{s}" for s in SEEDS}
    for run_dir in runs:
        want = expected(run_dir)
        assert want and all(len(rows) > 10 for rows in want.values())  # not vacuous
        assert got[run_dir.name] == want, run_dir.name
    assert reference_problems(tables) == {}
    # The runs differ (their faults do not touch the sources' values, their seeds' schedules
    # end at different times): a mix-up of runs would show.
    assert len({json.dumps(got[r.name]) for r in runs}) == len(runs)


@pytest.mark.parametrize("max_tasks", [None, 2])
def test_each_run_in_one_task_and_no_task_empty(spark: SparkSession, tables: Tables,
                                                max_tasks: int | None) -> None:
    from pyspark.sql import functions as F

    job = reference_job(spark, tables, max_tasks=max_tasks)
    cap = max_tasks or RUNS_PER_CORE * spark.sparkContext.defaultParallelism
    assert len(SEEDS) > 2 and job.rdd.getNumPartitions() == min(len(SEEDS), cap)
    # Every run's rows come from one partition, and every partition holds a run.
    placed = (job.select("run", F.spark_partition_id().alias("part")).distinct().collect())
    parts = {r["run"]: r["part"] for r in placed}
    assert len(placed) == len(parts) == len(SEEDS)
    assert sorted(set(parts.values())) == list(range(job.rdd.getNumPartitions()))


def break_source(run_dir: Path, source: str = "s1") -> str:
    """Append an incarnation to ``source``'s log holding a tentative tuple (which no source
    logs); return the text ``dpc check`` gives for the missing reference."""
    rd = RunDir(run_dir)
    config = load_config(rd.config)
    last = read_source_log(rd, source)[-1]
    bad = make_tuple(Kind.TENTATIVE, last.id + 1, last.time + 1, last.tmax + 1, last.values)
    path = rd.source_log_of(source, len(rd.source_logs(source)))
    with TupleLogWriter(path, config.sources[source].schema,
                        types=arrow_types(config.sources[source])) as log:
        log.append([bad])
    history = load_history(rd, config)
    with pytest.raises(CheckError) as e:
        reference_outputs(config, history.sources)
    return f"{type(e.value).__name__}: {e.value}"


def test_a_run_without_reference_is_reported_and_the_others_computed(
        spark: SparkSession, runs: list[Path], tmp_path: Path) -> None:
    good, broken = tmp_path / "good", tmp_path / "broken"
    shutil.copytree(runs[0], good)
    shutil.copytree(runs[1], broken)
    why = break_source(broken)
    tables = ingest([good, broken], tmp_path / "out")
    got = by_run(reference(spark, tables).collect())
    assert set(got) == {"good"}
    assert got["good"] == expected(good)
    assert reference_problems(tables) == {"broken": why}
    # The same text as dpc check's evidence for the verdicts that need the reference.
    assert run_check(broken, out=io.StringIO()) == 1
    evidence = [v["evidence"] for v in json.loads(RunDir(broken).check_json.read_text())
                ["verdicts"] if v["property"] == "eventual-consistency"
                and v["subject"].startswith("client")]
    assert evidence and all(e == f"no reference run: {why}" for e in evidence)


def test_stage_2_gives_stage_1s_rows_and_stage_1_takes_what_it_cannot(
        spark: SparkSession, runs: list[Path], tmp_path: Path) -> None:
    """Every run big enough (here: all) goes through the Spark plans; a run whose plan
    finds a runtime problem (a tentative source tuple) falls back to stage 1, which says
    dpc check's words for it; the tables are the same as stage 1 alone would write."""
    broken = tmp_path / "broken"
    shutil.copytree(runs[1], broken)
    why = break_source(broken)
    dirs = [runs[0], runs[2], broken]
    tables = ingest(dirs, tmp_path / "out")
    label = {path.resolve(): run for run, path in tables.runs.items()}
    good, bad = [label[d.resolve()] for d in dirs[:2]], label[broken.resolve()]
    said: list[str] = []
    got = by_run(reference(spark, tables, stage2_min_rows=0, progress=said.append).collect())
    assert set(got) == set(good)
    for run, run_dir in zip(good, dirs[:2], strict=True):
        assert got[run] == expected(run_dir), run
    assert reference_problems(tables) == {bad: why}
    assert f"run {good[0]}: reference by stage 2 (Spark plans)" in said
    assert any(line.startswith(f"run {bad}: reference by stage 1 (runtime error")
               for line in said), said
