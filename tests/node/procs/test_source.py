"""A source process's loop (node/procs/source.py) on virtual time: pacing after a stall,
boundaries, the end of its stream, and what it logged (node/procs/rundir.py)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import orjson
import pytest

from node.clock import now_us, use_clock
from node.config.load import parse_config
from node.config.model import ClusterConfig
from node.net.memory import MemoryTransport
from node.procs.generators import make_generator
from node.procs.pacing import next_multiple
from node.procs.rundir import RunDir, read_source_end, read_source_log
from node.procs.source import Source
from node.virtual_time import VirtualTimeLoop
from protocol.messages import Ack, Batch, Subscribe
from protocol.tuples import END_OF_STREAM, Kind, Tuple

EPOCH = 1_700_000_000_000_000


def cluster(tmp_path: Path, source: str = "rate = 1000.0", *, cluster_keys: str = "",
            replicas: int = 1) -> ClusterConfig:
    """s1 (its pace: ``source``) read by node n1 of ``replicas`` replicas n1a, n1b, ..."""
    import tomllib

    replica_tables = "".join(
        f"""  [[nodes.n1.replicas]]
  name = "n1{chr(ord('a') + i)}"
  data_port = {19101 + i}
  control_port = {19201 + i}
""" for i in range(replicas))
    text = f"""
[cluster]
name = "t"
token = "secret"
{cluster_keys}
[sources.s1]
schema = ["k", "v"]
port = 19001
boundary_interval = 0.1
{source}
[nodes.n1]
inputs = ["s1"]
  [[nodes.n1.operators]]
  name = "u"
  type = "sunion"
  inputs = ["s1"]
  [[nodes.n1.operators]]
  name = "out"
  type = "soutput"
  inputs = ["u"]
{replica_tables}"""
    return parse_config(tomllib.loads(text), tmp_path / "cluster.toml")


class Published:
    """What a source published, by wrapping its publisher's publish."""

    def __init__(self, source: Source) -> None:
        self.tuples: list[tuple[int, Tuple]] = []  # (when, tuple)
        inner = source.publisher.publish

        def publish(stream: str, batch: Any) -> None:
            batch = list(batch)
            self.tuples.extend((now_us(), t) for t in batch)
            inner(stream, batch)

        source.publisher.publish = publish  # type: ignore[method-assign]

    def data(self) -> list[Tuple]:
        return [t for _, t in self.tuples if t.kind is Kind.STABLE]

    def boundaries(self) -> list[tuple[int, Tuple]]:
        return [(w, t) for w, t in self.tuples if t.kind is Kind.BOUNDARY]

    def live_boundaries(self) -> list[tuple[int, Tuple]]:
        """(when, boundary) of every boundary but the end of stream."""
        return [(w, b) for w, b in self.boundaries() if b.time < END_OF_STREAM]


def run_virtual(main: Callable[[VirtualTimeLoop, list[int]], Coroutine[Any, Any, Any]]) -> Any:
    """Run ``main(loop, skew)`` on virtual time; the process clock is the loop's plus
    ``skew[0]`` µs (raising it is wall time passing while the process did not run)."""
    loop = VirtualTimeLoop()
    skew = [0]
    use_clock(lambda: EPOCH + int(loop.time() * 1_000_000) + skew[0])
    try:
        return loop.run_until_complete(main(loop, skew))
    finally:
        left = asyncio.all_tasks(loop)  # a failed test leaves its source running
        for task in left:
            task.cancel()

        async def drain() -> None:
            await asyncio.gather(*left, return_exceptions=True)

        loop.run_until_complete(drain())
        use_clock(None)
        loop.close()


def start(config: ClusterConfig, rd: RunDir, net: MemoryTransport | None = None,
          ) -> tuple[Source, asyncio.Event, asyncio.Task[None]]:
    source = Source(config, "s1", rd, (net or MemoryTransport()).for_process("s1"))
    stop = asyncio.Event()
    return source, stop, asyncio.get_running_loop().create_task(source.run(stop))


