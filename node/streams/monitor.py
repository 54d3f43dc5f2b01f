"""The HA monitor: heartbeats to upstream replicas, and switching input links (paper 3.3, 5).

Role. A replica or a client owns one :class:`UpstreamMonitor` over the input links whose
producer is a replicated node. A replica's monitor also *watches* its sources (paper
section 3.3: every upstream neighbour is probed; :func:`source_upstreams`): a source has no
replica to switch to, but its silence makes that input unavailable, which the replica's
consistency machine hears at once (``on_cut_off``: UP_FAILURE on detection, issue 46) instead
of at SUnion's first tentative release alpha*X later. The decisions are pure and live in
``node/streams/upstream.py``; this module is the I/O around them.

Theory of operation
-------------------
Per upstream replica, one *probe* connection to its data port carries ``HeartbeatRequest``
every ``interval`` (the :class:`~node.streams.upstream.HeartbeatTracker`'s grid) and brings back
``HeartbeatResponse`` with the state and the frontier (the largest tuple time its output
reached) of each of its output streams. Each request carries
the owner's acks of the streams it reads from that replica's node (``link.ack_id`` of
each link: what the link would Ack): the heartbeats reach every upstream replica, the ones
no link reads from too, so that their output buffers trim by what this consumer holds
(an Ack reaches only the producer a link reads; state/buffer.py). After every answer and
every round, :meth:`UpstreamMonitor.evaluate` runs :func:`~node.streams.upstream.choose_upstream`
for each monitored link and moves the link when the choice differs from the producer in
use: ``Resume.IDS`` is a plain resubscription, ``Resume.TMAX`` also arms the link's tmax
filter. The chooser's frontier rule (among UP_FAILURE replicas, one whose frontier is
ahead of the current source's by more than ``lag`` takes over) gets the ``lag`` the owner
passes: a replica its node's alpha*X, a client that of the node it reads (why alpha*X:
the module docstring of node/streams/upstream.py). The link rule (a STABLE source that reports a frontier more
than ``link_lag`` ahead of what its link received is left for a STABLE replica that far
ahead) gets what the link received, once its session is ``link_lag`` old, with
``link_lag`` = (misses + 1) * interval, the time heartbeats take to declare a silent
replica failed. A link whose connection broke asks :meth:`choose` for its next producer, with the
failed one excluded at once (no need to wait for missed heartbeats after a crash).

Corrections source (paper section 4). When the choice names one (a STABILIZATION replica,
while the data source is not STABLE), :meth:`~UpstreamMonitor.evaluate` has the link read
it in the background (``InputLink.correct_from``), and stops that reader when the choice
names none, or names the link's own data source (one producer is never read twice). The
chooser gets the corrections source in use (``corrections=``), so it sticks to it until
its REC_DONE. On that REC_DONE the link moves to it by itself, before the heartbeats stop
reporting STABILIZATION; ``link.reconciled`` says so, and the chooser
(``current_reconciled=``) then keeps it as the data source instead of moving the link
back to an UP_FAILURE replica. ``status()`` reports what the link reads: its data source,
its corrections source, how many tuples the reader holds and how many corrections
connections were adopted.

A replica that cannot be connected to, or does not answer, misses its heartbeats: after more
than ``misses`` in a row it is declared failed (the tracker's rule) and never chosen.

Unavailable inputs. :meth:`UpstreamMonitor.cut_off` lists the inputs that no upstream
replica offers as STABLE (every one dead, or saying UP_FAILURE / STABILIZATION), watched
sources included (a source is STABLE while it answers). After every evaluation the owner's
``on_cut_off`` hears that list whenever it changed: the replica's runtime turns it into the
machine's ``InputsChanged`` event and into the per-output states its own heartbeat answers
carry, so that its consumers leave it for a STABLE partner before any tentative release.

Invariants
----------
* A link is moved only to a producer the chooser picked from answered, alive replicas, and
  reads corrections only from one it picked too (or from none).
* Probe connections are owned by :meth:`run`'s TaskGroup: cancelling it closes them.
* A probe connection that breaks (``OSError``) or carries garbage (``RemoteProtocolError``)
  is closed and opened again; any other exception while handling heartbeats is a bug:
  it ends :meth:`run` (and the owner's TaskGroup with it), never logged and swallowed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from node.clock import now_us
from node.config.model import ClusterConfig, NodeConfig
from node.net.transport import Connection, Transport
from node.streams.link import InputLink
from node.streams.upstream import Choice, HeartbeatTracker, ReplicaView, Resume, choose_upstream
from protocol.errors import RemoteProtocolError
from protocol.messages import ConsistencyState, HeartbeatRequest, HeartbeatResponse

__all__ = [
    "UpstreamMonitor",
    "UpstreamReplica",
    "heartbeat_connection",
    "heartbeat_rounds",
    "source_upstreams",
    "upstream_links",
]


_now = now_us

@dataclass(frozen=True, slots=True)
class UpstreamReplica:
    name: str
    host: str
    port: int

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)


def upstream_links(
    config: ClusterConfig, links: Sequence[InputLink]
) -> dict[str, tuple[InputLink, list[UpstreamReplica]]]:
    """The links whose stream a replicated node produces, with that node's replicas."""
    out: dict[str, tuple[InputLink, list[UpstreamReplica]]] = {}
    for link in links:
        producer = config.producer_of(link.stream)
        if isinstance(producer, NodeConfig):
            out[link.stream] = (link, [UpstreamReplica(r.name, r.host, r.data_port)
                                       for r in producer.replicas])
    return out


