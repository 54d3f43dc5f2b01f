"""``ops_scripts/reconcile/tables.py``: the tables hold, row for row, what the existing
readers (the ones ``dpc check`` uses) read from the same run directories."""

from __future__ import annotations

import json
import shutil
import tempfile
import tracemalloc
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.config.load import load_config
from node.procs.rundir import RunDir, read_source_log
from node.procs.runlog import RunLogWriter, read_log, scan
from ops_scripts.check.history import read_history
from ops_scripts.check.recorded import load_history
from ops_scripts.harness.simulate import DEFAULT_CLUSTER, simulate_one
from ops_scripts.reconcile import tables as tables_module
from ops_scripts.reconcile.tables import (
    ROWS_PER_GROUP,
    IngestError,
    Tables,
    _log_rows,
    _source_rows,
    ingest,
    run_files,
    run_labels,
)
from protocol.tuples import Kind, make_tuple
from state.tuplelog import TupleLogWriter, iter_tuple_log
from tests.runlogs import garble_record

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Seed 2: no restart. Seed 4: two replicas recovered (n1b, n1c: incarnation-1 logs).
# Seed 5: a replica recovered and source s1 restarted (sources/s1.1.arrow).
SEEDS = (2, 4, 5)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("runs")
    config = load_config(DEFAULT_CLUSTER)
    out = {}
    for seed in SEEDS:
        simulate_one(config, seed, base / f"seed{seed}")
        out[f"seed{seed}"] = base / f"seed{seed}"
    return out


