"""A data source process: generate, log persistently, then publish (DESIGN.md section 4).

Every tuple is appended to the source's Arrow IPC log (RUN_DIR/sources/<name>.arrow) and
flushed *before* it is published, so that whatever a replica may have received is on disk
and a reconnecting consumer can be replayed what it missed (from the output buffer, which
keeps everything until every consumer acknowledged it).

Tuple times are wall-clock microseconds, never decreasing; ids count from 1. Which tuples
are due when is the pure schedule of ``node/procs/pacing.py``: a batch holds at most
``pacing.CAP`` tuples, and the stream ends only when its rows run out or its ``limit`` is
reached, never because a batch came out short: a source that fell behind (paused,
held back by a slow consumer) produces everything due in capped batches and goes on. A
BOUNDARY goes out every ``boundary_interval`` whatever the rate (the loop sleeps until the
earlier of the next tuple due and the next boundary due). When the source is done (its
``limit`` reached, its file exhausted, or :meth:`Source.end_stream`, which SIGUSR1 calls) it
publishes the end-of-stream boundary (:data:`END_OF_STREAM`), which lets every window downstream close,
and keeps serving replays until the process is stopped (SIGTERM; a source stopped before
its end publishes it on the way out).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from node.clock import now_us
from node.config.model import ClusterConfig
from node.net.transport import Transport
from node.procs.generators import arrow_types, make_generator
from node.procs.pacing import EndReason, RatePace, Schedule
from node.procs.rundir import RunDir
from node.streams.publisher import Publisher
from protocol.tuples import boundary
from state.buffer import OutputBuffer
from state.tuplelog import TupleLogWriter

__all__ = ["END_OF_STREAM", "Source"]

log = logging.getLogger("dpc.source")

#: The boundary a source sends when it will never send again: every window can close.
END_OF_STREAM = 2**62
#: How often the generator loop wakes up at most (it produces what is due since last time).
TICK = 0.002


class Source:
    def __init__(self, config: ClusterConfig, name: str, run_dir: RunDir, transport: Transport) -> None:
        self.config = config
        self.src = config.sources[name]
        self.transport = transport
        buf = OutputBuffer(name)
        buf.set_consumers(config.consumers_of(name))
        self.publisher = Publisher(name, {name: buf}, log=log)
        self.log_writer = TupleLogWriter(
            run_dir.source_log(name), self.src.schema, types=arrow_types(self.src), flush_every=10**9
        )
        self.run_dir = run_dir
        self.produced = 0
        self.ended = False
        self._schedule: Schedule | None = None

    async def run(self, stop: asyncio.Event) -> None:
        server = await self.transport.serve(self.src.host, self.src.port, self.publisher.handle)
        log.info("source %s serving on %s:%d at %.0f tuples/s", self.src.name, self.src.host,
                 self.src.port, self.src.rate)
        self.run_dir.mark_ready(self.src.name)
        try:
            async with asyncio.TaskGroup() as tg:
                gen = tg.create_task(self._generate(stop), name="generator")
                # A bug in the publisher's handler ends the source (transport.py's rule).
                watch = tg.create_task(server.failed(), name="server")
                await stop.wait()
                gen.cancel()
                watch.cancel()
            if not self.ended:
                self._end(EndReason.REQUEST)
        finally:
            self.log_writer.close()
            await server.close()
            log.info("source %s stopped after %d tuples", self.src.name, self.produced)

    async def _generate(self, stop: asyncio.Event) -> None:
        src, name = self.src, self.src.name
        start = now_us()
        sched = self._schedule = Schedule(make_generator(src), RatePace(start, src.rate),
                                          produced=self.produced, limit=src.limit)
        next_boundary = start + src.boundary_interval
        while not self.ended:  # end_stream() (SIGUSR1) ends it too
            now = now_us()
            batch = sched.take(now)  # at most CAP: after a stall, what is due comes in turns
            if batch:
                # On disk before on the wire: what a replica may hold, the log holds.
                self.log_writer.append(batch)
                self.log_writer.flush()
                self.publisher.publish(name, batch)
                self.produced = sched.produced
            if sched.ended is not None:  # the rows ran out or the limit is reached
                self._end(sched.ended)
                break
            if now >= next_boundary:
                self.publisher.publish(name, [boundary(sched.horizon(now))])
                next_boundary = now + src.boundary_interval
            await self.publisher.wait_for_room()
            # Wake when the next tuple or the next boundary is due, whichever comes first:
            # boundaries keep their interval at any rate, and a low rate costs few wake-ups
            # (what keeps the simulation fast). Behind (a tuple overdue): at once.
            due = sched.next_due()
            wake = next_boundary if due is None else min(due, next_boundary)
            delay = (wake - now_us()) / 1e6
            await asyncio.sleep(max(TICK, delay) if delay > 0 else 0)

    def end_stream(self) -> None:
        """Publish the end of stream now (SIGUSR1); go on serving replays until stopped."""
        if not self.ended:
            self._end(EndReason.REQUEST)

    def _end(self, reason: EndReason) -> None:
        self.ended = True
        self.publisher.publish(self.src.name, [boundary(END_OF_STREAM)])
        log.info("source %s: end of stream after %d tuples (%s)", self.src.name, self.produced,
                 reason.value)

    def status(self) -> dict[str, Any]:
        return {
            "name": self.src.name,
            "kind": "source",
            "produced": self.produced,
            "ended": self.ended,
            "outputs": self.publisher.stats(),
            "counters": {"tuples_out": {self.src.name: self.produced}},
        }


