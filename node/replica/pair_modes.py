"""The process-pair modes of a replica (Hwang et al., ICDE 2005; docs/ha-modes.md): what a
replica of a node with ``ha`` other than "dpc" does when its pair's roles move
(node/replica/pair.py, pure), per mode:

* **active standby**: nothing more (both replicas process; the secondary answers STANDBY);
* **amnesia**: the secondary's links are parked and release their producers; a takeover
  restarts the network empty at the inputs' live end, numbering its output in a new range
  (:meth:`PairModes._take_over_empty`);
* **passive standby**, **upstream backup** ("shipping" modes): the primary ships its
  secondary checkpoints or restart points every ``ha_interval`` (:meth:`PairModes._ship`,
  node/replica/standby.py, operators/restart.py) and acks its input only up to what the
  secondary holds; the secondary's parked links ack upstream the same; a takeover restores
  the last one and resumes the inputs from it (:meth:`PairModes._take_over_from_checkpoint`).

:class:`PairModes` is a mixin of :class:`~node.replica.runtime.Replica`, kept apart so that
the runtime reads as DPC's data path and this file as the pairs': it works on the
replica's links, network, output buffers and logs, declared below.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from node.clock import now_us
from node.errors import NodeError
from node.procs.rundir import RunDir
from node.procs.runlog import RunLogWriter
from node.replica.keepalive import KeepAlive
from node.replica.pair import Action as PairAction
from node.replica.pair import Pair, Role, TakeOver, heard, holds_state, silent
from node.replica.pair import start as start_pair
from node.replica.recovery import archive_output_logs, record_recovery
from node.replica.standby import Shipper, Standby, ship
from operators.restart import at_rest, restart, restart_point
from protocol.messages import StandbyAck, StandbyCheckpoint
from protocol.tuples import Tuple

if TYPE_CHECKING:
    from node.config.model import ClusterConfig, NodeConfig, ReplicaConfig
    from node.net.transport import Transport
    from node.replica.manager import Manager
    from node.streams.link import InputLink
    from node.streams.publisher import Publisher
    from operators import NetworkOutput, QueryNetwork
    from state.buffer import OutputBuffer

__all__ = ["IDS_PER_US", "PairModes"]

log = logging.getLogger("dpc.replica")

#: An amnesia takeover's first output id is the clock (µs) times this (``_take_over_empty``):
#: unique while a primary numbers fewer outputs a microsecond, and below 2**63 until 2255.
IDS_PER_US = 1024
#: Upstream backup: restart points a primary keeps while its consumers have not acknowledged
#: their output (two per ha_interval: 12.8 s at the default 100 ms).
_MAX_POINTS = 256


class PairModes:
    """A replica's process-pair behaviour (module docstring)."""

    # What it uses of the replica (node/replica/runtime.py sets them).
    config: ClusterConfig
    me: ReplicaConfig
    node: NodeConfig
    transport: Transport
    run_dir: RunDir
    network: QueryNetwork
    links: list[InputLink]
    buffers: dict[str, OutputBuffer]
    publisher: Publisher
    manager: Manager
    output_logs: dict[str, RunLogWriter]
    incarnation: int
    amnesia: bool
    passive: bool
    upstream: bool
    shipping: bool
    restarted: bool

    if TYPE_CHECKING:  # the replica's (node/replica/runtime.py)
        def _emit(self, result: NetworkOutput, now: int) -> None: ...

    def _init_pair(self, name: str, recover: bool, transport: Transport) -> None:
        """The pair's role and keep-alives, and each mode's state (the replica's
        constructor calls it once its links, network and buffers exist)."""
        #: A process-pair mode (``ha``, node/replica/pair.py): this replica's role and its
        #: keep-alives to its partner; None under DPC.
        self.pair: Pair | None = None
        self.keepalive: KeepAlive | None = None
        if self.node.settings.ha != "dpc":
            rank = [r.name for r in self.node.replicas].index(name)
            other = next(r for r in self.node.replicas if r.name != name)
            self.pair = start_pair(name, other.name, rank, recovered=recover,
                                   patience=self.node.settings.heartbeat_misses + 1,
                                   needs_state=self.node.settings.ha in (
                                       "passive_standby", "upstream_backup"))
            self.keepalive = KeepAlive(
                name, other.name, (other.host, other.data_port), transport,
                interval=self.node.settings.heartbeat_interval,
                misses=self.node.settings.heartbeat_misses,
                answered=self._partner_answered,
                # Flux: roles move on the controller's events only (node/replica/flux.py).
                failed=(lambda: None) if self.node.settings.ha == "flux"
                else lambda: self._pair_step(*silent(self._the_pair())), log=log)
            log.info("%s: %s of a process pair (ha = %r) with %s", name,
                     self.pair.role.value, self.node.settings.ha, other.name)
            if (self.amnesia or self.shipping) and self.pair.role is Role.SECONDARY:
                for link in self.links:
                    link.park(hold=self.shipping)
            if self.shipping:
                self._cap_inputs({})  # nothing covered by a secondary's checkpoint yet
        #: The network as built: what an amnesia takeover restarts from.
        self._empty = self.network.snapshot() if self.amnesia or self.upstream else None
        self._renumbered = False  # (amnesia: _partner_answered)
        #: Upstream backup: the primary's restart points not yet superseded, with when.
        self._points: list[dict[str, Any]] = []
        self._last_point = 0
        #: Passive standby: the primary's side and the secondary's (node/replica/standby.py).
        self.shipper = Shipper(name, leaf_deltas=self.upstream)
        self.standby = Standby(self._append_shipped)

    def _the_pair(self) -> Pair:
        if self.pair is None:
            raise NodeError(f"{self.me.name}: a keep-alive without a process pair")
        return self.pair

    def _pair_step(self, pair: Pair, actions: Sequence[PairAction]) -> None:
        """The pair's roles moved (node/replica/pair.py): a secondary answers downstream's
        heartbeats with STANDBY, so that takes effect at the next answer; the links move by
        ids, which a deterministic network makes the same on both replicas."""
        self.pair = pair
        for a in actions:
            log.warning("%s: %s (%s)", self.me.name,
                        "now the primary" if isinstance(a, TakeOver) else "now the secondary",
                        a.reason)
            if self.amnesia and isinstance(a, TakeOver):
                self._take_over_empty()
            elif self.shipping and isinstance(a, TakeOver):
                self._take_over_from_checkpoint()
            elif self.amnesia or self.shipping:
                for link in self.links:
                    link.park(hold=self.shipping)
                if self.shipping:
                    self._next_output_logs()

    def _next_output_logs(self) -> None:
        """A pair's replica that stepped down (passive standby, upstream backup) ends its
        output logs as a restart does (node/replica/recovery.py ``archive_output_logs``):
        what it emitted while it served is one incarnation's log, judged as a correct
        prefix, and a secondary emits nothing after it (ops_scripts/check ``check_idle_
        replica``; torture seed 901: a spurious takeover under load, then a step-down)."""
        for w in self.output_logs.values():
            w.close()
        self.incarnation = archive_output_logs(
            self.run_dir, self.me.name, list(self.node.outputs)) + 1
        self.output_logs = {s: RunLogWriter(self.run_dir.replica_output(self.me.name, s))
                            for s in self.node.outputs}

    async def _ship(self) -> None:
        """The primary's checkpoints to its secondary, every ``ha_interval``."""
        pair = self._the_pair()
        other = self.config.replica(pair.partner)

        def take(shipper: Shipper) -> StandbyCheckpoint | None:
            if self.upstream:
                point = self._shippable_point()
                if point is None:
                    return None
                return shipper.take(now_us(), point["h"],
                                    {s: (i, i) for s, i in point["resume"].items()}, dict)
            return shipper.take(
                now_us(), self.network.snapshot(),
                {link.stream: (link.last_stable_id, link.last_tentative_id)
                 for link in self.links},
                lambda: {s: list(b) for s, b in self.buffers.items()})

        await ship(self.shipper, self.transport, (other.host, other.data_port),
                   self.node.settings.ha_interval,
                   serving=lambda: self.pair is not None and self.pair.role is Role.PRIMARY,
                   take=take, covered=self._cap_inputs, owner=self.me.name,
                   partner=pair.partner, log=log)

    def _cap_inputs(self, covered: Mapping[str, tuple[int, int]]) -> None:
        """Passive standby and upstream backup: this replica acks its input only up to what
        its secondary's last checkpoint (or restart point) covers (node/replica/standby.py);
        ``{}``: nothing yet."""
        for link in self.links:
            link.ack_cap = covered.get(link.stream, (0, 0))[0]

    def _note_restart_point(self, now: int) -> None:
        """Upstream backup: after a network call that left the network at rest, a restart
        point (operators/restart.py), at most two per ``ha_interval``."""
        if now - self._last_point < self.node.settings.ha_interval // 2:
            return
        if not at_rest(self.network):
            return
        self._last_point = now
        self._points.append(restart_point(self.network))
        if len(self._points) > _MAX_POINTS:  # consumers lag: the oldest can wait no more
            del self._points[: len(self._points) - _MAX_POINTS]

    def _shippable_point(self) -> dict[str, Any] | None:
        """The newest restart point whose output every consumer acknowledged (each output
        buffer trimmed past it: the paper's level-0 acks of all downstream neighbours); the
        older ones are forgotten. None: none yet."""
        trimmed = {self.node.outputs[s]: b.trimmed_up_to for s, b in self.buffers.items()}
        best = None
        for k, point in enumerate(self._points):
            if all(last <= trimmed[op] for op, last in point["out"].items()):
                best = k
        if best is None:
            return None
        del self._points[:best]
        return self._points[0]

    def _append_shipped(self, stream: str, tuples: Sequence[Tuple]) -> None:
        """A secondary in passive standby queues its primary's output (output preservation):
        served to a consumer behind the checkpoint after a takeover."""
        self.publisher.publish(stream, list(tuples))

    def _take_over_from_checkpoint(self) -> None:
        """Passive standby's takeover (node/replica/standby.py): restore the last checkpoint
        and resume the inputs from its ids; upstream replays the rest, and the network
        reproduces what the primary emitted after it (downstream drops by ids what it
        holds). Recorded as a recovery (the checker's replica-convergence reads it)."""
        now = now_us()
        sb = self.standby
        mode = "upstream backup" if self.upstream else "passive standby"
        if self._empty is not None:  # upstream backup restarts from an empty state
            self.network.restore(self._empty)
        if sb.seq and self.upstream:
            rec = restart(self.network, sb.parts, now)
            self._emit(rec.output, now)
            starts = {s: (i, i) for s, i in rec.resume.items()}
            how = f"restart point {sb.seq}"
        elif sb.seq:
            self.network.restore(sb.parts)
            starts = {link.stream: sb.inputs.get(link.stream, (0, 0)) for link in self.links}
            how = f"checkpoint {sb.seq}"
        elif not self.restarted:
            starts = {link.stream: (0, 0) for link in self.links}  # upstream kept it all
            how = "the start (no checkpoint yet: the primary's acks were held at 0)"
        else:
            starts = {}
            how = "the live end: no checkpoint came since this restart (a gap)"
            log.error("%s: %s: taking over without a checkpoint; inputs at their live end, "
                      "what the primary held is lost", self.me.name, mode)
            self.network.number_after(now * IDS_PER_US)  # as amnesia's takeover
        for link in self.links:
            link.unpark(starts.get(link.stream))
        # Upstream keeps the input after the restored point until a new secondary holds a
        # newer one (node/replica/standby.py).
        self._cap_inputs(starts if starts else
                         {link.stream: (link.last_stable_id, 0) for link in self.links})
        self.manager.take_checkpoint(now)
        outputs = {s: self.network.operator(op).last_stable_id  # type: ignore[attr-defined]
                   for s, op in self.node.outputs.items()}
        for s, buf in self.buffers.items():
            if self.upstream and not len(buf) and not buf.last_id:
                buf.start_after(outputs[s])  # its consumers hold that much (level-0 acks)
        record_recovery(self.run_dir, self.me.name,
                        {"replica": self.me.name, "incarnation": self.incarnation,
                         "from": f"{mode} {how}", "restored_at_us": now,
                         "outputs": outputs, "inputs": {s: list(i) for s, i in starts.items()}})
        log.warning("%s: %s: restored from %s, inputs from %s, outputs after %s",
                    self.me.name, mode, how, starts, outputs)

    def _partner_answered(self, role: Role) -> None:
        """A keep-alive answer: the pair's roles move (node/replica/pair.py). Two amnesia
        primaries (the partner took over while this one stalled): while this one still
        serves it numbers its output in a new range too, above the partner's, from which
        the consumers that moved there resume; its older ids would be dropped as
        duplicates."""
        pair = self._the_pair()
        after, actions = heard(pair, role)
        if self.amnesia and pair.role is role is after.role is Role.PRIMARY:
            if not self._renumbered:  # (once per conflict; the one that yields, harmlessly)
                self._renumbered = True
                base = now_us() * IDS_PER_US
                self.network.number_after(base)
                log.warning("%s: amnesia: %s serves too; this one numbers its output after %d",
                            self.me.name, pair.partner, base)
        elif role is Role.SECONDARY:
            self._renumbered = False
        self._pair_step(after, actions)

    def _take_over_empty(self) -> None:
        """Amnesia's takeover (Hwang et al., section 4): the query restarts from an empty
        state and processes input as it arrives (the links subscribe at the live end); what
        the crashed primary held or had in flight is lost, a gap. Its output ids start
        above every id the crashed primary sent (``number_after``): downstream resumes by
        ids, and would drop a restarted numbering as duplicates. The primary's last ids are
        not known here (it may have sent more after its last keep-alive answer), so the new
        range is the clock's: ``now_us() * IDS_PER_US``, above any id a primary that took
        over earlier could have reached at fewer than IDS_PER_US ids a microsecond (and
        above this replica's own)."""
        if self._empty is None:
            raise NodeError(f"{self.me.name}: an amnesia takeover without the empty network")
        self.network.restore(self._empty)
        base = max(now_us() * IDS_PER_US, *(b.last_id for b in self.buffers.values()))
        self.network.number_after(base)
        for link in self.links:
            link.unpark()
        log.warning("%s: amnesia: the query restarts empty, its inputs at their live end, "
                    "its output ids after %d", self.me.name, base)


    def _standby_answer(self, msg: StandbyCheckpoint) -> StandbyAck:
        """A partner's checkpoint (node/replica/standby.py): applied by a shipping mode's
        secondary, which then holds upstream at what it covers (node/streams/link.py)."""
        if not (self.shipping and self.pair is not None and self.pair.role is Role.SECONDARY):
            return StandbyAck(self.me.name, msg.seq, True)  # not its secondary (now)
        ack = self.standby.apply(self.me.name, msg,
                                 {s: b.last_id for s, b in self.buffers.items()})
        if self.standby.refused is not None:
            log.error("%s: checkpoint %d from %s refused, a whole one asked for: %s",
                      self.me.name, msg.seq, msg.replica, self.standby.refused)
        if not ack.whole:
            self.pair = holds_state(self.pair)
            for link in self.links:
                link.hold_at(self.standby.inputs.get(link.stream, (0, 0))[0])
        return ack
