"""A restarted source holds only what a consumer may still ask for (issue 13, found by a
30-minute soak: a source restarted after 28 min loaded its whole log, 842,614 tuples).

The pure parts (the trim record of node/procs/rundir.py, the streaming log read,
``resume_from`` of node/procs/source.py), then a source on virtual time with a consumer that
acknowledges, killed and restarted.
"""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path

import orjson
import pyarrow as pa
import pytest

from node.config.model import ClusterConfig
from node.errors import NodeError, RunLogError
from node.net.memory import MemoryTransport
from node.procs.rundir import (
    RunDir,
    SourceTrim,
    iter_source_log,
    read_source_log,
    read_source_trim,
    write_source_trim,
)
from node.procs.source import TRIM_EVERY, Source, _GaplessIds, resume_from
from protocol.tuples import Kind, Tuple, make_tuple
from state.tuplelog import TupleLogWriter, iter_log_batches
from tests.node.procs.test_source import cluster as source_cluster
from tests.node.procs.test_source import kill, received, run_virtual, start


def S(i: int) -> Tuple:
    return make_tuple(Kind.STABLE, i, 100 * i, 100 * i, (i,))


# ------------------------------------------------------------------ the trim record
def test_the_trim_record_round_trips_atomically(tmp_path: Path) -> None:
    rd = RunDir(tmp_path).ensure()
    assert read_source_trim(rd, "s1") is None  # none yet: the restart loads everything
    write_source_trim(rd, "s1", SourceTrim(1200, {"n1a": 1250, "n1b": 1200}))
    assert rd.source_trim("s1") == rd.sources / "s1.trim.json"
    assert read_source_trim(tmp_path, "s1") == SourceTrim(1200, {"n1a": 1250, "n1b": 1200})
    write_source_trim(rd, "s1", SourceTrim(1300, {}))
    assert read_source_trim(rd, "s1") == SourceTrim(1300, {})
    assert not list(rd.sources.glob("*.tmp"))


@pytest.mark.parametrize("body", [
    b"{",
    b"[]",
    b'{"trimmed_up_to": 5}',
    b'{"trimmed_up_to": -1, "acks": {}}',
    b'{"trimmed_up_to": true, "acks": {}}',
    b'{"trimmed_up_to": 5, "acks": []}',
    b'{"trimmed_up_to": 5, "acks": {"n1a": "7"}}',
    b'{"trimmed_up_to": 5, "acks": {}, "t": 1}',
])
def test_a_malformed_trim_record_is_an_error_naming_the_file(tmp_path: Path, body: bytes) -> None:
    rd = RunDir(tmp_path).ensure()
    rd.source_trim("s1").write_bytes(body)
    with pytest.raises(RunLogError, match=r"source trim record .*s1\.trim\.json: ") as e:
        read_source_trim(rd, "s1")
    assert isinstance(e.value, NodeError)


# ------------------------------------------------------------------ reading the log
def test_the_source_log_streams_batch_by_batch_across_incarnations(tmp_path: Path) -> None:
    rd = RunDir(tmp_path).ensure()
    with pytest.raises(RunLogError, match="missing"):
        iter_source_log(rd, "s1")  # at once, not at the first batch
    data = [S(i) for i in range(1, 31)]
    for k, part in enumerate((data[:10], data[10:25], [], data[25:])):
        with TupleLogWriter(rd.source_log_of("s1", k), ("v",), flush_every=5) as w:
            w.append(part)
    batches = list(iter_source_log(rd, "s1"))
    assert [len(b) for b in batches] == [10, 15, 0, 5]  # one per flush (an empty log: one)
    assert [t for b in batches for t in b] == read_source_log(rd, "s1") == data


def logged(tmp_path: Path, *parts: list[Tuple]) -> list[pa.RecordBatch]:
    """``parts`` as a source log holds them: one record batch per flush."""
    path = tmp_path / "s1.arrow"
    with TupleLogWriter(path, ("v",)) as w:
        for part in parts:
            w.append(part)
            w.flush()
    return [b for b in iter_log_batches(path) if b.num_rows]


