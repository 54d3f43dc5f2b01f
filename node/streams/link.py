"""The input link: the consumer side of one input stream (DESIGN.md 4, paper section 4).

An :class:`InputLink` keeps one subscription to ``stream`` alive for ``subscriber``: it
connects to one of the stream's producers (replicas of the upstream node, or a source),
sends ``Subscribe(stream, subscriber, last_stable_id, last_tentative_id)``, hands every
Batch to ``on_batch`` and acknowledges what was processed. When the connection fails or
ends it moves on to the next producer, round-robin: at once when the producer had been
serving it (a crashed replica's partner is not kept waiting for: ``dpc bench failover``),
after ``retry_interval`` when it had not (a dead or refusing producer is not retried in a
tight loop), and after ``retry_interval`` too when it is the only producer;
``switch_to`` moves it on at once (for an HA monitor that found a better replica), also
while a connect is under way: that attempt is abandoned, not waited for (a connect to a
blackholed producer would only end at its timeout).

Resume ids. ``s`` = ``last_stable_id`` and ``t`` = ``last_tentative_id`` say what the link
holds in force, UNDOs applied, as ``OutputBuffer.replay(s, t)`` expects them; the rule and
its arithmetic are in node/streams/resume.py.

The corrections reader (paper section 4: downstream holds the reconciling replica as its
corrections source and a replica in UP_FAILURE for fresh data until REC_DONE).
``correct_from(producer)`` starts a second, background subscription at ``producer`` (an
upstream replica in STABILIZATION, named by the HA monitor) while the main session keeps
reading fresh tentative data from the data source; ``correct_from(None)`` stops it. It
subscribes with ``(s, s)``, ``s`` being ``last_stable_id`` then: it claims no tentative
tuple, since the ones held came from the other replica and their ids mean nothing here.
What arrives is *buffered*, never handed to ``on_batch``, in an
:class:`~state.buffer.OutputBuffer` that applies its UNDOs: the producer's in-force stream
after data tuple ``s`` (its stable tail, maybe its own tentatives, its UNDO, the corrected
stable tuples, ... REC_DONE). The replay that starts it carries no REC_DONE (history:
state/buffer.py), so the REC_DONE the reader waits for ends a reconciliation that was
still under way when it subscribed. The reader sends no acks. When a batch with a REC_DONE
arrives, the reader stops reading and the link switches: the main session leaves its
producer the way ``switch_to`` makes it (never interrupting ``on_batch``), then, with
``s`` and ``t`` the ids held at that moment, ``on_batch`` gets ``UNDO(s)`` (only if
``t > s``: it removes every tentative tuple of the old data source, and nothing stable)
followed by the buffer's in-force tuples after data tuple ``s``, its REC_DONE included
(so that no stable tuple is delivered twice), the ids advance as usual, and the corrections
connection *becomes* the main session (acking from then on): no resubscription, no gap.
That is what a case-3 resubscription at that producer would deliver at that moment (its
in-force stream after ``s``), without the round trip. ``reconciled`` then says that the
producer in use finished its reconciliation although its heartbeats may still report
STABILIZATION for a while (the HA monitor keeps it, node/streams/upstream.py); a TENTATIVE tuple
from it, or another session, clears it. If the buffer's stable tuples do not reach ``s`` (that producer is behind the
ids held), the connection is closed and the link resubscribes there by ids instead.

A corrections connection that fails, or a change of ``correct_from``, drops the buffer:
nothing of it was delivered, so nothing is lost; the reader retries the same producer
after ``retry_interval`` while it stays the corrections source.

Invariants:

* The ids describe what ``on_batch`` returned from: they move after it returns, with no
  await in between, so a resubscription neither skips nor repeats a processed data tuple.
  ``on_batch`` must take a batch whole or not at all (it is cancelled only when the link
  is). Only the main session calls it; the corrections reader never does, and a stable
  id is delivered at most once, adoption included.
* With ``columns`` (a replica's links: issue 48), a batch goes to ``on_batch`` as the
  :class:`~protocol.columns.Columns` it travelled in, no tuple built, when the link's own
  bookkeeping needs none: no UNDO in it and the tmax filter not armed (the ids then move
  to the last STABLE and the last TENTATIVE id, as :func:`~node.streams.resume.advance`
  moves them); any other batch goes as tuples.
* Acks are level-1: every ``ack_interval`` the link sends ``Ack(stream, subscriber, s)``
  when ``s`` moved since the last one, ``s`` being the last stable id *processed*.
* The link never holds two subscriptions at one producer (a publisher keeps one
  subscription per subscriber: a second one would silently replace the first). The
  reader does not subscribe at the main session's producer (``current``); before the main
  session subscribes at the reader's producer, the reader closes its connection, and the
  main session connects only after that (the corrections connection that delivered a
  REC_DONE is adopted instead, when possible). A handover waiting for the main loop holds
  a subscription too: the reader closes it before subscribing at its producer again, and
  before handing over another one (``_drop_handover_at``).
* A peer's garbage or unexpected message is logged with the producer's name and ends that
  connection only; the link goes on with the next producer. An exception of ``on_batch``
  ends ``run`` (a local failure, STYLE.md 8; it arrives in an ``ExceptionGroup``, from the
  session's TaskGroup). Cancelling ``run`` closes every connection, the reader's too.
* A blackholed producer (silent, connection open) is not detected here: liveness is the
  HA monitor's business (heartbeats, node/streams/monitor.py), which then calls ``switch_to``. When a
  connection fails, the link asks the monitor's ``choose(failed)`` for the next producer
  (round-robin when it has no opinion).
* Switching to an UP_FAILURE producer while holding tentative tuples arms the link's
  :class:`~node.streams.upstream.TmaxFilter` (``switch_to(..., tmax=True)``): tentative tuples not
  newer than all held are dropped (property 2: no duplicates, only tentatives lost). While
  unarmed the filter only tracks the highest ``tmax`` seen, at C speed. Adopting the
  corrections connection disarms it (its ``UNDO(s)`` replaces every held tentative).
* Parked (``park``: a process pair's secondary in amnesia, node/replica/runtime.py), a link
  holds no subscription, reads no corrections, sends every producer
  ``Unsubscribe(release=True)`` once (so that acks of an earlier life pin no buffer) and
  no ack (the HA monitor leaves it out of its heartbeats); ``unpark`` subscribes with
  ``live=True`` from ids 0 (the producer starts after its last stable tuple) until the
  first data tuple gives it ids to resume by.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from node.clock import now_us
from node.errors import NodeError
from node.net.transport import Connection, Transport
from node.streams.corrections import Address, Corrections, Handover
from node.streams.mutation import Mutation
from node.streams.resume import advance
from node.streams.upstream import TmaxFilter
from protocol.errors import RemoteProtocolError
from protocol.messages import Ack, Batch, Subscribe, Unsubscribe
from protocol.tuples import Kind, Tuple
from state.errors import StateError

__all__ = ["InputLink"]

REC_DONE = Kind.REC_DONE
_kind_of = itemgetter(0)


#: How often a run of failed connects to one producer is logged again as a warning (µs).
_REFUSED_REPEAT = 5_000_000
_STABLE_CODE, _TENTATIVE_CODE, _UNDO_CODE = int(Kind.STABLE), int(Kind.TENTATIVE), int(Kind.UNDO)


async def _first(*events: asyncio.Event) -> None:
    """Wait until one of ``events`` is set."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


