"""Passive standby (Hwang et al., ICDE 2005, section 5.1): the primary of a process pair
sends its secondary a checkpoint every M (``ha_interval``); the secondary processes nothing
and, when it takes over, restores the last checkpoint and resumes its inputs from there.

Theory of operation.

* **What a checkpoint holds** (:class:`~protocol.messages.StandbyCheckpoint`): the snapshot
  of every operator whose encoding changed since the checkpoint before (the paper's
  "changed operator state"; SUnion's snapshot holds its queued input), each input link's
  resume ids, and each output stream's tuples queued since the checkpoint before (the
  output queues' new tuples); the first one on a connection, or after the secondary asked
  for it, is *whole* (every operator, everything each output buffer holds). All of it is
  taken in one event-loop turn: the state, the input positions and the output queues agree.
  Nothing new since the checkpoint before: nothing is sent.
* **Upstream backup** ships restart points (operators/restart.py) on the same channel:
  operator headers, no state, no output. Of a header it sends only the leaves that moved
  (state/leaves.py; ``Shipper(leaf_deltas=True)``): a handful of counters and watermarks
  per point where the header is some 500 bytes of JSON (docs/ha-modes.md, Benchmark).
* **Input preservation**, from both sides. The secondary tells upstream which input it
  now covers (the paper's words): its parked links ack every producer the input ids of
  the last checkpoint it applied (node/streams/link.py ``hold_at``). And the primary acks
  its input only up to the same ids (each link's ``ack_cap``, as CEC does,
  node/replica/cec.py), 0 until its secondary acknowledged a checkpoint, the restored
  checkpoint's after a takeover: upstream, which trims by the smallest ack of its
  consumers and never takes an ack back, then keeps every input tuple after the
  checkpoint whichever replica serves or restarts. (Either side alone loses input: the
  primary's cap alone, when it crashes and its restarted incarnation holds nothing,
  ``dpc simulate`` seed 400; the secondary's hold alone, when a primary that acked what it
  processed steps down and its partner, which took over from an older checkpoint, fails
  in turn, seed 1008 of the isolation schedules.)
* **Output preservation.** The secondary appends the shipped output tuples to its own
  output buffers (which downstream's acks trim, as on any replica): a consumer behind the
  checkpoint is served from them after a takeover.
* **Takeover** (:meth:`Standby.take_over` via the runtime): the network is restored from the
  merged snapshots, the links resume from the checkpoint's ids (upstream replays the rest),
  and the network reproduces, ids included (a deterministic network), what the primary
  emitted after the checkpoint; downstream, which resubscribes by ids, drops what it holds
  (state/buffer.py ``AheadView``): precise recovery. A secondary that holds no checkpoint
  yet replays its inputs from the start (a fresh start: upstream kept them).

:class:`Shipper` (the primary's side) and :class:`Standby` (the secondary's) are pure;
:func:`ship` is the primary's loop. Only what a dead peer raises ends a connection here;
anything else is a bug and ends the replica, loudly.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from node.net.transport import Connection, Transport
from protocol.errors import RemoteProtocolError
from protocol.messages import StandbyAck, StandbyCheckpoint
from protocol.tuples import DATA_KINDS, Tuple
from state.checkpoint import Checkpoint, CheckpointStore
from state.leaves import apply_leaves, leaf_delta

__all__ = ["Shipper", "Standby", "ship"]

Ids = tuple[int, int]


class Shipper:
    """The primary's side: which checkpoint to send next, and what an ack of one means.

    ``take(parts, inputs, held)`` makes the next checkpoint from the network's snapshot,
    the links' resume ids and, for a whole one, each output buffer's held tuples; a delta
    carries the output tuples :meth:`queued` since the one before."""

    def __init__(self, replica: str, *, leaf_deltas: bool = False) -> None:
        self.replica = replica
        self.leaf_deltas = leaf_deltas
        self._seq = itertools.count(1)
        self._store: CheckpointStore | None = None  # None: the next one is whole
        self._base = 0
        self._queued: dict[str, list[Tuple]] = {}
        self.sent = 0
        self.acked_seq = 0  # the newest checkpoint the secondary said it holds
        self._inflight: dict[int, dict[str, Ids]] = {}  # seq -> its input ids
        self._inputs: dict[str, Ids] = {}  # those of the last checkpoint sent
        self._held: dict[str, Any] = {}  # leaf deltas: the parts as the secondary holds them

    def reset(self) -> None:
        """A new connection, or the secondary asked: the next checkpoint is whole."""
        self._store = None
        self._base = 0
        self._queued.clear()
        self._inflight.clear()
        self._held = {}

    def queued(self, stream: str, tuples: Sequence[Tuple]) -> None:
        """Output tuples appended to ``stream``'s buffer (kept only for a delta to come)."""
        if self._store is not None:
            self._queued.setdefault(stream, []).extend(tuples)

    def take(self, now: int, parts: Mapping[str, Any], inputs: Mapping[str, Ids],
             held: Callable[[], Mapping[str, Iterable[Tuple]]]) -> StandbyCheckpoint | None:
        """The next checkpoint, or None: nothing moved since the one before."""
        seq = next(self._seq)  # (a gap where nothing was sent: the secondary checks bases)
        whole = self._store is None
        store = self._store if self._store is not None else CheckpointStore()
        if self.leaf_deltas:
            send, leaves = self._leaf_deltas(parts, whole)
        else:
            send, leaves = {name: parts[name] for name in store.put(Checkpoint(seq, now, parts))}, {}
        if whole:
            outputs = {s: tuple(ts) for s, ts in held().items()}
        else:
            outputs = {s: tuple(ts) for s, ts in self._queued.items()}
        self._queued = {}
        if not (whole or send or leaves or any(outputs.values()) or inputs != self._inputs):
            return None
        msg = StandbyCheckpoint(self.replica, seq, self._base, send, dict(inputs), outputs,
                                leaves)
        self._store, self._base, self._inputs = store, seq, dict(inputs)
        self._inflight[seq] = dict(inputs)
        self.sent += 1
        return msg

    def _leaf_deltas(self, parts: Mapping[str, Any], whole: bool
                     ) -> tuple[dict[str, Any], dict[str, list[list[Any]]]]:
        """The parts to send whole (new ones, or of another shape) and the leaf deltas of
        the others (state/leaves.py) against what the secondary holds."""
        now = orjson.loads(orjson.dumps(parts))  # as the secondary decodes them
        send: dict[str, Any] = {}
        leaves: dict[str, list[list[Any]]] = {}
        for name, new in now.items():
            delta = None if whole or name not in self._held else leaf_delta(self._held[name], new)
            if delta is None:
                send[name] = new
            elif delta:
                leaves[name] = delta
        self._held = now
        return send, leaves

    def acked(self, ack: StandbyAck) -> dict[str, Ids] | None:
        """The secondary holds checkpoint ``ack.seq``: the input ids it covers (older ones
        in flight are forgotten), or None: a whole one is wanted next (``reset`` done here)
        or the ack is of nothing in flight."""
        if ack.whole:
            self.reset()
            return None
        inputs = self._inflight.pop(ack.seq, None)
        for seq in [q for q in self._inflight if q < ack.seq]:
            del self._inflight[seq]
        if inputs is not None:
            self.acked_seq = max(self.acked_seq, ack.seq)
        return inputs


