"""Tuple logs: the IPC stream log's round trips, refusals and crash tolerance."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from protocol.tuples import Kind, Tuple, boundary, make_tuple, rec_done, undo
from state import StateError
from state.tuplelog import TupleLogWriter, iter_tuple_log, read_tuple_log

SCHEMA = ("sym", "price", "qty")


def tick(i: int, kind: Kind = Kind.STABLE) -> Tuple:
    return make_tuple(kind, i, 1000 * i, 1000 * i - 7, (f"s{i % 3}", 1.5 * i, i))


def history() -> list[Tuple]:
    return [
        boundary(0),
        tick(1),
        tick(2),
        boundary(2500),
        tick(3, Kind.TENTATIVE),
        undo(2),
        tick(3),
        make_tuple(Kind.STABLE, 4, 4000, 4000, (None, None, None)),
        rec_done(4000),
    ]


def test_ipc_log_round_trips_every_kind_and_types_its_columns(tmp_path: Path) -> None:
    path = tmp_path / "log.arrows"
    with TupleLogWriter(path, SCHEMA) as w:
        w.append(history())
    schema, tuples = read_tuple_log(path, strict=True)
    assert schema == SCHEMA
    assert tuples == history()
    assert all(type(t.kind) is Kind for t in tuples)
    arrow = pa.ipc.open_stream(path.read_bytes()).schema
    assert arrow.names == ["kind", "id", "time", "tmax", *SCHEMA]
    assert [arrow.field(c).type for c in ("kind", "id", "time", "tmax")] == [
        pa.int8(),
        pa.int64(),
        pa.int64(),
        pa.int64(),
    ]
    assert arrow.field("sym").type == pa.string() and arrow.field("qty").type == pa.int64()


def test_ipc_log_bad_input_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StateError, match="clash: \\['id'\\]"):
        TupleLogWriter(tmp_path / "a", ("id", "v"))
    w = TupleLogWriter(tmp_path / "b", SCHEMA)
    w.append([make_tuple(Kind.STABLE, 1, 0, 0, (1, 2))])
    with pytest.raises(StateError, match="tuple id 1 has 2 values; the stream"):
        w.close()  # its flush refuses the tuple; the file is closed all the same
    mixed = [make_tuple(Kind.STABLE, i, 0, 0, (v,)) for i, v in enumerate([1, "x"], 1)]
    w = TupleLogWriter(tmp_path / "c", ("v",))
    w.append(mixed)
    with pytest.raises(StateError, match="cannot store column 'v'"):
        w.close()


def test_ipc_log_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "log.arrows"
    tuples = [tick(i) for i in range(1, 36)] + [boundary(99_000), rec_done()]
    with TupleLogWriter(path, SCHEMA, flush_every=10) as w:
        for k in range(0, len(tuples), 4):
            w.append(tuples[k : k + 4])
        # Flushed at 12, 24, 36 queued tuples: what a crash now would not lose.
        assert read_tuple_log(path)[1] == tuples[:36]
    assert read_tuple_log(path, strict=True) == (SCHEMA, tuples)


def test_ipc_log_without_tuples_keeps_the_schema(tmp_path: Path) -> None:
    path = tmp_path / "empty.arrows"
    TupleLogWriter(path, SCHEMA).close()
    assert read_tuple_log(path, strict=True) == (SCHEMA, [])


def test_ipc_log_survives_a_crash_at_any_byte(tmp_path: Path) -> None:
    path = tmp_path / "log.arrows"
    tuples = [tick(i) for i in range(1, 31)]
    w = TupleLogWriter(path, SCHEMA, flush_every=10, fsync=True)
    ends = []  # file size after each complete batch
    for k in range(0, 30, 10):
        w.append(tuples[k : k + 10])
        ends.append(os.path.getsize(path))
    w.append([tick(31)])  # queued, never flushed: the crash loses it
    # No close(): the process "crashed". Everything flushed is readable.
    assert read_tuple_log(path) == (SCHEMA, tuples)
    with pytest.raises(StateError, match="did not close it"):
        read_tuple_log(path, strict=True)
    data = path.read_bytes()
    cuts = sorted({0, 1, 7, ends[0] - 1, ends[0], ends[0] + 9, ends[1] - 3, ends[1], ends[2] - 1})
    for cut in cuts:
        path.write_bytes(data[:cut])
        complete = sum(1 for e in ends if e <= cut)
        schema, got = read_tuple_log(path)
        assert got == tuples[: 10 * complete], f"cut at byte {cut}"
        # Cut inside the first batch: the schema message may or may not be complete.
        assert schema == SCHEMA or (not complete and schema == ())
        # Streaming, batch by batch: the same complete batches.
        assert list(iter_tuple_log(path)) == [tuples[k : k + 10] for k in range(0, 10 * complete, 10)]
        if cut not in ends:
            with pytest.raises(StateError):
                read_tuple_log(path, strict=True)
    w._file.close()


def test_ipc_log_refuses_bytes_that_are_not_a_log(tmp_path: Path) -> None:
    path = tmp_path / "junk.arrows"
    path.write_bytes(b"hello, this is not Arrow")
    with pytest.raises(StateError, match="not an Arrow IPC stream"):
        read_tuple_log(path)
    with pytest.raises(StateError, match="not an Arrow IPC stream"):
        list(iter_tuple_log(path))


def test_ipc_log_column_types_are_fixed_by_the_first_batch(tmp_path: Path) -> None:
    first = [make_tuple(Kind.STABLE, 1, 0, 0, (None,))]
    later = [make_tuple(Kind.STABLE, 2, 0, 0, (5,))]
    w = TupleLogWriter(tmp_path / "a.arrows", ("v",), flush_every=1)
    w.append(first)
    with pytest.raises(
        StateError, match="cannot store column 'v' \\(the log's type for it is null\\)"
    ):
        w.append(later)
    with pytest.raises(StateError):  # the refused tuple stays queued: nothing dropped silently
        w.close()
    assert read_tuple_log(tmp_path / "a.arrows")[1] == first
    with TupleLogWriter(tmp_path / "b.arrows", ("v",), flush_every=1, types=[pa.int64()]) as w2:
        w2.append(first)
        w2.append(later)
    assert read_tuple_log(tmp_path / "b.arrows")[1] == first + later
