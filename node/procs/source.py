"""A data source process: generate, log persistently, then publish (DESIGN.md section 4).

Every tuple is appended to the source's Arrow IPC log (RUN_DIR/sources/<name>.arrow) and
flushed *before* it is published, so that whatever a replica may have received is on disk
and a reconnecting consumer can be replayed what it missed (from the output buffer, which
keeps everything until every consumer acknowledged it).

Tuple times are microseconds of the run's clock, never decreasing: the time a tuple is
produced, or for a file source with a ``time_column`` its event time rebased onto the run's
clock (its clock persisted in ``RUN_DIR/sources/<name>.pace.json``); ids count from 1. Which tuples
are due when is the pure schedule of ``node/procs/pacing.py``: a batch holds at most
``pacing.CAP`` tuples, and the stream ends only when its rows run out or its ``limit`` is
reached, never because a batch came out short: a source that fell behind (paused,
held back by a slow consumer) produces everything due in capped batches and goes on. A
BOUNDARY goes out every ``boundary_interval`` whatever the rate (the loop sleeps until the
earlier of the next tuple due and the next boundary due), at the multiples of the interval
on the run's clock: the grid SUnion cuts its buckets on (multiples of the bucket width), so
that with the paper's setup (boundary interval = bucket) the boundary that completes a
bucket leaves as the bucket ends, not up to one interval later (``dpc bench latency``: p50
up to 1.3 buckets with an arbitrary phase). When the source is done (its
``limit`` reached, its file exhausted, or :meth:`Source.end_stream`, which SIGUSR1 calls) it
first writes its end record (``RUN_DIR/sources/<name>.end.json``: when, why, its last id),
then publishes the end-of-stream boundary (:data:`END_OF_STREAM`), which lets every window
downstream close, and keeps serving replays until the process is stopped (SIGTERM; a source
stopped before its end ends it on the way out, reason "request").

A source is the durable origin of its stream. Restarted on the same run directory (``dpc
node CLUSTER NAME --run-dir RUN``, or a new ``Source`` in the simulation) it resumes from
what it persisted: its ids go on after the last logged id, its values go on along the same
deterministic sequence (the generator skips what was logged: an id is never re-emitted
with other content), tuple times never decrease, and it logs into a new file per
incarnation (``rundir.py``). A restarted source whose end record exists produces nothing:
it republishes the end of stream and serves replays. A subscriber that claims stable ids
beyond anything the source produced (its log was lost) is refused with an error naming it,
never served boundaries without data.

What a restart holds stays bounded however long the source ran. The source records its
buffer's trim point and its consumers' acks (``RUN_DIR/sources/<name>.trim.json``) about
once every :data:`TRIM_EVERY` seconds while they change, and at a clean stop. A restarted
source reads its log streaming, batch by batch (:func:`resume_from`: gapless from id 1, its
``produced`` and last time, checked column-wise in Arrow), and holds for replay only the tuples after that trim point:
its buffer starts as the trimmed one did (``OutputBuffer.start_after``), with the recorded
acks, so a consumer that asks for ids below the trim point is refused as the buffer that
trimmed them refused it (and one that was never heard from is served from the trim point
once the grace period ends, as before). The record may lag the buffer (the restart then
holds a little more), never run ahead of it: it is what the buffer had trimmed at that
instant. No record (an older run directory, a kill before the first write): it holds the
whole log.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from node.clock import now_us
from node.config.model import ClusterConfig
from node.errors import NodeError
from node.flux import follows_controller
from node.flux.events import Event
from node.flux.follow import Fetch, follow, http_events, release_failed
from node.net.traffic import TRAFFIC
from node.net.transport import Transport
from node.procs.generators import arrow_types, make_rows
from node.procs.pacing import EndReason, EventClock, RatePace, Schedule, next_multiple
from node.procs.rundir import (
    RunDir,
    SourceTrim,
    iter_source_batches,
    read_source_end,
    read_source_trim,
    write_source_end,
    write_source_trim,
)
from node.streams.publisher import Publisher
from protocol.messages import ConsistencyState, HeartbeatRequest, HeartbeatResponse, Message
from protocol.tuples import END_OF_STREAM, Tuple, boundary
from state.buffer import OutputBuffer
from state.spill import SpillStore
from state.spill_list import SpillList
from state.tuplelog import HEADER_COLUMNS, TupleLogWriter, tuples_of

__all__ = ["TRIM_EVERY", "Resumed", "Source", "resume_from"]

log = logging.getLogger("dpc.source")

#: How long (µs) a source lets due tuples gather before it sends them (a boundary on its
#: grid sends them at once): what is due within a linger goes out as one batch, one log
#: flush and one frame. Each wake-up costs about 0.6 ms of CPU (an Arrow log flush, a frame
#: per consumer): waking every 2 ms, a 300 tuples/s source woke per tuple and spent 23% of
#: a core, each replica 20% reading 900 frames/s; with the linger, 14% and 13%. A tuple
#: keeps the time it was due (pacing.py): the linger only delays its sending, by at most
#: 10 ms, a tenth of the default bucket.
LINGER = 10_000
#: How often at most (seconds) a source records its trim point (module docstring).
TRIM_EVERY = 1.0


class Source:
    """One source process: its schedule, its log, its publisher (module docstring)."""

    def __init__(self, config: ClusterConfig, name: str, run_dir: RunDir, transport: Transport,
                 *, flux_events: Fetch | None = None) -> None:
        """``flux_events``: the Flux controller's events (the simulation's), instead of its
        process's over HTTP (node/flux/follow.py)."""
        self.flux_events = flux_events
        self.config = config
        self.src = config.sources[name]
        self.transport = transport
        self.run_dir = run_dir
        # What earlier incarnations logged: ids, times and values go on after it, and what
        # its consumers had not all acknowledged is served to them (contract point 3).
        incarnation = len(run_dir.source_logs(name))
        trim = read_source_trim(run_dir, name) if incarnation else None
        trimmed = 0 if trim is None else trim.trimmed_up_to
        resumed, began = Resumed(0, 0, []), time.monotonic()
        if incarnation:
            resumed = resume_from(iter_source_batches(run_dir, name), trimmed, source=name,
                                  files=", ".join(map(str, run_dir.source_logs(name))),
                                  trim_file=str(run_dir.source_trim(name)))
        self.produced = resumed.produced
        self._last_time = resumed.last_time
        # What consumers have not acknowledged, past buffer_memory, waits on disk.
        spill = SpillList(SpillStore(run_dir.source_spill(name), "buffer"), self.src.buffer_memory)
        buf = OutputBuffer(name, spill=spill)
        buf.set_consumers(config.consumers_of(name))
        # As the buffer that trimmed up to there: replays from below it are refused.
        buf.start_after(self.produced, resumed.held, trimmed_up_to=trimmed)
        for consumer, acked in ({} if trim is None else trim.acks).items():
            # An ack below the trim point was a lapsed consumer's (state/buffer.py): it
            # stays not heard from, as a consumer gone from the config does.
            if consumer in buf.consumers and acked >= trimmed:
                buf.ack(consumer, acked)
        self._buffer = buf
        # What sources/<name>.trim.json holds (no file reads as nothing trimmed, no ack).
        self._trim_saved = SourceTrim(0, {}) if trim is None else trim
        # A source is the origin of its stream: a consumer that holds ids it never produced
        # is refused (its log was lost), never served boundaries without data.
        self.publisher = Publisher(name, {name: buf}, consumer_grace=config.consumer_grace, log=log,
                                   serve_ahead=False, splits={name: config.splits(name)},
                                   responder=self._respond)
        #: The largest tuple time published (data or boundary): heartbeat answers' frontier.
        self.frontier = self._last_time
        end = read_source_end(run_dir, name)
        #: Ended in an earlier incarnation: produce nothing, republish the end, serve replays.
        self.ended_before = end is not None
        self.ended = self.ended_before
        self.log_writer: TupleLogWriter | None = None
        if not self.ended:
            self.log_writer = TupleLogWriter(run_dir.source_log_of(name, incarnation), self.src.schema,
                                             types=arrow_types(self.src), flush_every=10**9)
        if incarnation:
            log.info("source %s restarted (incarnation %d): %s tuples logged (read in %.1f s), "
                     "%s held for replay (trimmed up to id %s)%s", name, incarnation,
                     f"{self.produced:,}", time.monotonic() - began, f"{len(buf):,}",
                     f"{buf.trimmed_up_to:,}",
                     f", ended ({end['reason']})" if end else "; going on")

    def _respond(self, msg: Message) -> Message | None:
        """Heartbeats from the replicas that read this source (node/streams/monitor.py
        watches every upstream neighbour, sources too: paper section 3.3): a source that
        answers is STABLE, and its frontier is the largest tuple time it published. A
        replica whose requests go unanswered declares its input unavailable at once (UP_FAILURE
        on detection) instead of waiting alpha*X for SUnion's first tentative release."""
        if not isinstance(msg, HeartbeatRequest):
            # (config/roles.py refuses other requests to a source before they get here.)
            log.error("source %s: no answer to a %s from %s: a source answers heartbeats only",
                      self.src.name, type(msg).__name__, getattr(msg, "sender", "?"))
            return None
        name = self.src.name
        return HeartbeatResponse(name, msg.seq, ConsistencyState.STABLE,
                                 {name: ConsistencyState.STABLE}, {name: self.frontier})

    async def run(self, stop: asyncio.Event) -> None:
        server = await self.transport.serve(self.src.host, self.src.port, self.publisher.handle)
        log.info("source %s serving on %s:%d at %.0f tuples/s", self.src.name, self.src.host,
                 self.src.port, self.src.rate)
        self.run_dir.mark_ready(self.src.name)
        try:
            async with asyncio.TaskGroup() as tg:
                if self.ended_before:
                    self.publisher.publish(self.src.name, [boundary(END_OF_STREAM)])
                else:
                    gen = tg.create_task(self._generate(stop), name="generator")
                # A bug in the publisher's handler ends the source (transport.py's rule).
                watch = tg.create_task(server.failed(), name="server")
                keep = tg.create_task(self._keep_trim(), name="trim")
                if follows_controller(self.config, self.src.name):
                    # Flux: a failed consumer no longer holds the buffer (node/replica/flux.py).
                    flux = tg.create_task(self._follow_controller(), name="flux")
                await stop.wait()
                if not self.ended_before:
                    gen.cancel()
                watch.cancel()
                keep.cancel()
                if follows_controller(self.config, self.src.name):
                    flux.cancel()
            if not self.ended:
                self._end(EndReason.REQUEST)  # stopped before its end (SIGTERM)
            self._record_trim()  # a clean stop: the next incarnation holds the least
        finally:
            if self.log_writer is not None:
                self.log_writer.close()
            self._buffer.close_spill()
            await server.close()
            log.info("source %s stopped after %d tuples", self.src.name, self.produced)

    async def _follow_controller(self) -> None:
        def apply(event: Event) -> None:
            release_failed(self.src.name, {self.src.name: self._buffer}, event)

        if self.flux_events is not None:  # the simulation's controller
            await follow(self.flux_events, apply)
            return
        async with http_events(self.config, self.src.name, log) as fetch:
            await follow(fetch, apply)

    async def _generate(self, stop: asyncio.Event) -> None:
        src, name, writer = self.src, self.src.name, self.log_writer
        if writer is None:
            raise NodeError(f"source {name!r}: nothing to generate after the end of its stream")
        start = now_us()
        rows = itertools.islice(make_rows(src), self.produced, None)  # ids go on
        pace = RatePace(start, src.rate) if src.time_column is None else self._event_clock(start)
        sched = Schedule(rows, pace, produced=self.produced, limit=src.limit,
                         last_time=self._last_time)
        next_boundary = next_multiple(start, src.boundary_interval)
        while not self.ended:  # end_stream() (SIGUSR1) ends it too
            now = now_us()
            batch = sched.take(now)  # at most CAP: after a stall, what is due comes in turns
            if batch:
                # On disk before on the wire: what a replica may hold, the log holds.
                writer.append(batch)
                writer.flush()
                self.publisher.publish(name, batch)
                self.produced = sched.produced
                self.frontier = max(self.frontier, batch[-1][2])
            if sched.ended is not None:  # the rows ran out or the limit is reached
                self._end(sched.ended)
                break
            if now >= next_boundary:
                promise = sched.horizon(now)
                self.publisher.publish(name, [boundary(promise)])
                self.frontier = max(self.frontier, promise)
                next_boundary = next_multiple(now, src.boundary_interval)
            await self.publisher.wait_for_room()
            # Wake when the next tuple (lingering) or the next boundary is due, whichever
            # comes first: boundaries leave on their grid at any rate, and a low rate costs
            # few wake-ups (what keeps the simulation fast). Behind (a tuple overdue): at once.
            due, t = sched.next_due(), now_us()
            if due is not None and due > t:
                due = max(due, t + LINGER)
            wake = next_boundary if due is None else min(due, next_boundary)
            await asyncio.sleep(max(0, wake - t) / 1e6)

    async def _keep_trim(self) -> None:
        """Record the trim point at most every TRIM_EVERY s, when it changed: not on every
        ack (a lagging record is safe: the restart holds a little more)."""
        while True:
            await asyncio.sleep(TRIM_EVERY)
            self._record_trim()

    def _record_trim(self) -> None:
        """Write the buffer's trim point and its consumers' acks, as they are now (so never
        a trim point above what the buffer trimmed), if they changed."""
        buf = self._buffer
        acks = {c: a for c, st in buf.consumer_status().items()
                if isinstance(a := st["acked"], int)}
        trim = SourceTrim(buf.trimmed_up_to, acks)
        if trim != self._trim_saved:
            write_source_trim(self.run_dir, self.src.name, trim)
            self._trim_saved = trim

    def _event_clock(self, now: int) -> EventClock:
        """An event-time source's clock: the one it persisted (a restart resumes the same
        mapping), else a new one from ``now``, persisted before the first tuple."""
        path = self.run_dir.source_pace(self.src.name)
        try:
            saved = orjson.loads(path.read_bytes())
            return EventClock(int(saved["t_start"]), int(saved["event_first"]),
                              float(saved["speedup"]))
        except FileNotFoundError:
            pass
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise NodeError(f"source {self.src.name!r}: its clock {path} is unreadable: {e!r}") from None
        first = next(make_rows(self.src), (None, ()))[0]
        speedup = self.src.speedup or 1.0
        clock = EventClock.starting(now, now if first is None else first, speedup, self.src.align)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(orjson.dumps(clock.to_dict()))
        tmp.replace(path)
        log.info("source %s: event time %d µs is run time %d µs, %g data s per s", self.src.name,
                 clock.event_first, clock.t_start, clock.speedup)
        return clock

    def end_stream(self) -> None:
        """Publish the end of stream now (SIGUSR1); go on serving replays until stopped."""
        if not self.ended:
            self._end(EndReason.REQUEST)

    def _end(self, reason: EndReason) -> None:
        """The end record first (contract point 1), then the end of stream."""
        self.ended = True
        write_source_end(self.run_dir, self.src.name, t=now_us(), reason=reason.value,
                         last_id=self.produced)
        self.publisher.publish(self.src.name, [boundary(END_OF_STREAM)])
        log.info("source %s: end of stream after %d tuples (%s)", self.src.name, self.produced,
                 reason.value)

    def status(self) -> dict[str, Any]:
        """Plain data for a status report."""
        return {
            "name": self.src.name,
            "kind": "source",
            "traffic": TRAFFIC.status(),  # bytes on the wire (node/net/traffic.py)
            "produced": self.produced,
            "ended": self.ended,
            "outputs": self.publisher.stats(),
            "counters": {"tuples_out": {self.src.name: self.produced}},
        }


