"""The replicas under benchmark: real ``dpc node`` processes, fed and read by this process.

``BenchReplica`` runs the bench node (ops_scripts/bench/layout.py: the first node fed by
sources only, ``n1`` of ``examples/basic.toml``) from a copy of the config with free
loopback ports: with ``partitions = 1``, ONE replica process of the whole node (its first
replica, ``n1a``), no other replica, and a client ``bench`` (whose acks trim the output
buffer); with ``partitions = P > 1``, the node split into P partitions on ``by``, which the
loader expands (node/config/partitions.py), ONE replica process per partition (``n1a_p0``
.. ``n1a_p<P-1>``) and a client ``bench_p<i>`` of each partition's output. ``settings``
override the config's [defaults]. This process plays the sources (node-runtime Publishers,
each sending a partition's replica its share, as ``ClusterConfig.splits`` says; tuple time
= wall-clock us; a boundary every ``boundary_interval``) and the clients (an InputLink per
replica, all counted together; latency = arrival us - tmax of each output STABLE tuple,
after a warm-up of min(0.5 s, a quarter of the step)).

A rate R (tuples/s over all sources, split as in the config) offered for ``seconds`` by
:meth:`BenchReplica.step` is **sustained** when this process's backlog for each replica
stayed under 1 s of input, every output's boundary passed the step's end within 1 s, >= 95%
of R was offered, p99 latency <= 1 s, p50 of the last quarter of the outputs is within
100 ms of the first quarter's (a backlog growing by 5% of R fails a 3 s step), and every
replica is STABLE. With ``scale_keys`` each ``key`` domain grows with R (``n x R / the
config's total rate``) so that the join's output per input tuple stays the example's.
Each step also takes the replicas' CPU time (user + system, ``/proc/PID/stat``) after the
warm-up: all of it per tuple offered (``Step.cpu_us``), and each replica's per tuple of its
own share (``Step.parts``; the share of each pool value is its Split's, counted exactly).
Used by ``dpc bench throughput``, ``overhead`` and ``latency``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import itertools
import json
import logging
import os
import signal
import sys
import urllib.request
from collections.abc import Coroutine, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from node.clock import now_us
from node.config.model import ClusterConfig, SourceConfig
from node.net.auth import authenticated
from node.net.tcp import TcpTransport
from node.net.tls import control_url, url_context
from node.procs.generators import make_generator
from node.procs.pacing import next_multiple
from node.streams.link import InputLink
from node.streams.publisher import Publisher
from ops_scripts.bench.layout import CLIENT, Layout, Ports, bench_config, bench_node
from ops_scripts.cluster.processes import read_cpu_seconds, read_rss
from ops_scripts.errors import BenchFailed
from protocol.exchange import Split
from protocol.messages import ConsistencyState, HeartbeatRequest, HeartbeatResponse, Message
from protocol.tuples import Kind, boundary, make_tuple
from state.buffer import OutputBuffer

__all__ = [
    "BOUNDARY", "CLIENT", "LATENCY_BOUND_S", "STABLE", "TIMEOUT", "TREND_US", "BenchReplica",
    "PartStep", "Step", "bench_node", "log", "run_bench", "runtime_gc",
]

T = TypeVar("T")
log = logging.getLogger("dpc.bench")
LATENCY_BOUND_S = 1.0  # p99 bound; also: backlog < 1 s of input, output through within 1 s
TREND_US = 100_000  # how much p50 may grow across a step
POOL = 1 << 16  # attribute values drawn per source and rate, used cyclically
TIMEOUT = 30.0  # replica start-up; catching up after an overloaded step
STABLE, BOUNDARY = Kind.STABLE, Kind.BOUNDARY
NAN = float("nan")


@dataclass
class PartStep:
    """One replica's figures in a step: its share of the tuples offered after the warm-up,
    its CPU time per tuple of that share, its outputs and RSS (MiB)."""

    replica: str
    share: int = 0
    cpu_us: float = NAN
    outputs: int = 0
    rss_mib: float = NAN


@dataclass
class Step:
    """One offered rate and what came of it (``failure`` empty: sustained)."""

    rate: float
    achieved: float = 0.0
    outputs: int = 0
    p50_ms: float = NAN
    p99_ms: float = NAN
    failure: str = ""
    #: The replicas at the end of the offered period: RSS (MiB, summed) and their /status
    #: gauges (SUnion buffered tuples, output buffer tuples, live heap blocks; summed).
    rss_mib: float = NAN
    gauges: dict[str, Any] = field(default_factory=dict)
    #: The replicas' CPU time (user + system) per tuple offered between the warm-up's end
    #: and the offered period's end, in microseconds: what fault tolerance costs shows here
    #: as directly as in the sustained rate, without the rate search's coarse steps.
    cpu_us: float = NAN
    #: Each replica's figures (one per partition; one for the whole node).
    parts: list[PartStep] = field(default_factory=list)


def _answer(name: str, frontiers: dict[str, int], msg: Message) -> Message | None:
    """A source's answer to a replica's heartbeat: STABLE, at the largest time published."""
    if not isinstance(msg, HeartbeatRequest):
        return None
    return HeartbeatResponse(name, msg.seq, ConsistencyState.STABLE,
                             {name: ConsistencyState.STABLE}, {name: frontiers[name]})


@dataclass
class _Feed:
    """One source stream played by this process (``sent``: tuples of the current step)."""

    src: SourceConfig
    share: float  # of the rate
    pub: Publisher
    splits: list[Split]  # each partition's share of the stream (none: P = 1)
    next_id: int = 1
    sent: int = 0
    pool: list[tuple[Any, ...]] = field(default_factory=list)  # values, used cyclically
    #: Per partition, how many of the pool's first j values are its (j = 0 .. len(pool)).
    prefix: list[list[int]] = field(default_factory=list)

    def set_pool(self, pool: list[tuple[Any, ...]]) -> None:
        self.pool, self.prefix = pool, []
        if not self.splits:
            return
        part_of: dict[tuple[Any, ...], int] = {}  # key values -> partition (Split.keeps)
        positions = self.splits[0].positions
        marks = [[0] * (len(pool) + 1) for _ in self.splits]
        for j, v in enumerate(pool):
            k = tuple(v[p] for p in positions)
            if (p := part_of.get(k)) is None:
                t = make_tuple(STABLE, 0, 0, 0, v)
                p = part_of[k] = next(i for i, s in enumerate(self.splits) if s.keeps(t))
            marks[p][j + 1] = 1
        self.prefix = [list(itertools.accumulate(m)) for m in marks]

    def share_of(self, partition: int, a: int, b: int) -> int:
        """Data tuples of ids ``a`` .. ``b - 1`` in ``partition`` (id i carries pool[i % n])."""
        cum = self.prefix[partition]
        n = len(cum) - 1

        def upto(x: int) -> int:
            return x // n * cum[n] + cum[x % n]

        return upto(b) - upto(a)


@dataclass
class _Replica:
    """One replica process the bench runs (the whole node's, or a partition's), and what the
    bench's client of its output saw."""

    name: str
    stream: str
    client: str
    data_port: int = 0
    control_port: int = 0
    proc: asyncio.subprocess.Process | None = None
    watermark: int = 0
    outputs: int = 0


