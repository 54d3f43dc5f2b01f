"""The run directory: layout, source logs, end records (the clients' and replicas' tuple
logs: test_runlog.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.errors import RunLogError
from node.procs.rundir import (
    RunDir,
    read_source_end,
    read_source_log,
    write_source_end,
)
from protocol.tuples import Kind, make_tuple
from state.tuplelog import TupleLogWriter


def test_run_dir_layout(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "run").ensure()
    for d in ("logs", "status", "sources", "clients", "replicas"):
        assert (tmp_path / "run" / d).is_dir()
    assert rd.config == tmp_path / "run" / "config.toml"
    assert rd.process_log("n1a") == tmp_path / "run" / "logs" / "n1a.log"
    assert rd.source_log("s1") == tmp_path / "run" / "sources" / "s1.arrow"
    assert rd.client_log("c1") == tmp_path / "run" / "clients" / "c1.arrow"
    assert rd.replica_output("n1a", "n1.out") == tmp_path / "run/replicas/n1a/n1.out.arrow"
    assert (rd.replica_output_before("n1a", "n1.out", 2)
            == tmp_path / "run/replicas/n1a/n1.out.incarnation-2.arrow")
    for bad in ("", "../x", "a/b", ".hidden"):
        with pytest.raises(RunLogError, match="cannot be a file name"):
            rd.client_log(bad)
    assert not rd.is_ready("n1a")
    rd.mark_ready("n1a")
    rd.mark_done("c1")
    assert rd.is_ready("n1a") and rd.is_done("c1") and not rd.is_done("n1a")
    assert RunDir(tmp_path / "run").ensure().is_ready("n1a")  # ensure keeps what exists


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
