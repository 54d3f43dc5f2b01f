"""The clients' and replicas' tuple logs (node/procs/runlog.py): a record per write, rows
numbered over the file, a torn tail dropped and cut, corruption named, the boundary scan."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.errors import RunLogError
from node.procs.runlog import (
    ARRIVAL_KEY,
    LogFollower,
    RunLogWriter,
    count_rows,
    head,
    iter_log,
    read_log,
    read_tuples,
    scan,
    tail,
)
from protocol.columns import Columns
from protocol.tuples import Kind, Tuple, boundary, make_tuple, rec_done, undo
from tests.paths import ROOT


def S(i: int, kind: Kind = Kind.STABLE) -> Tuple:
    return make_tuple(kind, i, 1000 * i, 1000 * i - 3, (f"k{i % 3}", i, 0.5 * i, None))


def history() -> list[Tuple]:
    return [S(1), S(2), boundary(2500), S(3, Kind.TENTATIVE), undo(2), S(3), rec_done(3000)]


def write_history(path: Path) -> list[tuple[int, Tuple]]:
    with RunLogWriter(path) as w:
        w.write(history()[:3], 10)
        w.write(history()[3:], 20)
        w.write([], 30)  # nothing: no record
    return [(10, t) for t in history()[:3]] + [(20, t) for t in history()[3:]]


def exact(rows: list[tuple[int, Tuple]]) -> list[tuple[int, Tuple, tuple[type, ...]]]:
    """Rows with their values' Python types: 1 == 1.0 == True would hide a lost type."""
    return [(a, t, tuple(map(type, t.values))) for a, t in rows]


def test_a_log_round_trips_tuples_and_each_record_is_an_arrow_stream(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "c1.arrow"  # parents are created
    expected = write_history(path)
    assert exact(read_log(path)) == exact(expected)
    assert read_tuples(path) == [t for _, t in expected]
    records = list(scan(path))
    assert [(r.number, r.row, r.rows, r.arrival) for r in records] == [(1, 1, 3, 10), (2, 4, 4, 20)]
    assert records[0].offset == 0 and records[1].offset == records[0].end
    assert records[1].end == path.stat().st_size
    # Each record is a standard Arrow IPC stream: pyarrow opens it at its offset.
    with pa.OSFile(str(path)) as f:
        f.seek(records[1].offset)
        reader = pa.ipc.open_stream(f)
        assert reader.schema.metadata == {ARRIVAL_KEY: b"20"}
        assert reader.schema.names[:4] == ["kind", "id", "time", "tmax"]
        assert reader.read_all().column("id").to_pylist() == [3, 2, 3, 0]
    # Reopening appends after what is there.
    with RunLogWriter(path) as w:
        w.write([S(4)], 40)
    assert read_log(path) == [*expected, (40, S(4))]


def test_columns_are_logged_as_given(tmp_path: Path) -> None:
    """A batch that came as columns (the wire's) is logged without becoming tuples; a
    column of mixed types (orjson text) and control tuples' null cells come back exactly."""
    tuples = [make_tuple(Kind.STABLE, 1, 10, 10, (1, "a", 2.5)),
              undo(0),
              make_tuple(Kind.TENTATIVE, 2, 20, 20, ("one", "b", 3)),
              make_tuple(Kind.STABLE, 3, 30, 30, (1.5, None, True)),
              rec_done(40)]
    columns = Columns.from_tuples(tuples)
    assert columns.batch.schema.field("v0").metadata == {b"dpc": b"json"}
    path = tmp_path / "r.arrow"
    with RunLogWriter(path) as w:
        w.write(columns, 7)
        w.write(columns.slice(2, 4), 8)
    assert exact(read_log(path)) == exact([(7, t) for t in tuples] + [(8, t) for t in tuples[2:4]])
    (batch,) = head(path, 5)
    assert batch.columns.batch.equals(columns.batch)  # the layout, as decode_columns checks it


_VALUE = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
                   st.floats(allow_nan=False, allow_infinity=False), st.text())


@st.composite
def _writes(draw: st.DrawFn) -> list[tuple[int, list[Tuple]]]:
    """A few writes of one stream: data tuples of one arity, control tuples between."""
    arity = draw(st.integers(0, 3))
    data = st.builds(make_tuple, st.sampled_from([Kind.STABLE, Kind.TENTATIVE]),
                     st.integers(0, 2**40), st.integers(0, 2**40), st.integers(0, 2**40),
                     st.tuples(*[_VALUE] * arity))
    control = st.one_of(st.integers(0, 2**40).map(undo), st.integers(0, 2**40).map(boundary),
                        st.integers(0, 2**40).map(rec_done))
    return draw(st.lists(st.tuples(st.integers(-(2**62), 2**62),
                                   st.lists(st.one_of(data, control), min_size=1, max_size=6)),
                         max_size=5))


