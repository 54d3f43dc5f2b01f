"""Following the Flux controller's events (node/flux/controller.py): each process that a
``fail`` or ``avail`` concerns applies every event once, in the controller's order.

:func:`follow` asks for the events after the last one applied and hands each to ``apply``;
:func:`http_events` asks the controller process (a long poll: ``GET /events?after=N&wait=1``),
and retries every ``retry`` seconds while the controller cannot be reached (it starts with
the cluster; a warning once per run of failures). The simulation hands in its controller's
``after`` directly. :func:`release_failed` is what every producer does on ``fail(x)``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager

from node.config.model import ClusterConfig
from node.flux.events import Event, Kind
from node.net.tls import control_url, url_context
from state.buffer import OutputBuffer

__all__ = ["Fetch", "follow", "http_events", "release_failed"]

#: The events after number N, waiting up to S seconds for one (possibly none).
Fetch = Callable[[int, float], Awaitable[list[Event]]]


async def follow(fetch: Fetch, apply: Callable[[Event], None],
                 idle: Callable[[], None] | None = None) -> None:
    """Apply every event decided from now on, once, in order, for ever; ``idle()`` after
    every answer (at least once a second). The events decided before are history: a
    process that starts (or restarts, after its own failure) takes the cluster as it is
    now, its partner's state included."""
    history = await fetch(0, 0.0)
    seq = history[-1].seq if history else 0
    while True:
        for e in await fetch(seq, 1.0):
            if e.seq == seq + 1:  # (an answer that overlaps the last one: skipped)
                apply(e)
                seq = e.seq
        if idle is not None:
            idle()


@asynccontextmanager
async def http_events(config: ClusterConfig, owner: str, log: logging.Logger,
                      retry: float = 0.1) -> AsyncIterator[Fetch]:
    """A :data:`Fetch` from the controller process over HTTP."""
    import aiohttp  # here: a process that follows no controller never loads it

    c = config.controller
    if c is None:
        raise RuntimeError(f"{config.path}: no [controller] to follow")
    url = control_url(config, c, "events")
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        failing = False

        async def fetch(after: int, wait: float) -> list[Event]:
            nonlocal failing
            try:
                async with http.get(url, params={"after": str(after), "wait": str(wait)},
                                    ssl=url_context(config) or True) as resp:
                    body = await resp.json()
                events = [Event.from_json(e) for e in body["events"]]
            except (aiohttp.ClientError, TimeoutError) as exc:
                if not failing:
                    log.warning("%s: the Flux controller cannot be reached (%r): retrying "
                                "every %g s", owner, exc, retry)
                failing = True
                await asyncio.sleep(retry)
                return []
            if failing:
                log.info("%s: the Flux controller answers again", owner)
                failing = False
            return events

        yield fetch


_log = logging.getLogger("dpc.flux")


def release_failed(owner: str, buffers: Mapping[str, OutputBuffer], event: Event) -> None:
    """``fail(x)``: x's acks no longer hold any of ``buffers`` (the paper's ``ack_all``)."""
    if event.kind is not Kind.FAIL:
        return
    for stream, buf in buffers.items():
        if event.replica in buf.consumers:
            buf.release(event.replica)
            _log.warning("%s: Flux: %s failed (controller event %d): its acks no longer "
                         "hold %r (ack_all), trimmed up to id %d", owner, event.replica,
                         event.seq, stream, buf.trimmed_up_to)
