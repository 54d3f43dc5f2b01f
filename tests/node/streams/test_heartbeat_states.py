"""What a replica's heartbeat answers say about its output streams (node/replica/runtime.py).

A replica built in-process over memory and never run: its HA monitor's tracker is fed by
hand, and the data port's responder is called directly."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from node.config.load import load_config
from node.net.memory import MemoryTransport
from node.net.transport import Connection
from node.procs.rundir import RunDir
from node.replica.runtime import Replica
from node.streams.mutation import Mutation
from protocol.messages import ConsistencyState, HeartbeatRequest, HeartbeatResponse
from tests.paths import EXAMPLES

STABLE, UP_FAILURE = ConsistencyState.STABLE, ConsistencyState.UP_FAILURE


@pytest.fixture
def n2a(tmp_path: Path) -> Iterator[Replica]:
    """Replica n2a of examples/sim.toml: one input, n1.out, from n1a, n1b or n1c."""
    config = load_config(EXAMPLES / "sim.toml")
    r = Replica(config, "n2a", RunDir(tmp_path).ensure(), MemoryTransport().for_process("n2a"))
    yield r
    for writer in r.output_logs.values():
        writer.close()


def silence(r: Replica, upstream: str, seqs: Iterator[int]) -> None:
    """``upstream`` leaves enough heartbeats unanswered to be declared failed."""
    tracker = r.monitor.tracker
    assert tracker is not None
    for _ in range(tracker.misses + 2):
        tracker.sent(upstream, next(seqs), 0)
    assert not tracker.alive(upstream)


def answer(r: Replica) -> HeartbeatResponse:
    msg = r._respond(HeartbeatRequest("c1", 1))
    assert isinstance(msg, HeartbeatResponse)
    return msg


def test_an_input_with_no_upstream_replica_left_makes_its_outputs_up_failure(
    n2a: Replica,
) -> None:
    # Cut off from n1a, n1b and n1c, n2a's lone SUnion receives nothing, so it never releases
    # a tentative tuple and the machine stays STABLE: its heartbeats must still tell the
    # client to prefer n2b, which has input (it stayed on n2a: simulate seed 450).
    seqs = itertools.count(1)
    assert answer(n2a).streams == {"n2.out": STABLE}
    silence(n2a, "n1a", seqs)
    silence(n2a, "n1b", seqs)
    assert answer(n2a).streams == {"n2.out": STABLE}  # n1c is left
    silence(n2a, "n1c", seqs)
    msg = answer(n2a)
    assert msg.streams == {"n2.out": UP_FAILURE}
    assert msg.state is STABLE  # the node's own state is the machine's
    assert n2a.monitor.cut_off() == ["n1.out"]


async def test_a_bug_in_the_data_servers_handler_ends_the_replica(tmp_path: Path) -> None:
    """Failures are loud: a handler error that is not a peer's (here a bug planted in the
    publisher) ends the replica's run with that error, instead of a log line and a replica
    that serves on (node/net/transport.py's rule, Server.failed in the replica's TaskGroup)."""
    config = load_config(EXAMPLES / "sim.toml")
    net = MemoryTransport()
    r = Replica(config, "n2a", RunDir(tmp_path).ensure(), net.for_process("n2a"),
                control=False)

    async def broken(conn: Connection) -> None:
        raise RuntimeError("publisher bug")

    r.publisher.handle = broken  # type: ignore[method-assign]
    stop = asyncio.Event()
    run = asyncio.ensure_future(r.run(stop))
    try:
        client = net.for_process("c1")
        async with asyncio.timeout(10):
            while True:  # the replica serves once its run started
                try:
                    conn = await client.connect(r.me.host, r.me.data_port)
                    break
                except OSError:
                    await asyncio.sleep(0.01)
            with pytest.raises(ExceptionGroup) as raised:
                await run
        await conn.close()
    finally:
        stop.set()
        if not run.done():
            run.cancel()
    assert raised.group_contains(RuntimeError, match="publisher bug")


def basic_replica(tmp_path: Path, mutation: Mutation | None = None) -> Replica:
    """Replica n1a of examples/basic.toml: inputs s1, s2, s3, all sources."""
    config = load_config(EXAMPLES / "basic.toml")
    return Replica(config, "n1a", RunDir(tmp_path).ensure(),
                   MemoryTransport().for_process("n1a"), mutation=mutation)


def test_a_silent_source_puts_the_replica_in_up_failure_at_once_and_back(
    tmp_path: Path,
) -> None:
    """Issue 46: a source is an upstream neighbour too; once its heartbeats go unanswered,
    the replica is in UP_FAILURE (long before any tentative release) and its output says
    so, so that the client moves to a STABLE partner; an answer again, before any tentative
    release, and it is STABLE with nothing to reconcile."""
    r = basic_replica(tmp_path)
    try:
        seqs = itertools.count(1)
        assert answer(r).streams == {"n1.out": STABLE}
        silence(r, "s3", seqs)
        r.monitor.evaluate()
        assert r.inputs_down == {"s3"} and r.state == "UP_FAILURE"
        msg = answer(r)
        assert msg.state is UP_FAILURE and msg.streams == {"n1.out": UP_FAILURE}
        tracker = r.monitor.tracker
        assert tracker is not None
        seq = next(seqs)
        tracker.sent("s3", seq, 0)
        assert tracker.answered("s3", seq, STABLE, {"s3": STABLE}, {"s3": 0})
        r.monitor.evaluate()
        assert r.inputs_down == frozenset() and r.state == "STABLE"
        assert answer(r).streams == {"n1.out": STABLE}
        assert r.manager.machine.reconciliations == 0
    finally:
        for writer in r.output_logs.values():
            writer.close()


def test_the_late_up_failure_mutation_watches_no_source(tmp_path: Path) -> None:
    """DPC_TEST_MUTATION=late-up-failure: what the masking check must catch. The sources
    are not watched, so the replica learns of a silent source only from SUnion's first
    tentative release, alpha*X later (the behaviour before issue 46)."""
    r = basic_replica(tmp_path, Mutation.LATE_UP_FAILURE)
    try:
        assert r.monitor.tracker is None and r.monitor.cut_off() == []
    finally:
        for writer in r.output_logs.values():
            writer.close()
