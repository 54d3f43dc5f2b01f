"""The input link: the consumer side of one input stream (DESIGN.md 4, paper section 4).

An :class:`InputLink` keeps one subscription to ``stream`` alive for ``subscriber``: it
connects to one of the stream's producers (replicas of the upstream node, or a source),
sends ``Subscribe(stream, subscriber, last_stable_id, last_tentative_id)``, hands every
Batch to ``on_batch`` and acknowledges what was processed. When the connection fails or
ends it moves on to the next producer, round-robin, after ``retry_interval``;
``switch_to`` moves it on at once (for an HA monitor that found a better replica).

Resume ids. With ``s`` = ``last_stable_id`` and ``t`` = ``last_tentative_id``, what the
link holds in force (UNDOs applied) is the stable stream through ``s`` followed, if
``t > s``, by tentative tuples through ``t``; ``t <= s`` means no tentative tuple is held.
A STABLE tuple sets ``s``, a TENTATIVE one sets ``t``. ``UNDO(u)`` deletes every data
tuple after ``u``, so ``t`` becomes ``min(t, u)``, never below ``s`` (stable tuples are
never undone). That is exactly what ``OutputBuffer.replay(s, t)`` expects: no tentatives
(case 1) resumes after ``s``; a held tentative run that the producer still has (case 2)
resumes after ``t``; any other (case 3) starts with ``UNDO(s)``. Control tuples carry no
id and change neither.

Invariants:

* The ids describe what ``on_batch`` returned from: they move after it returns, with no
  await in between, so a resubscription neither skips nor repeats a processed data tuple.
  ``on_batch`` must take a batch whole or not at all (it is cancelled only when the link
  is).
* Acks are level-1: every ``ack_interval`` the link sends ``Ack(stream, subscriber, s)``
  when ``s`` moved since the last one, ``s`` being the last stable id *processed*.
* A peer's garbage or unexpected message is logged with the producer's name and ends that
  connection only; the link goes on with the next producer. An exception of ``on_batch``
  ends ``run`` (a local failure, STYLE.md 8; it arrives in an ``ExceptionGroup``, from the
  session's TaskGroup). Cancelling ``run`` closes the connection.
* A blackholed producer (silent, connection open) is not detected here: liveness is the
  HA monitor's business (heartbeats, node/ha.py), which then calls ``switch_to``. When a
  connection fails, the link asks the monitor's ``choose(failed)`` for the next producer
  (round-robin when it has no opinion).
* Switching to an UP_FAILURE producer while holding tentative tuples arms the link's
  :class:`~node.upstream.TmaxFilter` (``switch_to(..., tmax=True)``): tentative tuples not
  newer than all held are dropped (property 2: no duplicates, only tentatives lost). While
  unarmed the filter only tracks the highest ``tmax`` seen, at C speed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from operator import itemgetter

from protocol.errors import RemoteProtocolError
from protocol.messages import Ack, Batch, Subscribe
from protocol.tuples import Kind, Tuple

from .errors import NodeError
from .transport import Connection, Transport
from .upstream import TmaxFilter

__all__ = ["InputLink"]

STABLE = Kind.STABLE
TENTATIVE = Kind.TENTATIVE
UNDO = Kind.UNDO
_kind_of = itemgetter(0)


def _last_index(kinds: list[Kind], kind: Kind, start: int, stop: int) -> int:
    """Index of the last ``kind`` in ``kinds[start:stop]``, or -1 (a C-level scan)."""
    seg = kinds[start:stop]
    seg.reverse()
    try:
        return stop - 1 - seg.index(kind)
    except ValueError:
        return -1


def _index(kinds: list[Kind], kind: Kind, start: int, default: int) -> int:
    """Index of the first ``kind`` in ``kinds[start:]``, or ``default``."""
    try:
        return kinds.index(kind, start)
    except ValueError:
        return default


class InputLink:
    """The subscription of ``subscriber`` to ``stream``. See the module docstring."""

    def __init__(
        self,
        transport: Transport,
        stream: str,
        subscriber: str,
        producers: Sequence[tuple[str, int]],
        on_batch: Callable[[str, Sequence[Tuple]], Awaitable[None]],
        *,
        ack_interval: float = 0.1,
        retry_interval: float = 0.1,
        choose: Callable[[tuple[str, int] | None], tuple[str, int] | None] | None = None,
        log: logging.Logger,
    ) -> None:
        if not producers:
            raise NodeError(f"input link {subscriber!r} <- {stream!r}: no producer to connect to")
        self.stream = stream
        self.subscriber = subscriber
        self.producers = tuple(producers)
        self._transport = transport
        self._on_batch = on_batch
        self._ack_interval = ack_interval
        self._retry_interval = retry_interval
        self._log = log
        self.choose = choose  # the HA monitor's opinion on the next producer, if any
        self.tmax = TmaxFilter()
        self.current: tuple[str, int] | None = None  # the producer in use or being tried
        self.switches = 0  # switch_to calls that moved the link
        self.last_stable_id = 0
        self.last_tentative_id = 0
        self.producer: str | None = None  # "host:port" while connected
        self.tuples_in = 0
        self.batches_in = 0
        self.connects = 0  # connections that carried a Subscribe
        self.failures = 0  # connection attempts that failed
        self._acked = 0
        self._next = 0  # index (mod len) of the producer to try next
        self._switching = False
        self._wake = asyncio.Event()  # set by switch_to()

    @property
    def connected(self) -> bool:
        return self.producer is not None

    @property
    def reconnects(self) -> int:
        """Connections after the first one (each one a resubscription)."""
        return max(0, self.connects - 1)

    def __repr__(self) -> str:
        return (
            f"InputLink({self.subscriber!r} <- {self.stream!r}, producer={self.producer}, "
            f"stable={self.last_stable_id}, tentative={self.last_tentative_id})"
        )

    def switch_to(self, producer: tuple[str, int] | None = None, *, tmax: bool = False) -> None:
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
            if producer not in self.producers:
                raise NodeError(
                    f"input link {self.subscriber!r} <- {self.stream!r}: {producer} is not "
                    f"one of its producers {list(self.producers)}"
                )
            self._next = self.producers.index(producer)
            self.current = producer  # the monitor's next look sees the switch as done
        self._switching = True
        self._wake.set()

    async def run(self) -> None:
        """Keep the subscription alive, forever (until cancelled)."""
        name = f"{self.subscriber} <- {self.stream}"
        failed: tuple[str, int] | None = None
        while True:
            choice = self.choose(failed) if self.choose is not None and not self._switching else None
            if choice is not None and choice in self.producers:
                self._next = self.producers.index(choice)
            host, port = self.producers[self._next % len(self.producers)]
            self.current = (host, port)
            self._next += 1
            self._switching = False
            self._wake.clear()
            address = f"{host}:{port}"
            try:
                conn = await self._transport.connect(host, port)
            except OSError as exc:
                self.failures += 1
                self._log.warning("%s: cannot connect to producer %s: %r", name, address, exc)
            else:
                try:
                    await self._session(conn, address, name)
                finally:
                    self.producer = None
                    await conn.close()
            failed = None if self._switching else (host, port)
            if not self._switching:
                await asyncio.sleep(self._retry_interval)

    async def _session(self, conn: Connection, address: str, name: str) -> None:
        try:
            await conn.send(
                Subscribe(self.stream, self.subscriber, self.last_stable_id, self.last_tentative_id)
            )
        except OSError as exc:
            self._log.warning("%s: cannot subscribe at producer %s: %r", name, address, exc)
            return
        self.producer = address
        self.connects += 1
        self._acked = 0  # the new producer has seen no ack of ours yet
        self._log.info(
            "%s: subscribed at producer %s from stable %d, tentative %d",
            name,
            address,
            self.last_stable_id,
            self.last_tentative_id,
        )
        async with asyncio.TaskGroup() as tg:
            # The acker and the switch watcher end a session by closing the connection,
            # never by cancelling the receiver: on_batch is not interrupted mid-batch.
            acker = tg.create_task(self._ack_loop(conn, name, address))
            watcher = tg.create_task(self._watch_switch(conn))
            try:
                level, problem = await self._receive_loop(conn)
            finally:
                acker.cancel()
                watcher.cancel()
        if self._switching:
            self._log.info("%s: left producer %s to switch", name, address)
        else:
            self._log.log(level, "%s: producer %s %s", name, address, problem)

    async def _watch_switch(self, conn: Connection) -> None:
        await self._wake.wait()
        await conn.close()

    async def _receive_loop(self, conn: Connection) -> tuple[int, str]:
        """Process batches until the producer closes, fails or misbehaves: how it ended."""
        stream, on_batch = self.stream, self._on_batch
        try:
            while True:
                msg = await conn.receive()
                if msg is None:
                    return logging.WARNING, "closed the connection"
                if type(msg) is not Batch:
                    what = f"an unexpected {type(msg).__name__} (expected Batch)"
                    return logging.ERROR, f"sent {what}; closing the connection"
                if msg.stream != stream:
                    what = f"a Batch of stream {msg.stream!r} (expected {stream!r})"
                    return logging.ERROR, f"sent {what}; closing the connection"
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
                self.tuples_in += len(tuples)
                self.batches_in += 1
        except RemoteProtocolError as exc:
            return logging.ERROR, f"sent bad data: {exc}; closing the connection"
        except OSError as exc:
            return logging.WARNING, f"connection failed: {exc!r}"

    def _advance(self, tuples: Sequence[Tuple]) -> None:
        kinds = list(map(_kind_of, tuples))
        s, t = self.last_stable_id, self.last_tentative_id
        start, n = 0, len(kinds)
        # Segments between UNDOs; without an UNDO (the common case) one C-level pass each.
        undo_at = _index(kinds, UNDO, 0, n)
        while True:
            i = _last_index(kinds, STABLE, start, undo_at)
            if i >= 0:
                s = tuples[i][1]
            i = _last_index(kinds, TENTATIVE, start, undo_at)
            if i >= 0:
                t = tuples[i][1]
            if undo_at == n:
                break
            t = max(s, min(t, tuples[undo_at][1]))
            start = undo_at + 1
            undo_at = _index(kinds, UNDO, start, n)
        self.last_stable_id, self.last_tentative_id = s, t

    async def _ack_loop(self, conn: Connection, name: str, address: str) -> None:
        try:
            while True:
                await asyncio.sleep(self._ack_interval)
                s = self.last_stable_id
                if s > self._acked:
                    await conn.send(Ack(self.stream, self.subscriber, s))
                    self._acked = s
        except OSError as exc:
            self._log.warning("%s: cannot ack to producer %s: %r", name, address, exc)
            await conn.close()