@dataclass
class Standby:
    """The secondary's side: the last checkpoint it applied (operator snapshots merged,
    input ids), and the output tuples to append to its buffers (``append``)."""

    append: Callable[[str, Sequence[Tuple]], None]
    seq: int = 0
    parts: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, Ids] = field(default_factory=dict)
    received: int = 0
    #: Why the last checkpoint was refused when its base was right (logged by the caller).
    refused: str | None = None

    def apply(self, me: str, msg: StandbyCheckpoint, last_ids: Mapping[str, int]
              ) -> StandbyAck:
        """Apply ``msg`` and say so as ``me`` (``last_ids``: each output buffer's last data
        id, what it already holds); a delta on another base than the one held is refused
        with a request for a whole checkpoint."""
        self.received += 1
        self.refused = None
        if msg.base != 0 and msg.base != self.seq:
            return StandbyAck(me, msg.seq, True)
        parts = dict(msg.parts) if msg.base == 0 else {**self.parts, **msg.parts}
        for name, delta in msg.leaves.items():
            try:
                parts[name] = apply_leaves(parts[name], delta)
            except (KeyError, ValueError) as exc:  # (nothing applied yet: self.parts holds)
                self.refused = f"the leaf delta of operator {name!r} does not fit: {exc!r}"
                return StandbyAck(me, msg.seq, True)
        self.parts = parts
        self.inputs = dict(msg.inputs)
        self.seq = msg.seq
        for stream, tuples in msg.outputs.items():
            new = _after(tuples, last_ids.get(stream, 0))
            if new:
                self.append(stream, new)
        return StandbyAck(me, msg.seq, False)


def _after(tuples: Sequence[Tuple], last: int) -> list[Tuple]:
    """The suffix of ``tuples`` from its first data tuple with id > ``last`` (what a buffer
    holding data tuple ``last`` lacks; the control tuples before it are dropped: a boundary
    is idempotent and the next one covers it)."""
    for k, t in enumerate(tuples):
        if t.kind in DATA_KINDS and t.id > last:
            return list(tuples[k:])
    return []


async def ship(shipper: Shipper, transport: Transport, address: tuple[str, int],
               interval: int, *, serving: Callable[[], bool],
               take: Callable[[Shipper], StandbyCheckpoint | None],
               covered: Callable[[dict[str, Ids]], None], owner: str, partner: str,
               log: logging.Logger) -> None:
    """Forever: while ``serving()`` (this replica is the primary), keep a connection to the
    partner at ``address`` and send it ``take(shipper)`` every ``interval`` µs; hand the
    input ids of each checkpoint the partner acknowledges to ``covered``. A lost
    connection is a whole checkpoint on the next one."""
    while True:
        if not serving():
            await asyncio.sleep(interval / 1e6)
            continue
        try:
            conn = await transport.connect(*address)
        except OSError:  # the partner is down or restarting: try again later
            await asyncio.sleep(interval / 1e6)
            continue
        shipper.reset()
        try:
            async with asyncio.TaskGroup() as tg:
                reader = tg.create_task(_read_acks(conn, shipper, covered, owner, partner, log))
                while serving() and not reader.done():
                    if (msg := take(shipper)) is not None:  # (nothing new to send)
                        await conn.send(msg)
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(interval / 1e6):
                            await asyncio.shield(reader)
                reader.cancel()
        except* OSError as group:  # the partner died or reset the connection
            log.info("%s: checkpoint connection to %s ended: %r", owner, partner,
                     group.exceptions[0])
        finally:
            await conn.close()


async def _read_acks(conn: Connection, shipper: Shipper,
                     covered: Callable[[dict[str, Ids]], None], owner: str, partner: str,
                     log: logging.Logger) -> None:
    try:
        while (msg := await conn.receive()) is not None:
            if not isinstance(msg, StandbyAck):
                log.error("%s: partner %s answered a checkpoint with a %s; closing", owner,
                          partner, type(msg).__name__)
                return
            if (inputs := shipper.acked(msg)) is not None:
                covered(inputs)
    except RemoteProtocolError as exc:
        log.error("%s: partner %s sent bad data on the checkpoint connection: %s; closing",
                  owner, partner, exc)
