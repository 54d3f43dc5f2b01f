"""The replica under benchmark: one real ``dpc node`` process, fed and read by this process.

``BenchReplica`` runs ONE replica, the first replica of the first node fed by sources only
(``n1a`` of ``examples/basic.toml``), from a copy of the config with free loopback ports,
no other replica and a client ``bench`` (whose acks trim the output buffer); ``settings``
override the config's [defaults]. This process plays the sources (node-runtime Publishers;
tuple time = wall-clock us; a boundary every ``boundary_interval``) and the client (an
InputLink; latency = arrival us - tmax of each output STABLE tuple, after a warm-up of
min(0.5 s, a quarter of the step)).

A rate R (tuples/s over all sources, split as in the config) offered for ``seconds`` by
:meth:`BenchReplica.step` is **sustained** when this process's backlog for the replica
stayed under 1 s of input, the output's boundary passed the step's end within 1 s, >= 95%
of R was offered, p99 latency <= 1 s, p50 of the last quarter of the outputs is within
100 ms of the first quarter's (a backlog growing by 5% of R fails a 3 s step), and the
replica is STABLE. With ``scale_keys`` each ``key`` domain grows with R (``n x R / the
config's total rate``) so that the join's output per input tuple stays the example's.
Each step also takes the replica's CPU time (user + system, ``/proc/PID/stat``) per tuple
offered after the warm-up (``Step.cpu_us``).
Used by ``dpc bench throughput``, ``overhead`` and ``latency``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import json
import logging
import os
import signal
import sys
import urllib.request
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from node.clock import now_us
from node.config.load import load_config
from node.config.model import ClusterConfig, NodeConfig, SourceConfig
from node.net.auth import authenticated
from node.net.ports import free_port
from node.net.tcp import TcpTransport
from node.net.tls import control_url, url_context
from node.procs.generators import make_generator
from node.procs.pacing import next_multiple
from node.streams.link import InputLink
from node.streams.publisher import Publisher
from ops_scripts.cluster.processes import read_cpu_seconds, read_rss
from ops_scripts.errors import BenchFailed
from protocol.tuples import Kind, boundary, make_tuple
from state.buffer import OutputBuffer

__all__ = [
    "BOUNDARY", "CLIENT", "LATENCY_BOUND_S", "STABLE", "TIMEOUT", "TREND_US", "BenchReplica",
    "Step", "bench_node", "log", "run_bench", "runtime_gc",
]

T = TypeVar("T")
log = logging.getLogger("dpc.bench")
LATENCY_BOUND_S = 1.0  # p99 bound; also: backlog < 1 s of input, output through within 1 s
TREND_US = 100_000  # how much p50 may grow across a step
CLIENT = "bench"
POOL = 1 << 16  # attribute values drawn per source and rate, used cyclically
TIMEOUT = 30.0  # replica start-up; catching up after an overloaded step
STABLE, BOUNDARY = Kind.STABLE, Kind.BOUNDARY



@dataclass
class Step:
    """One offered rate and what came of it (``failure`` empty: sustained)."""

    rate: float
    achieved: float = 0.0
    outputs: int = 0
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    failure: str = ""
    #: The replica at the end of the offered period: RSS (MiB) and its /status gauges
    #: (SUnion buffered tuples, output buffer tuples, live heap blocks).
    rss_mib: float = float("nan")
    gauges: dict[str, Any] = field(default_factory=dict)
    #: The replica's CPU time (user + system) per tuple offered between the warm-up's end
    #: and the offered period's end, in microseconds: what fault tolerance costs shows here
    #: as directly as in the sustained rate, without the rate search's coarse steps.
    cpu_us: float = float("nan")


def _toml(v: Any) -> str:
    """A TOML value (inline tables): JSON strings, numbers and booleans are TOML ones."""
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml(x)}" for k, x in v.items()) + "}"
    return "[" + ", ".join(map(_toml, v)) + "]" if isinstance(v, list | tuple) else json.dumps(v)


def bench_node(config: ClusterConfig) -> NodeConfig:
    for node in config.nodes.values():
        if all(s in config.sources for s in node.inputs):
            return node
    raise BenchFailed(f"{config.path}: no node reads from sources only: nothing to drive")


@dataclass
class _Feed:
    """One source stream played by this process (``sent``: tuples of the current step)."""

    src: SourceConfig
    share: float  # of the rate
    pub: Publisher
    next_id: int = 1
    sent: int = 0
    pool: list[tuple[Any, ...]] = field(default_factory=list)  # values, used cyclically


def _tls_table(config: ClusterConfig) -> dict[str, Any]:
    """``[cluster.tls]`` with absolute paths (the bench's config lives elsewhere), or none."""
    tls = config.tls
    if tls is None:
        return {}
    return {"tls": {"cert": str(tls.cert), "key": str(tls.key), "ca": str(tls.ca)}}


class BenchReplica:
    """The replica process and this process's sources and client (``stop`` ends the replica).

    ``settings`` override the config's [defaults] keys (TOML values: seconds for times);
    ``boundary_us`` every source's boundary interval (other benches vary both)."""

    def __init__(self, config: ClusterConfig, scale_keys: bool, run_dir: Path,
                 settings: dict[str, Any] | None = None, boundary_us: int | None = None) -> None:
        self.config, self.scale_keys, self.node = config, scale_keys, bench_node(config)
        self.settings = settings or {}
        self.replica, self.output = self.node.replicas[0].name, next(iter(self.node.outputs))
        self.dir, self.transport = run_dir, TcpTransport(tls=config.tls)
        self.base_rate = sum(config.sources[s].rate for s in self.node.inputs)
        self.feeds: list[_Feed] = []
        for s in (config.sources[s] for s in self.node.inputs):
            buf = OutputBuffer(s.name)
            buf.set_consumers([self.replica])
            pub = Publisher(f"bench-{s.name}", {s.name: buf}, log=log)
            self.feeds.append(_Feed(s, s.rate / self.base_rate, pub))
        self.boundary_us = boundary_us or min(f.src.boundary_interval for f in self.feeds)
        self.rate, self.t0, self.watermark, self.outputs, self.control_port = 0.0, 0, 0, 0, 0
        self.window = (0, 0)  # outputs with tmax in [lo, hi) count for latency
        self.latencies: list[int] = []
        self.proc: asyncio.subprocess.Process | None = None
        self.moved = asyncio.Event()  # set when the output's watermark moves or the replica dies
        self.halted = ""  # why the search cannot go on
        self.tasks: list[asyncio.Task[None]] = []

    def _write_config(self, ports: dict[str, int], data_port: int) -> Path:
        raw, node = self.config.raw, self.node
        replica = dict(raw["nodes"][node.name]["replicas"][0], host="127.0.0.1",
                       data_port=data_port, control_port=self.control_port)
        doc: dict[str, dict[str, Any]] = {
            "cluster": dict(raw["cluster"], control_host="127.0.0.1", **_tls_table(self.config)),
            "defaults": dict(raw.get("defaults", {}), **self.settings),
            "sources": {f.src.name: {"schema": list(f.src.schema), "host": "127.0.0.1",
                                     "port": ports[f.src.name], "rate": f.src.rate,
                                     "boundary_interval": self.boundary_us / 1e6}
                        for f in self.feeds},
            "nodes": {node.name: dict(raw["nodes"][node.name], replicas=[replica])},
            "clients": {CLIENT: {"stream": self.output}},
        }
        path = self.dir / "config.toml"
        path.write_text("".join(f"[{sec}]\n" + "".join(f"{json.dumps(k)} = {_toml(v)}\n" for k, v in t.items())
                                for sec, t in doc.items()), encoding="utf-8")
        return path

    def _check_alive(self, problem: str = "") -> None:
        """Raise if the replica died (or ``problem``), with the end of its output."""
        if self.proc is not None and self.proc.returncode is not None:
            problem = f"died (exit {self.proc.returncode})"
        if problem:
            lines = (self.dir / "replica.out").read_text(errors="replace").splitlines()
            raise BenchFailed(f"replica {self.replica} {problem}; its last lines:\n    "
                              + "\n    ".join(lines[-15:]))

    async def start(self) -> None:
        # Every port is picked first (outside the ephemeral range): the config names them,
        # and each process of it (the sources and the client here, the replica) proves to
        # the others that it is the one the config names there (node/net/auth.py).
        ports = {f.src.name: free_port() for f in self.feeds}
        data_port, self.control_port = free_port(), free_port()
        cfg = await asyncio.to_thread(self._write_config, ports, data_port)
        config = await asyncio.to_thread(load_config, cfg)
        for f in self.feeds:
            as_source = authenticated(self.transport, config, f.src.name, log=log)
            await as_source.serve("127.0.0.1", ports[f.src.name], f.pub.handle)
        out = await asyncio.to_thread(open, self.dir / "replica.out", "wb")
        with out:  # the child writes to its own copy of the descriptor
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "ops_scripts.cli", "node", str(cfg), self.replica,
                "--run-dir", str(self.dir), stdout=out, stderr=asyncio.subprocess.STDOUT,
                start_new_session=True)
        # The link retries until the replica serves; its first boundary out means ready.
        link = InputLink(authenticated(self.transport, config, CLIENT, log=log), self.output,
                         CLIENT, [("127.0.0.1", data_port)],
                         self._on_output, log=log)
        self.tasks = [asyncio.create_task(self._generate()), asyncio.create_task(link.run()),
                      asyncio.create_task(self._watch(self.proc))]
        try:
            async with asyncio.timeout(TIMEOUT):
                await self._caught_up(now_us())
        except TimeoutError:
            self._check_alive(f"sent no boundary within {TIMEOUT:.0f} s")

    async def _watch(self, proc: asyncio.subprocess.Process) -> None:
        """Wake the waits for output when the replica exits: they then raise at once."""
        await proc.wait()
        self.moved.set()

    async def close(self) -> None:
        """Cancel this process's sources and client, then stop the replica."""
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.stop()

    async def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the replica, SIGKILL after ``grace`` seconds; waits until it exited."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(grace):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()

    def _set_rate(self, rate: float) -> None:
        scale = rate / self.base_rate if self.scale_keys else 1.0
        for f in self.feeds:
            attrs = {a: replace(g, n=max(g.n, round(g.n * scale))) if g.kind == "key" else g
                     for a, g in f.src.attributes.items()}
            if rate > 0:  # fresh values: the key domains depend on the rate
                f.pool = list(itertools.islice(make_generator(replace(f.src, attributes=attrs)), POOL))
            f.sent = 0
        self.rate, self.t0 = rate, now_us()

    async def _generate(self) -> None:
        next_boundary = next_multiple(now_us(), self.boundary_us)  # as a source does
        while True:
            now = now_us()
            for f in self.feeds:
                due = int((now - self.t0) * self.rate * f.share / 1e6) - f.sent
                if due > 0:
                    pool, n, i0 = f.pool, len(f.pool), f.next_id
                    f.pub.publish(f.src.name, [make_tuple(STABLE, i, now, now, pool[i % n])
                                               for i in range(i0, i0 + due)])
                    f.next_id, f.sent = i0 + due, f.sent + due
                if now >= next_boundary:
                    f.pub.publish(f.src.name, [boundary(now)])
            if now >= next_boundary:
                next_boundary = next_multiple(now, self.boundary_us)
            await asyncio.sleep(0.002)  # like a source's generator loop

    async def _on_output(self, stream: str, tuples: Any) -> None:
        arrival, (lo, hi), lat = now_us(), self.window, self.latencies
        for t in tuples:
            k = t[0]
            if k is STABLE:
                if lo <= t[3] < hi:
                    lat.append(arrival - t[3])
            elif k is BOUNDARY and t[2] > self.watermark:
                self.watermark = t[2]
                self.moved.set()
        self.outputs += len(tuples)

    async def _caught_up(self, t: int) -> None:
        """Return once the output's boundary passed tuple time ``t``; raise if the replica
        dies meanwhile. The caller bounds the wait (``asyncio.timeout``)."""
        while self.watermark < t:
            self._check_alive()
            self.moved.clear()
            await self.moved.wait()

    def _sent(self) -> int:
        return sum(f.sent for f in self.feeds)

    def _cpu_seconds(self) -> float:
        """The replica's CPU seconds so far (nan once it has gone: the step then fails)."""
        cpu = None if self.proc is None else read_cpu_seconds(self.proc.pid)
        return float("nan") if cpu is None else cpu

    def _status(self) -> dict[str, Any]:
        url = control_url(self.config, self.control_port, "status")
        with urllib.request.urlopen(url, timeout=5, context=url_context(self.config)) as r:
            status: dict[str, Any] = json.load(r)
        return status

    def _state(self) -> str:
        return str(self._status()["state"])

    async def _memory(self, res: Step) -> None:
        """The replica's RSS and state gauges, now (the end of the offered period)."""
        if self.proc is None or self.proc.returncode is not None:
            return
        rss = read_rss(self.proc.pid)
        res.rss_mib = float("nan") if rss is None else rss / 2**20
        g = (await asyncio.to_thread(self._status))["gauges"]
        res.gauges = {"sunion_buffered": g["sunion_buffered"],
                      "buffer_tuples": sum(g["buffer_tuples"].values()),
                      "heap_blocks": g["heap_blocks"]}

    async def step(self, rate: float, seconds: float) -> Step:
        """Offer ``rate`` for ``seconds``, wait until the output caught up, judge."""
        res = Step(rate)
        self._set_rate(rate)
        start, out0, self.latencies = self.t0, self.outputs, []
        self.window = (start + int(min(0.5, seconds / 4) * 1e6), start + int(seconds * 1e6))
        mark: tuple[float, int] | None = None  # (replica CPU s, tuples sent) at the warm-up's end
        while now_us() < self.window[1] and not res.failure:
            await asyncio.sleep(0.05)
            self._check_alive()
            if mark is None and now_us() >= self.window[0]:
                mark = (self._cpu_seconds(), self._sent())
            if sum(sub["pending"] for f in self.feeds for st in f.pub.stats().values()
                   for sub in st["subscribers"].values()) > rate * LATENCY_BOUND_S:
                res.failure = f"backlog over {LATENCY_BOUND_S:g} s of input"
        end = now_us()
        res.achieved = self._sent() / ((end - start) / 1e6)
        if mark is not None and (sent := self._sent() - mark[1]) > 0:
            res.cpu_us = (self._cpu_seconds() - mark[0]) * 1e6 / sent
        self._set_rate(0)
        await self._memory(res)
        try:
            async with asyncio.timeout(LATENCY_BOUND_S):
                await self._caught_up(end)
        except TimeoutError:
            res.failure = res.failure or f"output not through the step's end in {LATENCY_BOUND_S:g} s"
            try:
                async with asyncio.timeout(TIMEOUT):
                    await self._caught_up(end)
            except TimeoutError:
                self.halted = f"{self.replica} did not catch up in {TIMEOUT:.0f} s after {rate:,.0f}/s"
        self.window, res.outputs = (0, 0), self.outputs - out0
        lats, q = self.latencies, len(self.latencies) // 4
        lat, first, last = sorted(lats), sorted(lats[:q]), sorted(lats[len(lats) - q:])
        if lat:
            res.p50_ms, res.p99_ms = lat[len(lat) // 2] / 1e3, lat[len(lat) * 99 // 100] / 1e3
        state = "?" if self.halted else await asyncio.to_thread(self._state)
        if state not in ("?", "STABLE"):  # UP_FAILURE: a bucket waited alpha*X, tentative out
            self.halted = f"the replica left STABLE ({state})"
        growth = last[q // 2] - first[q // 2] if q else 0
        res.failure = res.failure or next((why for bad, why in (
            (state not in ("?", "STABLE"), f"replica {state}"),
            (res.achieved < 0.95 * rate, "this process could not offer the rate"),
            (not lat, "no output data"),
            (res.p99_ms > LATENCY_BOUND_S * 1e3, f"p99 over {LATENCY_BOUND_S:g} s"),
            (growth > TREND_US, f"latency growing (p50 +{growth / 1e3:.0f} ms in the step)"),
        ) if bad), "")
        return res


@contextlib.contextmanager
def runtime_gc() -> Iterator[None]:
    """The node runtime's gc settings (DESIGN.md 7) for the bench's own process too."""
    gc.collect()
    gc.freeze()
    old = gc.get_threshold()
    gc.set_threshold(100_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


def run_bench(main: Coroutine[Any, Any, T], runs: list[BenchReplica]) -> T:
    """Run ``main`` on uvloop; any replica of ``runs`` still running when the loop ends (a
    second Ctrl-C) is SIGKILLed by its pid."""
    import uvloop

    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main)
    finally:
        for run in runs:
            if run.proc is not None and run.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(run.proc.pid, signal.SIGKILL)