class InputLink:
    """The subscription of ``subscriber`` to ``stream``. See the module docstring."""

    def __init__(
        self,
        transport: Transport,
        stream: str,
        subscriber: str,
        producers: Sequence[Address],
        # (str, Sequence[Tuple]), or (str, Sequence[Tuple] | Columns) with ``columns``.
        on_batch: Callable[[str, Any], Awaitable[None]],
        *,
        columns: bool = False,
        ack_interval: float = 0.1,
        retry_interval: float = 0.1,
        choose: Callable[[Address | None], Address | None] | None = None,
        log: logging.Logger,
        mutation: Mutation | None = None,
    ) -> None:
        if not producers:
            raise NodeError(f"input link {subscriber!r} <- {stream!r}: no producer to connect to")
        self.stream = stream
        self.subscriber = subscriber
        self.producers = tuple(producers)
        self._transport = transport
        self._on_batch = on_batch
        #: Hand ``on_batch`` a batch off the wire as its columns where the link's own
        #: bookkeeping needs no tuple (no UNDO in it, the tmax filter not armed): a
        #: replica's SUnion takes them as they are (operators/sunion.py). Else tuples.
        self.columns = columns
        self._ack_interval = ack_interval
        self._retry_interval = retry_interval
        self._log = log
        self.choose = choose  # the HA monitor's opinion on the next producer, if any
        self.tmax = TmaxFilter()
        self.current: Address | None = None  # the producer in use or being tried
        self.switches = 0  # switch_to calls that moved the link
        self.last_stable_id = 0
        self.last_tentative_id = 0
        # Test-only (the fault harness's mutation check): a deliberately broken build whose
        # resubscriptions overlap what the link already holds, so that duplicates reach it.
        self._overlap = mutation is Mutation.RESUBSCRIBE_OVERLAP
        self.producer: str | None = None  # "host:port" while connected
        # When the main session in progress began (now_us; None: no session): the HA
        # monitor's link rule judges a session at least its ``link_lag`` old by ``tmax.highest``
        # (node/streams/upstream.py).
        self.session_since: int | None = None
        self.batches_in = 0
        self.connects = 0  # connections that carried a Subscribe
        self.failures = 0  # connection attempts that failed
        #: Per producer refusing a connect now: (first failure, attempts, last warning) µs.
        self._unreachable: dict[Address, tuple[int, int, int | None]] = {}
        # The producer in use sent its REC_DONE on the corrections connection the link then
        # adopted, and no TENTATIVE tuple since (the module docstring; node/streams/upstream.py).
        self.reconciled = False
        self.corrections: Address | None = None  # the corrections reader's producer
        self.corrections_applied = 0  # corrections connections adopted on their REC_DONE
        self._fix: Corrections | None = None  # what the reader holds now
        self._fix_at: Address | None = None  # where the reader holds a subscription
        self._fix_closed = asyncio.Event()  # set while the reader holds no subscription
        self._fix_closed.set()
        self._fix_changed = asyncio.Event()  # set by correct_from() (and to stop the reader)
        self._handover: Handover | None = None
        self._acked = 0
        #: At most this is acknowledged (None: no cap): a replica with CEC checkpoints acks
        #: only what its log's recovery would not replay (node/replica/cec.py).
        self.ack_cap: int | None = None
        #: Parked (:meth:`park`): no subscription; the producers released, or held at
        #: ``held`` (a passive standby's checkpoint: :meth:`hold_at`).
        self.parked = False
        self.holding = False
        self.held: int | None = None  # the stable id a holding parked link acks
        self._held_moved = asyncio.Event()
        self._unparked = asyncio.Event()
        self._unparked.set()
        #: Subscribe at the live end (:meth:`unpark`) until a data tuple came.
        self.live = False
        self._next = 0  # index (mod len) of the producer to try next
        self._switching = False
        self._wake = asyncio.Event()  # set by switch_to() and by a REC_DONE handover

    @property
    def connected(self) -> bool:
        return self.producer is not None

    @property
    def ack_id(self) -> int:
        """What this link acknowledges (level-1): its last stable id processed, at most
        ``ack_cap`` (one less under the overlap mutation, so that every producer still holds
        what it asks again)."""
        if self.parked:
            return self.held or 0
        s = self.last_stable_id
        if self.ack_cap is not None and self.ack_cap < s:
            s = self.ack_cap
        return s - 1 if self._overlap and s > 0 else s

    def _sub_ack(self) -> int:
        """The ack a Subscribe carries: -1 (all it holds) unless acks are capped."""
        return -1 if self.ack_cap is None else self.ack_id

    @property
    def reconnects(self) -> int:
        """Connections after the first one (each one a resubscription)."""
        return max(0, self.connects - 1)

    @property
    def corrections_buffered(self) -> int:
        """Tuples the corrections reader holds now (in force: undone ones do not count)."""
        return 0 if self._fix is None else len(self._fix.buffer)

    def __repr__(self) -> str:
        return (
            f"InputLink({self.subscriber!r} <- {self.stream!r}, producer={self.producer}, "
            f"stable={self.last_stable_id}, tentative={self.last_tentative_id}, "
            f"corrections={self.corrections})"
        )

    def _check(self, producer: Address) -> None:
        if producer not in self.producers:
            raise NodeError(
                f"input link {self.subscriber!r} <- {self.stream!r}: {producer} is not "
                f"one of its producers {list(self.producers)}"
            )

    def switch_to(self, producer: Address | None = None, *, tmax: bool = False) -> None:
        """Drop the current connection (if any) and subscribe at ``producer`` next
        (default: the next producer, round-robin), resuming from the ids held. For an HA
        monitor that found a better replica; ``tmax`` arms the duplicate filter (a switch to
        an UP_FAILURE producer), otherwise it is disarmed."""
        if tmax:
            self.tmax.arm()
        else:
            self.tmax.reset()
        self.switches += 1
        if producer is not None:
            self._check(producer)
            self._next = self.producers.index(producer)
            self.current = producer  # the monitor's next look sees the switch as done
        self.session_since = None  # the session being left is not the new producer's
        self._switching = True
        self._wake.set()

    def park(self, *, hold: bool = False) -> None:
        """Hold no subscription (a process pair's secondary that does not process,
        node/replica/runtime.py): the session in progress ends and the link waits for
        :meth:`unpark`. Amnesia's secondary wants nothing: every producer is told
        ``Unsubscribe(release=True)``, so that nothing it acked in an earlier life pins a
        buffer, and the HA monitor's heartbeats carry no ack of this stream
        (node/streams/monitor.py). A passive standby's (``hold``) will resume from its
        last checkpoint: it acks each producer what that checkpoint covers
        (:meth:`hold_at`; the paper's "the secondary tells upstream which input it now
        covers"), and nothing until it has one."""
        if self.parked:
            return
        self.parked = True
        self.holding = hold
        self.held = None
        self._unparked.clear()
        self.correct_from(None)
        self.switch_to()

    def hold_at(self, stable_id: int) -> None:
        """A parked, holding link acks its producers ``stable_id`` from now on."""
        if self.parked and self.holding and stable_id != self.held:
            self.held = stable_id
            self._held_moved.set()

    def unpark(self, at: tuple[int, int] | None = None) -> None:
        """Subscribe again: from the resume ids ``at`` (passive standby: its checkpoint's),
        or, None, at the live end: from what the producer holds after its last stable
        tuple (``Subscribe(live=True)``), with the ids learnt from the first data tuple that
        comes; what was produced meanwhile is not asked for (amnesia: lost)."""
        if not self.parked:
            return
        self.parked = False
        self.live = at is None
        self.last_stable_id, self.last_tentative_id = (0, 0) if at is None else at
        self.tmax.reset()
        self._unparked.set()

    def correct_from(self, producer: Address | None) -> None:
        """Read corrections from ``producer`` in the background, until its REC_DONE moves
        the link there (module docstring); None stops the reader and drops what it holds.
        The producer of the main session (``current``) is never read twice: asking for it
        stops the reader too; a parked link reads nothing."""
        if self.parked:
            producer = None
        if producer is not None:
            self._check(producer)
            if producer == self.current:
                producer = None
        if producer == self.corrections:
            return
        self.corrections = producer
        self._fix_changed.set()

    async def run(self) -> None:
        """Keep the subscription alive, and the corrections reader, forever (until
        cancelled)."""
        name = f"{self.subscriber} <- {self.stream}"
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._corrections_loop(name))
                await self._main_loop(name)
        finally:
            handover, self._handover = self._handover, None
            if handover is not None:
                await handover.conn.close()

    # ------------------------------------------------------------------ main session
    async def _main_loop(self, name: str) -> None:
        failed: Address | None = None
        while True:
            if self.parked:
                await self._stay_parked(name)
                failed = None
            choice = (
                self.choose(failed) if self.choose is not None and not self._switching else None
            )
            if choice is not None and choice in self.producers:
                self._next = self.producers.index(choice)
            host, port = self.producers[self._next % len(self.producers)]
            self.current = (host, port)
            self._next += 1
            self._switching = False
            self._wake.clear()
            served_before = self.batches_in
            here, address = (host, port), f"{host}:{port}"
            taken = await self._take_handover(here, name)
            if taken is not None:
                handover, first = taken
                try:
                    await self._session(handover.conn, address, name, (first, handover.fix))
                finally:
                    self.producer = self.session_since = None
                    await handover.conn.close()
            else:
                # No await since _take_handover found none: the reader cannot hand this
                # producer over any more once told to leave it.
                await self._release_corrections(here)
                conn = None
                try:
                    conn = await self._connect(host, port, name)
                except OSError as exc:
                    self.failures += 1
                    self._refused(here, name, exc)
                if conn is not None:
                    self._unreachable.pop(here, None)
                    try:
                        await self._session(conn, address, name)
                    finally:
                        self.producer = self.session_since = None
                        await conn.close()
            failed = None if self._switching else (host, port)
            served = self.batches_in > served_before
            if not self._switching and not (served and len(self.producers) > 1):
                try:  # a switch or a REC_DONE handover cuts the pause short
                    async with asyncio.timeout(self._retry_interval):
                        await self._wake.wait()
                except TimeoutError:
                    pass

    def _refused(self, producer: Address, name: str, exc: OSError) -> None:
        """A connect to ``producer`` failed: a warning on the first of a run of failures and
        then every :data:`_REFUSED_REPEAT` µs of it, the other attempts at debug level (the
        link retries every ``retry_interval``: a producer down for a minute was 600 lines)."""
        now = now_us()
        first, count, warned = self._unreachable.get(producer, (now, 0, None))
        count += 1
        address = f"{producer[0]}:{producer[1]}"
        if warned is None or now - warned >= _REFUSED_REPEAT:
            more = "" if count == 1 else f" ({count} attempts in {(now - first) / 1e6:.1f} s)"
            self._log.warning("%s: cannot connect to producer %s%s: %r", name, address, more,
                              exc)
            warned = now
        else:
            self._log.debug("%s: cannot connect to producer %s: %r", name, address, exc)
        self._unreachable[producer] = (first, count, warned)

    async def _stay_parked(self, name: str) -> None:
        """Until :meth:`unpark`: release every producer once, or (holding) ack each what
        the checkpoint covers whenever that moves; a producer that cannot be reached is
        tried again every ``retry_interval`` (one that restarts has a fresh buffer, and is
        told again). One standing connection per producer carries the acks: a connection
        and its handshake per ack cost upstream backup a tenth of its bandwidth
        (docs/ha-modes.md, Benchmark)."""
        how = "holding at its checkpoint" if self.holding else "releasing"
        self._log.info("%s: parked: %s %d producer(s)", name, how, len(self.producers))
        told: dict[Address, int | None] = {}  # producer -> what it was told
        conns: dict[Address, Connection] = {}
        try:
            async with asyncio.TaskGroup() as watchers:
                while self.parked:
                    self._held_moved.clear()
                    want = self.held if self.holding else -1  # -1: a release
                    for producer in self.producers:
                        if want is None or told.get(producer) == want:
                            continue
                        msg = (Unsubscribe(self.stream, self.subscriber, release=True)
                               if want < 0 else Ack(self.stream, self.subscriber, want))
                        try:
                            conn = conns.get(producer)
                            if conn is None:
                                conn = conns[producer] = await self._transport.connect(*producer)
                                watchers.create_task(self._watch_parked(producer, conn, conns,
                                                                        told))
                            await conn.send(msg)
                        except OSError as exc:
                            self._log.debug("%s: cannot reach producer %s:%d yet: %r", name,
                                            *producer, exc)
                            if (dead := conns.pop(producer, None)) is not None:
                                await dead.close()  # (its watcher ends)
                            continue
                        told[producer] = want
                    done = all(told.get(p) == want for p in self.producers) or want is None
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(None if done else self._retry_interval):
                            await _first(self._unparked, self._held_moved)
                for conn in list(conns.values()):
                    await conn.close()
        finally:
            for conn in list(conns.values()):
                await conn.close()
        self._log.info("%s: unparked: subscribing %s", name,
                       "at the live end" if self.live else
                       f"from stable {self.last_stable_id}, tentative {self.last_tentative_id}")

    async def _watch_parked(self, producer: Address, conn: Connection,
                            conns: dict[Address, Connection],
                            told: dict[Address, int | None]) -> None:
        """Until the parked link's connection to ``producer`` ends: then forget it and what
        the producer was told (a restarted producer is told again). The producer sends
        nothing on it (it answers requests only)."""
        try:
            while await conn.receive() is not None:
                pass
        except OSError:  # the producer died or reset the connection
            pass
        except RemoteProtocolError as exc:
            self._log.error("%s: producer %s:%d sent bad data to a parked link: %s; closing",
                            self.stream, *producer, exc)
        if conns.get(producer) is conn:
            del conns[producer]
            told.pop(producer, None)
            self._held_moved.set()  # (tell it again, or retry later)
        await conn.close()

    async def _connect(self, host: str, port: int, name: str) -> Connection | None:
        """A connection to the producer at ``host:port``, or None when ``switch_to`` (or a
        REC_DONE handover) moved the link on first: the attempt is then cancelled. A connect
        to a producer behind a blackhole gets no answer until its timeout (a lost SYN: the
        fault wrapper's ``connect_timeout``, up to the transport's ``hello_timeout`` on a
        real partition); the HA monitor that meanwhile declared that producer failed and
        named another must not wait for it (simulate seed 1724: a switch back to a live
        replica waited 0.7 s for a 1 s connect timeout, and the client got a result 2.085 s
        after its input, bound k*X = 2 s). Raises what ``connect`` raises (OSError)."""
        conn: Connection | OSError | None = None
        if not self._switching:
            async with asyncio.TaskGroup() as tg:
                attempt = tg.create_task(self._attempt(host, port))
                moved = tg.create_task(self._wake.wait())
                await asyncio.wait((attempt, moved), return_when=asyncio.FIRST_COMPLETED)
                attempt.cancel()  # a no-op once it is done
                moved.cancel()
            conn = None if attempt.cancelled() else attempt.result()
        if isinstance(conn, OSError):
            raise conn
        if self._switching:
            if conn is not None:  # made just as the switch came: not wanted any more
                await conn.close()
            self._log.info("%s: left producer %s:%d before connecting, to switch", name,
                           host, port)
            return None
        return conn

    async def _attempt(self, host: str, port: int) -> Connection | OSError:
        """``connect``, its OSError returned: :meth:`_connect` raises it outside its
        TaskGroup (which would wrap it in an ExceptionGroup)."""
        try:
            return await self._transport.connect(host, port)
        except OSError as exc:
            return exc

    async def _take_handover(
        self, here: Address, name: str
    ) -> tuple[Handover, list[Tuple]] | None:
        """The corrections connection to adopt at ``here`` with what to deliver first, or
        None. Any other handover is closed: nothing of it was delivered, so
        dropping it loses nothing (the link moved elsewhere meanwhile, or that producer is
        behind the ids held and the link resubscribes there by ids)."""
        while (handover := self._handover) is not None:
            self._handover = None
            if handover.address == here:
                first = handover.fix.resume_after(self.last_stable_id, self.last_tentative_id)
                if first is not None:
                    return handover, first
            self._log.info(
                "%s: dropped the corrections buffered from %s:%d (REC_DONE) for %s:%d",
                name,
                *handover.address,
                *here,
            )
            await handover.conn.close()  # another handover may arrive meanwhile: loop
        return None

    async def _session(
        self,
        conn: Connection,
        address: str,
        name: str,
        adopted: tuple[list[Tuple], Corrections] | None = None,
    ) -> None:
        """One main session on ``conn``: a fresh subscription, or (``adopted`` given) the
        adopted corrections connection, whose buffered corrections ``adopted[0]`` go first."""
        first: list[Tuple] | None = None
        if adopted is None:
            s, t = self.last_stable_id, self.last_tentative_id
            if self._overlap and s > 0:  # the mutation: ask again for the last stable tuple
                s, t = s - 1, max(t - 1, s - 1)
            try:
                await conn.send(Subscribe(self.stream, self.subscriber, s, t, self._sub_ack(),
                                          live=self.live))
            except OSError as exc:
                self._log.warning("%s: cannot subscribe at producer %s: %r", name, address, exc)
                return
            self.connects += 1
            self.reconciled = False
            self._log.info(
                "%s: subscribed at producer %s from stable %d, tentative %d",
                name,
                address,
                self.last_stable_id,
                self.last_tentative_id,
            )
        else:
            first, fix = adopted
            self.corrections_applied += 1
            self.tmax.reset()  # UNDO(s) replaces every tentative tuple held: nothing to filter
            self.reconciled = fix.settled
            self._log.warning(
                "%s: REC_DONE from corrections source %s: moving to it, %d tuples of "
                "corrections after stable %d (tentative %d held)",
                name,
                address,
                len(first),
                self.last_stable_id,
                self.last_tentative_id,
            )
        self.producer = address
        self.session_since = now_us()
        self._acked = 0  # the new producer has seen no ack of ours yet
        async with asyncio.TaskGroup() as tg:
            # The acker and the switch watcher end a session by closing the connection,
            # never by cancelling the receiver: on_batch is not interrupted mid-batch.
            acker = tg.create_task(self._ack_loop(conn, name, address))
            watcher = tg.create_task(self._close_on(self._wake, conn))
            try:
                level, problem = await self._receive_loop(conn, first)
            finally:
                acker.cancel()
                watcher.cancel()
        if self._switching:
            self._log.info("%s: left producer %s to switch", name, address)
        else:
            self._log.log(level, "%s: producer %s %s", name, address, problem)

    @staticmethod
    async def _close_on(event: asyncio.Event, conn: Connection) -> None:
        await event.wait()
        await conn.close()

    async def _receive_loop(self, conn: Connection, first: list[Tuple] | None) -> tuple[int, str]:
        """Process batches until the producer closes, fails or misbehaves: how it ended.
        ``first``, if any, is processed before anything received."""
        stream, on_batch = self.stream, self._on_batch
        if first:
            self.tmax.observe(first)
            await on_batch(stream, first)
            self._advance(first)
            self.batches_in += 1
        try:
            while True:
                msg = await conn.receive()
                if type(msg) is not Batch or msg.stream != stream:
                    return self._problem(msg)
                if self.columns and not self.tmax.armed and await self._take_columns(msg):
                    continue
                tuples = msg.tuples
                if not tuples:
                    continue
                if self.tmax.armed:
                    tuples = self.tmax.accept(tuples)  # type: ignore[assignment]
                    if not tuples:
                        continue
                else:
                    self.tmax.observe(tuples)
                await on_batch(stream, tuples)
                self._advance(tuples)  # no await since on_batch returned: see the docstring
                self.batches_in += 1
        except RemoteProtocolError as exc:
            return logging.ERROR, f"sent bad data: {exc}; closing the connection"
        except OSError as exc:
            return logging.WARNING, f"connection failed: {exc!r}"

    async def _take_columns(self, msg: Batch) -> bool:
        """Hand ``msg`` on as columns (see ``columns``); False: it holds an UNDO, which
        the tuple path handles (:func:`~node.streams.resume.advance`)."""
        cols = msg.columns
        if not len(cols):
            return True
        kinds = cols.kinds()
        if (kinds == _UNDO_CODE).any():
            return False
        self.tmax.observe_highest(int(cols.batch.column(3).to_numpy().max()))
        await self._on_batch(self.stream, cols)
        # The ids after it, as advance() finds them (no UNDO: the last of each kind).
        ids = cols.ids()
        stable, tentative = np.flatnonzero(kinds == _STABLE_CODE), np.flatnonzero(
            kinds == _TENTATIVE_CODE)
        if len(stable):
            self.last_stable_id = int(ids[stable[-1]])
        if len(tentative):
            self.last_tentative_id = int(ids[tentative[-1]])
            self.reconciled = False  # a new failure upstream: its reconciliation is history
        if self.live and (self.last_stable_id or self.last_tentative_id):
            self.live = False
        self.batches_in += 1
        return True

    def _problem(self, msg: object) -> tuple[int, str]:
        """Why ``msg``, which is not a Batch of our stream, ends the connection."""
        if msg is None:
            return logging.WARNING, "closed the connection"
        if type(msg) is not Batch:
            what = f"an unexpected {type(msg).__name__} (expected Batch)"
        else:
            what = f"a Batch of stream {msg.stream!r} (expected {self.stream!r})"
        return logging.ERROR, f"sent {what}; closing the connection"

    def _advance(self, tuples: Sequence[Tuple]) -> None:
        self.last_stable_id, self.last_tentative_id, tentative = advance(
            tuples, self.last_stable_id, self.last_tentative_id)
        if self.live and (self.last_stable_id or self.last_tentative_id):
            self.live = False  # the ids say where it is now: resubscribe by them
        if tentative:
            self.reconciled = False  # a new failure upstream: its reconciliation is history

    async def _ack_loop(self, conn: Connection, name: str, address: str) -> None:
        try:
            while True:
                await asyncio.sleep(self._ack_interval)
                s = self.ack_id
                if s > self._acked:
                    await conn.send(Ack(self.stream, self.subscriber, s))
                    self._acked = s
        except OSError as exc:
            self._log.warning("%s: cannot ack to producer %s: %r", name, address, exc)
            await conn.close()

    # ------------------------------------------------------------------ corrections reader
    async def _release_corrections(self, producer: Address) -> None:
        """Before the main session subscribes at ``producer``: stop reading corrections
        there, and wait until the reader's connection is closed (its Subscribe then reached
        the producer before ours can, and ours replaces it)."""
        if self.corrections == producer:
            self.corrections = None
            self._fix_changed.set()
        if self._fix_at == producer:
            self._fix_changed.set()
            await self._fix_closed.wait()

    async def _corrections_loop(self, name: str) -> None:
        while True:
            self._fix_changed.clear()  # before reading the target: no change goes unseen
            target = self.corrections
            if target is None:
                await self._fix_changed.wait()
                continue
            await self._read_corrections(target, name)
            if self.corrections == target and not self._fix_changed.is_set():
                try:  # it failed: retry while it stays the corrections source
                    async with asyncio.timeout(self._retry_interval):
                        await self._fix_changed.wait()
                except TimeoutError:
                    pass

    async def _read_corrections(self, target: Address, name: str) -> None:
        host, port = target
        address = f"{host}:{port}"
        try:
            conn = await self._transport.connect(host, port)
        except OSError as exc:
            self._log.warning("%s: cannot connect to corrections source %s: %r", name, address, exc)
            return
        handed_over = False
        try:
            if not (self._fix_changed.is_set() or target == self.current):
                await self._drop_handover_at(target, name)
            if self._fix_changed.is_set() or target == self.current:
                return  # not wanted any more, or the main session reads it already
            s = self.last_stable_id
            self._fix_at = target  # no await since the check above: see _release_corrections
            self._fix_closed.clear()
            try:
                await conn.send(Subscribe(self.stream, self.subscriber, s, s, self._sub_ack()))
            except OSError as exc:
                self._log.warning(
                    "%s: cannot subscribe at corrections source %s: %r", name, address, exc
                )
                return
            fix = self._fix = Corrections(self.stream, s)
            self._log.info("%s: reading corrections from %s after stable %d", name, address, s)
            async with asyncio.TaskGroup() as tg:
                watcher = tg.create_task(self._close_on(self._fix_changed, conn))
                try:
                    level, problem = await self._receive_corrections(conn, fix)
                finally:
                    watcher.cancel()
            if problem or self._fix_changed.is_set():
                # A REC_DONE that raced with a stop counts for nothing: the main session may
                # be about to subscribe there, and this subscription must not outlive that.
                if problem and not self._fix_changed.is_set():
                    self._log.log(
                        level,
                        "%s: corrections source %s %s; dropping %d buffered tuples",
                        name,
                        address,
                        problem,
                        len(fix.buffer),
                    )
                return
            # REC_DONE: hand the connection to the main loop, which leaves its producer
            # (never mid-batch) and adopts it. From here on the producer is the data source.
            await self._drop_handover_at(None, name)  # a handover not taken yet is stale now
            if self._fix_changed.is_set():
                return
            self._handover = Handover(conn, target, fix)
            handed_over = True
            self.corrections = None
            self._next = self.producers.index(target)
            self.current = target  # the monitor's next look sees the move as done
            self.session_since = None  # the session being left is not the new producer's
            self._switching = True
            self._wake.set()
        finally:
            self._fix = None
            if not handed_over:
                await conn.close()
            self._fix_at = None
            self._fix_closed.set()

    async def _drop_handover_at(self, target: Address | None, name: str) -> None:
        """Close the handover waiting for the main loop if it is at ``target`` (None: at
        any producer). Its connection still holds a subscription there, which a new
        Subscribe of the reader would silently replace at the publisher: the main loop
        would then adopt a connection nothing is sent on any more. It is stale anyway: the
        reader reads ``target`` again only after ``switch_to`` sent the link elsewhere
        (``current`` moved off it), and the main loop drops a handover that is not at the
        producer it goes to. Nothing of it was delivered, so nothing is lost."""
        handover = self._handover
        if handover is None or target not in (None, handover.address):
            return
        self._handover = None
        self._log.info("%s: dropped the corrections buffered from %s:%d (REC_DONE): the link "
                       "moved on before adopting them", name, *handover.address)
        await handover.conn.close()

    async def _receive_corrections(self, conn: Connection, fix: Corrections) -> tuple[int, str]:
        """Buffer batches until one carries a REC_DONE (returns ``problem == ""``) or the
        connection ends: how it ended."""
        try:
            while True:
                msg = await conn.receive()
                if type(msg) is not Batch or msg.stream != self.stream:
                    return self._problem(msg)
                tuples = list(msg.tuples)
                if not tuples:
                    continue
                fix.buffer.append(tuples)
                if REC_DONE in map(_kind_of, tuples):
                    return logging.INFO, ""
        except StateError as exc:
            return logging.ERROR, f"sent a broken stream: {exc}; closing the connection"
        except RemoteProtocolError as exc:
            return logging.ERROR, f"sent bad data: {exc}; closing the connection"
        except OSError as exc:
            return logging.WARNING, f"connection failed: {exc!r}"