@dataclass(frozen=True, slots=True)
class Resumed:
    """What a restarted source takes from its log: how many tuples it produced, the last
    one's time, and the tuples it holds for replay (those after its trim point)."""

    produced: int
    last_time: int
    held: list[Tuple]


def resume_from(batches: Iterable[pa.RecordBatch], trimmed_up_to: int, *, source: str,
                files: str, trim_file: str) -> Resumed:
    """Read a source's log (``batches``, oldest first, as :func:`iter_source_batches`
    streams them) keeping only the tuples after ``trimmed_up_to``. A source resumes only
    from a whole log: ids 1, 2, ... with no gap, through at least its trim point (``files``
    and ``trim_file`` name them in the :class:`NodeError` otherwise).

    Only the tail is decoded into tuples: before it, the id column is checked a group of
    batches at a time inside Arrow (a source flushes a small batch per tick, so a 30-minute
    log at 500 tuples/s is some 660,000 of them; decoding each took a minute, long enough
    for ``dpc launch`` to give up on the restart)."""
    ids = _GaplessIds(source, files)
    produced, last = 0, None
    held: list[Tuple] = []
    for batch in batches:
        n = batch.num_rows
        if not n:
            continue
        ids.add(batch.column(_ID))
        produced, last = produced + n, batch
        if produced > trimmed_up_to:  # ids are positions: the tail after the trim point
            held.extend(tuples_of(batch.slice(max(0, n - (produced - trimmed_up_to)))))
    ids.check()
    if trimmed_up_to > produced:
        raise NodeError(f"source {source!r}: {trim_file} says its buffer was trimmed up to id "
                        f"{trimmed_up_to}, but its log ({files}) ends at id {produced}: the "
                        "trim record is not this log's")
    last_time = 0 if last is None else last.column(_TIME)[-1].as_py()
    return Resumed(produced, last_time, held)