def source_upstreams(config: ClusterConfig, links: Sequence[InputLink],
                     ) -> dict[str, UpstreamReplica]:
    """The links whose stream a source produces, with that source: watched for liveness
    (heartbeats), never switched (there is no other replica of a source)."""
    return {link.stream: UpstreamReplica(src.name, src.host, src.port)
            for link in links if (src := config.sources.get(link.stream)) is not None}


class _Probe:
    __slots__ = ("conn", "replica")

    def __init__(self, replica: UpstreamReplica) -> None:
        self.replica = replica
        self.conn: Connection | None = None


async def heartbeat_rounds(tracker: HeartbeatTracker, seqs: Iterator[int],
                           send: Callable[[str, int], Awaitable[None]],
                           after: Callable[[], None]) -> None:
    """Forever: at each of ``tracker``'s deadlines, ``send(replica, seq)`` every request
    due (counted as sent first, whatever the send does), then ``after()``. The heartbeat
    loop of the HA monitor and of a process pair's keep-alives (node/replica/keepalive.py)."""
    while True:
        delay = (tracker.next_deadline() - _now()) / 1e6
        if delay > 0:
            await asyncio.sleep(delay)
        now = _now()
        for name in tracker.due(now):
            seq = next(seqs)
            tracker.sent(name, seq, now)
            await send(name, seq)
        after()


async def heartbeat_connection(transport: Transport, address: tuple[str, int], interval: int,
                               attach: Callable[[Connection | None], None],
                               answered: Callable[[HeartbeatResponse], None], *, owner: str,
                               who: str, name: str, log: logging.Logger) -> None:
    """Forever: keep a connection to ``name`` (``who``: "upstream", "partner") at
    ``address`` for heartbeats, ``attach`` it (None while there is none), hand each
    ``HeartbeatResponse`` to ``answered``, and reconnect every ``interval`` after it ends.
    Only what a dead or garbage-sending peer raises ends the connection here (the
    transport's contract, node/net/transport.py); anything else is our bug and ends the
    caller's task group, loudly."""
    while True:
        try:
            conn = await transport.connect(*address)
        except OSError:  # refused, unreachable (TimeoutError is one): try again later
            await asyncio.sleep(interval / 1e6)
            continue
        attach(conn)
        try:
            while (msg := await conn.receive()) is not None:
                if not isinstance(msg, HeartbeatResponse):
                    log.error("%s: %s %s answered a heartbeat with a %s; closing", owner, who,
                              name, type(msg).__name__)
                    break
                answered(msg)
        except RemoteProtocolError as exc:
            log.error("%s: %s %s sent bad data on the heartbeat connection: %s; closing",
                      owner, who, name, exc)
        except OSError as exc:  # ConnectionError: the peer died or reset the connection
            log.info("%s: heartbeat connection to %s ended: %r", owner, name, exc)
        finally:
            attach(None)
            await conn.close()
        await asyncio.sleep(interval / 1e6)


