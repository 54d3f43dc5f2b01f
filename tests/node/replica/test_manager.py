"""The consistency manager's runtime (node/replica/manager.py): it turns SUnion signals and
partners' messages into the machine's events and performs its actions; the replay and the
permission requests it starts are owned by ``Manager.run``, cancelled and awaited when it
ends, and a failure of one ends ``run`` with it (a local failure, STYLE.md 8) instead of
vanishing."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest

from node.config.load import load_config
from node.errors import NodeError
from node.net.memory import MemoryTransport
from node.net.transport import Connection
from node.replica import consistency as cm
from node.replica.manager import (
    Emit,
    Manager,
    Partner,
    choose_engine,
    next_replay_step,
    policy_of,
    replay_eta,
)
from node.streams.mutation import Mutation
from operators import NetworkOutput, QueryNetwork
from ops_scripts.harness.simulate import DEFAULT_CLUSTER
from protocol.errors import RemoteProtocolError
from protocol.messages import Message, ReconcileGrant, ReconcileRefuse, ReconcileRequest
from protocol.tuples import Kind, Tuple, boundary, make_tuple
from state.errors import CheckpointError

LOG = logging.getLogger("test.manager")


def make_manager(partners: Sequence[Partner] = (), transport: MemoryTransport | None = None,
                 *, emit: Emit | None = None, now: Callable[[], int] = lambda: 0,
                 checkpoint: bool = True, mutation: Mutation | None = None,
                 checkpointing: cm.Checkpointing | None = None, replay_step: int | None = None,
                 replay_budget: int | None = None) -> Manager:
    node = load_config(DEFAULT_CLUSTER).nodes["n1"]
    transport = transport or MemoryTransport().for_process("n1a")
    policy = policy_of(node, "n1a")
    if checkpointing is not None:
        policy = replace(policy, checkpointing=checkpointing)
    manager = Manager("n1a", "n1", policy, QueryNetwork(node.network),
                      list(partners), transport, emit or (lambda out, now: None), now, log=LOG,
                      mutation=mutation, replay_step=replay_step, replay_budget=replay_budget)
    if checkpoint:
        # Checkpoint 0 (PERIODIC), as the deadline loop takes it at once; ON_FAILURE: a
        # checkpoint as if a failure had begun (the tests reconcile from it).
        manager.feed(cm.Tick(0))
        if policy.checkpointing is cm.Checkpointing.ON_FAILURE:
            manager.feed(cm.EpisodeImminent(0))
    return manager


def signal(kind: Kind) -> Tuple:
    return make_tuple(kind, 0, 0, 0, ())


async def until(condition: object, what: str) -> None:
    async with asyncio.timeout(5):
        # The conditions read the manager's state, which no Event announces: poll each turn.
        while not condition():  # type: ignore[operator]  # noqa: ASYNC110
            await asyncio.sleep(0)
    assert condition(), what  # type: ignore[operator]


async def test_cancelling_run_cancels_and_awaits_the_tasks_it_started() -> None:
    manager = make_manager()
    run = asyncio.create_task(manager.run())
    closed = asyncio.Event()

    async def request() -> None:
        try:
            await asyncio.Event().wait()  # a partner that never answers
        finally:
            closed.set()

    task = manager._spawn(request(), "request to n1b")
    await asyncio.sleep(0)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert task.cancelled() and closed.is_set()


async def test_a_task_that_fails_ends_run_with_its_error() -> None:
    manager = make_manager()
    run = asyncio.create_task(manager.run())

    async def replay() -> None:
        raise RuntimeError("the replay broke")

    manager._spawn(replay(), "replay")
    async with asyncio.timeout(5):
        with pytest.raises(RuntimeError, match="the replay broke"):
            await run


async def test_one_deadline_loop_serves_the_network_and_the_machine() -> None:
    """``run`` serves the machine's deadlines (checkpoints) and the network's (an SUnion's
    tentative release after alpha*X = 0.7 s), the latter only while new input is let in."""
    clock = [0]
    emitted: list[NetworkOutput] = []

    def emit(out: NetworkOutput, now: int) -> None:
        emitted.append(out)
        manager.on_signals(out.signals, now)

    manager = make_manager(emit=emit, now=lambda: clock[0], checkpointing=cm.Checkpointing.PERIODIC)
    manager.network.push("s1", [make_tuple(Kind.STABLE, 1, 10, 10, (0, 50))], 0)
    assert manager.network.next_deadline() == 700_000
    run = asyncio.create_task(manager.run())
    clock[0] = 250_000
    manager.wake()
    await until(lambda: manager.machine.checkpoints == 2, "the checkpoint due at 200 ms")
    manager.input_open.clear()  # as during a replay
    clock[0] = 800_000
    manager.wake()
    await until(lambda: manager.machine.checkpoints == 3, "the machine's deadline is served")
    assert emitted == [] and manager.state is cm.State.STABLE  # the network's waits
    manager.input_open.set()
    manager.wake()
    await until(lambda: manager.state is cm.State.UP_FAILURE, "the SUnion's release")
    assert [(op, s.kind) for op, s in emitted[0].signals] == [("u", Kind.UP_FAILURE)]
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run


async def test_on_failure_checkpoints_right_before_the_timer_that_begins_an_episode() -> None:
    """ON_FAILURE: no checkpoint while nothing fails (the machine's ticks only let the
    SUnions forget), then one taken by the deadline loop right before the on_timer call that
    releases the first tentative bucket: its SUnion has released nothing tentative yet."""
    clock = [0]
    states: list[cm.State] = []

    def emit(out: NetworkOutput, now: int) -> None:
        manager.on_signals(out.signals, now)
        states.append(manager.state)

    manager = make_manager(emit=emit, now=lambda: clock[0], checkpoint=False,
                           checkpointing=cm.Checkpointing.ON_FAILURE)
    # s1 sends a tuple and its boundary; s2 and s3 send nothing: bucket 0 waits.
    manager.network.push("s1", [make_tuple(Kind.STABLE, 1, 10, 10, (0, 50)), boundary(100_000)], 0)
    run = asyncio.create_task(manager.run())
    clock[0] = 650_000  # ForgetReleased due at 0, 200, 400 and 600 ms: no checkpoint
    manager.wake()
    await until(lambda: manager.machine.last_checkpoint_at == 650_000, "the forgetting at 650 ms")
    assert manager.machine.checkpoints == 0 and manager.checkpoints.last_seq is None
    # Nothing from s2/s3 for bucket 0: its deadline (alpha*X = 0.7 s) passes, it goes out
    # tentative, and a checkpoint was taken right before, while still STABLE.
    clock[0] = 800_000
    manager.wake()
    await until(lambda: manager.state is cm.State.UP_FAILURE, "the SUnion's tentative release")
    assert manager.machine.checkpoints == 1 and manager.checkpoints.last_seq == 1
    snap = manager.checkpoints.latest().parts["u"]
    assert snap["state"]["ftb"] is None and snap["state"]["next"] <= 0  # bucket 0 not released
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run


async def test_with_fault_tolerance_off_a_reconciliation_ends_the_replica_saying_why() -> None:
    manager = make_manager(checkpointing=cm.Checkpointing.OFF)
    assert manager.machine.checkpoints == 0  # the start-up tick only let the SUnions forget
    manager.feed(cm.UpFailure(10, "u"))
    with pytest.raises(NodeError, match="fault tolerance is off"):
        manager.feed(cm.RecRequest(20, "u"))  # no partner to ask: it grants itself


async def test_an_action_that_fails_ends_run_before_the_network_is_touched_again() -> None:
    """A failed action may leave the network half changed (a rewind that raised): the
    deadline loop's next turn raises that error, it does not serve the network's timers
    (which would fail on the damage and hide the cause, or worse, not fail)."""
    manager = make_manager(checkpointing=cm.Checkpointing.OFF)
    manager.feed(cm.UpFailure(10, "u"))
    with pytest.raises(NodeError, match="fault tolerance is off"):
        manager.feed(cm.RecRequest(20, "u"))  # (from a partner's answer, in the replica)
    async with asyncio.timeout(5):
        with pytest.raises(NodeError, match="fault tolerance is off"):
            await manager.run()


async def test_signals_of_one_call_are_events_per_sunion_up_failures_first() -> None:
    """One network call may carry one SUnion's REC_REQUEST and another's first UP_FAILURE:
    the machine must count the latter as failing first (else the REC_REQUEST would be
    illegal in STABLE, or permission asked while an SUnion is still tentative)."""
    manager = make_manager()
    manager.on_signals([("a", signal(Kind.REC_REQUEST)), ("b", signal(Kind.UP_FAILURE)),
                        ("a", signal(Kind.UP_FAILURE))], 5)
    m = manager.machine
    assert m.state is cm.State.UP_FAILURE and m.failing == {"b"} and m.request == 0
    # The last one corrected: with no partner the replica grants itself and reconciles.
    manager.on_signals([("b", signal(Kind.REC_REQUEST))], 6)
    assert manager.state is cm.State.STABILIZATION
    assert manager.stats["self_grants"] == manager.stats["permission_requests"] == 1
    await until(lambda: manager.state is cm.State.STABLE, "the replay ends, caught up")
    assert manager.stats["reconciliations"] == 1


@pytest.mark.parametrize("mutation", [None, Mutation.STUCK_RECONCILIATION])
async def test_under_the_stuck_reconciliation_mutation_a_replica_never_reconciles(
        mutation: Mutation | None) -> None:
    """Contract point 5 (issue 13): s2 falls silent, the SUnion releases s1's bucket
    tentatively after alpha*X (UP_FAILURE), then s2's missing tuple arrives and every input
    is corrected (REC_REQUEST). A sound replica (no partner: it grants itself) reconciles
    and is STABLE again; under the mutation it stays in UP_FAILURE however long it waits."""
    clock = [0]
    signals: list[Kind] = []

    def emit(out: NetworkOutput, now: int) -> None:
        signals.extend(s.kind for _, s in out.signals)
        manager.on_signals(out.signals, now)

    def push(stream: str, tuples: list[Tuple], at: int) -> None:
        clock[0] = at
        emit(manager.network.push(stream, tuples, at), at)
        manager.wake()

    manager = make_manager(emit=emit, now=lambda: clock[0], mutation=mutation)
    run = asyncio.create_task(manager.run())
    push("s1", [make_tuple(Kind.STABLE, 1, 10, 10, (0, 50)), boundary(100_000)], 0)
    push("s2", [boundary(100_000)], 0)
    push("s1", [make_tuple(Kind.STABLE, 2, 150_000, 150_000, (1, 50)), boundary(300_000)], 200_000)
    clock[0] = 900_000  # past alpha*X = 0.7 s: s2 is late
    manager.wake()
    await until(lambda: manager.state is cm.State.UP_FAILURE, "the tentative release")
    push("s2", [make_tuple(Kind.STABLE, 1, 120_000, 120_000, (1, 60)), boundary(300_000)],
         1_000_000)
    assert signals == [Kind.UP_FAILURE, Kind.REC_REQUEST]  # the inputs are corrected
    if mutation is None:
        await until(lambda: manager.state is cm.State.STABLE, "the reconciliation")
        assert manager.machine.reconciliations == manager.stats["reconciliations"] == 1
    else:
        for t in range(2, 30):  # retries, checkpoints and timers due: none of them helps
            clock[0] = t * 1_000_000
            manager.wake()
            await asyncio.sleep(0)
        assert manager.state is cm.State.UP_FAILURE and manager.machine.reconciliations == 0
        assert manager.stats["permission_requests"] == 0
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run


async def answering_partner(net: MemoryTransport, answer: type[Message]) -> Partner:
    """Replica n1b of the node, answering every request with ``answer``."""

    async def handle(conn: Connection) -> None:
        while (msg := await conn.receive()) is not None:
            assert isinstance(msg, ReconcileRequest)
            if answer is ReconcileGrant:
                await conn.send(ReconcileGrant("n1b", msg.request))
            else:
                await conn.send(ReconcileRefuse("n1b", msg.request, "reconciling"))

    await net.for_process("n1b").serve("h", 7, handle)
    return Partner("n1b", "h", 7)


@pytest.mark.parametrize("answer", [ReconcileGrant, ReconcileRefuse])
async def test_partners_answers_are_events(answer: type[Message]) -> None:
    net = MemoryTransport()
    manager = make_manager([await answering_partner(net, answer)], net.for_process("n1a"))
    assert manager.machine.policy.partners == ("n1b",)
    run = asyncio.create_task(manager.run())
    manager.on_signals([("u", signal(Kind.UP_FAILURE)), ("u", signal(Kind.REC_REQUEST))], 5)
    if answer is ReconcileGrant:
        await until(lambda: manager.machine.reconciliations == 1, "the grant reconciles")
        assert manager.stats["permission_refused"] == 0
    else:
        await until(lambda: manager.machine.refusals == 1, "the refusal is counted")
        assert manager.machine.permission is cm.Permission.REFUSED
        assert manager.stats["permission_refused"] == 1
    assert manager.stats["permission_requests"] == 1 and manager.stats["self_grants"] == 0
    assert manager.machine.unanswered == (0,)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run


async def test_an_unreachable_partner_is_silent_and_the_next_request_is_granted_by_itself() -> None:
    manager = make_manager([Partner("n1b", "nowhere", 1)])
    manager.on_signals([("u", signal(Kind.UP_FAILURE)), ("u", signal(Kind.REC_REQUEST))], 5)
    await until(lambda: manager.machine.unanswered == (4,), "the failed connect is an event")
    assert manager.state is cm.State.UP_FAILURE
    manager.feed(cm.Tick(manager.machine.next_ask_at or 0))  # the retry
    assert manager.state is cm.State.STABILIZATION and manager.stats["self_grants"] == 1
    assert manager.stats["permission_requests"] == 2


async def test_a_dead_partner_does_not_block_the_grant_of_a_live_one() -> None:
    """Issue 13, defect 3, at the runtime: n1c's port refuses the connection (it was killed),
    n1b grants: the replica reconciles on n1b's grant alone, at its first request."""
    net = MemoryTransport()
    manager = make_manager([await answering_partner(net, ReconcileGrant),
                            Partner("n1c", "nowhere", 1)], net.for_process("n1a"))
    run = asyncio.create_task(manager.run())
    manager.on_signals([("u", signal(Kind.UP_FAILURE)), ("u", signal(Kind.REC_REQUEST))], 5)
    await until(lambda: manager.machine.reconciliations == 1, "n1b's grant reconciles")
    assert manager.stats["permission_requests"] == 1 and manager.stats["self_grants"] == 0
    await until(lambda: manager.state is cm.State.STABLE, "the replay ends, caught up")
    assert manager.machine.unanswered == (0, 4)  # n1b answered, n1c refused the connection
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run


