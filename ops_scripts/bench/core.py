"""``dpc bench core``: the pure core's throughput against the raw limit, in one run.

Three synthetic streams are encoded into wire frames (``--frame`` tuples each, boundaries
every 100 ms bucket) and interleaved as a node would receive them. Two loops run over the
same frames, best of ``--repeat``:

* **bare**: decode every frame and iterate its tuples -- the ceiling for any consumer;
* **chain**: decode and push through SUnion(3 inputs) -> filter -> windowed aggregate ->
  SOutput (the issue's reference chain), each batch's tuples;
* **chain in columns**: the same, each batch pushed as the columns it travelled in
  (issue 48: no tuple built on the way in; the SUnion releases columns, the filter and
  SOutput run vectorized, the aggregate per tuple for now). Its output must equal the
  tuple chain's, or the bench fails.

The figure that matters is the ratio chain/bare, measured in the same process on the same
frames: these machines are shared and noisy, so absolute numbers alone prove nothing.
Aims (ISSUE 2): chain >= 250,000 tuples/s and chain/bare >= 0.10.
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Callable
from typing import Any

from node.procs.heap import runtime_gc
from operators import QueryNetwork
from ops_scripts.errors import BenchFailed
from protocol.codec import FrameDecoder, encode
from protocol.messages import Batch, Message
from protocol.tuples import Kind, Tuple, boundary, make_tuple

__all__ = ["CHAIN_SPEC", "chain_loop", "make_frames", "run_core_bench"]

BUCKET_US = 100_000
STREAMS = ("s1", "s2", "s3")

CHAIN_SPEC: dict[str, Any] = {
    "inputs": {s: ["key", "value", "price"] for s in STREAMS},
    "operators": [
        # wait is huge: the benchmark measures STABLE processing, no failure.
        {"name": "u", "type": "sunion", "inputs": list(STREAMS), "bucket": BUCKET_US, "wait": 10**15},
        {"name": "f", "type": "filter", "inputs": ["u"], "where": "value >= 10"},
        {"name": "a", "type": "aggregate", "inputs": ["f"], "window": 1_000_000,
         "group_by": ["key"],
         "aggregates": [{"fn": "count", "as": "n"}, {"fn": "sum", "attr": "price", "as": "total"},
                        {"fn": "max", "attr": "price", "as": "high"}]},
        {"name": "out", "type": "soutput", "inputs": ["a"]},
    ],
    "outputs": ["out"],
}


def make_frames(tuples: int, frame: int, seed: int = 1) -> list[bytes]:
    """``tuples`` tuples over three streams (1,000 per stream per bucket), as wire frames."""
    rng = random.Random(seed)
    per_stream = tuples // len(STREAMS)
    step = BUCKET_US // 1000
    frames_by_stream: list[list[bytes]] = []
    for s in STREAMS:
        batch: list[Tuple] = []
        frames: list[bytes] = []
        next_boundary = BUCKET_US
        for i in range(1, per_stream + 1):
            t = i * step
            if t >= next_boundary:
                batch.append(boundary(next_boundary))
                next_boundary += BUCKET_US
            batch.append(
                make_tuple(Kind.STABLE, i, t, t, (rng.randrange(16), rng.randrange(100), rng.random() * 100))
            )
            if len(batch) >= frame:
                frames.append(encode(Batch(s, tuple(batch))))
                batch = []
        batch.append(boundary(next_boundary + BUCKET_US))
        frames.append(encode(Batch(s, tuple(batch))))
        frames_by_stream.append(frames)
    # Round-robin across streams: what a node receiving three live sources sees.
    out: list[bytes] = []
    for k in range(max(len(f) for f in frames_by_stream)):
        out.extend(f[k] for f in frames_by_stream if k < len(f))
    return out


def _batch(msg: Message) -> Batch:
    """``msg``, a frame of :func:`make_frames`: always a Batch."""
    if not isinstance(msg, Batch):
        raise BenchFailed(f"decoded a {type(msg).__name__} from the benchmark's frames, "
                          "expected a Batch")
    return msg


def _bare(frames: list[bytes]) -> int:
    decoder = FrameDecoder()
    n = 0
    for f in frames:
        for msg in decoder.feed(f):
            for _t in _batch(msg).tuples:
                n += 1
    return n


def chain_loop(frames: list[bytes], columns: bool = False,
               outputs: list[Tuple] | None = None) -> int:
    """Decode ``frames`` and push them through :data:`CHAIN_SPEC` (their tuples, or their
    columns); the tuples fed. ``outputs`` collects what the chain emitted."""
    decoder = FrameDecoder()
    net = QueryNetwork(CHAIN_SPEC)
    n = 0
    produced = 0
    for f in frames:
        for msg in decoder.feed(f):
            batch = _batch(msg)
            n += len(batch)
            out = net.push(batch.stream, batch.columns if columns else batch.tuples, 0)
            produced += len(out.outputs["out"])
            if outputs is not None:
                outputs += out.outputs["out"]
    if produced == 0:
        raise BenchFailed("the chain produced no output: the benchmark would be meaningless")
    return n


def _best(fn: Callable[[list[bytes]], int], frames: list[bytes], repeat: int) -> tuple[float, int]:
    best = float("inf")
    n = 0
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        n = fn(frames)
        best = min(best, time.perf_counter() - start)
    return best, n


def run_core_bench(tuples: int = 600_000, repeat: int = 3, frame: int = 100) -> int:
    if tuples < 3 * frame or repeat < 1 or frame < 1:
        print("dpc bench core: need --tuples >= 3 x --frame, --repeat >= 1, --frame >= 1")
        return 2
    print(f"dpc bench core: {tuples:,} tuples, 3 streams, {frame} tuples/frame, best of {repeat}")
    print("  encoding frames ...", flush=True)
    frames = make_frames(tuples, frame)
    with runtime_gc():  # as the node processes run (DESIGN.md 7)
        print("  bare loop (decode + iterate) ...", flush=True)
        bare_s, n_bare = _best(_bare, frames, repeat)
        print("  chain (decode + SUnion -> filter -> aggregate -> SOutput) ...", flush=True)
        chain_s, n_chain = _best(chain_loop, frames, repeat)
        print("  chain in columns ...", flush=True)
        cols_s, n_cols = _best(lambda fr: chain_loop(fr, columns=True), frames, repeat)
        per_tuple: list[Tuple] = []
        in_columns: list[Tuple] = []
        chain_loop(frames, outputs=per_tuple)
        chain_loop(frames, columns=True, outputs=in_columns)
        if per_tuple != in_columns:
            raise BenchFailed("the chain in columns emitted other tuples than the chain of "
                              f"tuples ({len(in_columns):,} vs {len(per_tuple):,}): a bug")
    bare_rate = n_bare / bare_s
    chain_rate = n_chain / chain_s
    ratio = chain_rate / bare_rate
    print()
    print(f"  {'loop':<34}{'tuples':>12}{'seconds':>10}{'tuples/s':>14}")
    print(f"  {'bare: decode + iterate':<34}{n_bare:>12,}{bare_s:>10.3f}{bare_rate:>14,.0f}")
    print(f"  {'chain: decode + 4 operators':<34}{n_chain:>12,}{chain_s:>10.3f}{chain_rate:>14,.0f}")
    cols_rate = n_cols / cols_s
    print(f"  {'chain in columns':<34}{n_cols:>12,}{cols_s:>10.3f}{cols_rate:>14,.0f}")
    print()
    print(f"  columns / tuples = {cols_rate / chain_rate:.2f}   (the same output; issue 48)")
    print(f"  chain / bare = {ratio:.3f}   (aim >= 0.100: {'met' if ratio >= 0.1 else 'NOT met'})")
    print(f"  chain rate   = {chain_rate:,.0f} tuples/s   (aim >= 250,000: "
          f"{'met' if chain_rate >= 250_000 else 'NOT met'})")
    return 0
