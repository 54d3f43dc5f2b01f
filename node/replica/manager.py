"""The consistency manager's runtime: performs what ``node/replica/consistency.py`` decides.

Role (paper section 5, DESIGN.md section 4). The pure machine decides; this module only
turns what happens into its events (each SUnion's UP_FAILURE and REC_REQUEST signals, ticks,
reconciliation progress, each partner's answers, unreachable partners, partners' requests)
and performs its actions on the replica's query network, through the network's
reconciliation surface only: checkpoints, checkpoint/redo or undo/redo reconciliation,
REC_DONE, SUnion modes, suspending new input, and the permission messages to the other
replicas of the node.

Theory of operation
-------------------
*One deadline loop.* ``run`` is the replica's only timer: one task waits for the earlier of
the network's next deadline (SUnion releases, served by ``on_timer`` while new input is let
in) and the machine's (``Tick``), serves whichever is due, and waits again; anything that may
move either deadline (a step of the machine, a batch pushed, the input gate) wakes it.

*One event at a time.* An action may make the network emit signals (a reconciliation's
replay releases buckets, which may signal a new failure); those become events queued behind
the current step, never nested in it: the machine's contract is that the actions of one step
run in order with no other event in between.

*Reconciliation replays in steps.* ``Reconcile`` rewinds the network to the last
checkpoint (checkpoint/redo) or pushes UNDO_START into every SUnion (undo/redo); SUnion then
re-releases its kept buckets, at most ``replay_step`` buckets per event-loop turn (the replay
task), so the replica keeps answering heartbeats and partners while it reconciles, and
``/status`` shows the replay's progress. A step is also bounded in time: when one took longer
than ``replay_budget`` (the runtime passes a fifth of the heartbeat interval), the next
re-releases proportionally fewer buckets (:func:`next_replay_step`); a timed replay starts
with a one-bucket step and doubles it while steps keep well within the budget. A bucket count alone
does not bound a step: a loaded machine or a fast source made steps of 200 ms and more,
the replica's heartbeat answers waited behind them, and its consumers declared it failed
while it was only busy (test_strategy_combinations[process-process] flapped between
replicas and broke X). No new input and no timer reaches the network until the replay
is over (``input_open`` is clear): the paper's "a node suspends processing new input tuples
while reconciling". Then the progress event that ends STABILIZATION is fed (caught up once
every SOutput is past its duplicates). ``replay_gate`` is a fault hook: clear, it stalls the
replay between steps (a slow reconciliation, so tests can start a failure during one).

*Permission.* ``AskPermission`` sends ``ReconcileRequest`` to every partner (the other
replicas of the node) over a connection kept per partner; each answer becomes a
``PartnerAnswered`` event, a request that cannot be sent (the connection refused: a dead
partner) a ``PartnerUnreachable`` one. The machine counts them and decides (every reachable
partner granted, one refused; an unreachable or long-silent partner does not count; none
reachable: it grants itself, ``SelfGrant``, which is logged as a warning).

*Test mutation.* Under ``Mutation.STUCK_RECONCILIATION`` (node/streams/mutation.py, passed
in by the replica) the SUnions' REC_REQUESTs are dropped before the machine: the replica
never starts a reconciliation and stays in UP_FAILURE after a failure (a deliberately
broken build, for the checker's liveness property).

Invariants
----------
* The network is only touched from the event loop's thread, inside ``feed`` or the
  replica's data path, never concurrently (asyncio, one thread).
* ``input_open`` is clear only between ``SuspendNewInput`` and ``ResumeNewInput``, and
  while a replay runs.
* At most one replay task; it is the only code that touches the network while it runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from node.config.model import NodeConfig
from node.errors import NodeError
from node.net.transport import Connection, Transport
from node.replica import consistency as cm
from node.streams.mutation import Mutation
from operators import NetworkOutput, QueryNetwork
from protocol.errors import RemoteProtocolError
from protocol.messages import ReconcileGrant, ReconcileRefuse, ReconcileRequest
from protocol.tuples import Kind
from state.checkpoint import Checkpoint, CheckpointStore

if TYPE_CHECKING:  # (pyspark and pyarrow: loaded only where Spark may replay)
    from node.spark.replay import SparkReplayer

__all__ = ["Emit", "Manager", "Partner", "choose_engine", "next_replay_step", "policy_of",
           "replay_eta"]

#: A vectorized replay step may re-release this many times ``replay_step`` buckets: its
#: cost is mostly per step (building columns), so it gains with size; the time budget
#: still bounds every step (``next_replay_step``).
VECTORIZED_STEP_FACTOR = 10
#: A Spark replay step re-releases this many times ``replay_step`` buckets (one Spark job
#: each: its fixed cost is a few hundred ms); no time budget bounds it, as it runs in a
#: worker thread, not in the event loop's turn.
SPARK_STEP_FACTOR = 1000

Emit = Callable[[NetworkOutput, int], None]


def next_replay_step(step: int, took: int, budget: int, cap: int) -> int:
    """Buckets the next replay step may re-release, after a step of ``step`` buckets took
    ``took`` µs, for steps of at most ``budget`` µs and ``cap`` buckets: proportionally
    fewer after an overrun (never below 1), twice as many after a step under half the
    budget (never above ``cap``), else the same. Pure: the manager's clock measures."""
    if took > budget:
        return max(1, step * budget // took)
    if 2 * took < budget:
        return min(cap, 2 * step)
    return step


def replay_eta(done: int, total: int, elapsed_us: int) -> float | None:
    """Seconds a replay that re-released ``done`` of ``total`` input tuples in
    ``elapsed_us`` still needs at that pace; None before it has a pace."""
    if done <= 0 or elapsed_us <= 0:
        return None
    return round(max(0, total - done) * elapsed_us / done / 1e6, 3)


def choose_engine(setting: str, to_replay: int, vectorized_from: int,
                  spark_from: int | None = None) -> str:
    """The replay engine for a reconciliation that re-releases about ``to_replay`` input
    tuples: the setting itself, or for ``auto`` Spark from ``spark_from`` on (None:
    never), vectorized from ``vectorized_from`` on, else per tuple."""
    if setting != "auto":
        return setting
    if spark_from is not None and to_replay >= spark_from:
        return "spark"
    return "vectorized" if to_replay >= vectorized_from else "inproc"


def policy_of(node: NodeConfig, replica: str) -> cm.Policy:
    """The consistency policy of ``replica`` from its node's settings; its rank is its
    index among the node's replicas (lower wins a crossed permission request)."""
    st = node.settings
    rank = [r.name for r in node.replicas].index(replica)
    return cm.Policy(
        up_failure=cm.UpFailureStrategy(st.up_failure),
        stabilization=cm.StabilizationStrategy(st.stabilization),
        method=cm.Method(st.reconciliation),
        # "cec" persists continuously (the runtime's CEC log, operators/cec.py); for a
        # reconciliation the machine checkpoints in memory as on_failure does.
        checkpointing=cm.Checkpointing("off" if not st.fault_tolerance else
                                       "on_failure" if st.checkpointing == "cec" else
                                       st.checkpointing),
        checkpoint_interval=st.checkpoint_interval,
        rank=rank,
    )


class Partner:
    """Another replica of this node, and our connection to it for permission requests."""

    def __init__(self, name: str, host: str, port: int) -> None:
        self.name = name
        self.address = (host, port)
        self.conn: Connection | None = None


class Manager:
    """Owns a replica's consistency machine (see the module docstring)."""

    def __init__(
        self,
        owner: str,
        node: str,
        policy: cm.Policy,
        network: QueryNetwork,
        partners: Sequence[Partner],
        transport: Transport,
        emit: Emit,
        now: Callable[[], int],
        *,
        log: logging.Logger,
        replay_step: int | None = None,
        replay_budget: int | None = None,
        replay_engine: str = "inproc",
        vectorized_from: int = 0,
        spark_from: int | None = None,
        spark: SparkReplayer | None = None,
        warm_after: int = 0,
        on_state: Callable[[cm.State, int], None] | None = None,
        mutation: Mutation | None = None,
    ) -> None:
        """``mutation``: a test-only breakage (read from the environment by the entry point
        only); STUCK_RECONCILIATION concerns the manager (the module docstring).
        ``spark``: the Spark engine where ``replay_engine`` may choose it (``spark``, or
        ``auto`` with a ``spark_from``), its session started once a failure lasted
        ``warm_after`` µs and its log is half way to ``spark_from``."""
        self.owner = owner
        self.node = node
        self.network = network
        network.set_replay_step(replay_step)
        self._step_cap = replay_step
        self._step_budget = replay_budget  # µs a replay step should take at most
        self._engine_setting, self._vectorized_from = replay_engine, vectorized_from
        self._spark_from, self._spark, self._warm_after = spark_from, spark, warm_after
        if (replay_engine == "spark" or spark_from is not None) and spark is None:
            raise NodeError(f"{owner}: the replay engine may be spark, but no Spark was given")
        self._warming = False
        self.engine = "inproc"  # the current (or last) replay's engine
        self._replay_started = 0  # when it began (µs)
        self.partners = list(partners)
        self.transport = transport
        self._emit = emit
        self._now = now
        self._log = log
        self._on_state = on_state  # told of every state change (the run's history)
        # Test-only: the machine never hears that its inputs were corrected.
        self._stuck = mutation is Mutation.STUCK_RECONCILIATION
        self.checkpoints = CheckpointStore()
        self._on_failure = policy.checkpointing is cm.Checkpointing.ON_FAILURE
        # The machine counts the answers of exactly the partners asked.
        policy = replace(policy, partners=tuple(p.name for p in self.partners))
        self.machine, actions = cm.start(policy, now())
        self._events: deque[cm.Event] = deque()
        self._busy = False
        self._reply: Any = None
        self.input_open = asyncio.Event()  # cleared while SUSPEND or a replay holds new input
        self.input_open.set()
        self._suspended = False
        self._replay: asyncio.Task[None] | None = None
        # Tasks the manager starts (the replay, partner requests and their readers): held
        # here, cancelled and awaited when run() ends; one that fails ends run() with it.
        self._tasks: set[asyncio.Task[None]] = set()
        self._failure: BaseException | None = None
        self.replay_gate = asyncio.Event()  # fault hook: cleared, the replay stalls
        self.replay_gate.set()
        self._wake = asyncio.Event()  # a deadline may have moved: the loop re-reads both
        self.stats: dict[str, Any] = {
            "reconciliations": 0, "last_reconciliation": None, "self_grants": 0,
            "permission_requests": 0, "permission_refused": 0, "grants_given": 0,
        }
        self._do_all(actions)

    # ------------------------------------------------------------------ events in
    @property
    def state(self) -> cm.State:
        return self.machine.state

    def feed(self, event: cm.Event) -> None:
        """Queue ``event``; run the machine over the queue unless already running."""
        self._events.append(event)
        if self._busy:
            return
        self._busy = True
        try:
            while self._events:
                before = self.machine.state
                self.machine, actions = cm.step(self.machine, self._events.popleft())
                if self.machine.state is not before:
                    self._state_changed()
                self._do_all(actions)
                if not self._events:
                    # A deadline already due (the checkpoint on entering STABLE) is served
                    # now, before any new input: the next reconciliation replays from here.
                    deadline, now = cm.next_deadline(self.machine), self._now()
                    if deadline is not None and deadline <= now:
                        self._events.append(cm.Tick(now))
        except Exception as exc:
            # An action failed half way (the network may be half rewound): the replica
            # must end with this error, before the deadline loop's next turn touches the
            # network (it would fail on the damage, hiding the cause: torture seed 2 once
            # ended on an output id reused after a rewind had raised in a partner-answer
            # task whose exception was then swallowed).
            self._log.error("%s: %s failed: %s: %s", self.owner, type(event).__name__,
                            type(exc).__name__, exc, exc_info=exc)
            if self._failure is None:
                self._failure = exc
            raise
        finally:
            self._busy = False
            self._wake.set()

    @property
    def engine_setting(self) -> str:
        """The replica's ``replay_engine`` setting (``auto`` or an engine)."""
        return self._engine_setting

    def _state_changed(self) -> None:
        if self._on_state is not None:
            self._on_state(self.machine.state, self.machine.since)
        if (self.machine.state is cm.State.UP_FAILURE and self._spark is not None
                and self._spark.state == "cold" and not self._warming):
            self._warming = True
            self._spawn(self._warm_spark(), "spark warm-up")

    async def _warm_spark(self) -> None:
        """Start the Spark session ahead of need: once the failure lasted ``warm_after``
        and the log to replay is half way to Spark's threshold, checked every
        ``warm_after`` while not STABLE (at once with the setting ``spark``). Its start-up (a JVM:
        seconds of CPU) thus overlaps the failure instead of delaying the replay."""
        spark = self._spark
        if spark is None:  # (spawned only with one)
            raise RuntimeError(f"{self.owner}: warming Spark without a Spark engine")
        try:
            while True:
                if self._engine_setting != "spark":  # (it replays every failure: at once)
                    await asyncio.sleep(self._warm_after / 1e6)
                if self.machine.state is cm.State.STABLE:
                    return
                if (self._engine_setting == "spark"
                        or 2 * self.network.buffered >= (self._spark_from or 0)):
                    self._log.info("%s: failure for %.1f s, %d tuples to replay: warming Spark",
                                   self.owner, (self._now() - self.machine.since) / 1e6,
                                   self.network.buffered)
                    spark.warm()
                    return
        finally:
            self._warming = False

    def before_network_call(self, now: int, stream: str | None = None,
                            arrived: int | None = None) -> None:
        """Call before ``push`` (of a batch on ``stream`` that reached the node at
        ``arrived``) or ``on_timer`` (``stream`` None) at ``now``: if that call may begin a failure episode, the machine hears it
        first, and with ON_FAILURE checkpointing takes its checkpoint now, while all the
        network holds is stable. (Nothing to do with PERIODIC: its checkpoints cover it.)

        (STABLE here means: while the network holds only stable data, which UP_FAILURE on
        detection does too until the first tentative release: ``holds_only_stable``.)
        With ON_FAILURE in STABLE the SUnions first forget what they released: the machine's
        ``ForgetReleased``, which it allows at any STABLE instant (no redo replays from before
        the checkpoint a failure takes, and that checkpoint comes after this, right below),
        here at every call instead of every ``checkpoint_interval``: keeping 200 ms of
        released input cost the replica 6% of its CPU at 90,000 tuples/s."""
        if self._on_failure and self.machine.holds_only_stable:
            self.network.truncate()
            if self.network.episode_may_begin(now, stream, arrived):
                self.feed(cm.EpisodeImminent(now))

    def wake(self) -> None:
        """The network's deadline may have moved (a batch was pushed): re-read it."""
        self._wake.set()

    def on_signals(self, signals: Sequence[tuple[str, Any]], now: int) -> None:
        """The SUnions' UP_FAILURE / REC_REQUEST signals, from one network call, as events.

        UP_FAILUREs go first: an SUnion that began failing in the same call in which
        another one signalled its REC_REQUEST is failing when the machine counts that
        REC_REQUEST (each SUnion signals in order, UP_FAILURE before its REC_REQUEST)."""
        for sunion, sig in sorted(signals, key=lambda s: s[1].kind is not Kind.UP_FAILURE):
            if sig.kind is Kind.UP_FAILURE:
                self.feed(cm.UpFailure(now, sunion))
            elif sig.kind is Kind.REC_REQUEST and not self._stuck:
                self.feed(cm.RecRequest(now, sunion))
        if self.machine.state is cm.State.STABILIZATION:
            self._progress(now)

    def answer(self, req: ReconcileRequest) -> ReconcileGrant | ReconcileRefuse:
        """A partner asks permission to reconcile: the machine answers at once."""
        self._reply = None
        self.feed(cm.PermissionAsked(self._now(), req.replica, req.rank, req.request))
        reply = self._reply
        if reply is None:  # the machine always answers; a missing reply is our bug
            raise RuntimeError(f"{self.owner}: no answer to {req!r}")
        return reply  # type: ignore[no-any-return]

    def replay_progress(self) -> dict[str, Any]:
        """The current (or last) replay: input tuples re-released and to re-release."""
        done, total = self.network.replay_progress()
        running = self._replay is not None
        eta = replay_eta(done, total, self._now() - self._replay_started) if running else None
        spark = self._spark
        if running and self.engine == "spark" and spark is not None:
            # The SUnions' bookkeeping runs ahead of a Spark job (done is its end): its
            # pace is that of the jobs so far.
            eta = spark.eta()
        return {"in_progress": running, "replayed": done, "to_replay": total, "eta_s": eta,
                "stalled": not self.replay_gate.is_set(), "engine": self.engine,
                # Operator runs of vectorized replays: vectorized, or per tuple where not.
                "runs": dict(self.network.replay_runs),
                "spark": None if spark is None else {
                    "session": spark.state, "start_s": spark.start_s, "jobs": spark.jobs,
                    "tuples": spark.tuples, "seconds": round(spark.seconds, 3),
                    "running_tuples": spark.running[0] if spark.running else 0}}

    async def run(self) -> None:
        """Serve the network's and the machine's deadlines, forever (until cancelled, or
        until a task the manager started fails: its exception ends run)."""
        try:
            await self._deadline_loop()
        finally:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.owner} {name}")
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None and self._failure is None:
            self._failure = task.exception()
            self._wake.set()  # the deadline loop raises it

    async def _deadline_loop(self) -> None:
        while True:
            if self._failure is not None:
                raise self._failure
            self._wake.clear()
            # The network's timers wait while new input does (SUSPEND, or a replay, which
            # owns the network meanwhile).
            network = self.network.next_deadline() if self.input_open.is_set() else None
            machine = cm.next_deadline(self.machine)
            deadlines = [d for d in (network, machine) if d is not None]
            if not deadlines:
                await self._wake.wait()
                continue
            delay = (min(deadlines) - self._now()) / 1e6
            if delay > 0:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel that
                # races with the event being set (it is set on every batch), and the
                # replica would then never stop.
                try:
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                continue
            now = self._now()
            if network is not None and network <= now:
                self.before_network_call(now)
                self._emit(self.network.on_timer(now), now)
            machine = cm.next_deadline(self.machine)  # the timer's signals may have moved it
            if machine is not None and machine <= now:
                self.feed(cm.Tick(now))

    # ------------------------------------------------------------------ actions out
    def _do_all(self, actions: Sequence[cm.Action]) -> None:
        for action in actions:
            self._do(action)

    def _do(self, a: cm.Action) -> None:
        now = self._now()
        if isinstance(a, cm.TakeCheckpoint):
            self.take_checkpoint(now)
        elif isinstance(a, cm.ForgetReleased):
            self.network.truncate()
        elif isinstance(a, cm.SetSUnionMode):
            self.network.set_mode(a.mode.value)
        elif isinstance(a, cm.AskPermission):
            self._ask(a.request)
        elif isinstance(a, cm.SelfGrant):
            self.stats["permission_requests"] += 1
            self.stats["self_grants"] += 1
            self._log.warning("%s: granting reconciliation to itself: %s", self.owner, a.why)
        elif isinstance(a, cm.Grant):
            self.stats["grants_given"] += 1
            self._reply = ReconcileGrant(self.owner, a.request)
        elif isinstance(a, cm.Refuse):
            self._reply = ReconcileRefuse(self.owner, a.request, a.reason)
        elif isinstance(a, cm.Reconcile):
            self._reconcile(a.method, now)
        elif isinstance(a, cm.SendRecDone):
            self._emit(self.network.end_reconciliation(now), now)
        elif isinstance(a, cm.SuspendNewInput):
            self._suspended = True
            self._gate_input()
        elif isinstance(a, cm.ResumeNewInput):
            self._suspended = False
            self._gate_input()
        elif isinstance(a, cm.Log):
            self._log.info("%s: %s", self.owner, a.message)

    def take_checkpoint(self, now: int) -> int:
        """Snapshot the network (STABLE only: the machine's action, or an operator's
        request through the control plane); returns the checkpoint's number."""
        seq = (self.checkpoints.last_seq or 0) + 1
        self.checkpoints.put(Checkpoint(seq, now, self.network.checkpoint()))
        self.network.truncate()  # buckets released before this checkpoint are never replayed
        return seq

    def _gate_input(self) -> None:
        if self._suspended or self._replay is not None:
            self.input_open.clear()
        else:
            self.input_open.set()
        self._wake.set()  # the network's timers follow the gate

    def _reconcile(self, method: cm.Method, now: int) -> None:
        if self.machine.policy.checkpointing is cm.Checkpointing.OFF:
            raise NodeError(f"{self.owner}: a failure needs reconciling, but fault tolerance "
                            "is off (fault_tolerance = false: a setting for dpc bench overhead)")
        started = self._replay_started = self._now()
        self.engine = choose_engine(self._engine_setting, self.network.buffered,
                                    self._vectorized_from, self._spark_from)
        self.network.set_engine(self.engine)
        # Timed steps start with one bucket and grow while they keep well within budget.
        first = 1 if self._step_budget is not None and self._step_cap is not None else self._step_cap
        self.network.set_replay_step(first)
        if method is cm.Method.CHECKPOINT:
            snap = self.checkpoints.latest().parts
            out = self.network.rewind(snap, now)
        else:
            out = self.network.undo_start(now)
        self._replay = self._spawn(self._replay_rest(method, started, first), "replay")
        self._gate_input()
        self._emit(out, now)  # the first step (its signals are fed after this step)

    async def _replay_rest(self, method: cm.Method, started: int, step: int | None) -> None:
        """The replay's further steps, one per loop turn, then the progress event."""
        steps, cap, budget = 1, self._step_cap, self._step_budget
        if cap is not None and self.engine == "vectorized":
            cap *= VECTORIZED_STEP_FACTOR
        took = self._now() - started  # the first step ran in _reconcile
        if self.engine == "spark":
            steps += await self._replay_on_spark()
        while self.network.replaying:
            if step is not None and cap is not None and budget is not None:
                step = next_replay_step(step, took, budget, cap)
                self.network.set_replay_step(step)
            await asyncio.sleep(0)  # let heartbeats, partners and the control plane in
            await self.replay_gate.wait()
            now = self._now()
            self._emit(self.network.replay(now), now)
            took = self._now() - now
            steps += 1
        self.network.set_replay_step(self._step_cap)
        self._replay = None
        self._gate_input()
        now = self._now()
        progress = self.replay_progress()
        replayed, to_replay = progress["replayed"], progress["to_replay"]
        ms = (now - started) / 1000
        self.stats["reconciliations"] += 1
        self.stats["last_reconciliation"] = {
            "method": method.value, "engine": self.engine, "at_us": started,
            "input_tuples_to_replay": to_replay,
            "input_tuples_replayed": replayed, "steps": steps, "duration_ms": round(ms, 3),
        }
        self._log.warning("%s: reconciled by %s/redo, engine %s: %d input tuples replayed in "
                          "%d steps, %.1f ms", self.owner, method.value, self.engine, replayed,
                          steps, ms)
        self._progress(now)

    async def _replay_on_spark(self) -> int:
        """The replay's further steps as Spark jobs (node/spark/replay.py), each in a
        worker thread: the event loop goes on meanwhile (heartbeats, partners, status),
        and only this task touches the network, before and after each job."""
        spark = self._spark
        if spark is None:  # (the engine is spark only with one: __init__)
            raise RuntimeError(f"{self.owner}: a Spark replay without a Spark engine")
        self.network.set_replay_step(None if self._step_cap is None
                                     else self._step_cap * SPARK_STEP_FACTOR)
        steps = 0
        while self.network.replaying:
            await asyncio.sleep(0)
            await self.replay_gate.wait()
            now = self._now()
            out, jobs = self.network.replay_remote(now)
            self._emit(out, now)
            if jobs:
                results = await asyncio.to_thread(spark.run, jobs)
                now = self._now()
                self._emit(self.network.finish_remote(jobs, results, now), now)
            steps += 1
        return steps

    def _progress(self, now: int) -> None:
        caught_up = self._replay is None and self.network.caught_up()
        self.feed(cm.ReconciliationProgress(now, caught_up))

    # ------------------------------------------------------------------ permission
    def _ask(self, request: int) -> None:
        self.stats["permission_requests"] += 1
        msg = ReconcileRequest(self.owner, self.node, request, self.machine.policy.rank)
        for p in self.partners:
            self._spawn(self._send(p, msg), f"request to {p.name}")

    async def _send(self, p: Partner, msg: ReconcileRequest) -> None:
        try:
            if p.conn is None:
                p.conn = await self.transport.connect(*p.address)
                self._spawn(self._read(p, p.conn), f"answers of {p.name}")
            await p.conn.send(msg)
        except OSError as exc:
            self._log.info("%s: cannot ask partner %s: %r", self.owner, p.name, exc)
            self.feed(cm.PartnerUnreachable(self._now(), p.name))
            if p.conn is not None:
                await p.conn.close()
                p.conn = None

    async def _read(self, p: Partner, conn: Connection) -> None:
        """The partner's answers, as events, until the connection ends. Only what a dead or
        garbled peer raises ends it quietly (the next request connects again); anything
        else, the machine's refusal of an event included, ends this task and so the
        manager's run."""
        try:
            while True:
                try:
                    msg = await conn.receive()
                except (OSError, RemoteProtocolError) as exc:  # reset, refused, garbage
                    self._log.info("%s: connection to partner %s ended: %r", self.owner,
                                   p.name, exc)
                    break
                if msg is None:
                    break
                if not isinstance(msg, ReconcileGrant | ReconcileRefuse):
                    self._log.error("%s: partner %s sent an unexpected %s; closing",
                                    self.owner, p.name, type(msg).__name__)
                    break
                self._answered(p, msg)
        finally:
            if p.conn is conn:
                p.conn = None
            await conn.close()

    def _answered(self, p: Partner, msg: ReconcileGrant | ReconcileRefuse) -> None:
        if isinstance(msg, ReconcileGrant):
            self.feed(cm.PartnerAnswered(self._now(), p.name, msg.request, True))
            return
        if msg.request == self.machine.request:  # the refusals of our latest request
            self.stats["permission_refused"] += 1
        self.feed(cm.PartnerAnswered(self._now(), p.name, msg.request, False, msg.reason))