@settings(max_examples=150, deadline=None)
@given(writes=_writes())
def test_any_writes_read_back_exactly_row_by_row(writes: list[tuple[int, list[Tuple]]],
                                                tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("log") / "c.arrow"
    with RunLogWriter(path) as w:
        for arrival, batch in writes:
            w.write(batch, arrival)
    expected = [(a, t) for a, batch in writes for t in batch]
    assert exact(read_log(path)) == exact(expected)
    assert count_rows(path) == len(expected)
    rows = [(b.row + i, a) for b in iter_log(path) for i, (a, _) in enumerate(b.rows())]
    assert rows == [(n, a) for n, (a, _) in enumerate(expected, start=1)]  # row n: element n-1


def test_a_torn_last_record_is_dropped_and_cut_by_the_next_writer(tmp_path: Path) -> None:
    path = tmp_path / "c1.arrow"
    expected = write_history(path)
    whole = path.read_bytes()
    with RunLogWriter(tmp_path / "one.arrow") as w:
        w.write([S(4), S(5)], 40)
    record = (tmp_path / "one.arrow").read_bytes()
    for cut in (1, 4, 9, len(record) // 2, len(record) - 8, len(record) - 1):  # killed mid-write
        path.write_bytes(whole + record[:cut])
        assert read_log(path) == expected, cut
        assert count_rows(path) == len(expected)
        assert [r for b in tail(path, 2) for r in b.rows()] == expected[-2:]
    # A restarted writer cuts the torn record before appending: none is left in the middle.
    with RunLogWriter(path) as w:
        w.write([S(6)], 50)
    assert path.read_bytes().startswith(whole)
    assert read_log(path) == [*expected, (50, S(6))]


def test_a_file_cut_inside_its_first_record_reads_as_empty(tmp_path: Path) -> None:
    path = tmp_path / "c1.arrow"
    write_history(path)
    path.write_bytes(path.read_bytes()[:100])
    assert read_log(path) == [] and count_rows(path) == 0 and tail(path, 3) == []
    with RunLogWriter(path) as w:
        w.write([S(1)], 1)
    assert read_log(path) == [(1, S(1))]


def _second_record_broken(path: Path, how: str) -> None:
    records = list(scan(path))
    data = bytearray(path.read_bytes())
    start = records[1].offset
    if how == "garbage":
        data[start:start + 8] = b"not arrw"
    elif how == "lengths":  # the schema message's length runs past the end of the file
        data[start + 4:start + 8] = (10**6).to_bytes(4, "little")
    elif how == "arrival":
        at = data.index(b"dpc.arrival", start)
        data[at:at + 11] = b"dpc.arrivax"
    elif how == "values":  # a control tuple that carries a value: the layout refuses it
        path.write_bytes(bytes(data[:start]))
        with RunLogWriter(path) as w:
            cells = Columns.from_tuples([S(3), S(4)]).batch
            kinds = pa.array([Kind.STABLE, Kind.UNDO], pa.int8())
            w.write(Columns(cells.set_column(0, cells.schema.field(0), kinds)), 20)
        data = bytearray(path.read_bytes())
    path.write_bytes(bytes(data) + bytes(data[records[0].offset:records[0].end]))


@pytest.mark.parametrize(("how", "why"), [
    ("garbage", "not an Arrow IPC stream"),
    ("lengths", "a complete record follows"),
    ("arrival", "no integer dpc.arrival"),
    ("values", r"row 4 \+ k\): columns: row 1: a UNDO carries values"),
])
def test_a_corrupt_record_is_refused_naming_the_file_and_its_rows(tmp_path: Path, how: str,
                                                                   why: str) -> None:
    path = tmp_path / "c1.arrow"
    write_history(path)
    _second_record_broken(path, how)
    readers = [read_log, lambda p: LogFollower(p).poll()]
    if how != "values":  # (counting and the tail read headers only; values not looked at)
        readers += [count_rows, lambda p: tail(p, 1)]
    for read in readers:
        with pytest.raises(RunLogError, match=why) as err:
            read(path)
        assert str(path) in str(err.value) and "record 2 (" in str(err.value)
        assert "(from row 4" in str(err.value)
    assert [b.row for b in head(path, 3)] == [1]  # what precedes it reads
    if how != "values":
        with pytest.raises(RunLogError, match="record 2"):
            RunLogWriter(path)  # nor is it appended to (a writer reads the headers)


def test_a_missing_log_is_named_and_counts_nothing(tmp_path: Path) -> None:
    with pytest.raises(RunLogError, match=r"gone\.arrow: cannot read"):
        read_log(tmp_path / "gone.arrow")
    assert count_rows(tmp_path / "gone.arrow") == 0
    assert LogFollower(tmp_path / "gone.arrow").poll() == []
    assert not os.path.exists(tmp_path / "gone.arrow")


def test_tuples_the_layout_cannot_carry_are_refused_with_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c1.arrow"
    with RunLogWriter(path) as w:
        with pytest.raises(RunLogError, match=r"c1\.arrow: cannot log these tuples: value 0"):
            w.write([S(1), make_tuple(Kind.STABLE, 2, 0, 0, (object(), 1, 0.5, None))], 0)
        with pytest.raises(RunLogError, match="integer µs"):
            w.write([S(1)], 1.5)  # type: ignore[arg-type]
    assert read_log(path) == []
    w.close()  # idempotent
    with pytest.raises(RunLogError, match="after close"):
        w.write([S(1)], 0)


@pytest.mark.parametrize("n", [0, 1, 2, 7, 300, 1000, 5000])
def test_head_and_tail_are_the_first_and_last_rows(tmp_path: Path, n: int) -> None:
    path = tmp_path / "c1.arrow"
    rows = [(10 * i, S(i)) for i in range(1, 1001)]
    with RunLogWriter(path) as w:
        for k in range(0, 1000, 7):  # records of 7 rows, at their first row's arrival
            w.write([t for _, t in rows[k:k + 7]], rows[k][0])
    arrivals = [rows[k - k % 7][0] for k in range(1000)]
    want = [(arrivals[i], rows[i][1]) for i in range(1000)]
    got_tail = tail(path, n)
    assert [r for b in got_tail for r in b.rows()] == want[1000 - min(n, 1000):]
    assert [b.row for b in got_tail][:1] == ([1000 - min(n, 1000) + 1] if n else [])
    got_head = head(path, n)
    assert [r for b in got_head for r in b.rows()] == want[:n]
    assert [b.row for b in got_head] == list(range(1, min(n, 1000) + 1, 7))
    after = [r for b in iter_log(path, after=n) for r in b.rows()]
    assert after == want[n:]


def test_the_tail_decodes_only_the_records_it_returns(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import node.procs.runlog as runlog

    path = tmp_path / "c1.arrow"
    with RunLogWriter(path) as w:
        for i in range(1, 2001):
            w.write([S(i)], i)
    decoded: list[int] = []
    real = runlog._decode
    monkeypatch.setattr(runlog, "_decode", lambda f, rec, where: decoded.append(rec.number)
                        or real(f, rec, where))
    assert [t.id for b in tail(path, 3) for t in b.tuples()] == [1998, 1999, 2000]
    assert decoded == [1998, 1999, 2000]
    assert count_rows(path) == 2000 and decoded == [1998, 1999, 2000]


def test_a_follower_reads_what_was_added_and_waits_for_a_record_in_progress(
        tmp_path: Path) -> None:
    path = tmp_path / "c1.arrow"
    follower = LogFollower(path)
    assert follower.poll() == []  # no file yet
    w = RunLogWriter(path)
    w.write([S(1), S(2)], 1)
    assert [(b.row, b.rows()) for b in follower.poll()] == [(1, [(1, S(1)), (1, S(2))])]
    w.write([S(3)], 2)
    whole = path.read_bytes()
    w.close()
    with RunLogWriter(tmp_path / "next.arrow") as n:
        n.write([S(4)], 3)
    record = (tmp_path / "next.arrow").read_bytes()
    path.write_bytes(whole + record[:20])  # the writer is mid-write
    assert [(b.row, b.tuples()) for b in follower.poll()] == [(3, [S(3)])]
    assert follower.poll() == [] and follower.rows == 3
    path.write_bytes(whole + record)  # ... and done
    assert follower.skip() == 4 and follower.poll() == []


def test_sigterm_loses_nothing_already_written(tmp_path: Path) -> None:
    """A process killed by SIGTERM right after write() returned keeps every batch."""
    path = tmp_path / "c1.arrow"
    code = textwrap.dedent(f"""
        import signal
        from node.procs.runlog import RunLogWriter
        from protocol.tuples import Kind, make_tuple
        w = RunLogWriter({str(path)!r})
        for b in range(20):
            w.write([make_tuple(Kind.STABLE, 10 * b + i, b, b, (i,)) for i in range(10)], b)
        print("written", flush=True)
        signal.pause()  # until the test's SIGTERM
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"written\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    got = read_log(path)
    assert len(got) == 200
    assert [t.id for _, t in got] == [10 * b + i for b in range(20) for i in range(10)]
