"""One replica of a node: the runtime around the pure query network (DESIGN.md section 4).

Data path, in the order a tuple travels::

    InputLink (one per input stream, node/link.py)
      -> QueryNetwork.push (SUnion -> operators -> SOutput, operators/network.py)
      -> Publisher.publish (output buffer + live subscribers, node/publisher.py)
      -> this replica's output log (RUN_DIR/replicas/<name>/<stream>.jsonl)

Around it, in one TaskGroup: the data server, the control plane, a timer that wakes the
network at its next SUnion deadline, and a checkpointer that snapshots the network every
``checkpoint_interval`` while STABLE (and lets each SUnion drop the buckets before it).

Back-pressure: before pushing a batch, the replica waits until every subscriber of its
outputs has room, so a slow consumer slows this replica, which reads its inputs more
slowly, which slows its upstream. Nothing is dropped.

The consistency state here is STABLE / UP_FAILURE, driven by SUnion's signals; the full
DPC state machine (reconciliation, replica switching) is the next issue's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from operator import countOf, itemgetter
from typing import Any

from operators import NetworkOutput, QueryNetwork
from operators.sunion import SUnion
from protocol.tuples import Kind, Tuple
from state.buffer import OutputBuffer
from state.checkpoint import CheckpointStore, take_checkpoint

from .config import ClusterConfig
from .control import ControlPlane
from .link import InputLink
from .publisher import Publisher
from .runlog import JsonlTupleWriter, RunDir
from .transport import Transport

__all__ = ["Replica", "now_us"]

log = logging.getLogger("dpc.replica")
_KIND = itemgetter(0)


def now_us() -> int:
    """Wall-clock microseconds: the unit of tuple time, arrival and SUnion deadlines."""
    return time.time_ns() // 1000


class Replica:
    """A node replica process's state and tasks. ``run(stop)`` until ``stop`` is set."""

    def __init__(self, config: ClusterConfig, name: str, run_dir: RunDir, transport: Transport) -> None:
        self.config = config
        self.me = config.replica(name)
        self.node = config.nodes[self.me.node]
        self.transport = transport
        self.run_dir = run_dir
        self.network = QueryNetwork(self.node.network)
        self.sunions = [op for op in self.network.operators if isinstance(op, SUnion)]
        # SOutput operator name -> global stream name
        self.stream_of = {op: stream for stream, op in self.node.outputs.items()}
        buffers: dict[str, OutputBuffer] = {}
        for stream in self.node.outputs:
            buf = OutputBuffer(stream)
            buf.set_consumers(config.consumers_of(stream))
            buffers[stream] = buf
        self.publisher = Publisher(name, buffers, log=log)
        self.links = [
            InputLink(transport, stream, name, self._producers(stream), self._on_batch, log=log)
            for stream in self.node.inputs
        ]
        self.output_logs = {s: JsonlTupleWriter(run_dir.replica_output(name, s)) for s in self.node.outputs}
        self.checkpoints = CheckpointStore()
        self.state = "STABLE"
        self.state_since = now_us()
        self.started = now_us()
        self.counters: dict[str, Any] = {
            "tuples_in": dict.fromkeys(self.node.inputs, 0),
            "tuples_out": dict.fromkeys(self.node.outputs, 0),
            "tentative_out": dict.fromkeys(self.node.outputs, 0),
            "undo_out": dict.fromkeys(self.node.outputs, 0),
            "checkpoints": 0,
        }
        self._deadline_changed = asyncio.Event()
        self._checkpoint_seq = 0

    def _producers(self, stream: str) -> list[tuple[str, int]]:
        producer = self.config.producer_of(stream)
        if stream in self.config.sources:
            src = self.config.sources[stream]
            return [(src.host, src.port)]
        return [(r.host, r.data_port) for r in producer.replicas]  # type: ignore[union-attr]

    # ------------------------------------------------------------------ running
    async def run(self, stop: asyncio.Event) -> None:
        server = await self.transport.serve(self.me.host, self.me.data_port, self.publisher.handle)
        control = ControlPlane(
            self.me.name, self.config.control_host, self.me.control_port, self.config.token,
            self.status, {"checkpoint": self._checkpoint_action, "shutdown": self._shutdown_action(stop)},
        )
        await control.start()
        log.info("replica %s of node %s serving data on %s:%d, control on %s:%d",
                 self.me.name, self.node.name, self.me.host, self.me.data_port,
                 self.config.control_host, self.me.control_port)
        self.run_dir.mark_ready(self.me.name)
        try:
            async with asyncio.TaskGroup() as tg:
                tasks = [tg.create_task(link.run(), name=f"link {link.stream}") for link in self.links]
                tasks.append(tg.create_task(self._timer_loop(), name="timer"))
                tasks.append(tg.create_task(self._checkpoint_loop(), name="checkpointer"))
                await stop.wait()
                for t in tasks:
                    t.cancel()
        finally:
            await server.close()
            await control.stop()
            for w in self.output_logs.values():
                w.close()
            log.info("replica %s stopped", self.me.name)

    async def _on_batch(self, stream: str, tuples: list[Tuple] | Any) -> None:
        await self.publisher.wait_for_room()
        now = now_us()
        self.counters["tuples_in"][stream] += len(tuples)
        self._emit(self.network.push(stream, tuples, now), now)
        self._deadline_changed.set()

    async def _timer_loop(self) -> None:
        while True:
            self._deadline_changed.clear()
            deadline = self.network.next_deadline()
            if deadline is None:
                await self._deadline_changed.wait()
                continue
            delay = (deadline - now_us()) / 1e6
            if delay > 0:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel that
                # races with the event being set (it is set on every batch), and the
                # replica would then never stop.
                try:
                    async with asyncio.timeout(delay):
                        await self._deadline_changed.wait()
                except TimeoutError:
                    pass
                continue
            now = now_us()
            self._emit(self.network.on_timer(now), now)

    async def _checkpoint_loop(self) -> None:
        interval = self.node.settings.checkpoint_interval / 1e6
        while True:
            await asyncio.sleep(interval)
            if self.state == "STABLE":
                self._take_checkpoint()

    def _take_checkpoint(self) -> None:
        self._checkpoint_seq += 1
        parts = {op.name: op for op in self.network.operators}
        self.checkpoints.put(take_checkpoint(parts, self._checkpoint_seq, now_us()))
        for s in self.sunions:
            s.truncate()  # buckets released before this checkpoint are never replayed
        self.counters["checkpoints"] += 1

    async def _checkpoint_action(self) -> dict[str, Any]:
        if self.state != "STABLE":
            return {"taken": False, "reason": f"checkpoints are taken only in STABLE (now {self.state})"}
        self._take_checkpoint()
        return {"taken": True, "seq": self._checkpoint_seq}

    def _shutdown_action(self, stop: asyncio.Event) -> Any:
        async def shutdown() -> dict[str, Any]:
            stop.set()
            return {"stopping": True}

        return shutdown

    # ------------------------------------------------------------------ output
    def _emit(self, result: NetworkOutput, now: int) -> None:
        for op_name, tuples in result.outputs.items():
            if not tuples:
                continue
            stream = self.stream_of[op_name]
            self.publisher.publish(stream, tuples)
            self.output_logs[stream].write(tuples, now)
            # Counted in C (countOf over the kinds), not by a Python loop per tuple.
            kinds = list(map(_KIND, tuples))
            self.counters["tuples_out"][stream] += countOf(kinds, Kind.STABLE)
            self.counters["tentative_out"][stream] += countOf(kinds, Kind.TENTATIVE)
            self.counters["undo_out"][stream] += countOf(kinds, Kind.UNDO)
        for op, signal in result.signals:
            if signal.kind is Kind.UP_FAILURE and self.state == "STABLE":
                self._set_state("UP_FAILURE")
                log.warning("%s: %s held a bucket longer than alpha*X: tentative results", self.me.name, op)
            elif signal.kind is Kind.REC_REQUEST:
                log.warning("%s: %s has every input corrected (reconciliation arrives with the next issue)",
                            self.me.name, op)

    def _set_state(self, state: str) -> None:
        self.state = state
        self.state_since = now_us()

    # ------------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        now = now_us()
        return {
            "name": self.me.name,
            "kind": "replica",
            "node": self.node.name,
            "state": self.state,
            "time_in_state_s": round((now - self.state_since) / 1e6, 3),
            "uptime_s": round((now - self.started) / 1e6, 3),
            "inputs": {
                link.stream: {
                    "upstream": link.producer,
                    "connected": link.connected,
                    "last_stable_id": link.last_stable_id,
                    "last_tentative_id": link.last_tentative_id,
                }
                for link in self.links
            },
            # An output stream's consistency state is the node's (one SUnion per node today).
            "outputs": {s: {"state": self.state, **st} for s, st in self.publisher.stats().items()},
            "counters": self.counters,
            "gauges": {
                "buffer_tuples": {s: st.get("buffered", 0) for s, st in self.publisher.stats().items()},
                "sunion_buffered": sum(s.buffered for s in self.sunions),
                "in_failure": int(any(s.in_failure for s in self.sunions)),
                # Tuples behind a boundary their upstream had already promised: bad input.
                "late_dropped": sum(s.late_dropped for s in self.sunions),
            },
        }
