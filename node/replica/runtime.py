"""One replica of a node: the runtime around the pure query network (DESIGN.md section 4).

Data path, in the order a tuple travels::

    InputLink (one per input stream, node/streams/link.py)
      -> QueryNetwork.push (SUnion -> operators -> SOutput, operators/network.py)
      -> Publisher.publish (output buffer + live subscribers, node/streams/publisher.py)
      -> this replica's output log (RUN_DIR/replicas/<name>/<stream>.arrow, node/procs/runlog.py)

Around it, in one TaskGroup: the data server (which also answers heartbeats and partners'
permission requests), the control plane, the consistency manager (node/replica/manager.py:
the replica's one deadline loop, which serves the network's SUnion deadlines and the
machine's; checkpoints in STABLE, reconciliation, REC_DONE, permission) and the HA monitor (node/streams/monitor.py: heartbeats to upstream replicas and
switching the input links). Fault injection (node/faults/rules.py) wraps the transport: the
control plane's ``POST /fault`` cuts this replica off from named processes, or heals.

Back-pressure: before pushing a batch, the replica waits until every subscriber of its
outputs has room, so a slow consumer slows this replica, which reads its inputs more
slowly, which slows its upstream. Nothing is dropped.

The consistency state (STABLE / UP_FAILURE / STABILIZATION) is the manager's machine's,
driven by SUnion's signals; every output stream reports it in heartbeat answers, except
that the secondary of a process pair (``ha``, node/replica/pair.py) reports STANDBY, so
that no consumer reads it until it takes over (docs/ha-modes.md).

Started with ``recover=True`` (``dpc node ... --recover``, after a crash), the replica is
RECOVERING first: it rebuilds its state from a partner's and the upstream buffers, refusing
subscribers and heartbeats until it caught up (node/replica/recovery.py), then rejoins.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sys
from collections.abc import Mapping, Sequence
from itertools import compress
from operator import countOf, itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from node.clock import now_us, virtual
from node.config.crossovers import read_crossovers, thresholds
from node.config.model import ClusterConfig
from node.errors import ActionError, NodeError
from node.faults.ops import Cut, Heal, Shape, Stall, Unstall, from_body
from node.faults.rules import Faults, FaultyTransport
from node.flux import follows_controller
from node.flux.follow import Fetch, follow, http_events
from node.net.tls import server_context
from node.net.traffic import TRAFFIC
from node.net.transport import Transport
from node.procs.control import ControlPlane
from node.procs.looplag import LoopLag
from node.procs.rundir import RunDir
from node.procs.runlog import RunLogWriter
from node.replica import consistency as cm
from node.replica.cec import CecKeeper
from node.replica.flux import FluxMode, flux_duals
from node.replica.manager import Manager, Partner, policy_of
from node.replica.pair import Role, holds_state
from node.replica.pair_modes import PairModes
from node.replica.recovery import (
    StateAsk,
    archive_output_logs,
    fetch_partner_state,
    http_state_ask,
    record_recovery,
)
from node.streams.link import InputLink
from node.streams.monitor import UpstreamMonitor, source_upstreams, upstream_links
from node.streams.mutation import MUTATION_DUPLICATES, Mutation
from node.streams.publisher import Publisher
from operators import NetworkOutput, QueryNetwork, tuple_from_plain, tuple_to_plain
from operators.spec import OperatorSpec
from protocol.messages import (
    ConsistencyState,
    HeartbeatRequest,
    HeartbeatResponse,
    Message,
    ReconcileRequest,
    StandbyCheckpoint,
)
from protocol.tuples import END_OF_STREAM, Kind, Tuple
from state.buffer import OutputBuffer
from state.spill import SpillStore
from state.spill_list import SpillList

if TYPE_CHECKING:
    from node.spark.replay import SparkReplayer

__all__ = ["MUTATION_DUPLICATES", "Replica", "spark_replayer"]

log = logging.getLogger("dpc.replica")
_KIND = itemgetter(0)
_TMAX = itemgetter(3)
#: The kinds whose tuple time moves a stream's frontier (a boundary's tmax is its time; no
#: tentative boundary leaves a node; UNDO and REC_DONE say nothing about progress).
_FRONTIER_KINDS = frozenset({Kind.STABLE, Kind.TENTATIVE, Kind.BOUNDARY})


def spark_replayer(replica: str, engine: str, conf: Mapping[str, str],
                   workdir: Path) -> SparkReplayer:
    """The Spark engine of a replica whose replay engine may be spark: checked for Java
    here, at start, in one line (not a JVM's stack trace in the middle of a failure)."""
    from node.spark.session import java_problem

    problem = java_problem()
    if problem is not None:
        raise NodeError(f"replica {replica}: its replay engine ({engine}) may run on Spark, "
                        f"but {problem}")
    from node.spark.replay import SparkReplayer  # (pyarrow, and pyspark at the session)

    return SparkReplayer(conf, workdir, f"dpc replay {replica}", log)


def _outputs_fed_by(operators: Sequence[OperatorSpec],
                    stream_of: Mapping[str, str]) -> dict[str, frozenset[str]]:
    """Input stream -> the output streams (``stream_of``: SOutput name -> stream) that it
    feeds, through the operators' inputs."""
    readers: dict[str, list[str]] = {}
    for op in operators:
        for name in op.inputs:
            readers.setdefault(name, []).append(op.name)
    fed: dict[str, frozenset[str]] = {}
    for source in {name for op in operators for name in op.inputs} - {op.name for op in operators}:
        seen, todo = set(), [source]
        while todo:
            for reader in readers.get(todo.pop(), ()):
                if reader not in seen:
                    seen.add(reader)
                    todo.append(reader)
        fed[source] = frozenset(stream_of[n] for n in seen if n in stream_of)
    return fed


class Replica(PairModes, FluxMode):
    """A node replica process's state and tasks. ``run(stop)`` until ``stop`` is set."""

    def __init__(self, config: ClusterConfig, name: str, run_dir: RunDir, transport: Transport,
                 *, recover: bool = False, control: bool = True,
                 ask_state: StateAsk | None = None, mutation: Mutation | None = None,
                 loop_lag: LoopLag | None = None, flux_events: Fetch | None = None) -> None:
        """``control=False`` runs without the HTTP control plane (the simulation drives the
        replica's methods directly); ``ask_state`` replaces the HTTP request for a
        partner's state during recovery (node/replica/recovery.py); ``mutation`` is a
        test-only breakage of the input links or of the consistency manager
        (node/streams/mutation.py), read from the environment by the entry point only;
        ``loop_lag``: the process's event-loop gauge (node/procs/looplag.py), run and
        reported in ``/status`` (real processes only); ``flux_events``: the Flux
        controller's events (node/flux/follow.py; the simulation's), instead of its
        process's over HTTP."""
        self.loop_lag = loop_lag
        self.flux_events = flux_events
        self.config = config
        self._control = control
        self._ask_state = ask_state
        self.me = config.replica(name)
        self.node = config.nodes[self.me.node]
        self.faults = Faults(name, log=log)
        transport = FaultyTransport(transport, self.faults, config.addresses())
        self.transport = transport
        self.run_dir = run_dir
        ft = self.node.settings.fault_tolerance
        if not ft:
            log.warning("%s: fault tolerance is OFF (fault_tolerance = false): no checkpoints, "
                        "no undo logs, output buffers keep nothing; a failure cannot be "
                        "corrected (a setting for dpc bench overhead)", name)
        # Operators log their input only where a reconciliation reads it: undo/redo rebuilds
        # from those logs; checkpoint/redo restores a snapshot and replays SUnions' buffers,
        # and no UNDO reaches an operator then (only SUnion's UNDO_START makes one, and the
        # input SUnions absorb upstream's). The logs' upkeep was most of what fault tolerance
        # still cost failure-free (issue 15's profile: ``Operator._trim``).
        undo_logs = ft and self.node.settings.reconciliation == "undo"
        self.network = QueryNetwork(self.node.network, undo_logs=undo_logs)
        # During a long failure, half of buffer_memory holds the input kept for the replay,
        # half the output buffers' streams (evenly); the rest waits on disk (state/spill.py).
        memory, spill_dir = self.node.settings.buffer_memory, run_dir.replica_spill(name)
        if ft:
            self.network.set_spill(spill_dir, memory // 2)
        #: ``checkpointing = "cec"``: the persistent log of continuous eventual checkpoints
        #: (node/replica/cec.py), from which ``--recover`` restores this replica.
        self.cec: CecKeeper | None = None
        if ft and self.node.settings.checkpointing == "cec":
            self.cec = CecKeeper(self.network, run_dir.replica_cec(name), self.node.settings,
                                 log=log, name=name)
        if mutation is Mutation.RESUBSCRIBE_OVERLAP:
            log.error("%s: TEST MUTATION %s: resubscriptions overlap (duplicates)", name,
                      mutation.value)
        elif mutation is Mutation.STUCK_RECONCILIATION:
            log.error("%s: TEST MUTATION %s: this replica never reconciles", name,
                      mutation.value)
        elif mutation is Mutation.LATE_UP_FAILURE:
            log.error("%s: TEST MUTATION %s: no UP_FAILURE on detection (only at the first "
                      "tentative release)", name, mutation.value)
        #: The test-only mutation that keeps unavailable inputs from the machine.
        self._late_up_failure = mutation is Mutation.LATE_UP_FAILURE
        #: Input streams no upstream replica (or source) offers alive and STABLE, as the
        #: monitor last said (``_inputs_down``); the outputs they feed say UP_FAILURE.
        self.inputs_down: frozenset[str] = frozenset()
        # SOutput operator name -> global stream name
        self.stream_of = {op: stream for stream, op in self.node.outputs.items()}
        self.fed_by = _outputs_fed_by(self.network.spec.operators, self.stream_of)
        buffers: dict[str, OutputBuffer] = {}
        share = memory // 2 // max(1, len(self.node.outputs))
        for stream in self.node.outputs:
            spill = SpillList(SpillStore(spill_dir / "output", stream), share) if ft else None
            buf = OutputBuffer(stream, retain=ft, spill=spill)
            buf.set_consumers(config.consumers_of(stream))
            buffers[stream] = buf
        self.buffers = buffers
        #: Output stream -> its frontier: the largest tuple time published on it (heartbeats).
        self.frontiers = dict.fromkeys(self.node.outputs, 0)
        self.publisher = Publisher(name, buffers, responder=self._respond,
                                   consumer_grace=config.consumer_grace, log=log,
                                   splits={s: config.splits(s) for s in buffers})
        #: While recovering: what it is waiting for (status), else None.
        self.recovering: str | None = None
        self.recovery: dict[str, Any] | None = None  # the last recovery, for status
        #: ``ha = "amnesia"``: this replica's secondary holds nothing and restarts the query
        #: empty when it takes over (:meth:`_take_over_empty`); a restart rebuilds nothing.
        self.amnesia = self.node.settings.ha == "amnesia"
        #: ``ha = "passive_standby"``: the primary ships checkpoints (node/replica/standby.py),
        #: the secondary holds the last one and restores it when it takes over.
        self.passive = self.node.settings.ha == "passive_standby"
        #: ``ha = "upstream_backup"``: the primary ships restart points (operators/restart.py),
        #: the secondary restarts the network from the last one on upstream's replay.
        self.upstream = self.node.settings.ha == "upstream_backup"
        #: The secondary ships or holds what node/replica/standby.py moves (not amnesia).
        self.shipping = self.passive or self.upstream
        #: A restart that copies a partner's state (DPC, active standby); a pair whose
        #: secondary does not process restarts as a secondary with nothing to rebuild.
        self.restarted = recover
        if recover and not (self.amnesia or self.shipping):
            self._set_recovering("waiting for a partner's state")
        self.links = [
            InputLink(transport, stream, name, self._producers(stream), self._on_batch, log=log,
                      columns=self.node.settings.data_path == "columns",
                      mutation=mutation)
            for stream in self.node.inputs
        ]
        self.monitor = UpstreamMonitor(
            name, transport, upstream_links(config, self.links),
            interval=self.node.settings.heartbeat_interval,
            misses=self.node.settings.heartbeat_misses, lag=self.node.settings.wait, log=log,
            duals=flux_duals(config, self.me.name),
            # (The mutation late-up-failure: sources unwatched, the machine never told.)
            sources=None if self._late_up_failure else source_upstreams(config, self.links),
            on_cut_off=None if self._late_up_failure else self._inputs_down,
        )
        self.incarnation = 1
        if recover:  # the crashed incarnation's logs stay, beside the new ones
            # This incarnation's number: the logs before it are incarnations 1 .. n-1.
            self.incarnation = archive_output_logs(run_dir, name, list(self.node.outputs)) + 1
        self.output_logs = {s: RunLogWriter(run_dir.replica_output(name, s)) for s in self.node.outputs}
        partners = [Partner(r.name, r.host, r.data_port) for r in self.node.replicas if r.name != name]
        engine = self.me.replay_engine or self.node.settings.replay_engine
        vectorized_from, spark_from = thresholds(
            self.node.settings.vectorized_from, self.node.settings.spark_from, config.spark,
            read_crossovers())
        #: The Spark replay engine, where this replica's engine may be spark.
        self.spark: SparkReplayer | None = None
        if engine == "spark" or (engine == "auto" and spark_from is not None):
            self.spark = spark_replayer(name, engine, config.spark, spill_dir / "spark")
        else:
            spark_from = None
        self.manager = Manager(
            name, self.node.name, policy_of(self.node, name), self.network, partners,
            transport, self._emit, now_us, log=log, replay_step=self.node.settings.replay_step,
            # A replay step leaves room for the heartbeat answers (manager docstring).
            replay_budget=self.node.settings.heartbeat_interval // 5,
            replay_engine=engine, vectorized_from=vectorized_from, spark_from=spark_from,
            spark=self.spark, warm_after=3 * self.node.settings.x,
            on_state=lambda state, at: self._record_state(state.value, at), mutation=mutation,
        )
        self._init_pair(name, recover, transport)
        self.started = now_us()
        self.counters: dict[str, Any] = {
            "tuples_in": dict.fromkeys(self.node.inputs, 0),
            "tuples_out": dict.fromkeys(self.node.outputs, 0),
            "tentative_out": dict.fromkeys(self.node.outputs, 0),
            "undo_out": dict.fromkeys(self.node.outputs, 0),
        }

    def _producers(self, stream: str) -> list[tuple[str, int]]:
        producer = self.config.producer_of(stream)
        if stream in self.config.sources:
            src = self.config.sources[stream]
            return [(src.host, src.port)]
        return [(r.host, r.data_port) for r in producer.replicas]  # type: ignore[union-attr]

    # ------------------------------------------------------------------ running
    async def run(self, stop: asyncio.Event) -> None:
        server = await self.transport.serve(self.me.host, self.me.data_port, self.publisher.handle)
        control = None
        if self._control:
            control = ControlPlane(
                self.me.name, self.me.control_address, self.me.control_port, self.config.token,
                self.status,
                {"checkpoint": self._checkpoint_action, "shutdown": self._shutdown_action(stop),
                 "fault": self._fault_action, "digest": self._digest_action,
                 "state": self.state_for_partner},
                tls=None if self.config.tls is None else server_context(self.config.tls),
                health=lambda: {"ready": not self.recovering, "incarnation": self.started},
            )
            await control.start()
        log.info("replica %s of node %s serving data on %s:%d, control on %s:%d",
                 self.me.name, self.node.name, self.me.host, self.me.data_port,
                 self.me.control_address, self.me.control_port)
        self.run_dir.mark_ready(self.me.name)
        if self.spark is not None and self.manager.engine_setting == "spark":
            # Every reconciliation of this replica replays on Spark: its session starts now,
            # in the background, not in the first failure (status: consistency.replay.spark).
            self.spark.warm()
        self._record_state(self.state, now_us())
        if self.cec is not None and not self.recovering:
            self.cec.start_fresh(now_us())
            self._cap_acks()
        try:
            async with asyncio.TaskGroup() as tg:
                tasks: list[asyncio.Task[None]] = []

                async def start() -> None:
                    if self.recovering:
                        await (self._recover() if self.cec is None else self._recover_from_log())
                        tasks.append(tg.create_task(self._rejoin_when_caught_up(), name="rejoin"))
                    tasks.extend(tg.create_task(link.run(), name=f"link {link.stream}")
                                 for link in self.links)
                    tasks.append(tg.create_task(self.manager.run(), name="consistency manager"))
                    tasks.append(tg.create_task(self.monitor.run(), name="ha monitor"))
                    if self.keepalive is not None:
                        tasks.append(tg.create_task(self.keepalive.run(), name="keep-alive"))
                    if self.shipping and self.pair is not None:
                        tasks.append(tg.create_task(self._ship(), name="checkpoints"))
                    if follows_controller(self.config, self.me.name):
                        tasks.append(tg.create_task(self._follow_controller(), name="flux"))

                tasks.append(tg.create_task(start(), name="start"))
                if self.loop_lag is not None:
                    tasks.append(tg.create_task(self.loop_lag.run(), name="loop lag"))
                # A bug in the data server's handler ends the replica (transport.py's rule).
                tasks.append(tg.create_task(server.failed(), name="data server"))
                await stop.wait()
                for t in tasks:
                    t.cancel()
        finally:
            await server.close()
            if control is not None:
                await control.stop()
            for w in self.output_logs.values():
                w.close()
            self.network.close_spill()  # the segments die with the process (state/spill.py)
            if self.spark is not None:
                self.spark.stop()
            if self.cec is not None:
                self.cec.close()
            for buf in self.buffers.values():
                buf.close_spill()
            log.info("replica %s stopped", self.me.name)

    async def _follow_controller(self) -> None:
        """The Flux controller's events, each once, in order (node/replica/flux.py)."""
        if self.flux_events is not None:  # the simulation's controller
            await follow(self.flux_events, self.flux_event, self.flux_idle)
            return
        async with http_events(self.config, self.me.name, log) as fetch:
            await follow(fetch, self.flux_event, self.flux_idle)

    @property
    def state(self) -> str:
        return "RECOVERING" if self.recovering else self.manager.state.value

    # ------------------------------------------------------------------ recovery
    def _set_recovering(self, why: str | None) -> None:
        """While ``why`` is set, status says RECOVERING and every Subscribe is refused."""
        was = self.state if hasattr(self, "manager") else None
        self.recovering = self.publisher.refusing = why
        if was is not None and self.state != was:
            self._record_state(self.state, now_us())

    def _inputs_down(self, down: frozenset[str]) -> None:
        """The monitor's word after an evaluation that changed it: the inputs that no
        upstream replica (or source) offers alive and STABLE. The machine hears it at once
        (``InputsChanged``: UP_FAILURE on detection, before any tentative release; STABLE
        again if all are back before one). Once every input ended, nothing is missing."""
        if self.ended:
            down = frozenset()
        was, self.inputs_down = self.inputs_down, down
        if down == was:
            return
        if down - was:
            log.warning("%s: input %s unavailable (no upstream replica alive and STABLE)",
                        self.me.name, ", ".join(sorted(down - was)))
        if was - down:
            log.warning("%s: input %s available again", self.me.name,
                        ", ".join(sorted(was - down)))
        self.manager.feed(cm.InputsChanged(now_us(), down))

    def _record_state(self, state: str, at: int) -> None:
        """Append a state change to this replica's states log (merged into the history)."""
        with open(self.run_dir.replica_states(self.me.name), "ab") as f:
            f.write(orjson.dumps({"t": at, "state": state}) + b"\n")

    async def _recover(self) -> None:
        """Rebuild from a partner's state (node/replica/recovery.py, steps 2-3)."""
        partners = [r for r in self.node.replicas if r.name != self.me.name]
        if self._ask_state is not None:
            partner, st = await fetch_partner_state(partners, self._ask_state, log, self.me.name)
        else:
            async with http_state_ask(self.config, self.me.name, self.started) as ask:
                partner, st = await fetch_partner_state(partners, ask, log, self.me.name)
        self.network.restore(st["network"])
        for link in self.links:
            link.last_stable_id, link.last_tentative_id = st["inputs"][link.stream]
        held, trimmed = st.get("held", {}), st.get("trimmed", {})
        for stream, buf in self.buffers.items():
            # With the partner's buffered tail, a consumer it had not served yet (a cut
            # link, a slow reader) can resume here too: otherwise this replica refuses its
            # Subscribe (trimmed) and that consumer has only the partner to turn to.
            buf.start_after(st["outputs"][stream],
                            [tuple_from_plain(p) for p in held.get(stream, ())],
                            trimmed.get(stream))
        now = now_us()
        self.manager.take_checkpoint(now)
        self._set_recovering("catching up with its inputs")
        if self.pair is not None:  # a copy of its partner's state: it may serve
            self.pair = holds_state(self.pair)
        self.recovery = {"from": partner, "restored_at_us": now, "outputs": st["outputs"],
                         "inputs": st["inputs"], "rejoined_at_us": None}
        record_recovery(self.run_dir, self.me.name,
                        {"replica": self.me.name, "incarnation": self.incarnation, **self.recovery})
        log.warning("%s: recovering: restored %s's state (outputs after %s, inputs from %s); "
                    "catching up from the upstream buffers", self.me.name, partner,
                    st["outputs"], st["inputs"])

    async def _recover_from_log(self) -> None:
        """Rebuild from this replica's own CEC log (node/replica/cec.py): no partner is
        asked. The eventual checkpoint is read in a thread (a long extent takes seconds; the
        control plane answers meanwhile, its status showing the progress); nothing else
        touches the network before the links start."""
        keeper = self.cec
        if keeper is None:
            raise NodeError(f"{self.me.name}: recovering from a log without CEC checkpoints")
        if virtual():
            rec = keeper.recover(now_us())
        else:  # the reading in a thread (seconds for a long extent), the restore here
            started = asyncio.get_running_loop().time()
            ec, frames = await asyncio.to_thread(keeper.read)
            rec = keeper.restore(ec, frames, now_us(),
                                 asyncio.get_running_loop().time() - started)
        now = now_us()
        for link in self.links:
            s = rec.network.resume[link.stream]
            link.last_stable_id = link.last_tentative_id = s
        self._cap_acks()
        for stream, buf in self.buffers.items():
            op = self.node.outputs[stream]
            buf.start_after(rec.last_ids[op], rec.held[op], rec.trimmed[op])
        self._emit(rec.network.output, now)  # the UNDO of a tentative tail it had sent
        self.manager.take_checkpoint(now)
        self._set_recovering("catching up with its inputs")
        outputs = {stream: rec.last_ids[op] for stream, op in self.node.outputs.items()}
        inputs = {link.stream: [link.last_stable_id, link.last_tentative_id]
                  for link in self.links}
        self.recovery = {"from": "its CEC log", "restored_at_us": now, "outputs": outputs,
                         "inputs": inputs, "rejoined_at_us": None,
                         "ec_load_s": round(rec.seconds, 3), "extent_frames": rec.frames_read,
                         "parts": rec.network.parts}
        record_recovery(self.run_dir, self.me.name,
                        {"replica": self.me.name, "incarnation": self.incarnation, **self.recovery})
        log.warning("%s: recovering from its CEC log: %d parts from %d frames in %.2f s "
                    "(outputs after %s, inputs from %s); catching up from the upstream buffers",
                    self.me.name, rec.network.parts, rec.frames_read, rec.seconds, outputs, inputs)

    async def _rejoin_when_caught_up(self) -> None:
        """Step 4: refuse subscribers until every input link brought a batch from upstream
        and every SUnion releases within the catch-up slack (plus a bucket) of now, or the
        node is in a failure of its own."""
        slack = self.manager.machine.policy.catch_up_slack + self.node.settings.bucket
        while self.manager.state.value == "STABLE":
            fed = all(link.batches_in > 0 for link in self.links)
            released = self.network.released_to
            behind = now_us() - (0 if released is None else released)
            if fed and behind < slack:
                break
            await asyncio.sleep(0.05)
        self._set_recovering(None)
        if self.recovery is None:  # _recover records it before this task starts
            raise NodeError(f"{self.me.name}: rejoining without a recovery record")
        self.recovery["rejoined_at_us"] = now = now_us()
        log.warning("%s: recovered: caught up %.2f s after the restore; accepting subscribers",
                    self.me.name, (now - self.recovery["restored_at_us"]) / 1e6)

    async def state_for_partner(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """A recovering partner asks for this replica's state (node/replica/recovery.py, step 2):
        ``POST /state``, or a direct call in the simulation. Raises ActionError unless STABLE
        with nothing tentative in force."""
        if self.state != "STABLE":
            raise ActionError(f"{self.me.name} is {self.state}, not STABLE: ask again later")
        tentative = sorted(s for s, b in self.buffers.items() if b.last_id != b.last_stable_id)
        if tentative:
            raise ActionError(f"{self.me.name} has tentative output in force on {tentative}")
        log.warning("%s: giving its state to %s", self.me.name, body.get("for", "?"))
        # Flux: until that incarnation caught up, or failed (node/replica/flux.py).
        self.pause_for_catch_up(str(body.get("for", "?")), int(body.get("incarnation", 0)))
        return {
            "replica": self.me.name,
            "network": self.network.snapshot(),
            "inputs": {link.stream: [link.last_stable_id, link.last_tentative_id]
                       for link in self.links},
            "outputs": {s: b.last_id for s, b in self.buffers.items()},
            "held": {s: [tuple_to_plain(t) for t in b] for s, b in self.buffers.items()},
            "trimmed": {s: b.trimmed_up_to for s, b in self.buffers.items()},
        }

    def _respond(self, msg: Message) -> Message | None:
        """The data port's answers: heartbeats (each output stream's state: the node's, but
        UP_FAILURE where an input it depends on has no upstream replica alive and STABLE,
        and STABLE for the others while the network holds only stable data, STABLE or
        UP_FAILURE on detection: paper section 3.3, "a subset of its outputs may be
        unaffected by the failure and may remain in the stable state"; and its frontier,
        the largest tuple time published on it, which tells downstream
        whether an UP_FAILURE replica makes progress; none while recovering), and partners'
        permission requests (the consistency manager decides)."""
        if isinstance(msg, HeartbeatRequest):
            if self.recovering:
                return None
            state = ConsistencyState[self.state]
            streams = dict.fromkeys(self.node.outputs, state)
            if self.manager.machine.holds_only_stable:
                streams = dict.fromkeys(self.node.outputs, ConsistencyState.STABLE)
                # An input with no upstream replica (or source) left, or none that offers
                # it STABLE, is a failure (paper section 2): the outputs it feeds say
                # UP_FAILURE from its detection on (the machine hears it too: UP_FAILURE on
                # detection), so that downstream moves to a STABLE partner at once, and
                # never moves here from one that still has input (simulate seed 922: a
                # client left the replica serving tentative results for one whose upstream
                # replicas were all in UP_FAILURE with no input, and waited there).
                for stream in self.monitor.cut_off():
                    streams.update(dict.fromkeys(self.fed_by.get(stream, ()),
                                                 ConsistencyState.UP_FAILURE))
            if self.pair is not None and self.pair.role is Role.SECONDARY:
                streams = dict.fromkeys(streams, ConsistencyState.STANDBY)  # serves nobody
            return HeartbeatResponse(self.me.name, msg.seq, state, streams,
                                     {s: self.frontiers[s] for s in streams})
        if isinstance(msg, StandbyCheckpoint):
            return self._standby_answer(msg)
        if not isinstance(msg, ReconcileRequest):  # the publisher passes these three only
            raise NodeError(f"{self.me.name}: no answer to a {type(msg).__name__}: the data "
                            "port answers heartbeat and permission requests only")
        return self.manager.answer(msg)

    async def _on_batch(self, stream: str, tuples: list[Tuple] | Any) -> None:
        arrived = now_us()
        await self.publisher.wait_for_room()
        await self.manager.input_open.wait()  # SUSPEND or a replay: hold new input
        now = now_us()
        # A batch held here waited in this node: SUnion counts that toward alpha*X.
        held = arrived if arrived < now else None
        self.counters["tuples_in"][stream] += len(tuples)
        self.manager.before_network_call(now, stream, held)
        self._emit(self.network.push(stream, tuples, now, held), now)
        self.manager.wake()  # the network's next deadline may have moved

    async def _checkpoint_action(self, body: Mapping[str, Any]) -> dict[str, Any]:
        if self.state != "STABLE":
            return {"taken": False, "reason": f"checkpoints are taken only in STABLE (now {self.state})"}
        return {"taken": True, "seq": self.manager.take_checkpoint(now_us())}

    async def _fault_action(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /fault``: :meth:`apply_fault`."""
        return self.apply_fault(body)

    def apply_fault(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Fault injection at this replica (node/faults/rules.py): one operation of the
        fault vocabulary, as the body of ``POST /fault`` (node/faults/ops.py: cut, shape,
        heal, stall, unstall), read and applied. The simulation calls it with the bodies
        ``dpc run`` sends. A heal of all also ends a stall; a stall holds this replica's
        reconciliations between two replay steps (the manager's replay gate).

        Names must be the cluster's other processes. A bad body, key or value is an
        :class:`ActionError` (a 400) naming it; nothing changes then."""
        # Every process: clients too (they listen nowhere, but a replica serves them).
        known = {*self.config.sources, *self.config.clients,
                 *(r.name for n in self.config.nodes.values() for r in n.replicas)} - {self.me.name}
        match from_body(body, owner=self.me.name, known=known):
            case Stall():
                self.manager.replay_gate.clear()
                log.warning("%s: replay stalled", self.me.name)
                return {"replay": self.manager.replay_progress()}
            case Unstall():
                self.manager.replay_gate.set()
                log.warning("%s: replay resumed", self.me.name)
                return {"replay": self.manager.replay_progress()}
            case Cut(peers, direction, kind):
                self.faults.cut(peers, direction=direction, kind=kind)
                return {"cut": self.faults.cut_peers, "rules": self.faults.status()["rules"]}
            case Shape(peers, delay, bandwidth, slow):
                self.faults.shape(peers, delay=delay, bandwidth=bandwidth, slow=slow)
                return {"shapes": self.faults.status()["shapes"]}
            case Heal(None):
                self.manager.replay_gate.set()
                return {"healed": self.faults.heal(), "cut": self.faults.cut_peers}
            case Heal(peers):
                return {"healed": self.faults.heal(peers), "cut": self.faults.cut_peers}

    def _shutdown_action(self, stop: asyncio.Event) -> Any:
        async def shutdown(body: Mapping[str, Any]) -> dict[str, Any]:
            stop.set()
            return {"stopping": True}

        return shutdown

    # ------------------------------------------------------------------ output
    def _cap_acks(self) -> None:
        """Acknowledge upstream only what a recovery from the CEC log would not replay: from
        the log's start and right after a recovery too, whatever happens next (a replica
        that recovered into a failure writes no frame for a while, and must not ack meanwhile
        what a second crash would need again)."""
        if self.cec is None:
            return
        acks = self.cec.acks()
        for link in self.links:
            link.ack_cap = acks.get(link.stream, 0)

    def _emit(self, result: NetworkOutput, now: int) -> None:
        if self.cec is not None and self.cec.after(result, now):
            # The log holds the step (before anything of it leaves): acks follow the
            # eventual checkpoint, old segments go.
            self._cap_acks()
            self.cec.retain({op: self.buffers[s].trimmed_up_to
                             for s, op in self.node.outputs.items()})
        for op_name, tuples in result.outputs.items():
            if not tuples:
                continue
            stream = self.stream_of[op_name]
            self.publisher.publish(stream, tuples)
            self.output_logs[stream].write(tuples, now)
            if self.passive:
                self.shipper.queued(stream, tuples)
            # Counted in C (countOf over the kinds), not by a Python loop per tuple.
            kinds = list(map(_KIND, tuples))
            top = max(compress(map(_TMAX, tuples), map(_FRONTIER_KINDS.__contains__, kinds)),
                      default=0)
            if top > self.frontiers[stream]:
                self.frontiers[stream] = top
            self.counters["tuples_out"][stream] += countOf(kinds, Kind.STABLE)
            self.counters["tentative_out"][stream] += countOf(kinds, Kind.TENTATIVE)
            self.counters["undo_out"][stream] += countOf(kinds, Kind.UNDO)
        if self.upstream and self.pair is not None and self.pair.role is Role.PRIMARY:
            self._note_restart_point(now)
        if result.signals:
            for op, signal in result.signals:
                log.warning("%s: %s signalled %s", self.me.name, op, signal.kind.name)
            self.manager.on_signals(result.signals, now)

    # ------------------------------------------------------------------ status
    @property
    def ended(self) -> bool:
        """Every SUnion released the end-of-stream boundary: nothing more will change the
        operators' state, so replicas of one node now have equal digests. An amnesia
        secondary, whose links are parked, reads nothing: no end will come, and nothing
        changes either."""
        if self.links and all(link.parked for link in self.links):
            return True
        released = self.network.released_to
        return released is None or released >= END_OF_STREAM // 2

    async def _digest_action(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Operator state digests on request (snapshotting is not for every /status poll)."""
        return {"state": self.state, "state_hashes": self.state_hashes()}

    def state_hashes(self) -> dict[str, str]:
        """A digest of each operator's state (``digest_state``: no undo-log bookkeeping;
        SUnion's buffers hold arrival times: left out); replicas that processed the same
        stable input have the same digests."""
        return {
            name: hashlib.sha256(orjson.dumps(state, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]
            for name, state in self.network.digest_states().items()
        }

    def status(self) -> dict[str, Any]:
        now = now_us()
        m = self.manager.machine
        reachable = cm.reachable(m)
        names = self.config.addresses()
        ha = self.monitor.status()
        replay = self.manager.replay_progress()
        spill = sum((b.spill_stats() for b in self.buffers.values()), self.network.spill_stats())
        kept = self.network.kept_in_memory()
        return {
            "name": self.me.name,
            "kind": "replica",
            "node": self.node.name,
            "state": self.state,
            # Every SUnion released the sources' end of stream: what the digests wait for.
            "ended": self.ended,
            "time_in_state_s": round((now - m.since) / 1e6, 3),
            "uptime_s": round((now - self.started) / 1e6, 3),
            "consistency": {
                "policy": f"{m.policy.up_failure.value}/{m.policy.stabilization.value}, "
                          f"{m.policy.method.value}/redo, rank {m.policy.rank}",
                "permission": m.permission.value,
                # Per partner, our requests it left unanswered in a row, and whether its grant
                # is needed (not once it refused the connection or was silent too long).
                "partners": {p: {"unanswered": n, "counts": p in reachable}
                             for p, n in zip(m.policy.partners, m.unanswered, strict=True)},
                "sunion_mode": m.sunion_mode.value,
                "replay": replay,
                "last_reconciliation": self.manager.stats["last_reconciliation"],
            },
            "recovery": {"recovering": self.recovering, "last": self.recovery},
            # A process pair's role (node/replica/pair.py); None under DPC.
            "pair": None if self.pair is None else {
                "ha": self.node.settings.ha, "role": self.pair.role.value,
                "partner": self.pair.partner,
                "partner_alive": None if self.keepalive is None
                else self.keepalive.tracker.alive(self.pair.partner),
                # What node/replica/standby.py moved: sent (primary), applied (secondary).
                "checkpoints_sent": self.shipper.sent,
                "checkpoints_acked": self.shipper.acked_seq,
                "checkpoint_held": self.standby.seq, "flux": self.flux_status()},
            # Bytes on the wire (node/net/traffic.py): dpc bench ha's bandwidth.
            "traffic": TRAFFIC.status(),
            "cec": None if self.cec is None else self.cec.status(),
            "faults": {**self.faults.status(), "replay_stalled": not self.manager.replay_gate.is_set()},
            "inputs": {
                link.stream: {
                    "upstream": names.get(link.current) if link.current else None,
                    "connected": link.connected,
                    "last_stable_id": link.last_stable_id,
                    "last_tentative_id": link.last_tentative_id,
                    "tmax_filter": link.tmax.armed,
                    **ha.get(link.stream, {}),
                }
                for link in self.links
            },
            # An output stream's consistency state is the node's (one SUnion per node today).
            "outputs": {s: {"state": self.state, **st} for s, st in self.publisher.stats().items()},
            "counters": {
                **self.counters,
                "checkpoints": m.checkpoints,
                "reconciliations": m.reconciliations,
                "permission_refusals": m.refusals,
                **{k: v for k, v in self.manager.stats.items() if k != "last_reconciliation"},
            },
            "gauges": {
                "buffer_tuples": {s: st.get("buffered", 0) for s, st in self.publisher.stats().items()},
                "sunion_buffered": self.network.buffered,
                "in_failure": int(self.network.in_failure),
                # The state as its wire code (0 STABLE, 1 UP_FAILURE, 2 STABILIZATION).
                "consistency_state": ConsistencyState[self.manager.state.value].value,
                "recovering": int(self.recovering is not None),
                "time_in_state_seconds": round((now - m.since) / 1e6, 3),
                "replaying": int(replay["in_progress"]),
                "replay_replayed_tuples": replay["replayed"],
                "replay_to_replay_tuples": replay["to_replay"],
                # At the pace so far; -1 while no replay is under way (or has no pace yet).
                "replay_eta_seconds": -1 if replay["eta_s"] is None else replay["eta_s"],
                "replay_vectorized": int(replay["engine"] == "vectorized"),
                "replay_spark": int(replay["engine"] == "spark"),
                # The Spark engine (where the replica may use it): its session up, its jobs.
                "spark_session_ready": int((replay["spark"] or {}).get("session") == "ready"),
                "spark_jobs": (replay["spark"] or {}).get("jobs", 0),
                "replay_vectorized_runs": replay["runs"]["vectorized"],
                "replay_per_tuple_runs": replay["runs"]["per_tuple"],
                # Tuples behind a boundary their upstream had already promised: bad input.
                "late_dropped": self.network.late_dropped,
                # The SUnions' input kept for a replay beyond buffer_memory, on disk.
                "kept_memory_tuples": kept[0],
                "kept_memory_limit_tuples": kept[1],
                "spilled_tuples": spill.tuples,
                "spill_segments": spill.segments,
                "spill_bytes": spill.bytes,
                **({} if self.cec is None else self.cec.gauges()),
                # The process's live Python heap (blocks allocated, any size): what a leak
                # grows. RSS also keeps what the allocator holds after a burst (dpc soak).
                "heap_blocks": sys.getallocatedblocks(),
                **(self.loop_lag.gauges() if self.loop_lag is not None else {}),
            },
        }