class DeadPeer:
    """A partner connection whose ``receive`` raises ``error``."""

    peer = "n1b"

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.closed = False

    async def send(self, message: Message) -> None:
        raise AssertionError("nothing is sent here")

    async def receive(self) -> Message | None:
        raise self.error

    async def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("error", [ConnectionResetError("reset by peer"), TimeoutError(),
                                   RemoteProtocolError("frame of unknown version 9")])
async def test_a_dead_or_garbled_partner_ends_its_reader_quietly(error: BaseException) -> None:
    partner = Partner("n1b", "h", 7)
    manager = make_manager([partner])
    run = asyncio.create_task(manager.run())
    partner.conn = conn = DeadPeer(error)
    await manager._spawn(manager._read(partner, conn), "answers of n1b")
    assert conn.closed and partner.conn is None  # the next request connects afresh
    await asyncio.sleep(0)
    assert not run.done()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run


async def test_anything_else_in_the_partner_reader_ends_run_loudly() -> None:
    """A grant the replica cannot act on (here: no checkpoint to reconcile from) is no
    network failure: it ends the reader, and run with it, instead of a line in the log."""
    net = MemoryTransport()
    manager = make_manager([await answering_partner(net, ReconcileGrant)],
                           net.for_process("n1a"), checkpoint=False)
    run = asyncio.create_task(manager.run())
    manager.on_signals([("u", signal(Kind.UP_FAILURE)), ("u", signal(Kind.REC_REQUEST))], 5)
    async with asyncio.timeout(5):
        with pytest.raises(CheckpointError, match="no checkpoint was put yet"):
            await run


