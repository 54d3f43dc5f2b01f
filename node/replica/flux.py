"""What a replica does on the Flux controller's events (node/flux/; docs/flux.md).

A node with ``ha = "flux"`` is a process pair per partition, processing alike as in active
standby (node/replica/pair_modes.py): the primary serves downstream, the secondary answers
STANDBY and holds everything its consumers have not acknowledged. What Flux changes is who
decides and what follows (the paper's sections 3.3, 3.4 and 5.2):

* **Each side feeds its own.** In the normal case a replica of a flux node reads each
  input a flux pair produces from that pair's replica of its own rank, its *dual*
  (``flux_duals``; node/streams/upstream.py's rank 0), the secondary producer serving the
  secondary consumer though it answers STANDBY to everyone else: the paper's symmetric
  protocol, the two sides of a stage two dataflows. Acks go to both producers (on every
  heartbeat), so a tuple leaves a producer's buffer once both consumers hold it. When the
  dual is not there (failed, catching up), the consumer reads from the other one (the
  paper's ``reverse``), and returns to its dual once it serves again.
* **Take-over.** Roles move on the controller's ``fail(partner)`` only, never on this
  replica's own keep-alives: one decision, in one order, for every process. A secondary
  whose partner failed becomes the primary; downstream moves to it by ids, resuming after
  the last id it holds (its buffer is the paper's: nothing acknowledged by a consumer is
  held, nothing unacknowledged is dropped).
* **ack_all.** On ``fail(x)`` for a consumer x of this replica's outputs (a replica of a
  flux node downstream), x's acks stop holding the output buffers (``OutputBuffer.release``):
  the paper's ``ack_all(dest)``, ``del := del - dest``. Sources do the same
  (node/procs/source.py).
* **Catch-up.** A restarted replica (``--recover``) copies its partner's state (operator
  state, its inputs' positions, the output buffers' unacknowledged tails: the paper's state
  and producer-buffer movement, node/replica/recovery.py). While it does, the partner acks
  its inputs no further than where the copy stands (``ack_cap``: the pause; the paper stops
  the producers' sending, which a single-threaded replica's atomic snapshot does not need),
  so that the producers, which had released the failed replica, still hold everything after
  the copy when it subscribes there (its Subscribe counts as its acks again: the paper's
  ``csync`` with ``reset``). The controller's ``avail(x)`` (x ready: caught up) ends the
  pause, and so does a ``fail(x)`` of that incarnation (x failed during the move: the
  paper's idempotent catch-up), a newer incarnation's request (it failed and restarted
  before the controller saw it), or ``PAUSE_LIMIT`` without word of it. Downstream acks reach x from then on
  with its heartbeats (the paper's ``psync``). Only the pair catching up is concerned; the
  other partitions never notice.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from node.clock import now_us
from node.config.model import ClusterConfig, NodeConfig
from node.flux.events import Event, Kind
from node.flux.follow import release_failed
from node.replica.pair import Pair, Role, TakeOver

if TYPE_CHECKING:
    from node.config.model import ReplicaConfig
    from node.replica.pair import Action
    from node.streams.link import InputLink
    from state.buffer import OutputBuffer

__all__ = ["PAUSE_LIMIT", "FluxMode", "flux_duals"]

log = logging.getLogger("dpc.replica")
#: The longest a catch-up pauses this replica's acks without the controller's word (µs).
PAUSE_LIMIT = 10_000_000


def flux_duals(config: ClusterConfig, name: str) -> dict[str, str]:
    """Replica ``name`` of a flux node: each input stream a flux pair produces -> that
    pair's replica of ``name``'s rank, its dual (the paper's symmetric normal case: each
    side of a stage feeds its own consumers; node/streams/upstream.py rank 0)."""
    replica = config.replica(name)
    node = config.nodes[replica.node]
    if node.settings.ha != "flux":
        return {}
    rank = [r.name for r in node.replicas].index(name)
    out = {}
    for stream in node.inputs:
        producer = config.producer_of(stream)
        if isinstance(producer, NodeConfig) and producer.settings.ha == "flux":
            out[stream] = producer.replicas[rank].name
    return out


class FluxMode:
    """A replica's Flux behaviour (module docstring); a mixin of the replica."""

    me: ReplicaConfig
    node: NodeConfig
    links: list[InputLink]
    buffers: dict[str, OutputBuffer]
    pair: Pair | None

    if TYPE_CHECKING:
        def _pair_step(self, pair: Pair, actions: Sequence[Action]) -> None: ...

    #: The partner (and its incarnation) whose catch-up pauses this replica's acks, or None,
    #: and since when (µs).
    catching_up: tuple[str, int] | None = None
    _paused_at: int = 0

    @property
    def flux(self) -> bool:
        return self.node.settings.ha == "flux"

    def flux_event(self, event: Event) -> None:
        """Apply one controller event (node/flux/follow.py calls this, in order)."""
        release_failed(self.me.name, self.buffers, event)
        pair = self.pair
        if not self.flux or pair is None or event.replica != pair.partner:
            return
        if event.kind is Kind.FAIL and pair.role is Role.SECONDARY:
            self._pair_step(replace(pair, role=Role.PRIMARY, waited=0),
                            [TakeOver(f"the controller reported {pair.partner} failed, "
                                      f"event {event.seq}: taking over")])
        if self.catching_up == (event.replica, event.incarnation):
            self._end_pause(f"{event.kind.value}({event.replica}), event {event.seq}")

    def pause_for_catch_up(self, partner: str, incarnation: int) -> None:
        """A restarting partner (its ``incarnation``) takes this replica's state: ack the
        inputs no further than the state it is given holds, until the controller says how
        that incarnation's catch-up ended (a fail of an earlier one, which the controller
        may report after this one started, changes nothing here)."""
        if not self.flux:
            return
        if self.catching_up is not None and self.catching_up != (partner, incarnation):
            log.warning("%s: Flux catch-up of %s (incarnation %d) superseded by incarnation "
                        "%d: it failed during the move", self.me.name, *self.catching_up,
                        incarnation)
        for link in self.links:
            link.ack_cap = link.ack_id
        self.catching_up = (partner, incarnation)
        self._paused_at = now_us()
        log.warning("%s: Flux catch-up of %s (incarnation %d): acks to the producers paused "
                    "at %s", self.me.name, partner, incarnation,
                    {link.stream: link.ack_cap for link in self.links})

    def flux_idle(self) -> None:
        """Between the controller's answers: a pause that lasted ``PAUSE_LIMIT`` without
        word of its incarnation ends (it failed before the controller's probes ever saw it;
        its next restart catches up anew). The pause is needed only until the standby
        subscribed at the copy's positions, a second after the move at most."""
        if self.catching_up is not None and now_us() - self._paused_at > PAUSE_LIMIT:
            self._end_pause(f"no word of that incarnation from the controller in "
                            f"{PAUSE_LIMIT / 1e6:g} s")

    def _end_pause(self, why: str) -> None:
        for link in self.links:
            link.ack_cap = None
        log.warning("%s: Flux catch-up of %s over (%s): acks resumed", self.me.name,
                    self.catching_up[0] if self.catching_up else "?", why)
        self.catching_up = None

    def flux_status(self) -> dict[str, Any] | None:
        return {"catching_up": self.catching_up} if self.flux else None
