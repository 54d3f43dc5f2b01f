"""The run directory: layout, JSONL tuple logs (round trip, torn tail, corruption, a killed
writer), the client Parquet copy, source logs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.errors import RunLogError
from node.procs.rundir import (
    JsonlTupleWriter,
    RunDir,
    _encode,
    _encode_lines,
    read_client_parquet,
    read_jsonl_tuples,
    read_source_end,
    read_source_log,
    tail_jsonl_tuples,
    write_client_parquet,
    write_source_end,
)
from protocol.tuples import Kind, Tuple, boundary, make_tuple, rec_done, undo
from state.tuplelog import TupleLogWriter
from tests.paths import ROOT


def S(i: int, kind: Kind = Kind.STABLE) -> Tuple:
    return make_tuple(kind, i, 1000 * i, 1000 * i - 3, (f"k{i % 3}", i, 0.5 * i, None))


def history() -> list[Tuple]:
    return [S(1), S(2), boundary(2500), S(3, Kind.TENTATIVE), undo(2), S(3), rec_done(3000)]


def write_history(path: Path) -> list[tuple[int, Tuple]]:
    with JsonlTupleWriter(path) as w:
        w.write(history()[:3], 10)
        w.write(history()[3:], 20)
        w.write([], 30)  # nothing: no line
    return [(10, t) for t in history()[:3]] + [(20, t) for t in history()[3:]]


def test_run_dir_layout(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "run").ensure()
    for d in ("logs", "status", "sources", "clients", "replicas"):
        assert (tmp_path / "run" / d).is_dir()
    assert rd.config == tmp_path / "run" / "config.toml"
    assert rd.process_log("n1a") == tmp_path / "run" / "logs" / "n1a.log"
    assert rd.source_log("s1") == tmp_path / "run" / "sources" / "s1.arrow"
    assert rd.client_log("c1") == tmp_path / "run" / "clients" / "c1.jsonl"
    assert rd.client_parquet("c1") == tmp_path / "run" / "clients" / "c1.parquet"
    assert rd.replica_output("n1a", "n1.out") == tmp_path / "run/replicas/n1a/n1.out.jsonl"
    for bad in ("", "../x", "a/b", ".hidden"):
        with pytest.raises(RunLogError, match="cannot be a file name"):
            rd.client_log(bad)
    assert not rd.is_ready("n1a")
    rd.mark_ready("n1a")
    rd.mark_done("c1")
    assert rd.is_ready("n1a") and rd.is_done("c1") and not rd.is_done("n1a")
    assert RunDir(tmp_path / "run").ensure().is_ready("n1a")  # ensure keeps what exists


def test_jsonl_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "c1.jsonl"  # parents are created
    expected = write_history(path)
    got = read_jsonl_tuples(path)
    assert got == expected
    assert all(type(t.kind) is Kind and type(t.values) is tuple for _, t in got)
    assert RunDir.count_lines(path) == len(expected)
    assert RunDir.count_lines(tmp_path / "nope.jsonl") == 0
    first = orjson.loads(path.read_bytes().split(b"\n")[0])
    assert first == {
        "kind": "STABLE",
        "id": 1,
        "time": 1000,
        "tmax": 997,
        "values": ["k1", 1, 0.5, None],
        "arrival": 10,
    }
    # Reopening appends.
    with JsonlTupleWriter(path) as w:
        w.write([S(4)], 40)
    assert read_jsonl_tuples(path) == [*expected, (40, S(4))]


@pytest.mark.parametrize("n", [0, 1, 7, 300, 5000])
def test_the_tail_of_a_log_is_its_last_rows_and_leaves_a_torn_line_out(tmp_path: Path,
                                                                       n: int) -> None:
    path = tmp_path / "c1.jsonl"
    rows = [(10 * i, make_tuple(Kind.STABLE, i, 1000 + i, 997 + i, (f"k{i}", i, 0.5, None)))
            for i in range(1, 1001)]
    with JsonlTupleWriter(path) as w:
        for arrival, t in rows:
            w.write([t], arrival)
    assert tail_jsonl_tuples(path, n) == rows[len(rows) - min(n, len(rows)):]
    with path.open("ab") as f:
        f.write(b'{"kind": "STAB')  # a writer killed mid-line
    assert tail_jsonl_tuples(path, n) == rows[len(rows) - min(n, len(rows)):]


def test_truncated_last_line_is_dropped_and_cut_by_the_next_writer(tmp_path: Path) -> None:
    path = tmp_path / "c1.jsonl"
    expected = write_history(path)
    whole = path.read_bytes()
    with open(path, "ab") as f:
        f.write(b'{"kind": "STABLE", "id": 4, "time": 40')  # killed mid-line
    assert read_jsonl_tuples(path) == expected
    # A restarted writer cuts the torn line before appending: no corrupt line in the middle.
    with JsonlTupleWriter(path) as w:
        w.write([S(4)], 50)
    assert path.read_bytes().startswith(whole)
    assert read_jsonl_tuples(path) == [*expected, (50, S(4))]


def test_torn_line_without_any_newline(tmp_path: Path) -> None:
    path = tmp_path / "c1.jsonl"
    path.write_bytes(b'{"kind": "STA')
    assert read_jsonl_tuples(path) == []
    with JsonlTupleWriter(path) as w:
        w.write([S(1)], 1)
    assert read_jsonl_tuples(path) == [(1, S(1))]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"{not json", "corrupt line"),
        (b"", "corrupt line"),
        (b'{"kind": "BOGUS", "id": 1, "time": 0, "tmax": 0, "values": [], "arrival": 0}', "kind"),
        (
            b'{"kind": "STABLE", "id": "1", "time": 0, "tmax": 0, "values": [], "arrival": 0}',
            "'id'",
        ),
        (b'{"kind": "STABLE", "id": 1, "time": 0, "tmax": 0, "arrival": 0}', "values"),
        (b"[1, 2]", "JSON object"),
    ],
)
def test_corrupt_middle_line_names_file_and_line(tmp_path: Path, line: bytes, why: str) -> None:
    path = tmp_path / "c1.jsonl"
    write_history(path)
    lines = path.read_bytes().split(b"\n")
    lines[2] = line
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(RunLogError, match=why) as err:
        read_jsonl_tuples(path)
    assert str(path) in str(err.value) and "line 3" in str(err.value)


_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    # Strings that look like the seam between two lines, as the batch encoder splits on it.
    st.sampled_from(['},{"kind":"', '}\n{"kind":"STABLE"', '{"kind":"x"}', "\\", '"']),
    st.text(),
)


@settings(max_examples=200, deadline=None)
@given(batch=st.lists(
    st.builds(make_tuple, st.sampled_from(list(Kind)), st.integers(0, 2**40), st.integers(0, 2**40),
              st.integers(0, 2**40), st.lists(_VALUE, max_size=4).map(tuple)),
    max_size=8,
))
def test_a_batch_is_written_as_one_line_per_tuple_exactly(batch: list[Tuple]) -> None:
    """The writer encodes a whole batch in one orjson call and splits it into lines: the
    bytes are exactly one ``orjson.dumps`` per tuple, whatever the strings hold."""
    expected = b"".join(orjson.dumps(_encode(t, 7)) + b"\n" for t in batch)
    assert _encode_lines(batch, 7) == expected


def test_unencodable_value_is_refused_with_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c1.jsonl"
    with JsonlTupleWriter(path) as w, pytest.raises(RunLogError, match=r"c1\.jsonl: cannot encode tuple .*id=1, time=0, tmax=0, values=\(<object"):
        w.write([S(1), make_tuple(Kind.STABLE, 1, 0, 0, (object(),))], 0)
    assert read_jsonl_tuples(path) == []
    w.close()  # idempotent
    with pytest.raises(RunLogError, match="after close"):
        w.write([S(1)], 0)


def test_sigterm_loses_nothing_already_written(tmp_path: Path) -> None:
    """A process killed by SIGTERM right after write() returned keeps every batch."""
    path = tmp_path / "c1.jsonl"
    code = textwrap.dedent(f"""
        import sys, time
        from node.procs.rundir import JsonlTupleWriter
        from protocol.tuples import Kind, make_tuple
        w = JsonlTupleWriter({str(path)!r})
        for b in range(20):
            w.write([make_tuple(Kind.STABLE, 10 * b + i, b, b, (i,)) for i in range(10)], b)
        print("written", flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"written\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    got = read_jsonl_tuples(path)
    assert len(got) == 200
    assert [t.id for _, t in got] == [10 * b + i for b in range(20) for i in range(10)]


def test_client_parquet_written_from_jsonl(tmp_path: Path) -> None:
    rd = RunDir(tmp_path).ensure()
    expected = write_history(rd.client_log("c1"))
    assert write_client_parquet(rd.client_log("c1"), rd.client_parquet("c1")) == len(expected)
    table = pq.read_table(rd.client_parquet("c1"))
    assert table.column_names == ["kind", "id", "time", "tmax", "values", "arrival"]
    assert table.schema.field("kind").type == pa.string()
    assert table.schema.field("values").type == pa.string()
    assert table.schema.field("arrival").type == pa.int64()
    assert table.column("kind").to_pylist()[:5] == [
        "STABLE",
        "STABLE",
        "BOUNDARY",
        "TENTATIVE",
        "UNDO",
    ]
    assert orjson.loads(table.column("values")[0].as_py()) == ["k1", 1, 0.5, None]
    assert read_client_parquet(rd.client_parquet("c1")) == expected
    assert not list(rd.clients.glob("*.tmp"))


def test_a_long_client_log_is_converted_a_batch_at_a_time(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The conversion streams (one row group per batch read, the log never held whole) and
    gives what one batch would; a corrupt line names itself and leaves no file behind."""
    import node.procs.rundir as rundir

    rows = [(i, S(i)) for i in range(1, 1001)]
    with JsonlTupleWriter(tmp_path / "c.jsonl") as w:
        for arrival, t in rows:
            w.write([t], arrival)
    real = rundir.iter_jsonl_tuples
    monkeypatch.setattr(rundir, "iter_jsonl_tuples", lambda p: real(p, batch=64))
    assert write_client_parquet(tmp_path / "c.jsonl", tmp_path / "c.parquet") == 1000
    assert pq.ParquetFile(tmp_path / "c.parquet").num_row_groups == 16
    assert read_client_parquet(tmp_path / "c.parquet") == rows
    with (tmp_path / "c.jsonl").open("ab") as f:
        f.write(b"not json\n")
    with pytest.raises(RunLogError, match=r"c\.jsonl, line 1001: corrupt line"):
        write_client_parquet(tmp_path / "c.jsonl", tmp_path / "d.parquet")
    assert not (tmp_path / "d.parquet").exists() and not list(tmp_path.glob("*.tmp"))


def test_empty_client_parquet(tmp_path: Path) -> None:
    (tmp_path / "c.jsonl").write_bytes(b"")
    assert write_client_parquet(tmp_path / "c.jsonl", tmp_path / "c.parquet") == 0
    assert pq.read_table(tmp_path / "c.parquet").num_rows == 0


def test_source_log_round_trip_and_missing(tmp_path: Path) -> None:
    rd = RunDir(tmp_path).ensure()
    data = [make_tuple(Kind.STABLE, i, 100 * i, 100 * i, (i % 4, 2 * i)) for i in range(1, 50)]
    writer = TupleLogWriter(rd.source_log("s1"), ("key", "value"), flush_every=10**9)
    writer.append(data[:20])
    writer.flush()  # before sending: what a killed source leaves behind
    assert read_source_log(rd, "s1") == data[:20]
    writer.append(data[20:])
    writer.close()
    assert read_source_log(tmp_path, "s1") == data
    with pytest.raises(RunLogError, match=r"s2\.arrow.*missing"):
        read_source_log(rd, "s2")


def test_reading_a_missing_jsonl_names_it(tmp_path: Path) -> None:
    with pytest.raises(RunLogError, match=r"gone\.jsonl"):
        read_jsonl_tuples(tmp_path / "gone.jsonl")
    assert not os.path.exists(tmp_path / "gone.jsonl")


def test_a_source_log_is_every_incarnation_in_order(tmp_path: Path) -> None:
    """Contract point 2: one file per incarnation, read back as one log."""
    rd = RunDir(tmp_path).ensure()
    data = [make_tuple(Kind.STABLE, i, 100 * i, 100 * i, (i,)) for i in range(1, 31)]
    assert rd.source_logs("s1") == []
    for k, part in enumerate((data[:10], data[10:25], [], data[25:])):
        with TupleLogWriter(rd.source_log_of("s1", k), ("v",)) as w:
            w.append(part)
    assert rd.source_log_of("s1", 0) == rd.source_log("s1") == rd.sources / "s1.arrow"
    assert [p.name for p in rd.source_logs("s1")] == ["s1.arrow", "s1.1.arrow", "s1.2.arrow",
                                                      "s1.3.arrow"]
    assert read_source_log(rd, "s1") == data
    rd.source_log_of("s1", 1).write_bytes(rd.source_log_of("s1", 1).read_bytes()[:-30])  # killed
    assert [t.id for t in read_source_log(rd, "s1")] == [*range(1, 11), *range(26, 31)]


def test_the_end_record_round_trips_and_refuses_garbage(tmp_path: Path) -> None:
    rd = RunDir(tmp_path).ensure()
    assert read_source_end(rd, "s1") is None  # never ended
    write_source_end(rd, "s1", t=123, reason="limit", last_id=7)
    assert read_source_end(tmp_path, "s1") == {"t": 123, "reason": "limit", "last_id": 7}
    assert rd.source_end("s1") == rd.sources / "s1.end.json"
    assert not list(rd.sources.glob("*.tmp"))
    with pytest.raises(RunLogError, match="end reason 'bored'"):
        write_source_end(rd, "s1", t=1, reason="bored", last_id=1)
    rd.source_end("s1").write_text('{"t": 1, "reason": "file"}')
    with pytest.raises(RunLogError, match=r"s1\.end\.json: expected"):
        read_source_end(rd, "s1")
    rd.source_end("s1").write_text("{")
    with pytest.raises(RunLogError, match="unreadable"):
        read_source_end(rd, "s1")