def test_resume_from_keeps_only_the_tuples_after_the_trim_point(tmp_path: Path) -> None:
    batches = logged(tmp_path, [S(1), S(2), S(3)], [], [S(4), S(5), S(6)], [S(7), S(8), S(9)])
    for trimmed, held in ((0, range(1, 10)), (3, range(4, 10)), (4, range(5, 10)),
                          (8, [9]), (9, [])):
        r = resume_from(iter(batches), trimmed, source="s1", files="f", trim_file="t")
        assert (r.produced, r.last_time) == (9, 900)
        assert r.held == [S(i) for i in held], trimmed
    empty = resume_from([], 0, source="s1", files="f", trim_file="t")
    assert (empty.produced, empty.last_time, empty.held) == (0, 0, [])


@pytest.mark.parametrize("parts, bad", [
    ([[S(1), S(2)], [S(3), S(5)]], "id 5 where id 4"),  # a gap between batches' ends
    ([[S(1), S(2)], [S(4), S(5)]], "id 4 where id 3"),  # a gap between batches
    ([[S(2), S(3)]], "id 2 where id 1"),  # not from 1
    ([[S(1), S(3), S(4)]], "id 3 where id 2"),  # inside one batch
    ([[S(1), S(2), S(2), S(3)]], "id 2 where id 3"),  # a repeat: steps of 0 and 1
])
def test_resume_from_refuses_a_gap(tmp_path: Path, parts: list[list[Tuple]], bad: str) -> None:
    with pytest.raises(NodeError, match=rf"its log \(a.arrow, a.1.arrow\) has {bad} belongs"):
        resume_from(logged(tmp_path, *parts), 0, source="s1", files="a.arrow, a.1.arrow",
                    trim_file="t")


def test_resume_from_checks_a_long_log_group_by_group(tmp_path: Path) -> None:
    """Ids are checked a group at a time: a gap in a later group is found as well, and a
    whole log of many groups passes."""
    n = 2 * _GaplessIds.GROUP + 10
    whole = [S(i) for i in range(1, n + 1)]
    parts = [whole[k:k + 1000] for k in range(0, n, 1000)]
    r = resume_from(logged(tmp_path, *parts), n - 5, source="s1", files="f", trim_file="t")
    assert (r.produced, r.last_time, r.held) == (n, 100 * n, whole[-5:])
    broken = [*whole[: n - 3], S(n)]
    with pytest.raises(NodeError, match=f"has id {n} where id {n - 2} belongs"):
        resume_from(logged(tmp_path, broken), 0, source="s1", files="f", trim_file="t")


def test_resume_from_refuses_a_trim_point_beyond_the_log(tmp_path: Path) -> None:
    with pytest.raises(NodeError, match=r"s1.trim.json says its buffer was trimmed up to id 4, "
                                        r"but its log \(a.arrow\) ends at id 3"):
        resume_from(logged(tmp_path, [S(1), S(2), S(3)]), 4, source="s1", files="a.arrow",
                    trim_file="s1.trim.json")


# ------------------------------------------------------------------ a source on virtual time
def cluster(tmp_path: Path) -> ClusterConfig:
    """s1 at 1000 tuples/s read by one node of two replicas (n1a acks, n1b never
    subscribes), with a grace period of 0.5 s."""
    return source_cluster(tmp_path, cluster_keys="consumer_grace = 0.5", replicas=2)


def data_of(tuples: list[Tuple] | None) -> list[Tuple]:
    assert tuples is not None, "refused"
    return [t for t in tuples if t.kind is Kind.STABLE]