def published_over(tmp_path: Path, settings: str, *, seconds: float, after: float = 0.0,
                   ) -> Published:
    """What source s1 (its config line ``settings``) published in ``seconds`` of virtual
    time, started ``after`` seconds into the run."""
    config = cluster(tmp_path, settings)
    rd = RunDir(tmp_path / "run").ensure()

    async def main(loop: VirtualTimeLoop, skew: list[int]) -> Published:
        await asyncio.sleep(after)
        source, stop, task = start(config, rd)
        seen = Published(source)
        await asyncio.sleep(seconds)
        stop.set()
        await task
        return seen

    result: Published = run_virtual(main)
    return result


def test_a_source_that_falls_behind_catches_up_and_goes_on(tmp_path: Path) -> None:
    """Defect 1 of issue 13: a stall longer than 10,000 / rate seconds (here 13 s at 1000
    tuples/s) used to end the stream for good right after it."""
    config = cluster(tmp_path)
    rd = RunDir(tmp_path / "run").ensure()

    async def main(loop: VirtualTimeLoop, skew: list[int]) -> tuple[Source, list[Tuple]]:
        source, stop, task = start(config, rd)
        seen = Published(source)
        await asyncio.sleep(1.0)
        skew[0] += 13_000_000  # 13 s pass while the process is stopped
        await asyncio.sleep(2.0)
        assert not source.ended, "the stall ended the stream"
        stop.set()
        await task
        return source, seen.data()

    source, data = run_virtual(main)
    # 16 s of wall time at 1000/s: everything due was produced, gapless, in order.
    assert 15_900 <= source.produced <= 16_100
    assert [t.id for t in data] == list(range(1, source.produced + 1))
    assert read_source_log(rd, "s1") == data


def test_boundaries_go_out_every_interval_whatever_the_rate(tmp_path: Path) -> None:
    """Defect 5 of issue 13: at 2 tuples/s the loop slept until the next tuple was due, so
    boundaries went out every 0.5 s instead of every boundary_interval (0.1 s)."""
    seen = published_over(tmp_path, "rate = 2.0", seconds=10.0)
    live = seen.live_boundaries()
    assert 95 <= len(live) <= 101, len(live)  # 10 s / 0.1 s
    assert 19 <= len(seen.data()) <= 21
    times = [b.time for _, b in live]
    assert times == sorted(times)
    # Each boundary keeps its promise: no tuple published after it is older.
    order = seen.tuples
    for i, (_, t) in enumerate(order):
        if t.kind is Kind.BOUNDARY:
            assert all(u.time >= t.time for _, u in order[i + 1:] if u.kind is Kind.STABLE)


def test_boundaries_go_out_on_the_grid_of_the_interval(tmp_path: Path) -> None:
    """Boundaries leave at the multiples of boundary_interval on the run's clock (the grid
    SUnion cuts buckets on), so the one that completes a bucket leaves as the bucket ends.
    With the interval counted from the source's start instead, a bucket waited up to one
    more interval for it (dpc bench latency: p50 1.3 buckets)."""
    seen = published_over(tmp_path, "rate = 50.0", seconds=3.0, after=0.0371)  # off the grid
    live = seen.live_boundaries()
    assert len(live) >= 28
    for when, b in live:
        assert when % 100_000 <= 2_000, (when, b)  # at a multiple of 0.1 s (the loop's tick)
        assert b.time >= when - when % 100_000  # and it covers that multiple


def test_next_multiple() -> None:
    assert [next_multiple(t, 100) for t in (0, 1, 99, 100, 250)] == [100, 100, 100, 200, 300]


