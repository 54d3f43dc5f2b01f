"""The publisher: serves the output streams of one process to its subscribers (DESIGN.md 4).

A source or a node replica owns one :class:`Publisher` over its output buffers (one
:class:`~state.buffer.OutputBuffer` per output stream) and runs :meth:`Publisher.handle`
for every connection of its data port.

Theory of operation. ``publish`` appends a batch to the stream's buffer, which keeps the
stream in force, and appends the *raw* batch (UNDO, REC_DONE and BOUNDARY included) to the
pending list of every live subscription of that stream, then wakes the writer of each
subscription's connection. A subscriber that applies what it receives holds the same
stream in force as the buffer. ``Subscribe(stream, subscriber, s, t)`` queues
``buffer.catchup(s, t)`` (the replay, read back from disk a batch at a time where the
buffer spilled: a resubscriber after a long failure never makes the process hold the
whole replay at once) and registers the subscription, with no ``await`` in between: every
tuple published before is in the replay and every one published after is in the pending
list, exactly once. Each connection has one writer task, which sends each subscription's
pending tuples as Batch frames of at most ``max_batch`` tuples, as soon as it can: no
linger timer, so a lone tuple goes out at once, and under load tuples pile up while the
previous frame drains and leave in full batches. A writer gives up the event loop after
every ``FRAMES_PER_TURN`` frames: a socket that takes everything never suspends ``send``,
and a long replay (a client switching replicas after a long failure: 100,000 tuples) sent
in one turn held the process's heartbeat answers until its consumers declared it failed.

Invariants:

* Nothing accepted is dropped. A slow subscriber's pending list grows; ``wait_for_room``
  holds the producer back while any subscription has ``high_water`` tuples pending. When
  a connection ends, its subscriptions go, and the buffer still holds what they had not
  acknowledged: the subscriber resubscribes, here or at another replica.
* A (stream, subscriber) has at most one live subscription: a new Subscribe replaces the
  old one, on whatever connection it was, unless it comes on a connection accepted before
  the one holding the subscription (a Subscribe that was late on an abandoned connection):
  that one is refused, so the newer connection keeps the feed.
* In a process, the data port's transport authenticates every connection before this
  handler sees it (node/net/auth.py), and refuses any message that does not speak for that
  process or goes beyond its role (node/config/roles.py): what is dispatched here comes
  from a process of the config, as itself.
* Bad input from a peer (garbage bytes, a Batch, an unknown stream, a replay the buffer
  cannot serve, an unexpected message, silence for ``hello_timeout`` after connecting) is
  logged with the peer's name and closes that connection only (STYLE.md 9).
* Acks go to ``buffer.ack`` for subscribers that are consumers of the buffer (which its
  owner sets with ``set_consumers``); acks of others trim nothing and are ignored. A
  consumer's Subscribe counts as its ack of ``last_stable_id`` (it holds that much), and
  so do the acks a ``HeartbeatRequest`` carries (node/streams/monitor.py sends them to
  every replica of this node, so that a buffer no consumer reads trims too). A heartbeat
  acking a stream this publisher does not serve, or one the sender is not a consumer of,
  is refused like any bad input, and none of its acks is applied.
* The grace rule (state/buffer.py): ``consumer_grace`` µs after the first publish, every
  consumer not heard from yet (no Subscribe, Ack or heartbeat) stops holding its buffers'
  trimming, with a warning naming it. If it subscribes later from below the trim point,
  it is served from there, and a warning names it and the stable ids it missed.
* A process pair in amnesia (node/replica/runtime.py): ``Subscribe(..., live=True)`` serves
  from the live end (after the buffer's last stable tuple, the ids it carries ignored) and
  acks that tuple; ``Unsubscribe(..., release=True)`` makes its consumer hold nothing back
  (``buffer.release``: an acked consumer otherwise pins the buffer for ever) until its
  next ack; a release naming a stream not served or a non-consumer is refused.
* A subscriber ahead of a buffer (it claims stable ids the buffer has not produced) is
  served through an ``AheadView`` (it failed over from a partner replica), unless
  ``serve_ahead`` is off: a source, the origin of its stream, refuses it with an error.
* A subscriber with a split (``splits``: a replica of a partition node, from
  ``ClusterConfig.splits``) is sent its share of the stream: the data tuples whose key
  hashes to its partition, and every control tuple (protocol/exchange.py), in the replay
  and in the live feed alike; ids are the stream's, with gaps.
* While ``refusing`` is set (a replica recovering, node/replica/recovery.py) every Subscribe is
  refused with that reason and the connection closed; the responder may then return None
  to a heartbeat (no answer: the replica counts as down).
* Requests (``HeartbeatRequest``, ``ReconcileRequest``, ``StandbyCheckpoint``) go to the
  owner's ``responder``, whose answer is sent on the same connection ahead of any pending
  batch (a replica under load still answers its heartbeats promptly). A publisher without a responder (a source)
  treats them as unexpected messages.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from node.clock import now_us
from node.config.model import DEFAULT_CONSUMER_GRACE
from node.errors import NodeError
from node.net.transport import Connection
from protocol.errors import RemoteProtocolError
from protocol.exchange import Split, shares
from protocol.messages import (
    Ack,
    Batch,
    HeartbeatRequest,
    Message,
    ReconcileRequest,
    StandbyCheckpoint,
    Subscribe,
    Unsubscribe,
)
from protocol.tuples import Tuple
from state.buffer import AheadView, Catchup, OutputBuffer
from state.errors import ReplayAheadError, ReplayError

__all__ = ["FRAMES_PER_TURN", "Publisher"]

# Drop the sent prefix of a pending list physically once it is this long and at least
# half the list: O(1) amortized per tuple, without a memmove per batch.
_COMPACT_MIN = 4096
#: Frames a writer sends before it lets the other tasks of the process run (docstring).
FRAMES_PER_TURN = 8


class _Subscription:
    """What one subscriber of one stream still has to receive over one connection."""

    __slots__ = ("ahead", "catchup", "head", "live", "pending", "sent", "session", "split",
                 "stream", "subscriber")

    def __init__(self, stream: str, subscriber: str, session: _Session, catchup: Catchup,
                 ahead: AheadView | None = None, split: Split | None = None):
        self.ahead = ahead  # a subscriber ahead of this replica: its filter, until caught up
        self.split = split  # a partition's subscriber: its share of the stream
        self.stream = stream
        self.subscriber = subscriber
        self.session = session
        # The replay, sent first (read from disk batch by batch where the buffer spilled),
        # then what was published since.
        self.catchup: Catchup | None = catchup if len(catchup) else None
        self.pending: list[Tuple] = []  # pending[head:] is still to send
        self.head = 0
        self.sent = 0
        self.live = True

    @property
    def backlog(self) -> int:
        return (len(self.catchup) if self.catchup else 0) + len(self.pending) - self.head

    def take(self, n: int) -> list[Tuple]:
        """The next batch to send, at most ``n`` tuples (empty: nothing is left)."""
        while self.catchup is not None:
            chunk = self.catchup.take(n)
            if not len(self.catchup):
                self.catchup = None
            if chunk and self.split is not None:
                chunk = self.split.select(chunk)
            if chunk:
                return chunk
        pending, head = self.pending, self.head
        chunk = pending[head : head + n]
        head += len(chunk)
        if head >= len(pending):
            pending.clear()
            head = 0
        elif head >= _COMPACT_MIN and 2 * head >= len(pending):
            del pending[:head]
            head = 0
        self.head = head
        return chunk


class _Session:
    """One consumer connection: its subscriptions and its writer's wake-up call."""

    __slots__ = ("conn", "replies", "seq", "subs", "wakeup")

    def __init__(self, conn: Connection, seq: int) -> None:
        self.conn = conn
        self.seq = seq  # accept order: a later connection of a subscriber is its newer one
        self.subs: dict[tuple[str, str], _Subscription] = {}
        self.replies: list[Message] = []  # answers to requests, sent before any batch
        self.wakeup = asyncio.Event()