def test_a_replay_step_shrinks_after_an_overrun_and_grows_back_up_to_the_cap() -> None:
    assert next_replay_step(10, took=100_000, budget=20_000, cap=10) == 2  # 5x over: a fifth
    assert next_replay_step(1, took=500_000, budget=20_000, cap=10) == 1  # never below one
    assert next_replay_step(2, took=15_000, budget=20_000, cap=10) == 2  # within: kept
    assert next_replay_step(2, took=5_000, budget=20_000, cap=10) == 4  # well under: doubled
    assert next_replay_step(8, took=0, budget=20_000, cap=10) == 10  # never above the cap


async def test_a_replay_keeps_each_step_within_its_time_budget() -> None:
    """The defect: a replay step was bounded by buckets only (``replay_step``), so on a
    loaded machine one step ran for 200 ms and more, heartbeat answers waited behind it and
    consumers declared a busy replica failed. Here re-releasing a bucket costs the manager's
    clock 1 ms for the first 12 buckets, then 10 ms (the machine got loaded): the steps start
    at one bucket, grow to the cap of 10 while cheap, and after the one step that overran
    the 20 ms budget every step keeps within it; the replay still re-releases everything."""
    clock = [0]
    steps: list[int] = []

    def emit(out: NetworkOutput, now: int) -> None:
        manager.on_signals(out.signals, now)

    def push(stream: str, tuples: list[Tuple], at: int) -> None:
        clock[0] = at
        emit(manager.network.push(stream, tuples, at), at)
        manager.wake()

    manager = make_manager(emit=emit, now=lambda: clock[0], replay_step=10, replay_budget=20_000)
    net = manager.network

    def costly(call: Callable[..., NetworkOutput]) -> Callable[..., NetworkOutput]:
        def step(*args: object) -> NetworkOutput:
            before = net.replay_progress()[0] if call.__name__ == "replay" else 0
            out = call(*args)
            # One s1 tuple a bucket: the tuples this step re-released are its buckets.
            steps.append(net.replay_progress()[0] - before)
            clock[0] += (1_000 if sum(steps) <= 12 else 10_000) * steps[-1]
            return out
        return step

    net.rewind = costly(net.rewind)  # type: ignore[method-assign]
    net.replay = costly(net.replay)  # type: ignore[method-assign]
    run = asyncio.create_task(manager.run())
    for b in range(40):  # s2 falls silent after its first boundary; s1 goes on
        push("s1", [make_tuple(Kind.STABLE, b + 1, b * 100_000 + 10, b * 100_000 + 10, (b, 50)),
                    boundary((b + 1) * 100_000)], b * 100_000)
        if b == 0:
            push("s2", [boundary(100_000)], 0)
    await until(lambda: manager.state is cm.State.UP_FAILURE, "the tentative release")
    push("s2", [boundary(40 * 100_000)], 4_000_000)  # s2 is back: every bucket is corrected
    await until(lambda: manager.state is cm.State.STABLE, "the reconciliation")
    assert sum(steps) >= 30 and steps[:4] == [1, 2, 4, 8], steps
    overrun = next(i for i, n in enumerate(steps) if sum(steps[:i + 1]) > 12)
    assert max(steps[overrun + 1:]) <= 2, f"steps after an overrun must keep within the budget: {steps}"
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run