class UpstreamMonitor:
    """Heartbeats to the replicas behind ``links`` and the switching of those links."""

    def __init__(
        self,
        owner: str,
        transport: Transport,
        links: Mapping[str, tuple[InputLink, Sequence[UpstreamReplica]]],
        *,
        interval: int,
        misses: int,
        lag: int,
        log: logging.Logger,
        duals: Mapping[str, str] | None = None,
        sources: Mapping[str, UpstreamReplica] | None = None,
        on_cut_off: Callable[[frozenset[str]], None] | None = None,
    ) -> None:
        """``duals``: stream -> the replica of its flux producer pair on the owner's side
        (Flux, docs/flux.md: each side of a stage feeds its own consumers). ``sources``:
        input stream -> its source, watched for liveness only (:func:`source_upstreams`).
        ``on_cut_off``: told :meth:`cut_off` (as a set) after an evaluation that changed it."""
        self.owner = owner
        self.sources = dict(sources or {})
        self._on_cut_off = on_cut_off
        self._cut_off: frozenset[str] = frozenset()
        self.duals = dict(duals or {})
        self.lag = lag
        # The link rule's threshold: the time a silent replica takes to be declared failed.
        self.link_lag = (misses + 1) * interval
        self.transport = transport
        self.links = {s: link for s, (link, _) in links.items()}
        self.replicas = {s: tuple(rs) for s, (_, rs) in links.items()}
        self._names = {s: frozenset(r.name for r in rs) for s, rs in self.replicas.items()}
        self._by_address = {r.address: r.name for rs in self.replicas.values() for r in rs}
        self._address = {r.name: r.address for rs in self.replicas.values() for r in rs}
        names = sorted({r.name for rs in self.replicas.values() for r in rs}
                       | {r.name for r in self.sources.values()})
        self._probes = {r.name: _Probe(r) for rs in self.replicas.values() for r in rs}
        self._probes.update((r.name, _Probe(r)) for r in self.sources.values())
        # Upstream replica -> the monitored streams it produces (what its heartbeats ack).
        self._acked_at: dict[str, list[str]] = {}
        for s, rs in self.replicas.items():
            for r in rs:
                self._acked_at.setdefault(r.name, []).append(s)
        self.tracker = HeartbeatTracker(names, interval, misses, start=_now()) if names else None
        self.interval = interval
        self._log = log
        self._seq = itertools.count(1)
        self.choices: dict[str, Choice] = {}
        self.failed_seen: set[str] = set()
        for link in self.links.values():
            link.choose = self._chooser(link.stream)  # the link asks us on every reconnect

    # ------------------------------------------------------------------ choosing
    def current(self, stream: str) -> str | None:
        """The replica the link of ``stream`` reads its data from (None: none, or unknown)."""
        addr = self.links[stream].current
        return None if addr is None else self._by_address.get(addr)

    def corrections(self, stream: str) -> str | None:
        """The replica the link of ``stream`` reads corrections from (None: none)."""
        addr = self.links[stream].corrections
        return None if addr is None else self._by_address.get(addr)

    def cut_off(self) -> list[str]:
        """The monitored and watched input streams that no upstream replica (or source)
        offers as STABLE: every one is dead (declared failed by the tracker) or says the
        stream is failing (UP_FAILURE, STABILIZATION). Such an input brings tentative data or
        none; a live replica whose state is not known yet counts as STABLE (start-up is not a
        failure)."""
        t = self.tracker
        if t is None:
            return []
        out = [s for s, src in self.sources.items() if not t.alive(src.name)]
        for s, rs in self.replicas.items():
            view = t.view(s)
            if not any(view[r.name].alive and view[r.name].state in (ConsistencyState.STABLE,
                                                                     None)
                       for r in rs if r.name in view):
                out.append(s)
        return out

    def _choice(self, stream: str, exclude: str | None = None) -> Choice | None:
        if self.tracker is None:
            return None
        names = self._names[stream]  # the tracker watches every upstream node's replicas
        view = {n: v for n, v in self.tracker.view(stream).items() if n in names}
        if exclude is not None and exclude in view:
            view[exclude] = ReplicaView(False, view[exclude].state)
        link = self.links[stream]
        current = None if exclude is not None else self.current(stream)
        received = None  # the link rule judges a session once its replay had time to arrive
        since = link.session_since
        if current is not None and since is not None and _now() - since >= self.link_lag:
            received = link.tmax.highest or 0
        return choose_upstream(
            stream,
            current,
            view,
            lag=self.lag,
            corrections=self.corrections(stream),
            holding_tentative=link.last_tentative_id > link.last_stable_id,
            current_reconciled=link.reconciled,
            received=received,
            link_lag=self.link_lag,
            dual=self.duals.get(stream),
        )

    def _chooser(self, stream: str) -> Callable[[tuple[str, int] | None], tuple[str, int] | None]:
        def choose(failed: tuple[str, int] | None) -> tuple[str, int] | None:
            exclude = None if failed is None else self._by_address.get(failed)
            choice = self._choice(stream, exclude)
            if choice is None:
                return None  # no opinion: round-robin
            if choice.data is None:
                return self._not_standby(stream, failed)
            if choice.resume is Resume.TMAX:
                self.links[stream].tmax.arm()
            return self._address[choice.data]
        return choose

    def _not_standby(self, stream: str, failed: tuple[str, int] | None,
                     ) -> tuple[str, int] | None:
        """With no replica to choose: round-robin (None) unless a replica says STANDBY (a
        process pair's secondary serves nobody, node/replica/pair.py); then the first
        replica that does not, other than ``failed``, or ``failed`` again (the link retries
        it after a pause, until the secondary took over)."""
        if self.tracker is None:
            return None
        view = self.tracker.view(stream)
        names = [r.name for r in self.replicas[stream]]
        if not any(view[n].state is ConsistencyState.STANDBY for n in names):
            return None
        others = [n for n in names if view[n].state is not ConsistencyState.STANDBY
                  and self._address[n] != failed]
        return self._address[others[0]] if others else failed

    def evaluate(self) -> None:
        """Move every monitored link whose best producer changed, and start or stop its
        corrections reader to follow the choice."""
        if self.tracker is not None:
            dead = set(self.tracker.failed())
            for name in dead - self.failed_seen:
                self._log.warning("%s: upstream replica %s missed more than %d heartbeats: "
                                  "failed", self.owner, name, self.tracker.misses)
            self.failed_seen = dead
        for stream, link in self.links.items():
            choice = self._choice(stream)
            if choice is None:
                continue
            self.choices[stream] = choice
            if choice.resume in (Resume.IDS, Resume.TMAX) and choice.data is not None:
                self._log.warning("%s: input %s: switching from %s to %s (%s)", self.owner,
                                  stream, self.current(stream), choice.data, choice.resume.value)
                link.switch_to(self._address[choice.data], tmax=choice.resume is Resume.TMAX)
            self._follow_corrections(stream, link, choice)
        self._tell_cut_off()

    def _tell_cut_off(self) -> None:
        if self._on_cut_off is None:
            return
        now = frozenset(self.cut_off())
        if now != self._cut_off:
            self._cut_off = now
            self._on_cut_off(now)

    def _follow_corrections(self, stream: str, link: InputLink, choice: Choice) -> None:
        wanted = None if choice.corrections is None else self._address[choice.corrections]
        if wanted == link.current:
            wanted = None  # the data source itself: the main session reads its corrections
        if wanted == link.corrections:
            return
        before = self.corrections(stream)
        link.correct_from(wanted)
        self._log.info(
            "%s: input %s: corrections source %s -> %s",
            self.owner,
            stream,
            before,
            self.corrections(stream),
        )

    def status(self) -> dict[str, Any]:
        t = self.tracker
        return {
            stream: {
                "data_source": self.current(stream),
                "corrections_source": self.corrections(stream),
                "corrections_buffered": self.links[stream].corrections_buffered,
                "corrections_applied": self.links[stream].corrections_applied,
                "replicas": {
                    r.name: {
                        "alive": t.alive(r.name) if t else None,
                        "state": (s.name if (s := (t.stream_states(r.name).get(stream) if t else None))
                                  else None),
                        "missed": t.missed(r.name) if t else None,
                        "frontier": t.frontiers(r.name).get(stream, 0) if t else None,
                    }
                    for r in self.replicas[stream]
                },
            }
            for stream in self.links
        }

    # ------------------------------------------------------------------ heartbeats
    def acks_for(self, replica: str) -> dict[str, int]:
        """The acks a heartbeat to ``replica`` carries: each monitored stream it produces
        -> the link's ack id (0 while the link holds nothing: the consumer is heard from);
        for a parked link (node/streams/link.py) only what it holds at, if anything (an
        amnesia secondary wants nothing)."""
        links = self.links
        return {s: links[s].ack_id for s in self._acked_at.get(replica, ())
                if not links[s].parked or links[s].held is not None}

    async def run(self) -> None:
        if self.tracker is None:
            return
        tracker = self.tracker
        async with asyncio.TaskGroup() as tg:
            for probe in self._probes.values():
                tg.create_task(self._keep_connected(probe, tracker))
            tg.create_task(self._beat(tracker))

    async def _beat(self, tracker: HeartbeatTracker) -> None:
        await heartbeat_rounds(tracker, self._seq, self._send_heartbeat, self.evaluate)

    async def _send_heartbeat(self, name: str, seq: int) -> None:
        conn = self._probes[name].conn
        if conn is not None:
            # A failed send: the probe's reader notices and reconnects.
            with contextlib.suppress(OSError):
                await conn.send(HeartbeatRequest(self.owner, seq, self.acks_for(name)))

    async def _keep_connected(self, probe: _Probe, tracker: HeartbeatTracker) -> None:
        r = probe.replica

        def attach(conn: Connection | None) -> None:
            probe.conn = conn

        def answered(msg: HeartbeatResponse) -> None:
            if tracker.answered(r.name, msg.seq, msg.state, msg.streams, msg.frontiers):
                self.evaluate()

        await heartbeat_connection(self.transport, (r.host, r.port), self.interval, attach,
                                   answered, owner=self.owner, who="upstream", name=r.name,
                                   log=self._log)