_ID, _TIME = HEADER_COLUMNS.index("id"), HEADER_COLUMNS.index("time")


class _GaplessIds:
    """Checks that id columns, added in order, hold 1, 2, 3, ... with no gap: a group of
    about :attr:`GROUP` ids at a time, in Arrow (a Python loop over every id of a long log
    is what made restarts slow)."""

    GROUP = 1 << 16

    def __init__(self, source: str, files: str) -> None:
        self.where = f"source {source!r}: its log ({files})"
        self.checked = 0  # ids 1..checked are there
        self.pending: list[pa.Array] = []
        self.rows = 0

    def add(self, column: pa.Array) -> None:
        self.pending.append(column)
        self.rows += len(column)
        if self.rows >= self.GROUP:
            self.check()

    def check(self) -> None:
        """Check what was added since the last check."""
        if not self.pending:
            return
        ids = pa.concat_arrays(self.pending)
        first = self.checked + 1
        steps = pc.min_max(pc.pairwise_diff(ids)).as_py() if len(ids) > 1 else {"min": 1, "max": 1}
        if ids.null_count or ids[0].as_py() != first or steps != {"min": 1, "max": 1}:
            # The first id out of place, for the error (a bad log: the slow path is fine).
            k, i = next((k, i) for k, i in enumerate(ids.to_pylist()) if i != first + k)
            raise NodeError(f"{self.where} has id {i} where id {first + k} belongs: cannot "
                            "resume from a log with a gap")
        self.checked += len(ids)
        self.pending, self.rows = [], 0
