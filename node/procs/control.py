"""The control plane of a process: aiohttp HTTP on its control port.

* ``GET /health`` -> ``{"ok": true, "name": ...}`` (a replica adds ``ready`` and
  ``incarnation``: what the Flux controller probes, node/flux/controller.py)
* ``GET /<query>?...`` (the Flux controller's ``/events``) answers without changing anything
* ``GET /status`` -> the process's status as JSON (state machine, streams, counters)
* ``GET /metrics`` -> the same counters in the Prometheus text format
* ``POST /<action>`` (a replica's: ``/checkpoint``, ``/shutdown``, ``/fault``, ``/digest``) changes
  things, so it requires the cluster's token as ``Authorization: Bearer <token>``; without
  it: 401, with a wrong one: 403. The body, if any, is a JSON object handed to the action;
  a body that is not one, or an action's :class:`ActionError`, is a 400 with the reason.

Bound to the process's own control host (its ``control_host``, else the cluster's, else
its ``host``: ``control_address`` in node/config/model.py). The process supplies its
status as a plain dict; metrics are derived from its ``counters`` and ``gauges`` sections.
"""

from __future__ import annotations

import hmac
import ssl
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import orjson
from aiohttp import web
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest

from node.errors import ActionError

__all__ = ["ControlPlane"]

StatusFn = Callable[[], Mapping[str, Any]]
ActionFn = Callable[[Mapping[str, Any]], Awaitable[Mapping[str, Any]]]
QueryFn = Callable[[Mapping[str, str]], Awaitable[Mapping[str, Any]]]
HealthFn = Callable[[], Mapping[str, Any]]


class _StatusCollector:
    """Turns the ``counters`` / ``gauges`` of a status dict into metric families, labelled
    by process name (and by stream where a section is keyed by stream)."""

    def __init__(self, name: str, status: StatusFn) -> None:
        self._name = name
        self._status = status

    def collect(self) -> Iterator[Metric]:
        st = self._status()
        for section, family in (("counters", CounterMetricFamily), ("gauges", GaugeMetricFamily)):
            for key, value in st.get(section, {}).items():
                metric = family(f"dpc_{key}", f"{key} ({section[:-1]})", labels=["process", "stream"])
                if isinstance(value, Mapping):  # per stream
                    for stream, v in value.items():
                        metric.add_metric([self._name, str(stream)], float(v))
                else:
                    metric.add_metric([self._name, ""], float(value))
                yield metric


class ControlPlane:
    """One process's HTTP control plane. ``start()``, then ``stop()``."""

    def __init__(
        self,
        name: str,
        host: str,
        port: int,
        token: str,
        status: StatusFn,
        actions: Mapping[str, ActionFn],
        tls: ssl.SSLContext | None = None,
        *,
        queries: Mapping[str, QueryFn] | None = None,
        health: HealthFn | None = None,
    ) -> None:
        """``tls``: serve HTTPS with this context ([cluster.tls], node/net/tls.py);
        ``queries``: read-only ``GET /<name>?...`` answers (the Flux controller's events);
        ``health``: more of ``/health``'s answer (a replica's readiness)."""
        self.name = name
        self._tls = tls
        self.host = host
        self.port = port
        self._token = token.encode()
        self._status = status
        self._actions = dict(actions)
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(_StatusCollector(name, status))
        self._runner: web.AppRunner | None = None
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/status", self._get_status)
        app.router.add_get("/metrics", self._metrics)
        for action in self._actions:
            app.router.add_post(f"/{action}", self._action)
        self._queries = dict(queries or {})
        self._health_more = health
        for query in self._queries:
            app.router.add_get(f"/{query}", self._query)
        self._app = app

    async def start(self) -> None:
        self._runner = web.AppRunner(self._app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True,
                           ssl_context=self._tls)
        await site.start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _health(self, request: web.Request) -> web.Response:
        more = self._health_more() if self._health_more is not None else {}
        return web.json_response({"ok": True, "name": self.name, **more})

    async def _query(self, request: web.Request) -> web.Response:
        try:
            answer = await self._queries[request.path.strip("/")](request.query)
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response(dict(answer))

    async def _get_status(self, request: web.Request) -> web.Response:
        return web.json_response(dict(self._status()))

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self._registry)
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})

    async def _action(self, request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            return web.json_response(
                {"error": "this request changes the process: send 'Authorization: Bearer <token>'"},
                status=401,
            )
        if not hmac.compare_digest(auth[len("Bearer ") :].encode(), self._token):
            return web.json_response({"error": "wrong token"}, status=403)
        action = request.path.strip("/")
        raw = await request.read()
        try:
            body = orjson.loads(raw) if raw.strip() else {}
        except orjson.JSONDecodeError as exc:
            return web.json_response({"error": f"body is not JSON: {exc}"}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"error": "body must be a JSON object"}, status=400)
        try:
            result = await self._actions[action](body)
        except ActionError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response({"ok": True, "action": action, **result})
