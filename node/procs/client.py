"""A client process: subscribe to one output stream and log what arrives, when.

The client subscribes like a node does (node/streams/link.py: last stable and last tentative ids;
node/streams/monitor.py: heartbeats to the producing node's replicas, switching to the best one) and appends every received tuple, with
its arrival time in microseconds, to RUN_DIR/clients/<name>.arrow (a record per batch
received: node/procs/runlog.py). Once the end-of-stream boundary arrives it marks itself
done (RunDir.mark_done), which is how ``dpc launch`` knows the run drained.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from node.clock import now_us
from node.config.model import ClusterConfig
from node.net.transport import Transport
from node.procs.rundir import RunDir
from node.procs.runlog import RunLogWriter
from node.streams.link import InputLink
from node.streams.monitor import UpstreamMonitor, upstream_links
from node.streams.mutation import Mutation
from protocol.tuples import END_OF_STREAM, Kind, Tuple

__all__ = ["Client"]

log = logging.getLogger("dpc.client")


class Client:
    def __init__(self, config: ClusterConfig, name: str, run_dir: RunDir, transport: Transport,
                 *, mutation: Mutation | None = None) -> None:
        """``mutation``: a test-only breakage of the input link (node/streams/link.py)."""
        self.cfg = config.clients[name]
        node = config.producer_of(self.cfg.stream)
        producers = [(r.host, r.data_port) for r in node.replicas]  # type: ignore[union-attr]
        self.link = InputLink(transport, self.cfg.stream, name, producers, self._on_batch,
                              log=log, mutation=mutation)
        settings = node.settings  # type: ignore[union-attr]
        self.monitor = UpstreamMonitor(
            name, transport, upstream_links(config, [self.link]),
            interval=settings.heartbeat_interval, misses=settings.heartbeat_misses,
            lag=settings.wait, log=log,
        )
        self.run_dir = run_dir
        self.writer = RunLogWriter(run_dir.client_log(name))
        self.received = 0
        self.tentative = 0
        self.ended = False

    async def _on_batch(self, stream: str, tuples: Sequence[Tuple]) -> None:
        self.writer.write(tuples, now_us())
        self.received += len(tuples)
        for t in tuples:
            if t[0] is Kind.TENTATIVE:
                self.tentative += 1
            elif t[0] is Kind.BOUNDARY and t[2] >= END_OF_STREAM // 2 and not self.ended:
                # Windows downstream of the end may report a little before END_OF_STREAM.
                self.ended = True
                self.run_dir.mark_done(self.cfg.name)
                log.info("client %s: end of stream after %d tuples", self.cfg.name, self.received)

    async def run(self, stop: asyncio.Event) -> None:
        self.run_dir.mark_ready(self.cfg.name)
        try:
            async with asyncio.TaskGroup() as tg:
                tasks = [tg.create_task(self.link.run(), name=f"link {self.cfg.stream}"),
                         tg.create_task(self.monitor.run(), name="ha monitor")]
                await stop.wait()
                for task in tasks:
                    task.cancel()
        finally:
            self.writer.close()
            log.info("client %s stopped after %d tuples", self.cfg.name, self.received)

    def status(self) -> dict[str, Any]:
        return {"name": self.cfg.name, "kind": "client", "stream": self.cfg.stream,
                "received": self.received, "tentative": self.tentative, "ended": self.ended,
                "upstream": self.link.producer, "switches": self.link.switches,
                "inputs": self.monitor.status()}