@pytest.fixture(scope="module")
def tables(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Tables:
    return ingest(list(runs.values()), tmp_path_factory.mktemp("out"))


def rows(tables: Tables, table: str, **where: Any) -> list[dict[str, Any]]:
    """The table's rows that match ``where`` (test-sized tables only)."""
    t = pq.read_table(tables.path(table))
    out = t.to_pylist()
    return [r for r in out if all(r[k] == v for k, v in where.items())]


def values_text(values: Any) -> str:
    return orjson.dumps(list(values)).decode()


def tuple_rows(tuples: Any) -> list[tuple[Any, ...]]:
    return [(n, t.kind.name, t.id, t.time, t.tmax, values_text(t.values))
            for n, t in enumerate(tuples, start=1)]


def table_rows(got: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((r["line"], r["kind"], r["id"], r["time"], r["tmax"], r["values"]) for r in got)


def copy_run(runs: dict[str, Path], tmp_path: Path, seed: int = 2) -> Path:
    return Path(shutil.copytree(runs[f"seed{seed}"], tmp_path / f"copy{seed}"))


def test_the_seeds_have_what_the_tests_need(runs: dict[str, Path]) -> None:
    """The seeds were picked for their restarts; a change of the simulation may lose them."""
    assert list(runs["seed4"].glob("replicas/*/*.incarnation-1.arrow"))
    assert list(runs["seed5"].glob("replicas/*/*.incarnation-1.arrow"))
    assert (runs["seed5"] / "sources" / "s1.1.arrow").exists()


def test_runs_table(runs: dict[str, Path], tables: Tables) -> None:
    assert dict(tables.runs) == {label: p.resolve() for label, p in runs.items()}
    got = {r["run"]: r for r in rows(tables, "runs")}
    assert set(got) == set(runs)
    for label, p in runs.items():
        assert got[label]["path"] == str(p.resolve())
        assert got[label]["config"] == (p / "config.toml").read_text()


def test_sources_equal_read_source_log(runs: dict[str, Path], tables: Tables) -> None:
    for label, p in runs.items():
        rd = RunDir(p)
        for s in load_config(rd.config).sources:
            got = rows(tables, "sources", run=label, stream=s)
            assert table_rows(got) == tuple_rows(read_source_log(rd, s)), (label, s)
            # Each row's incarnation: which file of RunDir.source_logs holds it.
            sizes = [sum(len(b) for b in iter_tuple_log(f)) for f in rd.source_logs(s)]
            expected = [k for k, n in enumerate(sizes) for _ in range(n)]
            assert [r["incarnation"] for r in sorted(got, key=lambda r: r["line"])] == expected
    assert {r["incarnation"] for r in rows(tables, "sources", run="seed5", stream="s1")} == {0, 1}


def test_run_files_lists_each_runs_own_files_and_rows(runs: dict[str, Path],
                                                     tables: Tables) -> None:
    """What stage 1 reads and the stage-2 threshold counts, from the footers alone."""
    for table in ("sources", "logs"):
        files = run_files(tables, table)
        assert set(files) == set(runs), table
        for label, got in files.items():
            assert got and all(p.parent == tables.path(table) for p, _ in got)
            for path, n in got:  # each file holds that run's rows only, n of them
                assert pq.read_table(path, columns=["run"]).column(0).to_pylist() == [label] * n
            assert sum(n for _, n in got) == len(rows(tables, table, run=label)), (table, label)
    assert {p for fs in run_files(tables, "sources").values() for p, _ in fs} == \
        {p for p in tables.path("sources").glob("*.parquet") if pq.read_metadata(p).num_rows}


def test_logs_equal_what_dpc_check_reads(runs: dict[str, Path], tables: Tables) -> None:
    for label, p in runs.items():
        rd = RunDir(p)
        config = load_config(rd.config)
        h = load_history(rd, config)
        assert not h.problems, h.problems
        got = rows(tables, "logs", run=label)
        keys = {(r["process"], r["role"], r["stream"], r["incarnation"]) for r in got}
        expected_keys = {(c.name, "client", c.stream, 0) for c in config.clients.values()}
        for c in config.clients.values():
            mine = [r for r in got if r["process"] == c.name]
            assert table_rows(mine) == tuple_rows(h.clients[c.name])
            assert [r["arrival"] for r in sorted(mine, key=lambda r: r["line"])] == \
                [a for a, _ in read_log(rd.client_log(c.name))] == h.arrivals[c.name]
            assert {r["after"] for r in mine} == {None}
        for (replica, stream), current in h.replicas.items():
            earlier = h.earlier.get((replica, stream), [])
            logs = [*earlier, current]
            afters: list[int | None] = [None]
            if (replica, stream) in h.restored_after:
                afters = [*h.earlier_after[(replica, stream)], h.restored_after[(replica, stream)]]
            for k, (log, after) in enumerate(zip(logs, afters, strict=True), start=1):
                mine = [r for r in got if r["process"] == replica and r["stream"] == stream
                        and r["incarnation"] == k]
                assert table_rows(mine) == tuple_rows(log), (label, replica, stream, k)
                assert {r["after"] for r in mine} <= {after}
                expected_keys.add((replica, "replica", stream, k))
        assert keys == expected_keys, label
    # The recovered replicas of seed 4 and 5 show up with their earlier incarnations.
    assert any(r["incarnation"] == 2 for r in rows(tables, "logs", run="seed4"))
    assert any(r["incarnation"] == 2 and r["after"] for r in rows(tables, "logs", run="seed5"))


def test_history_equals_read_history(runs: dict[str, Path], tables: Tables) -> None:
    for label, p in runs.items():
        path = RunDir(p).history
        got = sorted(rows(tables, "history", run=label), key=lambda r: r["line"])
        assert [json.loads(r["body"]) for r in got] == read_history(path)
        assert [(r["t"], r["event"]) for r in got] == [(e["t"], e["event"])
                                                       for e in read_history(path)]
        lines = path.read_text().split("\n")
        assert all(json.loads(lines[r["line"] - 1]) == json.loads(r["body"]) for r in got)


def test_spark_reads_the_tables(spark: SparkSession, tables: Tables) -> None:
    from pyspark.sql import functions as F

    names = ("runs", "sources", "logs", "history")
    frames = [spark.read.parquet(str(tables.path(t))).select(F.lit(t).alias("table"), "run")
              for t in names]
    union = frames[0].unionByName(frames[1]).unionByName(frames[2]).unionByName(frames[3])
    counts = {(r["table"], r["run"]): r["count"]
              for r in union.groupBy("table", "run").count().collect()}
    expected: dict[tuple[str, str], int] = {}
    for t in names:
        for r in rows(tables, t):
            expected[(t, r["run"])] = expected.get((t, r["run"]), 0) + 1
    assert counts == expected
    logs = spark.read.parquet(str(tables.path("logs")))
    assert dict(logs.dtypes)["incarnation"] == "int"


def test_progress_and_replace(runs: dict[str, Path], tmp_path: Path) -> None:
    lines: list[str] = []
    ingest([runs["seed2"], runs["seed4"]], tmp_path, progress=lines.append)
    n = pq.read_table(tmp_path / "tables" / "sources").num_rows + \
        pq.read_table(tmp_path / "tables" / "logs").num_rows
    assert len(lines) == 2 and lines[0].startswith("run seed2: 2 sources, 6 logs, ")
    # (9: a third restarted incarnation, of issue 46's subset failure drawn last)
    assert lines[1].startswith("run seed4: 2 sources, 9 logs, ")
    total = sum(int(line.split(", ")[-1].split()[0].replace(",", "")) for line in lines)
    assert total == n + 2 + pq.read_table(tmp_path / "tables" / "history").num_rows
    again = ingest([runs["seed5"]], tmp_path)  # replaces, does not add
    assert list(again.runs) == ["seed5"]
    assert {r["run"] for r in pq.read_table(again.path("logs")).to_pylist()} == {"seed5"}
    assert not (tmp_path / "tables.partial").exists()


def _contents(tables: Tables) -> dict[str, list[dict[str, Any]]]:
    return {t: sorted(pq.read_table(tables.path(t)).to_pylist(), key=repr) for t in
            tables_module.SCHEMAS}


def test_a_pool_of_processes_writes_what_one_process_writes(runs: dict[str, Path],
                                                            tables: Tables,
                                                            tmp_path: Path) -> None:
    """``jobs=2`` (what large inputs get): the same rows in every table, each file still
    one log of one run (run_files), the progress lines in the order the runs were given."""
    lines: list[str] = []
    pooled = ingest(list(runs.values()), tmp_path, progress=lines.append, jobs=2)
    assert _contents(pooled) == _contents(tables)
    assert {r: len(f) for r, f in run_files(pooled, "sources").items()} == \
        {r: len(f) for r, f in run_files(tables, "sources").items()}
    assert [line.split(":")[0] for line in lines] == [f"run {r}" for r in runs]


def test_a_bad_log_in_a_pool_is_the_same_error_and_leaves_nothing(runs: dict[str, Path],
                                                                  tmp_path: Path) -> None:
    run = copy_run(runs, tmp_path)
    log = RunDir(run).client_log("c1")
    garble_record(log, 2)
    with pytest.raises(IngestError, match=rf"{log}, record 2 \(from row \d+\): not an Arrow"):
        ingest([runs["seed2"], run], tmp_path / "out", jobs=2)
    assert not (tmp_path / "out" / "tables").exists()
    assert not (tmp_path / "out" / "tables.partial").exists()


def test_torn_last_record_is_dropped(runs: dict[str, Path], tmp_path: Path) -> None:
    run = copy_run(runs, tmp_path)
    log = RunDir(run).client_log("c1")
    before = read_log(log)
    first = next(scan(log))
    with open(log, "ab") as f:  # a writer killed halfway through a record
        f.write(log.read_bytes()[first.offset : (first.offset + first.end) // 2])
    assert read_log(log) == before
    t = ingest([run], tmp_path / "out")
    got = rows(t, "logs", process="c1")
    assert table_rows(got) == tuple_rows([tu for _, tu in before])


def test_corrupt_middle_record_names_file_and_rows(runs: dict[str, Path],
                                                   tmp_path: Path) -> None:
    run = copy_run(runs, tmp_path)
    out = tmp_path / "out"
    ingest([run], out)
    log = RunDir(run).replica_output("n1b", "n1.out")
    garble_record(log, 3)
    with pytest.raises(IngestError, match=rf"{log}, record 3 \(from row \d+\): not an Arrow"):
        ingest([run], out)
    # The previous tables are left as they were, and nothing half-written.
    assert pq.read_table(out / "tables" / "runs").num_rows == 1
    assert not (out / "tables.partial").exists()


def test_a_bad_history_line_names_file_and_line(runs: dict[str, Path], tmp_path: Path) -> None:
    run = copy_run(runs, tmp_path)
    history = RunDir(run).history
    lines = history.read_text().splitlines()
    lines[1] = "not json"
    history.write_text("\n".join(lines) + "\n")
    with pytest.raises(IngestError, match=rf"{history}:2: not JSON"):
        ingest([run], tmp_path / "out")


def test_bad_run_directories(runs: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=rf"{tmp_path / 'nope'} is not a run directory"):
        ingest([runs["seed2"], tmp_path / "nope"], tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(IngestError, match=rf"{tmp_path / 'empty'} .*no config.toml"):
        ingest([tmp_path / "empty"], tmp_path / "out")
    run = copy_run(runs, tmp_path)
    RunDir(run).client_log("c1").unlink()
    with pytest.raises(IngestError, match=r"c1\.arrow: cannot read"):
        ingest([run], tmp_path / "out")
    assert not (tmp_path / "out" / "tables").exists()


def test_labels(tmp_path: Path) -> None:
    def run(rel: str) -> Path:
        p = tmp_path / rel
        p.mkdir(parents=True)
        (p / "config.toml").write_text("")
        return p

    a, b, c = run("x/r1"), run("y/r1"), run("y/r2")
    assert run_labels([a, b, c]) == {"x/r1": a, "y/r1": b, "y/r2": c}
    assert run_labels([b, c]) == {"r1": b, "r2": c}
    assert run_labels([c]) == {"r2": c}
    nested = run("y/r2/inner")
    assert run_labels([c, nested]) == {"r2": c, "r2/inner": nested}
    with pytest.raises(IngestError, match=rf"{b} and {tmp_path}/y/\.\./y/r1 .*'r1'"):
        run_labels([b, tmp_path / "y" / ".." / "y" / "r1"])


def test_a_long_log_is_written_in_row_groups(runs: dict[str, Path], tmp_path: Path) -> None:
    run = copy_run(runs, tmp_path)
    log = RunDir(run).client_log("c1")
    log.unlink()
    n = 200_000
    with RunLogWriter(log) as w:
        for start in range(0, n, 10_000):
            w.write([make_tuple(Kind.STABLE, i, i, i, (i % 7, i * 0.5, "k", True))
                     for i in range(start + 1, start + 10_001)], arrival=start)
    t = ingest([run], tmp_path / "out")
    files = [pq.ParquetFile(f) for f in t.path("logs").iterdir()]
    (big,) = [f for f in files if f.metadata.num_rows == n]
    groups = [big.metadata.row_group(g).num_rows for g in range(big.metadata.num_row_groups)]
    assert groups == [ROWS_PER_GROUP] * 3 + [n - 3 * ROWS_PER_GROUP]
    last = big.read_row_group(big.metadata.num_row_groups - 1).to_pylist()[-1]
    assert (last["line"], last["id"], last["values"]) == (n, n, f'[{n % 7},{n * 0.5},"k",true]')


def test_memory_does_not_grow_with_the_log(runs: dict[str, Path], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """What ingest allocates at its peak (Python objects: the rows it holds) hardly moves
    for a log 50,000 rows longer: it holds a row group of 1,000 rows and one record (a
    write's, here 500 rows), never the log (which would be over 10 MB of row tuples here)."""
    monkeypatch.setattr(tables_module, "ROWS_PER_GROUP", 1000)
    peaks = []
    for n in (100, 10_000, 60_000):  # the first: a warm-up (lazy imports, caches)
        run = copy_run(runs, tmp_path / str(n))
        log = RunDir(run).client_log("c1")
        log.unlink()
        with RunLogWriter(log) as w:
            for start in range(0, n, 500):
                w.write([make_tuple(Kind.STABLE, i, i, i, (i, "x" * 40))
                         for i in range(start, min(n, start + 500))], start)
        tracemalloc.start()
        try:
            ingest([run], tmp_path / f"out{n}")
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    assert peaks[2] - peaks[1] < 3_000_000, peaks


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=20))
def test_a_source_log_and_a_tuple_log_give_a_float_one_text(xs: list[float]) -> None:
    """(Finite floats: a tuple log, as the wire, carries no NaN or infinity.)"""
    tuples = [make_tuple(Kind.STABLE, i, i, i, (x,)) for i, x in enumerate(xs, start=1)]
    with tempfile.TemporaryDirectory() as d:
        rd = RunDir(d).ensure()
        with TupleLogWriter(rd.source_log("s"), ["x"], types=[pa.float64()]) as w:
            w.append(tuples)
        with RunLogWriter(Path(d) / "x.arrow") as j:
            j.write(tuples, arrival=0)
        arrow = [row[-1] for row in _source_rows(rd, "s")]
        text = [row[-1] for row in _log_rows(Path(d) / "x.arrow")]
    assert arrow == text == [values_text(t.values) for t in tuples]