def test_end_stream_publishes_the_end_and_nothing_after_it(tmp_path: Path) -> None:
    config = cluster(tmp_path)
    rd = RunDir(tmp_path / "run").ensure()

    async def main(loop: VirtualTimeLoop, skew: list[int]) -> tuple[Source, Published]:
        source, stop, task = start(config, rd)
        seen = Published(source)
        await asyncio.sleep(1.0)
        source.end_stream()  # SIGUSR1
        await asyncio.sleep(1.0)
        stop.set()
        await task
        return source, seen

    source, seen = run_virtual(main)
    last = seen.tuples[-1][1]
    assert source.ended and last.kind is Kind.BOUNDARY and last.time == END_OF_STREAM
    assert [t for _, t in seen.tuples].count(last) == 1
    assert read_source_log(rd, "s1") == seen.data()


async def kill(task: asyncio.Task[None]) -> None:
    """What a kill -9 leaves: no end of stream, no end record (the simulation's kill)."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def received(net: MemoryTransport, s: int, seconds: float, *, consumer: str = "n1a",
                   ack: bool = False) -> list[Tuple] | None:
    """What ``consumer`` receives of s1 in ``seconds``, subscribing with stable id ``s``
    (acking what it received every 0.1 s if ``ack``, as a link does); None if the source
    closed the connection on it (a refusal)."""
    while True:  # until the source serves (virtual time)
        try:
            conn = await net.for_process(consumer).connect("127.0.0.1", 19001)
            break
        except ConnectionRefusedError:
            await asyncio.sleep(0.01)
    await conn.send(Subscribe("s1", consumer, s, s))
    out: list[Tuple] = []

    async def acker() -> None:
        while True:
            await asyncio.sleep(0.1)
            data = [t.id for t in out if t.kind is Kind.STABLE]
            if data:
                await conn.send(Ack("s1", consumer, data[-1]))

    task = asyncio.get_running_loop().create_task(acker()) if ack else None
    try:
        async with asyncio.timeout(seconds):
            while (msg := await conn.receive()) is not None:
                assert isinstance(msg, Batch)
                out.extend(msg.tuples)
            return None
    except TimeoutError:
        return out
    finally:
        if task is not None:
            task.cancel()
        await conn.close()


def test_a_restarted_source_resumes_ids_values_times_and_its_log(tmp_path: Path) -> None:
    """Defect 2 of issue 13 (contract points 1-3): after a kill, a new Source on the same
    run directory goes on where the log ends, serves replays of what its consumer did not
    acknowledge, and after its end record produces nothing more."""
    config = cluster(tmp_path)
    rd = RunDir(tmp_path / "run").ensure()

    async def main(loop: VirtualTimeLoop, skew: list[int]) -> tuple[int, list[Tuple], Source]:
        net = MemoryTransport()
        first, _, task = start(config, rd, net)
        await asyncio.sleep(1.0)
        await kill(task)
        killed_at = first.produced
        second, stop, task = start(config, rd, net)
        assert second.produced == killed_at  # resumed before producing anything
        replay = await received(net, 100, 0.5)  # a consumer that held ids 1..100
        await asyncio.sleep(0.5)
        stop.set()  # SIGTERM before its end: end record "request"
        await task
        third, stop, task = start(config, rd, net)
        assert third.ended and third.produced == second.produced
        after_end = await received(net, 100, 0.5)  # n1a acked 100 to the second (trimmed)
        stop.set()
        await task
        assert after_end is not None and after_end[-1].time == END_OF_STREAM
        assert [t for t in after_end if t.kind is Kind.STABLE] == read_source_log(rd, "s1")[100:]
        assert replay is not None
        return killed_at, replay, second

    killed_at, replay, _ = run_virtual(main)
    log = read_source_log(rd, "s1")
    assert 900 <= killed_at <= 1100 and len(log) > killed_at + 900
    assert [t.id for t in log] == list(range(1, len(log) + 1))  # gapless, no id twice
    src = config.sources["s1"]
    assert [t.values for t in log] == list(itertools.islice(make_generator(src), len(log)))
    times = [t.time for t in log]
    assert times == sorted(times)
    assert [p.name for p in rd.source_logs("s1")] == ["s1.arrow", "s1.1.arrow"]  # none for the third
    assert read_source_end(rd, "s1") == {"t": read_source_end(rd, "s1")["t"],  # type: ignore[index]
                                         "reason": "request", "last_id": len(log)}
    data = [t for t in replay if t.kind is Kind.STABLE]
    assert [t.id for t in data][: killed_at - 100] == list(range(101, killed_at + 1))
    assert data == log[100 : 100 + len(data)]


def test_a_subscriber_ahead_of_the_source_is_refused_loudly(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A consumer that holds ids the source never produced (the source's log was lost):
    refused with an error naming it, not served boundaries without data."""
    config = cluster(tmp_path)
    rd = RunDir(tmp_path / "run").ensure()

    async def main(loop: VirtualTimeLoop, skew: list[int]) -> list[Tuple] | None:
        net = MemoryTransport()
        _, stop, task = start(config, rd, net)
        await asyncio.sleep(0.2)
        got = await received(net, 10**6, 1.0)
        stop.set()
        await task
        return got

    with caplog.at_level(logging.ERROR, logger="dpc.source"):
        assert run_virtual(main) is None  # the connection was closed on it
    assert "subscribed 'n1a' to 's1' claiming stable id 1000000" in caplog.text
    assert "refused" in caplog.text