class BenchReplica:
    """The replica processes and this process's sources and clients (``stop`` ends them).

    ``settings`` override the config's [defaults] keys (TOML values: seconds for times);
    ``boundary_us`` every source's boundary interval (other benches vary both);
    ``partitions`` and ``by``: the node split by key, one replica per partition
    (``Layout.of``)."""

    def __init__(self, config: ClusterConfig, scale_keys: bool, run_dir: Path,
                 settings: dict[str, Any] | None = None, boundary_us: int | None = None,
                 partitions: int = 1, by: Sequence[str] | None = None) -> None:
        self.config, self.scale_keys, self.node = config, scale_keys, bench_node(config)
        self.layout = Layout.of(config, partitions, by)
        self.settings = settings or {}
        self.replicas = [_Replica(r, s, c) for r, s, c in zip(
            self.layout.replicas, self.layout.streams, self.layout.clients, strict=True)]
        self.dir, self.transport = run_dir, TcpTransport(tls=config.tls)
        self.sources = [config.sources[s] for s in self.node.inputs]
        self.base_rate = sum(s.rate for s in self.sources)
        self.feeds: list[_Feed] = []  # at start: the splits are the written config's
        self.frontiers: dict[str, int] = {}  # per source: the largest time it published
        self.boundary_us = boundary_us or min(s.boundary_interval for s in self.sources)
        self.rate, self.t0, self.outputs = 0.0, 0, 0
        self.window = (0, 0)  # outputs with tmax in [lo, hi) count for latency
        self.latencies: list[int] = []
        self.moved = asyncio.Event()  # set when an output's watermark moves or a replica dies
        self.halted = ""  # why the search cannot go on
        self.tasks: list[asyncio.Task[None]] = []
        self.running = config  # until start() writes the bench's own

    def _check_alive(self, problem: str = "", at: _Replica | None = None) -> None:
        """Raise if a replica died (or ``problem`` at replica ``at``), with the end of its output."""
        for r in self.replicas:
            if r.proc is not None and r.proc.returncode is not None:
                problem, at = f"died (exit {r.proc.returncode})", r
        if problem and at is not None:
            lines = (self.dir / f"{at.name}.out").read_text(errors="replace").splitlines()
            raise BenchFailed(f"replica {at.name} {problem}; its last lines:\n    "
                              + "\n    ".join(lines[-15:]))

    async def start(self) -> None:
        # Every port is picked first (outside the ephemeral range): the config names them,
        # and each process of it (the sources and the clients here, the replicas) proves to
        # the others that it is the one the config names there (node/net/auth.py).
        ports = Ports.pick(self.layout, self.sources)
        for r, d, c in zip(self.replicas, ports.data, ports.control, strict=True):
            r.data_port, r.control_port = d, c
        cfg = self.dir / "config.toml"
        config = await asyncio.to_thread(bench_config, self.config, self.layout, ports, cfg,
                                         self.settings, self.boundary_us)
        self.running = config  # what the replicas run: their ports and hosts
        for s in self.sources:
            buf = OutputBuffer(s.name)
            buf.set_consumers(list(config.consumers_of(s.name)))
            splits = config.splits(s.name)
            # The stand-in answers heartbeats as a source does (node/procs/source.py): a
            # replica watches its sources and goes UP_FAILURE when one is silent (issue 46).
            self.frontiers[s.name] = 0
            pub = Publisher(f"bench-{s.name}", {s.name: buf}, splits={s.name: splits}, log=log,
                            responder=functools.partial(_answer, s.name, self.frontiers))
            self.feeds.append(_Feed(s, s.rate / self.base_rate, pub,
                                    [splits[r.name] for r in self.replicas if r.name in splits]))
            as_source = authenticated(self.transport, config, s.name, log=log)
            await as_source.serve("127.0.0.1", ports.sources[s.name], pub.handle)
        for r in self.replicas:
            out = await asyncio.to_thread(open, self.dir / f"{r.name}.out", "wb")
            with out:  # the child writes to its own copy of the descriptor
                r.proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "ops_scripts.cli", "node", str(cfg), r.name,
                    "--run-dir", str(self.dir), stdout=out, stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True)
        # The links retry until the replicas serve; a boundary out of each means ready.
        self.tasks = [asyncio.create_task(self._generate())]
        for r in self.replicas:
            link = InputLink(authenticated(self.transport, config, r.client, log=log), r.stream,
                             r.client, [("127.0.0.1", r.data_port)],
                             functools.partial(self._on_output, r), log=log)
            self.tasks += [asyncio.create_task(link.run()), asyncio.create_task(self._watch(r))]
        try:
            async with asyncio.timeout(TIMEOUT):
                await self._caught_up(t := now_us())
        except TimeoutError:
            self._check_alive(f"sent no boundary within {TIMEOUT:.0f} s", self._behind(t)[0])

    async def _watch(self, r: _Replica) -> None:
        """Wake the waits for output when a replica exits: they then raise at once."""
        if r.proc is not None:
            await r.proc.wait()
        self.moved.set()

    async def close(self) -> None:
        """Cancel this process's sources and clients, then stop the replicas."""
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.stop()

    async def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the replicas, SIGKILL after ``grace`` seconds; waits until they exited."""
        await asyncio.gather(*(self._stop(r.proc, grace) for r in self.replicas))

    @staticmethod
    async def _stop(proc: asyncio.subprocess.Process | None, grace: float) -> None:
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
                f.set_pool(list(itertools.islice(make_generator(replace(f.src, attributes=attrs)), POOL)))
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
                    self.frontiers[f.src.name] = now
                if now >= next_boundary:
                    f.pub.publish(f.src.name, [boundary(now)])
                    self.frontiers[f.src.name] = now
            if now >= next_boundary:
                next_boundary = next_multiple(now, self.boundary_us)
            await asyncio.sleep(0.002)  # like a source's generator loop

    async def _on_output(self, r: _Replica, stream: str, tuples: Any) -> None:
        arrival, (lo, hi), lat = now_us(), self.window, self.latencies
        for t in tuples:
            k = t[0]
            if k is STABLE:
                if lo <= t[3] < hi:
                    lat.append(arrival - t[3])
            elif k is BOUNDARY and t[2] > r.watermark:
                r.watermark = t[2]
                self.moved.set()
        r.outputs += len(tuples)
        self.outputs += len(tuples)

    def _behind(self, t: int) -> list[_Replica]:
        """The replicas whose output's boundary has not passed tuple time ``t`` yet."""
        return [r for r in self.replicas if r.watermark < t]

    async def _caught_up(self, t: int) -> None:
        """Return once every output's boundary passed tuple time ``t``; raise if a replica
        dies meanwhile. The caller bounds the wait (``asyncio.timeout``)."""
        while self._behind(t):
            self._check_alive()
            self.moved.clear()
            await self.moved.wait()

    def _sent(self) -> int:
        return sum(f.sent for f in self.feeds)

    def _backlogs(self) -> dict[str, int]:
        """Per replica, the tuples (before its split) this process has yet to send it."""
        out = {r.name: 0 for r in self.replicas}
        for f in self.feeds:
            for st in f.pub.stats().values():
                for name, sub in st["subscribers"].items():
                    out[name] = out.get(name, 0) + sub["pending"]
        return out

    def _cpu_seconds(self) -> list[float]:
        """Each replica's CPU seconds so far (nan once it has gone: the step then fails)."""
        cpus = [None if r.proc is None else read_cpu_seconds(r.proc.pid) for r in self.replicas]
        return [NAN if c is None else c for c in cpus]

    def _status(self, r: _Replica) -> dict[str, Any]:
        # The config the replicas run (its ports picked at start), not the one benched.
        url = control_url(self.running, self.running.replica(r.name), "status")
        with urllib.request.urlopen(url, timeout=5, context=url_context(self.config)) as resp:
            status: dict[str, Any] = json.load(resp)
        return status

    async def _memory(self, res: Step) -> None:
        """Each replica's RSS and state gauges, now (the end of the offered period); summed
        into ``res``."""
        for r, part in zip(self.replicas, res.parts, strict=True):
            if r.proc is None or r.proc.returncode is not None:
                return
            rss = read_rss(r.proc.pid)
            part.rss_mib = NAN if rss is None else rss / 2**20
            g = (await asyncio.to_thread(self._status, r))["gauges"]
            for k, v in (("sunion_buffered", g["sunion_buffered"]),
                         ("buffer_tuples", sum(g["buffer_tuples"].values())),
                         ("heap_blocks", g["heap_blocks"])):
                res.gauges[k] = res.gauges.get(k, 0) + v
        res.rss_mib = sum(p.rss_mib for p in res.parts)

    def _shares(self, ids: list[int]) -> list[int]:
        """Per replica, the data tuples of its share sent since the feeds' ids were ``ids``."""
        if len(self.replicas) == 1:
            return [sum(f.next_id - i for f, i in zip(self.feeds, ids, strict=True))]
        return [sum(f.share_of(p, i, f.next_id) for f, i in zip(self.feeds, ids, strict=True))
                for p in range(len(self.replicas))]

    def _who(self, rs: list[_Replica]) -> str:
        """`` (names)`` of the replicas concerned when there are several, else nothing."""
        return f" ({', '.join(r.name for r in rs)})" if len(self.replicas) > 1 else ""

    async def step(self, rate: float, seconds: float) -> Step:
        """Offer ``rate`` for ``seconds``, wait until the outputs caught up, judge."""
        res = Step(rate, parts=[PartStep(r.name) for r in self.replicas])
        self._set_rate(rate)
        start, out0, self.latencies = self.t0, self.outputs, []
        outs0 = [r.outputs for r in self.replicas]
        self.window = (start + int(min(0.5, seconds / 4) * 1e6), start + int(seconds * 1e6))
        # At the warm-up's end: the replicas' CPU s, the tuples sent, each feed's next id.
        mark: tuple[list[float], int, list[int]] | None = None
        while now_us() < self.window[1] and not res.failure:
            await asyncio.sleep(0.05)
            self._check_alive()
            if mark is None and now_us() >= self.window[0]:
                mark = (self._cpu_seconds(), self._sent(), [f.next_id for f in self.feeds])
            backlogs = self._backlogs()
            over = [r for r in self.replicas if backlogs[r.name] > rate * LATENCY_BOUND_S]
            if over:
                res.failure = f"backlog over {LATENCY_BOUND_S:g} s of input{self._who(over)}"
        end = now_us()
        res.achieved = self._sent() / ((end - start) / 1e6)
        if mark is not None and (sent := self._sent() - mark[1]) > 0:
            cpus = self._cpu_seconds()
            res.cpu_us = (sum(cpus) - sum(mark[0])) * 1e6 / sent
            for part, c1, c0, share in zip(res.parts, cpus, mark[0], self._shares(mark[2]),
                                           strict=True):
                part.share = share
                part.cpu_us = (c1 - c0) * 1e6 / share if share else NAN
        self._set_rate(0)
        await self._memory(res)
        try:
            async with asyncio.timeout(LATENCY_BOUND_S):
                await self._caught_up(end)
        except TimeoutError:
            res.failure = res.failure or (f"output not through the step's end in {LATENCY_BOUND_S:g} s"
                                          + self._who(self._behind(end)))
            try:
                async with asyncio.timeout(TIMEOUT):
                    await self._caught_up(end)
            except TimeoutError:
                late = ", ".join(r.name for r in self._behind(end))
                self.halted = f"{late} did not catch up in {TIMEOUT:.0f} s after {rate:,.0f}/s"
        self.window, res.outputs = (0, 0), self.outputs - out0
        for part, r, o0 in zip(res.parts, self.replicas, outs0, strict=True):
            part.outputs = r.outputs - o0
        lats, q = self.latencies, len(self.latencies) // 4
        lat, first, last = sorted(lats), sorted(lats[:q]), sorted(lats[len(lats) - q:])
        if lat:
            res.p50_ms, res.p99_ms = lat[len(lat) // 2] / 1e3, lat[len(lat) * 99 // 100] / 1e3
        states = {r.name: "?" if self.halted else
                  str((await asyncio.to_thread(self._status, r))["state"]) for r in self.replicas}
        left = [(r, states[r.name]) for r in self.replicas if states[r.name] not in ("?", "STABLE")]
        if left:  # UP_FAILURE: a bucket waited alpha*X, tentative out
            self.halted = (f"the replica left STABLE ({left[0][1]})" if len(self.replicas) == 1
                           else "replicas left STABLE: " + ", ".join(f"{r.name} {s}" for r, s in left))
        growth = last[q // 2] - first[q // 2] if q else 0
        res.failure = res.failure or next((why for bad, why in (
            (bool(left), ", ".join(f"replica{self._who([r])} {s}" for r, s in left)),
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
            for r in run.replicas:
                if r.proc is not None and r.proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(r.proc.pid, signal.SIGKILL)
