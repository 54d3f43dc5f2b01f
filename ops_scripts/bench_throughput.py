"""``dpc bench throughput``: one real replica's sustained input rate against the raw limit.

Two figures of the same run (DESIGN.md 7: on shared machines the ratio is what matters):

* **raw**: Batch frames of 100 ``(key, value)`` tuples, encoded here, sent over loopback
  TCP to a child process that decodes them (FrameDecoder) and iterates the tuples, for
  ``seconds`` (0.5 to 2 s): the ceiling of anything that receives tuples.
* **replica**: ONE real replica process (``dpc node``) of the config's first node fed by
  sources only (``n1`` of ``examples/basic.toml``), from a generated copy of the config:
  free loopback ports, that one replica, one client entry ``bench`` (so that acks trim
  its output buffer). This process plays the sources (one node-runtime Publisher per
  stream; tuple time = wall-clock us; a boundary every ``boundary_interval``) and the
  client (an InputLink on the node's output; latency = arrival us - tmax of each output
  STABLE tuple; outputs of a step's first quarter, at most 0.5 s, are warm-up).

A rate R (tuples/s over all sources, split as the config's rates) is offered for
``seconds``. R is **sustained** when: this process offered >= 95% of R; its backlog for
the replica stayed under 1 s of input and the output's boundary never lagged the clock by
2 s; after the step the output's boundary passed the step's end within 1 s (all of it was
processed); p99 latency <= 1 s; latency is not growing (p50 of the last quarter of the
step's outputs within 100 ms, one bucket, of the first quarter's: a backlog growing at
5% of R fails a 3 s step); and the replica is STABLE with no tentative output. R starts at
``--start-rate``, doubles until a step fails or ``--max-rate``, then bisects: at most
``--steps`` steps; between steps only boundaries flow until the output caught up.

The query measured is the config's, unchanged, and so is the replica (it logs every
output tuple, as in any run). The workload is scaled: with ``--keys scaled`` (default)
each ``key`` attribute's domain grows with R (``n x R / the config's total rate``: 100
keys at 3,000 tuples/s for the basic example), so the join's output per input tuple stays
the example's (~0.3). With the config's fixed keys (``--keys example``) the basic join
emits about 1e-4 R^2 results/s (1 M/s at 100,000 tuples/s): a quadratic workload.
Speed is reported, never asserted: exit 0 whenever the measurement completed.
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
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from node.config import ClusterConfig, NodeConfig, SourceConfig
from node.config_load import load_config
from node.generators import make_generator
from node.link import InputLink
from node.publisher import Publisher
from node.replica import now_us
from node.runlog import RunDir
from node.tcp import TcpTransport
from protocol.codec import FrameDecoder, encode
from protocol.messages import Batch
from protocol.tuples import Kind, boundary, make_tuple
from state.buffer import OutputBuffer

__all__ = ["LATENCY_BOUND_S", "BenchFailed", "Step", "raw_rate", "run_throughput_bench"]

log = logging.getLogger("dpc.bench")
LATENCY_BOUND_S = 1.0  # p99 bound; also: backlog < 1 s of input, output through within 1 s
TREND_US = 100_000  # p50 may grow this much across a step
STALL_US = 2_000_000  # the output boundary lagging the clock this much aborts a step
AIM = 100_000
CLIENT = "bench"
POOL = 1 << 16  # attribute values drawn per source and rate, used cyclically
TICK = 0.002
TIMEOUT = 30.0  # replica start-up; catching up after an overloaded step
STABLE, TENTATIVE, BOUNDARY = Kind.STABLE, Kind.TENTATIVE, Kind.BOUNDARY


class BenchFailed(Exception):
    """The replica failed to start or died: no figure to report."""


@dataclass
class Step:
    """One offered rate and what came of it (``failure`` empty: sustained)."""

    rate: float
    achieved: float = 0.0
    outputs: int = 0
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    failure: str = ""


def _stop(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM ``proc`` by pid; SIGKILL its process group after ``grace`` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# ------------------------------------------------------------------------ raw baseline
def _raw_receiver(port: int) -> None:
    """Child process of :func:`raw_rate`: decode and iterate until EOF; print n, seconds."""
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    sock = socket.create_connection(("127.0.0.1", port))
    decoder, n, start = FrameDecoder(), 0, 0.0
    while data := sock.recv(1 << 18):
        if not n:
            start = time.perf_counter()
        for msg in decoder.feed(data):
            assert isinstance(msg, Batch)
            for _t in msg.tuples:
                n += 1
    print(n, time.perf_counter() - start, flush=True)


def raw_rate(seconds: float, frame: int = 100) -> float:
    """Tuples/s of encode -> loopback TCP -> decode + iterate (in a child process)."""
    t = now_us()
    chunks = [tuple(make_tuple(STABLE, i, t + i, t + i, (i % 100, i % 97)) for i in range(j, j + frame))
              for j in range(1, 64 * frame, frame)]
    code = "import sys; from ops_scripts.bench_throughput import _raw_receiver as r; r(int(sys.argv[1]))"
    with socket.create_server(("127.0.0.1", 0)) as srv:
        srv.settimeout(TIMEOUT)
        proc = subprocess.Popen([sys.executable, "-c", code, str(srv.getsockname()[1])],
                                stdout=subprocess.PIPE, start_new_session=True)
        try:
            conn, _ = srv.accept()
            with conn:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                end = time.perf_counter() + seconds
                while time.perf_counter() < end:
                    for c in chunks:
                        conn.sendall(encode(Batch("s1", c)))
                conn.shutdown(socket.SHUT_WR)
                out, _ = proc.communicate(timeout=60)
        finally:
            _stop(proc)
    n, secs = out.split()
    return int(n) / float(secs)


# ------------------------------------------------------------------------ the replica
def _toml(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a TOML basic string
    if isinstance(v, list | tuple):
        return "[" + ", ".join(map(_toml, v)) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {v!r} as TOML")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _bench_node(config: ClusterConfig) -> NodeConfig:
    for node in config.nodes.values():
        if all(s in config.sources for s in node.inputs):
            return node
    raise BenchFailed(f"{config.path}: no node reads from sources only: nothing to drive")


class _Feed:
    """One source stream played by this process: ids, values, its share of the rate."""

    def __init__(self, src: SourceConfig, share: float, pub: Publisher) -> None:
        self.src, self.share, self.pub = src, share, pub
        self.next_id, self.sent = 1, 0  # sent: tuples of the current step
        self.pool: list[tuple[Any, ...]] = []

    def draw(self, key_scale: float) -> None:
        attrs = {a: replace(g, n=max(g.n, round(g.n * key_scale))) if g.kind == "key" else g
                 for a, g in self.src.attributes.items()}
        self.pool = list(itertools.islice(make_generator(replace(self.src, attributes=attrs)), POOL))


class _Run:
    """The replica process and this process's sources and client for it. The caller
    stops ``proc`` (by pid) in its ``finally``."""

    def __init__(self, config: ClusterConfig, scale_keys: bool, run_dir: Path) -> None:
        self.config, self.scale_keys = config, scale_keys
        self.node = _bench_node(config)
        self.replica = self.node.replicas[0].name
        self.output = next(iter(self.node.outputs))
        self.rd = RunDir(run_dir).ensure()
        self.transport = TcpTransport()
        srcs = [config.sources[s] for s in self.node.inputs]
        self.base_rate = sum(s.rate for s in srcs)
        self.feeds: list[_Feed] = []
        for s in srcs:
            buf = OutputBuffer(s.name)
            buf.set_consumers([self.replica])
            self.feeds.append(_Feed(s, s.rate / self.base_rate,
                                    Publisher(f"bench-{s.name}", {s.name: buf}, log=log)))
        self.boundary_us = min(s.boundary_interval for s in srcs)
        self.rate, self.t0 = 0.0, 0
        self.watermark = 0  # the newest boundary on the output
        self.window = (0, 0)  # outputs with tmax in [lo, hi) count for latency
        self.latencies: list[int] = []
        self.outputs = self.tentative = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.control_port = 0
        self.halted = ""  # why the search cannot go on
        self._tasks: list[asyncio.Task[None]] = []

    # ---------------------------------------------------------------- process
    def _write_config(self, ports: dict[str, int], data_port: int) -> Path:
        raw, node = self.config.raw, self.node
        rnode = dict(raw["nodes"][node.name])
        rnode["replicas"] = [dict(rnode["replicas"][0], host="127.0.0.1", data_port=data_port,
                                  control_port=self.control_port)]
        doc: dict[str, dict[str, Any]] = {
            "cluster": dict(raw["cluster"], control_host="127.0.0.1"),
            "defaults": dict(raw.get("defaults", {})),
            "sources": {f.src.name: {"schema": list(f.src.schema), "host": "127.0.0.1",
                                     "port": ports[f.src.name], "rate": f.src.rate,
                                     "boundary_interval": f.src.boundary_interval / 1e6}
                        for f in self.feeds},
            "nodes": {node.name: rnode},
            "clients": {CLIENT: {"stream": self.output}},
        }
        path = self.rd.path / "config.toml"
        path.write_text("".join(f"[{sec}]\n" + "".join(f"{json.dumps(k)} = {_toml(v)}\n"
                                                       for k, v in table.items())
                                for sec, table in doc.items()), encoding="utf-8")
        return path

    def _check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise BenchFailed(f"replica {self.replica} died (exit {self.proc.returncode}):\n"
                              + self.tail())

    def tail(self, n: int = 15) -> str:
        p = self.rd.logs / f"{self.replica}.out"
        lines = p.read_text(errors="replace").splitlines()[-n:] if p.exists() else []
        return "\n".join("    " + line for line in lines)

    async def start(self) -> None:
        ports = {f.src.name: (await self.transport.serve("127.0.0.1", 0, f.pub.handle)).port
                 for f in self.feeds}
        data_port, self.control_port = _free_port(), _free_port()
        cfg = self._write_config(ports, data_port)
        with open(self.rd.logs / f"{self.replica}.out", "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ops_scripts.cli", "node", str(cfg), self.replica,
                 "--run-dir", str(self.rd.path)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + TIMEOUT
        while not self.rd.is_ready(self.replica):
            self._check_alive()
            if time.monotonic() > deadline:
                raise BenchFailed(f"replica {self.replica} not ready in {TIMEOUT:.0f} s:\n" + self.tail())
            await asyncio.sleep(0.05)
        link = InputLink(self.transport, self.output, CLIENT, [("127.0.0.1", data_port)],
                         self._on_output, log=log)
        self._tasks = [asyncio.create_task(self._generate()), asyncio.create_task(link.run())]
        if not await self._caught_up(now_us(), TIMEOUT):
            raise BenchFailed(f"no output boundary from {self.replica} in {TIMEOUT:.0f} s:\n"
                              + self.tail())

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _state(self) -> str:
        url = f"http://127.0.0.1:{self.control_port}/status"
        with urllib.request.urlopen(url, timeout=5) as resp:
            st: dict[str, Any] = json.load(resp)
        tentative = sum(st["counters"]["tentative_out"].values())
        return str(st["state"]) + (f" ({tentative} tentative tuples)" if tentative else "")

    # ---------------------------------------------------------------- data
    def _set_rate(self, rate: float) -> None:
        if rate > 0:
            for f in self.feeds:
                f.draw(rate / self.base_rate if self.scale_keys else 1.0)
        self.rate, self.t0 = rate, now_us()
        for f in self.feeds:
            f.sent = 0

    async def _generate(self) -> None:
        next_boundary = now_us()
        while True:
            now = now_us()
            for f in self.feeds:
                due = int((now - self.t0) * self.rate * f.share / 1e6) - f.sent
                if due > 0:
                    pool, n, i0 = f.pool, len(f.pool), f.next_id
                    f.pub.publish(f.src.name, [make_tuple(STABLE, i, now, now, pool[i % n])
                                               for i in range(i0, i0 + due)])
                    f.next_id += due
                    f.sent += due
                if now >= next_boundary:
                    f.pub.publish(f.src.name, [boundary(now)])
            if now >= next_boundary:
                next_boundary = now + self.boundary_us
            await asyncio.sleep(TICK)

    async def _on_output(self, stream: str, tuples: Any) -> None:
        arrival = now_us()
        lo, hi = self.window
        lat = self.latencies
        for t in tuples:
            k = t[0]
            if k is STABLE:
                if lo <= t[3] < hi:
                    lat.append(arrival - t[3])
            elif k is BOUNDARY:
                self.watermark = max(self.watermark, t[2])
            elif k is TENTATIVE:
                self.tentative += 1
        self.outputs += len(tuples)

    def _backlog(self) -> int:
        return sum(sub["pending"] for f in self.feeds for st in f.pub.stats().values()
                   for sub in st["subscribers"].values())

    async def _caught_up(self, t: int, timeout: float) -> bool:
        """Wait until the output's boundary passed tuple time ``t``; False after ``timeout``."""
        deadline = time.monotonic() + timeout
        while self.watermark < t:
            self._check_alive()
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    async def step(self, rate: float, seconds: float) -> Step:
        """Offer ``rate`` for ``seconds``, wait until the output caught up, judge."""
        res = Step(rate)
        self._set_rate(rate)
        start, out0, tent0 = self.t0, self.outputs, self.tentative
        self.latencies = []
        self.window = (start + int(min(0.5, seconds / 4) * 1e6), start + int(seconds * 1e6))
        while now_us() < self.window[1] and not res.failure:
            await asyncio.sleep(0.05)
            self._check_alive()
            if self._backlog() > rate * LATENCY_BOUND_S:
                res.failure = f"backlog over {LATENCY_BOUND_S:g} s of input"
            elif now_us() - self.watermark > STALL_US:
                res.failure = f"output boundary {STALL_US / 1e6:g} s behind"
        end = now_us()
        res.achieved = sum(f.sent for f in self.feeds) / ((end - start) / 1e6)
        self._set_rate(0)
        if not await self._caught_up(end, LATENCY_BOUND_S):
            res.failure = res.failure or f"output not through the step's end in {LATENCY_BOUND_S:g} s"
            if not await self._caught_up(end, TIMEOUT):
                self.halted = f"{self.replica} did not catch up in {TIMEOUT:.0f} s after {rate:,.0f}/s"
        self.window = (0, 0)
        res.outputs = self.outputs - out0
        lats, q = self.latencies, len(self.latencies) // 4
        lat = sorted(lats)
        if lat:
            res.p50_ms, res.p99_ms = lat[len(lat) // 2] / 1e3, lat[len(lat) * 99 // 100] / 1e3
        first, last = (sorted(lats[:q]), sorted(lats[-q:])) if q else ([], [])
        state = "?" if self.halted else await asyncio.to_thread(self._state)
        if state not in ("?", "STABLE") or self.tentative > tent0:
            res.failure = res.failure or f"replica {state}, {self.tentative - tent0} tentative"
            self.halted = self.halted or f"the replica left STABLE ({state})"
        if res.failure:
            pass
        elif res.achieved < 0.95 * rate:
            res.failure = "this process could not offer the rate"
        elif not lat:
            res.failure = "no output data"
        elif res.p99_ms > LATENCY_BOUND_S * 1e3:
            res.failure = f"p99 over {LATENCY_BOUND_S:g} s"
        elif q and last[q // 2] - first[q // 2] > TREND_US:
            res.failure = f"latency growing (p50 {first[q // 2] / 1e3:.0f} -> {last[q // 2] / 1e3:.0f} ms)"
        return res


# ------------------------------------------------------------------------ the search
def _next_rate(steps: list[Step], start: float, max_rate: float) -> float | None:
    """Double from ``start`` until a failure or ``max_rate``, then bisect (None: done)."""
    lo = max((s.rate for s in steps if not s.failure), default=0.0)
    hi = min((s.rate for s in steps if s.failure), default=None)
    if hi is None:
        return None if lo >= max_rate else min(2 * lo if lo else start, max_rate)
    if lo and hi / lo <= 1.1:
        return None
    return round((lo + hi) / 2 if lo else hi / 2, -2) or None


async def _search(run: _Run, seconds: float, start: float, max_rate: float, n: int) -> list[Step]:
    steps: list[Step] = []
    await run.start()
    try:
        while len(steps) < n and not run.halted and (rate := _next_rate(steps, start, max_rate)):
            s = await run.step(rate, seconds)
            steps.append(s)
            print(f"  {len(steps):>4} {rate:>12,.0f} {s.achieved:>12,.0f} {s.outputs:>10,} "
                  f"{s.p50_ms:>9.1f} {s.p99_ms:>9.1f}   "
                  + (f"NOT sustained: {s.failure}" if s.failure else "sustained"), flush=True)
    finally:
        await run.stop()
    if run.halted:
        print(f"  search stopped: {run.halted}")
    return steps


def run_throughput_bench(config_path: Path = Path("examples/basic.toml"), seconds: float = 3.0,
                         start_rate: float = 12_500, max_rate: float = 800_000,
                         max_steps: int = 8, keys: str = "scaled") -> int:
    """Measure and print both figures and their ratio: 0 when the measurement completed,
    1 when the replica failed to start or died, 2 for nonsense arguments."""
    if seconds <= 0 or start_rate <= 0 or max_rate < start_rate or max_steps < 1:
        print("dpc bench throughput: need --seconds > 0, 0 < --start-rate <= --max-rate, --steps >= 1")
        return 2
    config = load_config(config_path)
    node = _bench_node(config)
    rep = node.replicas[0].name
    base = sum(config.sources[s].rate for s in node.inputs)
    print(f"dpc bench throughput: {config_path}, node {node.name}: one replica process ({rep}) "
          f"fed by this process (sources {', '.join(node.inputs)}; client on "
          f"{next(iter(node.outputs))}); loopback")
    print("  query measured (the config's, unchanged): " + "; ".join(
        f"{o.name}={o.type}({', '.join(o.inputs)})" for o in node.network.operators))
    print("  workload: " + (f"key domains scaled with the rate R (n x R / {base:,.0f}): output "
                            "per input tuple as in the config" if keys == "scaled" else
                            "the config's key domains at every rate (a join's output grows as R^2)"))
    print(f"  sustained: backlog < {LATENCY_BOUND_S:g} s of input, output through each step's end in "
          f"{LATENCY_BOUND_S:g} s, p99 <= {LATENCY_BOUND_S:g} s, p50 growing < {TREND_US // 1000} ms, "
          f"STABLE; {seconds:g} s per step")
    gc.collect()
    gc.freeze()  # as the node runtime does (DESIGN.md 7)
    old = gc.get_threshold()
    gc.set_threshold(100_000, 50, 100)
    logging.basicConfig(level=logging.ERROR)
    try:
        print("  raw: encode -> loopback TCP -> decode + iterate ...", flush=True)
        raw = raw_rate(min(max(seconds, 0.5), 2.0))
        print(f"  {'step':>4} {'offered/s':>12} {'achieved/s':>12} {'outputs':>10} {'p50 ms':>9} "
              f"{'p99 ms':>9}   verdict", flush=True)
        with tempfile.TemporaryDirectory(prefix="dpc-bench-") as tmp:
            run = _Run(config, keys == "scaled", Path(tmp))
            try:
                import uvloop

                with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                    steps = runner.run(_search(run, seconds, start_rate, max_rate, max_steps))
            except BenchFailed as e:
                print(f"dpc bench throughput: FAILED: {e}", file=sys.stderr)
                return 1
            finally:
                if run.proc is not None:
                    _stop(run.proc)
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()
    best = max((s for s in steps if not s.failure), key=lambda s: s.rate, default=None)
    rate = best.rate if best else 0.0
    p50, p99 = (f"{best.p50_ms:>9.1f}", f"{best.p99_ms:>9.1f}") if best else (f"{'-':>9}",) * 2
    print(f"\n  {'figure':<44}{'tuples/s':>12}{'p50 ms':>9}{'p99 ms':>9}")
    print(f"  {'raw: encode + loopback TCP + decode':<44}{raw:>12,.0f}{'-':>9}{'-':>9}")
    print(f"  {f'replica {rep} sustained (STABLE)':<44}{rate:>12,.0f}{p50}{p99}")
    if best is None and steps:
        print(f"  (not even {min(s.rate for s in steps):,.0f} tuples/s was sustained)")
    print(f"\n  replica / raw = {rate / raw:.3f}")
    print(f"  replica rate  = {rate:,.0f} tuples/s   (aim >= {AIM:,}: {'met' if rate >= AIM else 'NOT met'})")
    return 0