def test_an_event_time_source_replays_its_file_on_the_run_clock_across_a_restart(
        tmp_path: Path) -> None:
    """Tuple time = event time rebased onto the run's clock; a restarted source resumes the
    same mapping (its persisted clock); boundaries never run ahead of the clock or of a
    tuple to come; the file's end is the end of the stream (record "file")."""
    hours = [f"2010/01/{1 + h // 24:02d} {h % 24:02d}:00,{h}" for h in range(100)]
    (tmp_path / "data.csv").write_text("date,v\n" + "\n".join(hours) + "\n")
    config = cluster(tmp_path, 'generator = "file"\nfile = "data.csv"\ntime_column = "date"\n'
                               'speedup = 36000.0\nalign = 86400\nconstants = { k = "x" }')
    rd = RunDir(tmp_path / "run").ensure()

    async def main(loop: VirtualTimeLoop, skew: list[int]) -> tuple[int, list[tuple[int, Tuple]]]:
        net = MemoryTransport()
        first, _, task = start(config, rd, net)
        seen = Published(first)
        await asyncio.sleep(4.0)
        await kill(task)
        killed_at = first.produced
        await asyncio.sleep(1.0)  # down for 10 data hours (0.1 s each)
        second, stop, task = start(config, rd, net)
        tuples = seen.tuples
        seen = Published(second)
        await asyncio.sleep(8.0)  # the file ends after 10 s of the run's clock
        assert second.ended
        stop.set()
        await task
        return killed_at, tuples + seen.tuples

    killed_at, published = run_virtual(main)
    log = read_source_log(rd, "s1")
    assert [t.id for t in log] == list(range(1, 101))
    clock = orjson.loads(rd.source_pace("s1").read_bytes())
    assert clock["t_start"] % 100_000 == 0  # a data day (86400 s / 36000) is 2.4 s: 100 ms grid
    hour = 3_600_000_000
    for t in log:
        assert t.values == ("x", t.id - 1)  # the file's v; date is not in the schema
        event = 1_262_304_000_000_000 + (t.id - 1) * hour
        assert t.time == clock["t_start"] + (event - clock["event_first"]) // 36000
    end = read_source_end(rd, "s1")
    assert end is not None and end["reason"] == "file" and end["last_id"] == 100
    for i, (when, b) in enumerate(published):
        if b.kind is Kind.BOUNDARY and b.time < END_OF_STREAM:
            assert b.time <= when  # never ahead of the run's clock
            assert all(u.time >= b.time for _, u in published[i + 1:] if u.kind is Kind.STABLE)
    # the restart's catch-up: tuples due while it was down came at once, with their own times
    # (late by more than a loop tick: the virtual clock's float steps may round "on time"
    # a microsecond past the due time)
    late = [(w, t) for w, t in published if t.kind is Kind.STABLE and w > t.time + 10_000]
    assert late and all(t.id > killed_at for _, t in late) and killed_at > 10
