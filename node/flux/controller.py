"""The Flux controller (section 3.3.1 of the paper): one process that probes every replica of
the cluster's flux nodes and decides ``fail`` / ``avail`` events in one total order
(node/flux/events.py), which every process concerned follows (node/flux/follow.py).

The paper assumes the controller replicated by a consensus protocol; here it is one process
(``[controller]`` in the cluster file, ``dpc node CLUSTER controller``), which the fault
harness never kills: docs/flux.md says how a coordination service (etcd: a lease per
replica for the probes, a key's revision history for the event log) takes its place.

* Every ``heartbeat_interval`` it probes each replica of a flux node (``GET /health`` on its
  control plane, at most one interval of waiting: ``ready`` false while the replica
  recovers, ``incarnation`` its start time), and hands the answers to the detector.
* ``GET /events?after=N&wait=S`` answers the events after number N, waiting up to S
  seconds (at most 5) for one: ``{"events": [[seq, "fail" | "avail", replica,
  incarnation], ...]}``.
* ``GET /status``: each replica's state and the events so far.

:class:`Controller` is the loop, with the probe and the clock injected: the process probes
over HTTP; the simulation (ops_scripts/harness/simulate.py) asks its replicas directly, on
virtual time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from node.clock import now_us
from node.config.model import ClusterConfig
from node.flux.events import Decision, Detector, Event, EventLog, apply
from node.net.tls import control_url, url_context
from node.procs.control import ControlPlane
from node.procs.rundir import RunDir

__all__ = ["MAX_WAIT", "Controller", "ControllerProcess", "Health", "flux_replicas"]

log = logging.getLogger("dpc.controller")
#: The longest a GET /events waits for an event (seconds).
MAX_WAIT = 5.0


@dataclass(frozen=True, slots=True)
class Health:
    """A replica's answer to a probe."""

    ready: bool
    incarnation: int


#: Probe one replica: its answer, or None (no answer in time).
Probe = Callable[[str], Awaitable["Health | None"]]


def flux_replicas(config: ClusterConfig) -> list[str]:
    """The replicas the controller watches: those of every node with ``ha = "flux"``."""
    return [r.name for n in config.nodes.values() if n.settings.ha == "flux"
            for r in n.replicas]


class Controller:
    """Probes, decides, numbers (module docstring)."""

    def __init__(self, replicas: Sequence[str], probe: Probe, *, interval: int,
                 misses: int) -> None:
        self.replicas = list(replicas)
        self.interval = interval
        self.detector = Detector(self.replicas, interval, misses)
        self.events = EventLog()
        self._probe = probe
        self._changed = asyncio.Event()  # set (and replaced) when events come

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            answers = await asyncio.gather(*(self._probe(r) for r in self.replicas))
            now = now_us()
            decided = []
            for r, h in zip(self.replicas, answers, strict=True):
                if h is not None:
                    decided += self.detector.observe(r, now, ready=h.ready,
                                                     incarnation=h.incarnation)
            decided += self.detector.tick(now)
            self.record(decided)
            await asyncio.sleep(max(0.0, self.interval / 1e6 - (loop.time() - started)))

    def record(self, decided: Sequence[Decision]) -> list[Event]:
        """Number ``decided`` into the log and wake the followers waiting."""
        new = apply(self.events, decided)
        for e in new:
            log.warning("controller: event %d: %s(%s, incarnation %d)", e.seq, e.kind.value,
                        e.replica, e.incarnation)
        if new:
            self._changed.set()
            self._changed = asyncio.Event()
        return new

    async def after(self, seq: int, wait: float) -> list[Event]:
        """The events after number ``seq``; if none yet, the first to come within ``wait``
        seconds (none: an empty list)."""
        if self.events.last <= seq and wait > 0:
            try:
                await asyncio.wait_for(self._changed.wait(), wait)
            except TimeoutError:
                return []
        return self.events.after(seq)

    def status(self) -> dict[str, Any]:
        return {"name": "controller", "kind": "controller",
                "replicas": {r: ("up" if self.detector.up[r] else
                                 "failed" if r in self.detector.seen else "not seen yet")
                             for r in self.replicas},
                "events": [e.to_json() for e in self.events.events]}


class ControllerProcess:
    """``dpc node CLUSTER controller``: the controller on its control port, probing over
    HTTP."""

    def __init__(self, config: ClusterConfig, run_dir: RunDir) -> None:
        if config.controller is None:
            raise RuntimeError(f"{config.path}: no [controller] in the cluster file")
        self.where = config.controller
        self.config = config
        self.run_dir = run_dir
        node = next(n for n in config.nodes.values() if n.settings.ha == "flux")
        self.settings = node.settings
        self._http: aiohttp.ClientSession | None = None
        self.controller = Controller(flux_replicas(config), self._probe,
                                     interval=node.settings.heartbeat_interval,
                                     misses=node.settings.heartbeat_misses)

    async def _probe(self, name: str) -> Health | None:
        if self._http is None:
            raise RuntimeError("the controller probes only while it runs")
        r = self.config.replica(name)
        try:
            async with self._http.get(control_url(self.config, r, "health"),
                                      ssl=url_context(self.config) or True) as resp:
                body = await resp.json()
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None
        if not isinstance(body, Mapping) or body.get("name") != name:
            return None
        return Health(bool(body.get("ready", True)), int(body.get("incarnation", 0)))

    async def _events(self, query: Mapping[str, str]) -> Mapping[str, Any]:
        try:
            after = int(query.get("after", "0"))
            wait = min(MAX_WAIT, float(query.get("wait", "0")))
        except ValueError as e:
            raise ValueError(f"after must be an integer and wait a number: {e}") from None
        return {"events": [e.to_json() for e in await self.controller.after(after, wait)]}

    async def run(self, stop: asyncio.Event) -> None:
        c = self.where
        timeout = aiohttp.ClientTimeout(total=self.settings.heartbeat_interval / 1e6)
        async with aiohttp.ClientSession(timeout=timeout) as self._http:
            plane = ControlPlane("controller", c.control_address, c.control_port, self.config.token,
                                 self.controller.status, {}, queries={"events": self._events})
            await plane.start()
            self.run_dir.mark_ready("controller")
            log.info("controller: watching %s every %g s (failed after %d misses)",
                     ", ".join(self.controller.replicas), self.settings.heartbeat_interval / 1e6,
                     self.settings.heartbeat_misses)
            try:
                async with asyncio.TaskGroup() as tg:
                    task = tg.create_task(self.controller.run())
                    await stop.wait()
                    task.cancel()
            finally:
                await plane.stop()
