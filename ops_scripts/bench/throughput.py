"""``dpc bench throughput``: one real replica's sustained input rate against the raw limit.

Both figures come from one run (DESIGN.md 7). **raw**: Batch frames of 100 ``(key, value)``
tuples encoded here and sent over loopback TCP for ``seconds`` (0.5 to 2 s) to a child
process that decodes (FrameDecoder) and iterates them. **replica**: the highest rate one
replica process sustains (``ops_scripts/bench/replica.py`` says what the harness runs and
what *sustained* means). R doubles from ``--start-rate`` until a failure or
``--max-rate``, then bisects (``--steps`` at most); between steps only boundaries flow until
the output caught up. The query and the replica are the config's, unchanged; ``--keys
scaled`` (default) grows each ``key`` domain with R so that the join's output per input
tuple stays the example's (~0.3), where the config's 100 keys (``--keys example``) make the
basic join emit ~1e-4 R^2 results/s (1 M/s at 100,000/s). Speed is reported, never asserted.
"""

from __future__ import annotations

import gc
import logging
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from node.clock import now_us
from node.config.load import load_config
from ops_scripts.bench.replica import (
    LATENCY_BOUND_S,
    STABLE,
    TIMEOUT,
    TREND_US,
    BenchReplica,
    Step,
    bench_node,
    run_bench,
    runtime_gc,
)
from ops_scripts.errors import BenchFailed
from protocol.codec import FrameDecoder, encode
from protocol.messages import Batch
from protocol.tuples import make_tuple

__all__ = [
    "LATENCY_BOUND_S", "Step", "raw_rate", "run_throughput_bench", "search_sustained",
]

AIM = 300_000  # tuples/s, and AIM_RAW of the raw rate (issue 15)
AIM_RAW = 0.10


def _stop(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM ``proc`` (by its pid), SIGKILL after ``grace`` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
            if not isinstance(msg, Batch):
                raise BenchFailed(f"raw receiver: got a {type(msg).__name__}, expected Batch frames")
            for _t in msg.tuples:
                n += 1
    print(n, time.perf_counter() - start, flush=True)


def raw_rate(seconds: float, frame: int = 100) -> float:
    """Tuples/s of encode -> loopback TCP -> decode + iterate (in a child process)."""
    t = now_us()
    chunks = [tuple(make_tuple(STABLE, i, t + i, t + i, (i % 100, i % 97)) for i in range(j, j + frame))
              for j in range(1, 64 * frame, frame)]
    code = "import sys; from ops_scripts.bench.throughput import _raw_receiver as r; r(int(sys.argv[1]))"
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


def _next_rate(steps: list[Step], start: float, max_rate: float,
               precision: float = 0.1) -> float | None:
    """Double from ``start`` until a failure or ``max_rate``, then bisect until the highest
    rate sustained and the lowest not are within ``precision`` (None: done)."""
    lo = max((s.rate for s in steps if not s.failure), default=0.0)
    hi = min((s.rate for s in steps if s.failure), default=None)
    if hi is None:
        return None if lo >= max_rate else min(2 * lo if lo else start, max_rate)
    return None if lo and hi / lo <= 1 + precision else round((lo + hi) / 2 if lo else hi / 2, -2) or None


async def search_sustained(run: BenchReplica, seconds: float, start: float, max_rate: float,
                           n: int, precision: float = 0.1) -> list[Step]:
    """Offer at most ``n`` rates (``_next_rate``), printing a row per step."""
    steps: list[Step] = []
    try:
        await run.start()
        while (len(steps) < n and not run.halted
               and (rate := _next_rate(steps, start, max_rate, precision))):
            steps.append(s := await run.step(rate, seconds))
            print(f"  {len(steps):>4} {rate:>12,.0f} {s.achieved:>12,.0f} {s.outputs:>10,} "
                  f"{s.p50_ms:>9.1f} {s.p99_ms:>9.1f} {s.cpu_us:>9.2f}   "
                  + (f"NOT sustained: {s.failure}" if s.failure else "sustained"), flush=True)
    finally:
        await run.close()
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
    node = bench_node(config := load_config(config_path))
    rep, base = node.replicas[0].name, sum(config.sources[s].rate for s in node.inputs)
    ops = "; ".join(f"{o.name}={o.type}({', '.join(o.inputs)})" for o in node.network.operators)
    load = (f"key domains scaled with the rate R (n x R / {base:,.0f}): output per input tuple as "
            "in the config" if keys == "scaled" else "the config's keys at every rate (join output ~ R^2)")
    print(f"dpc bench throughput: {config_path}: one replica process ({rep}) of node {node.name}, "
          f"fed and read by this process over loopback\n  query measured: the config's, unchanged: "
          f"{ops}\n  workload: {load}\n  sustained: backlog < 1 s of input, output through each "
          f"step's end in 1 s, p99 <= {LATENCY_BOUND_S:g} s, p50 growing < {TREND_US // 1000} ms, "
          f"STABLE; {seconds:g} s per step; cpu us/t: the replica's CPU time per input tuple")
    logging.basicConfig(level=logging.ERROR)
    with runtime_gc(), tempfile.TemporaryDirectory(prefix="dpc-bench-") as tmp:
        print("  raw: encode -> loopback TCP -> decode + iterate ...", flush=True)
        raw = raw_rate(min(max(seconds, 0.5), 2.0))
        print(f"  {'step':>4} {'offered/s':>12} {'achieved/s':>12} {'outputs':>10} {'p50 ms':>9} "
              f"{'p99 ms':>9} {'cpu us/t':>9}   verdict", flush=True)
        run = BenchReplica(config, keys == "scaled", Path(tmp))
        try:
            steps = run_bench(search_sustained(run, seconds, start_rate, max_rate, max_steps), [run])
        except BenchFailed as e:
            print(f"dpc bench throughput: FAILED: {e}", file=sys.stderr)
            return 1
    b = max((s for s in steps if not s.failure), key=lambda s: s.rate, default=Step(0.0))
    rate = b.rate  # 0 (latencies nan) when no rate was sustained
    print(f"\n  {'figure':<44}{'tuples/s':>12}{'p50 ms':>9}{'p99 ms':>9}")
    print(f"  {'raw: encode + loopback TCP + decode':<44}{raw:>12,.0f}{'-':>9}{'-':>9}")
    print(f"  {f'replica {rep} sustained (STABLE)':<44}{rate:>12,.0f}{b.p50_ms:>9.1f}{b.p99_ms:>9.1f}")
    if b.gauges:
        g = b.gauges
        print(f"  memory of {rep} at {rate:,.0f} tuples/s: RSS {b.rss_mib:,.1f} MiB; SUnion "
              f"{g['sunion_buffered']:,} tuples buffered, output buffer {g['buffer_tuples']:,} "
              f"tuples, live heap {g['heap_blocks']:,} blocks")
    print(f"\n  replica / raw = {rate / raw:.3f}   (aim >= {AIM_RAW:.2f}: "
          f"{'met' if rate >= AIM_RAW * raw else 'NOT met'})")
    print(f"  replica rate  = {rate:,.0f} tuples/s   (aim >= {AIM:,}: {'met' if rate >= AIM else 'NOT met'})")
    return 0