def test_on_failure_forgets_released_input_before_every_call_while_stable() -> None:
    """ON_FAILURE, STABLE: what the SUnions released is forgotten before the next network
    call (no redo can need it: a failure's checkpoint is taken after that, before the call),
    not kept until the next checkpoint_interval tick; PERIODIC keeps it for its checkpoint."""
    batch = [make_tuple(Kind.STABLE, 1, 10, 10, (0, 50)), boundary(100_000)]
    kept = {}
    for mode in (cm.Checkpointing.ON_FAILURE, cm.Checkpointing.PERIODIC):
        manager = make_manager(checkpointing=mode)
        for stream in ("s1", "s2"):  # bucket 0 complete: released stable
            manager.before_network_call(0, stream)
            manager.network.push(stream, batch, 0)
        assert manager.network.released_to == 100_000 and manager.state is cm.State.STABLE
        manager.before_network_call(1, "s1")
        kept[mode] = manager.network.buffered
    assert kept == {cm.Checkpointing.ON_FAILURE: 0, cm.Checkpointing.PERIODIC: 2}


def test_auto_replays_vectorized_from_the_threshold_and_a_setting_is_obeyed() -> None:
    assert choose_engine("auto", 999_999, 1_000_000) == "inproc"
    assert choose_engine("auto", 1_000_000, 1_000_000) == "vectorized"
    assert choose_engine("inproc", 10**9, 0) == "inproc"
    assert choose_engine("vectorized", 0, 10**9) == "vectorized"
    # Spark from its own threshold (above the vectorized one), never without one.
    assert choose_engine("auto", 10**7 - 1, 10**6, 10**7) == "vectorized"
    assert choose_engine("auto", 10**7, 10**6, 10**7) == "spark"
    assert choose_engine("auto", 10**12, 10**6, None) == "vectorized"
    assert choose_engine("spark", 0, 10**6, None) == "spark"


def test_a_replays_eta_is_what_is_left_at_the_pace_so_far() -> None:
    assert replay_eta(250_000, 1_000_000, 2_000_000) == 6.0  # a quarter in 2 s: 6 s left
    assert replay_eta(1_000_000, 1_000_000, 9_000_000) == 0.0
    assert replay_eta(0, 1_000_000, 2_000_000) is None  # no pace yet
    assert replay_eta(10, 5, 1_000) == 0.0  # (corrections made it longer than announced)