def test_a_restarted_source_holds_only_what_was_not_acknowledged(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """n1a acks for 2 s and goes; the source runs 1.5 s more and is killed. Restarted, it
    holds only the tuples after its recorded trim point, and every consumer gets what the
    buffer before the kill gave it: n1a is refused below the trim point (also after the
    grace period: it was heard from), n1b (never heard from) is served from the trim point
    once the grace period ends, n1a from the trim point on gets the log, without a gap."""
    config = cluster(tmp_path)
    rd = RunDir(tmp_path / "run").ensure()

    async def main(loop: object, skew: list[int]) -> tuple[int, int]:
        net = MemoryTransport()
        first, _, task = start(config, rd, net)
        got = data_of(await received(net, 0, 2.0, consumer="n1a", ack=True))
        assert [t.id for t in got] == list(range(1, len(got) + 1))
        await asyncio.sleep(1.5)
        stats = first.status()["outputs"]["s1"]
        trim = read_source_trim(rd, "s1")
        assert trim is not None
        assert 1000 < trim.trimmed_up_to <= stats["trimmed_up_to"]  # never above the buffer
        assert trim.acks == {"n1a": stats["consumers"]["n1a"]["acked"]}
        assert await received(net, 10, 0.3, consumer="n1a") is None  # the buffer before the kill
        await kill(task)
        t = trim.trimmed_up_to
        log = read_source_log(rd, "s1")

        second, stop, task = start(config, rd, net)
        held = second.status()["outputs"]["s1"]
        assert second.produced == first.produced == len(log) > t + 1000
        assert (held["buffered"], held["trimmed_up_to"]) == (len(log) - t, t)
        assert held["consumers"]["n1a"]["acked"] == trim.acks["n1a"]  # heard from, as before
        assert await received(net, 10, 0.3, consumer="n1a") is None
        await asyncio.sleep(TRIM_EVERY)  # the grace period (0.5 s) is over
        assert await received(net, 10, 0.3, consumer="n1a") is None  # still refused: it was heard from
        lapsed = data_of(await received(net, 0, 0.3, consumer="n1b"))  # never heard from: the grace rule
        assert lapsed[0].id == t + 1
        resumed = data_of(await received(net, t, 0.5, consumer="n1a"))
        assert resumed[: len(log) - t] == log[t:]
        assert [u.id for u in resumed] == list(range(t + 1, t + len(resumed) + 1))
        stop.set()
        await task
        return len(log), t

    with caplog.at_level(logging.INFO, logger="dpc.source"):
        logged, t = run_virtual(main)
    line = re.search(r"source s1 restarted \(incarnation 1\): ([\d,]+) tuples logged \(read in "
                     r"[\d.]+ s\), ([\d,]+) held for replay \(trimmed up to id ([\d,]+)\); going on",
                     caplog.text)
    assert line is not None, caplog.text
    assert line.groups() == (f"{logged:,}", f"{logged - t:,}", f"{t:,}")


def test_without_a_trim_record_the_restart_holds_the_whole_log(tmp_path: Path) -> None:
    """An older run directory, or a kill before the first record: everything, as before."""
    config = cluster(tmp_path)
    rd = RunDir(tmp_path / "run").ensure()

    async def main(loop: object, skew: list[int]) -> None:
        net = MemoryTransport()
        _, _, task = start(config, rd, net)
        await received(net, 0, 2.0, consumer="n1a", ack=True)
        await kill(task)
        rd.source_trim("s1").unlink()
        second, stop, task = start(config, rd, net)
        held = second.status()["outputs"]["s1"]
        assert (held["buffered"], held["trimmed_up_to"]) == (second.produced, 0)
        logged = second.produced
        got = data_of(await received(net, 0, 0.3, consumer="n1a"))
        assert len(got) > logged and got == read_source_log(rd, "s1")[: len(got)]
        stop.set()
        await task

    run_virtual(main)


def test_a_malformed_trim_record_stops_the_restart_naming_it(tmp_path: Path) -> None:
    config = cluster(tmp_path)
    rd = RunDir(tmp_path / "run").ensure()
    with TupleLogWriter(rd.source_log("s1"), ("k", "v")) as w:
        w.append([make_tuple(Kind.STABLE, i, i, i, ("a", i)) for i in range(1, 4)])
    rd.source_trim("s1").write_bytes(orjson.dumps({"trimmed_up_to": "3", "acks": {}}))
    with pytest.raises(NodeError, match=r"s1\.trim\.json"):
        Source(config, "s1", rd, MemoryTransport().for_process("s1"))
    rd.source_trim("s1").write_bytes(orjson.dumps({"trimmed_up_to": 4, "acks": {}}))
    with pytest.raises(NodeError, match=r"trimmed up to id 4, but its log .* ends at id 3"):
        Source(config, "s1", rd, MemoryTransport().for_process("s1"))