class Publisher:
    """Serves the output streams of process ``owner``. See the module docstring."""

    def __init__(
        self,
        owner: str,
        buffers: Mapping[str, OutputBuffer],
        *,
        high_water: int = 50_000,
        max_batch: int = 100,
        hello_timeout: float = 5.0,
        responder: Callable[[Message], Message | None] | None = None,
        consumer_grace: int = DEFAULT_CONSUMER_GRACE,
        serve_ahead: bool = True,
        splits: Mapping[str, Mapping[str, Split]] | None = None,
        log: logging.Logger,
    ) -> None:
        if high_water < 1 or max_batch < 1:
            raise NodeError(
                f"publisher {owner!r}: high_water and max_batch must be at least 1, got "
                f"{high_water} and {max_batch}"
            )
        if consumer_grace < 0:
            raise NodeError(
                f"publisher {owner!r}: consumer_grace must be >= 0 µs, got {consumer_grace}"
            )
        self.owner = owner
        self._buffers = buffers
        self._high_water = high_water
        self._max_batch = max_batch
        self._hello_timeout = hello_timeout
        self._responder = responder
        self._serve_ahead = serve_ahead
        #: stream -> subscriber -> its share (a partition's replica, protocol/exchange.py)
        self._splits = splits or {}
        self._log = log
        #: Why every Subscribe is refused now (a recovering replica), or None.
        self.refusing: str | None = None
        # stream -> subscriber -> its live subscription
        self._live: dict[str, dict[str, _Subscription]] = {s: {} for s in buffers}
        self._room = asyncio.Event()
        self._room_waiters = 0
        self._accepted = 0  # connections accepted so far (each session's seq)
        # The grace rule: its length (None once applied), and its end (None until the first
        # publish starts it). The clock is read per publish only until then.
        self._grace: int | None = consumer_grace
        self._grace_ends: int | None = None

    # ------------------------------------------------------------------ producing
    def publish(self, stream: str, tuples: Iterable[Tuple]) -> None:
        """Append ``tuples`` to ``stream`` and queue them for its live subscribers."""
        buffer = self._buffers.get(stream)
        if buffer is None:
            raise NodeError(
                f"publisher {self.owner!r}: publish to unknown stream {stream!r} "
                f"(streams: {', '.join(map(repr, self._buffers))})"
            )
        batch = tuples if isinstance(tuples, list) else list(tuples)
        if not batch:
            return
        buffer.append(batch)  # raises on a broken invariant: then nobody gets the batch
        if self._grace is not None:
            self._grace_tick()
        subs = self._live.get(stream)
        if subs:
            # Each partition's share is cut once per batch, for all its replicas.
            cut: dict[tuple[int, tuple[int, ...]], list[list[Tuple]]] = {}
            for sub in subs.values():
                if sub.ahead is None:
                    sent = batch
                else:
                    sent = sub.ahead.view(batch)
                    if sub.ahead.passing:
                        sub.ahead = None
                split = sub.split
                if split is None:
                    sub.pending.extend(sent)
                elif sent is batch:
                    if split.scheme not in cut:
                        cut[split.scheme] = shares(batch, *split.scheme)
                    sub.pending.extend(cut[split.scheme][split.index])
                else:  # (an AheadView's filtered batch: its own)
                    sub.pending.extend(split.select(sent))
                sub.session.wakeup.set()

    def _grace_tick(self) -> None:
        """Start the grace period at the first publish; once it is over, release every
        consumer not heard from yet (state/buffer.py's grace rule), once."""
        now = now_us()
        if self._grace_ends is None:
            self._grace_ends = now + (self._grace or 0)
        if now < self._grace_ends:
            return
        for stream, buffer in self._buffers.items():
            released = buffer.release_unheard()
            if released:
                self._log.warning(
                    "%s: %s never heard from in %g s: no longer holding the trimming of "
                    "%r's buffer (trimmed up to id %d now); served from the trim point if "
                    "it subscribes later",
                    self.owner,
                    ", ".join(released),
                    (self._grace or 0) / 1e6,
                    stream,
                    buffer.trimmed_up_to,
                )
        self._grace = None

    async def wait_for_room(self) -> None:
        """Return once every live subscription has fewer than ``high_water`` tuples
        pending. A producer awaits this between batches: a slow consumer slows it."""
        while not self._has_room():
            self._room_waiters += 1
            self._room.clear()
            try:
                await self._room.wait()
            finally:
                self._room_waiters -= 1

    def _has_room(self) -> bool:
        high = self._high_water
        for subs in self._live.values():
            for sub in subs.values():
                if sub.backlog >= high:
                    return False
        return True

    def _notify_room(self) -> None:
        if self._room_waiters:
            self._room.set()  # the waiters re-check; cheap, and only when someone waits

    # ------------------------------------------------------------------ inspection
    def stats(self) -> dict[str, dict[str, Any]]:
        """Per stream: tuples buffered, ids, and each subscriber's peer, pending and sent
        counts (plain data, for /status)."""
        out: dict[str, dict[str, Any]] = {}
        for stream, buffer in self._buffers.items():
            subs = self._live.get(stream, {})
            out[stream] = {
                "buffered": len(buffer),
                "last_id": buffer.last_id,
                "last_stable_id": buffer.last_stable_id,
                "trimmed_up_to": buffer.trimmed_up_to,
                "consumers": buffer.consumer_status(),
                "subscribers": {
                    name: {"peer": sub.session.conn.peer, "pending": sub.backlog, "sent": sub.sent}
                    for name, sub in subs.items()
                },
            }
        return out

    # ------------------------------------------------------------------ serving
    async def handle(self, conn: Connection) -> None:
        """Serve one consumer connection until it ends (the data port's Handler)."""
        self._accepted += 1
        session = _Session(conn, self._accepted)
        try:
            async with asyncio.TaskGroup() as tg:
                writer = tg.create_task(self._write_loop(session))
                try:
                    await self._read_loop(session)
                finally:
                    writer.cancel()  # it may be blocked on a peer that stopped reading
        finally:
            for sub in list(session.subs.values()):
                self._unlink(sub)
            session.subs.clear()
            await conn.close()

    async def _read_loop(self, session: _Session) -> None:
        conn = session.conn
        peer = conn.peer
        try:
            hello = asyncio.timeout(self._hello_timeout)
            try:
                async with hello:
                    msg = await conn.receive()
            except TimeoutError:
                if not hello.expired():
                    raise
                self._log.error(
                    "%s: peer %s connected but said nothing for %g s; closing the connection",
                    self.owner,
                    peer,
                    self._hello_timeout,
                )
                return
            while msg is not None:
                problem = self._dispatch(session, msg)
                if problem is not None:
                    self._log.error(
                        "%s: peer %s %s; closing the connection", self.owner, peer, problem
                    )
                    return
                msg = await conn.receive()
            self._log.info(
                "%s: peer %s closed the connection (subscriptions: %s)",
                self.owner,
                peer,
                self._names(session),
            )
        except RemoteProtocolError as exc:
            self._log.error(
                "%s: peer %s sent bad data: %s; closing the connection", self.owner, peer, exc
            )
        except OSError as exc:
            self._log.info(
                "%s: connection from peer %s broke: %r (subscriptions: %s)",
                self.owner,
                peer,
                exc,
                self._names(session),
            )

    def _dispatch(self, session: _Session, msg: Message) -> str | None:
        """Apply one message from a consumer; return what was wrong with it, if anything."""
        if isinstance(msg, Ack):
            buffer = self._buffers.get(msg.stream)
            if buffer is None:
                return f"sent an Ack for unknown stream {msg.stream!r} ({self._streams()})"
            if msg.subscriber in buffer.consumers:
                buffer.ack(msg.subscriber, msg.tuple_id)
            return None
        if isinstance(msg, Subscribe):
            return self._subscribe(session, msg)
        if isinstance(msg, Unsubscribe):
            sub = session.subs.pop((msg.stream, msg.subscriber), None)
            if sub is not None:
                self._unlink(sub)
            return self._release(msg) if msg.release else None
        if self._responder is not None and isinstance(
                msg, HeartbeatRequest | ReconcileRequest | StandbyCheckpoint):
            if isinstance(msg, HeartbeatRequest) and msg.acks:
                problem = self._heartbeat_acks(msg)
                if problem is not None:
                    return problem
            reply = self._responder(msg)
            if reply is not None:  # None: the owner stays silent (it is still recovering)
                session.replies.append(reply)
                session.wakeup.set()
            return None
        if isinstance(msg, Batch):
            return (
                f"sent a Batch of stream {msg.stream!r} to a publisher's data port "
                "(consumers send Subscribe, Unsubscribe and Ack)"
            )
        return f"sent an unexpected {type(msg).__name__} (expected Subscribe, Unsubscribe or Ack)"

    def _release(self, msg: Unsubscribe) -> str | None:
        """An Unsubscribe with ``release``: its sender holds nothing of the stream and
        stops holding the buffer back (state/buffer.py ``release``)."""
        buffer = self._buffers.get(msg.stream)
        if buffer is None:
            return f"released unknown stream {msg.stream!r} ({self._streams()})"
        if msg.subscriber not in buffer.consumers:
            consumers = ", ".join(map(repr, buffer.consumers)) or "none"
            return (f"released stream {msg.stream!r} as {msg.subscriber!r}, which is not one "
                    f"of its consumers ({consumers})")
        buffer.release(msg.subscriber)
        self._log.info("%s: %s released %r: it holds nothing of it and trims nothing",
                       self.owner, msg.subscriber, msg.stream)
        return None

    def _heartbeat_acks(self, msg: HeartbeatRequest) -> str | None:
        """Apply the acks ``msg`` carries, each like an Ack of its sender, or none of them
        (and say why) if one names a stream not served here or one the sender does not
        consume."""
        for stream in msg.acks:
            buffer = self._buffers.get(stream)
            if buffer is None:
                return (f"sent a heartbeat acking unknown stream {stream!r} "
                        f"({self._streams()})")
            if msg.sender not in buffer.consumers:
                consumers = ", ".join(map(repr, buffer.consumers)) or "none"
                return (f"sent a heartbeat acking stream {stream!r} as {msg.sender!r}, which "
                        f"is not one of its consumers ({consumers})")
        for stream, tuple_id in msg.acks.items():
            self._buffers[stream].ack(msg.sender, tuple_id)
        return None

    def _subscribe(self, session: _Session, msg: Subscribe) -> str | None:
        stream, name = msg.stream, msg.subscriber
        buffer = self._buffers.get(stream)
        if buffer is None:
            return f"subscribed {name!r} to unknown stream {stream!r} ({self._streams()})"
        s, t = msg.last_stable_id, msg.last_tentative_id
        if msg.live:  # from the live end (amnesia's takeover): after the last stable tuple
            s = t = buffer.last_stable_id
        consumer = name in buffer.consumers
        if consumer:
            # It holds that much (heard from); it may want some of it again (CEC): ack_id.
            buffer.ack(name, s if msg.ack_id < 0 else min(msg.ack_id, s))
        if self.refusing is not None:
            return f"subscribed {name!r} to {stream!r}, refused: this replica is {self.refusing}"
        held = self._live.get(stream, {}).get(name)
        if held is not None and held.session.seq > session.seq:
            # A Subscribe that was late on an older connection (a delayed link): the
            # subscriber has moved on to the newer one, which must keep the feed.
            return (f"subscribed {name!r} to {stream!r} on an older connection than the one "
                    "that holds its subscription: superseded")
        ahead: AheadView | None = None
        try:
            catchup = buffer.catchup(s, t)
        except ReplayAheadError as exc:
            if not self._serve_ahead:  # a source: nobody can hold what it never produced
                return (f"subscribed {name!r} to {stream!r} claiming stable id "
                        f"{s}, beyond anything produced here ({exc}): refused")
            # It took stable tuples from a partner that this replica (in UP_FAILURE) has not
            # produced yet: serve it what comes after them, not nothing (state/buffer.py).
            replayed, ahead = buffer.replay_ahead(s, t)
            catchup = Catchup(replayed, [])
            if ahead.passing:
                ahead = None
        except ReplayError as exc:
            if not (consumer and buffer.lapsed(name)):
                return f"subscribed {name!r} from tuples already trimmed: {exc}"
            # Never heard from within the grace period (state/buffer.py): served from the
            # trim point; what it missed is gone, and said so.
            trimmed = buffer.trimmed_up_to
            catchup = Catchup(buffer.replay_lapsed(name, s, t), [])
            self._log.warning(
                "%s: %s subscribed to %r from stable id %d, but it was not heard from within "
                "the grace period and the buffer was trimmed up to id %d: serving it from "
                "there; it missed stable ids %d..%d",
                self.owner, name, stream, s, trimmed, s + 1, trimmed,
            )
        # From here to the registration there is no await: nothing published can slip
        # between the replay and the live feed.
        old = self._live.setdefault(stream, {}).get(name)
        if old is not None:
            old.session.subs.pop((stream, name), None)
            self._unlink(old)
        split = self._splits.get(stream, {}).get(name)
        sub = _Subscription(stream, name, session, catchup, ahead, split)
        self._live[stream][name] = sub
        session.subs[(stream, name)] = sub
        session.wakeup.set()
        self._log.info(
            "%s: peer %s subscribed %r to %r from stable %d, tentative %d"
            + (" (the live end)" if msg.live else "")
            # (A partition's count is the stream's: its share is cut as the tuples are sent.)
            + (" (%d tuples to replay" if split is None else " (%d tuples of the stream to replay")
            + (", ahead of this replica: filtered until it catches up)" if ahead else ")")
            + (f" (partition {split.index} of {split.count}: its share of them only)"
               if split else ""),
            self.owner,
            session.conn.peer,
            name,
            stream,
            s,
            t,
            len(catchup),
        )
        return None

    def _unlink(self, sub: _Subscription) -> None:
        sub.live = False
        if sub.catchup is not None:  # not sent: what it reads from disk is released
            sub.catchup.close()
            sub.catchup = None
        subs = self._live.get(sub.stream)
        if subs is not None and subs.get(sub.subscriber) is sub:
            del subs[sub.subscriber]
        self._notify_room()  # its backlog no longer holds the producer

    async def _write_loop(self, session: _Session) -> None:
        conn, max_batch, high = session.conn, self._max_batch, self._high_water
        frames = 0
        try:
            while True:
                await session.wakeup.wait()
                session.wakeup.clear()
                busy = True
                while busy:  # one batch per subscription per round: fair between streams
                    busy = False
                    while session.replies:
                        await conn.send(session.replies.pop(0))
                    for sub in list(session.subs.values()):
                        if not sub.live or not sub.backlog:
                            continue
                        chunk = sub.take(max_batch)
                        if not chunk:
                            continue  # (only a spilled replay's REC_DONEs were left)
                        await conn.send(Batch(sub.stream, tuple(chunk)))
                        sub.sent += len(chunk)
                        busy = True
                        if sub.backlog < high:
                            self._notify_room()
                        frames += 1
                        if frames % FRAMES_PER_TURN == 0:
                            await asyncio.sleep(0)  # heartbeats and the data path go on
        except OSError as exc:
            # The read loop notices the closed connection and ends the session.
            self._log.info(
                "%s: sending to peer %s failed: %r; closing the connection",
                self.owner,
                conn.peer,
                exc,
            )
            await conn.close()

    @staticmethod
    def _names(session: _Session) -> str:
        return ", ".join(f"{n!r} on {s!r}" for s, n in session.subs) or "none"

    def _streams(self) -> str:
        return "streams here: " + (", ".join(map(repr, self._buffers)) or "none")
