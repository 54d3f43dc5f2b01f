"""``dpc bench replay``: a reconciliation's replay, per tuple (inproc) against vectorized.

For each size N, one node of a cluster file (default: the basic example's ``n1``) is run
in process through a failure whose replay re-releases N input tuples: a stable prefix, a
checkpoint, one input stream silent while the others carry N tuples' worth of buckets
(released tentative), the silent stream's tuples coming back late, then the timed part:
``rewind`` to the checkpoint and ``replay`` steps of ``--step`` buckets until the replay
ends, as checkpoint/redo does in a replica. The same input is replayed once per engine,
with the node's ``buffer_memory`` (what does not fit is spilled, as in a replica; the
vectorized engine reads it back as Arrow) and the cyclic GC tuned as the runtime tunes it.
Both engines must emit the same tuples (compared by digest): anything else is a bug, and
the bench exits 1 saying so. Speed is reported as a ratio, never asserted.
"""

from __future__ import annotations

import gc
import hashlib
import itertools
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from node.config.load import load_config
from node.config.model import ClusterConfig, NodeConfig
from node.procs.generators import make_generator
from operators import QueryNetwork
from ops_scripts.errors import BenchFailed
from protocol.tuples import Kind, Tuple, boundary, make_tuple

__all__ = ["ENGINES", "ReplayRun", "replay_once", "run_replay_bench"]

ENGINES = ("inproc", "vectorized")
_PREFIX_BUCKETS = 3


@dataclass(frozen=True)
class ReplayRun:
    """One engine's replay of N tuples: its time, outputs, and their digest."""

    engine: str
    tuples: int
    seconds: float
    outputs: int
    digest: str
    spilled: int  # input tuples written to disk during the failure

    @property
    def rate(self) -> float:
        return self.tuples / self.seconds if self.seconds > 0 else float("inf")


def _streams(config: ClusterConfig, node: NodeConfig) -> Iterator[tuple[int, str, list[Tuple]]]:
    """The node's input, bucket by bucket: (bucket index, stream, that bucket's tuples and
    its boundary), every stream at its source's rate, endless."""
    width = node.settings.bucket
    sources = [config.sources[s] for s in node.inputs]
    gens = [make_generator(s) for s in sources]
    ids = [itertools.count(1) for _ in sources]
    emitted = [0] * len(sources)
    for b in itertools.count():
        end = (b + 1) * width
        for k, src in enumerate(sources):
            batch = []
            step = 1e6 / src.rate
            while (t := int(emitted[k] * step)) < end:
                batch.append(make_tuple(Kind.STABLE, next(ids[k]), t, t, next(gens[k])))
                emitted[k] += 1
            batch.append(boundary(end))
            yield b, src.name, batch


def replay_once(config: ClusterConfig, node: NodeConfig, engine: str, tuples: int,
                step: int, spill_dir: Path) -> ReplayRun:
    """Drive ``node``'s network through the failure and time the replay (see above)."""
    net = QueryNetwork(node.network, undo_logs=node.settings.reconciliation == "undo")
    net.set_engine(engine)
    net.set_replay_step(step)
    net.set_spill(spill_dir, node.settings.buffer_memory // 2)
    silent = node.inputs[-1]
    x = node.settings.x
    late: list[list[Tuple]] = []
    replayed, now = 0, 0
    point = None
    for b, stream, batch in _streams(config, node):
        now = b * node.settings.bucket + x  # a bucket's data is X old: past SUnion's wait
        if b < _PREFIX_BUCKETS:
            net.push(stream, batch, now)
            if b == _PREFIX_BUCKETS - 1 and stream == silent:
                net.on_timer(now)
                point = net.checkpoint()
            continue
        if replayed >= tuples and stream == silent:
            break
        n = len(batch) - 1
        replayed += n
        if stream == silent:
            late.append(batch)
        else:
            net.push(stream, batch, now)
            net.on_timer(now)
    now += x  # every pending bucket is past its wait: released tentative
    net.on_timer(now)
    if not net.in_failure or point is None:
        raise BenchFailed(f"node {node.name!r}: the silent stream {silent!r} caused no "
                          "failure: nothing to replay")
    for batch in late:  # the silent stream comes back: its tuples correct the buckets
        net.push(silent, batch, now)
        net.on_timer(now)
    out: list[Tuple] = []
    start = time.perf_counter()
    result = net.rewind(point, now)
    out += result.outputs[node.network.outputs[0]]
    while net.replaying:
        out += net.replay(now).outputs[node.network.outputs[0]]
    seconds = time.perf_counter() - start
    spilled = net.spill_stats().written_tuples
    net.close_spill()
    digest = hashlib.sha256(repr([tuple(t) for t in out]).encode()).hexdigest()[:16]
    return ReplayRun(engine, replayed, seconds, len(out), digest, spilled)


def run_replay_bench(sizes: Sequence[int], config_path: Path, node_name: str | None = None,
                     step: int = 100) -> int:
    config = load_config(config_path)
    if node_name is not None and node_name not in config.nodes:
        raise BenchFailed(f"no node {node_name!r} in {config_path} (nodes: "
                          f"{', '.join(config.nodes)})")
    if step < 1:
        raise BenchFailed(f"--step must be >= 1, got {step}")
    node = config.nodes[node_name] if node_name else next(iter(config.nodes.values()))
    print(f"dpc bench replay: node {node.name!r} of {config_path} ({len(node.inputs)} inputs, "
          f"{node.settings.bucket / 1000:g} ms buckets), replay steps of {step} buckets, "
          f"buffer_memory {node.settings.buffer_memory // 2**20} MiB")
    print(f"  {'tuples':>12}{'engine':>12}{'seconds':>10}{'tuples/s':>14}{'outputs':>10}"
          f"{'vs inproc':>11}")
    crossover = None
    old = gc.get_threshold()
    gc.freeze()  # as the runtime does (DESIGN.md 7): the GC would dominate either engine
    gc.set_threshold(100_000, 50, 100)
    try:
        for n in sizes:
            runs = {}
            for engine in ENGINES:
                with tempfile.TemporaryDirectory(prefix="dpc-bench-replay-") as d:
                    runs[engine] = r = replay_once(config, node, engine, n, step, Path(d))
                ratio = r.rate / runs["inproc"].rate
                print(f"  {r.tuples:>12,}{engine:>12}{r.seconds:>10.3f}{r.rate:>14,.0f}"
                      f"{r.outputs:>10,}{ratio:>10.2f}x", flush=True)
            if runs["vectorized"].digest != runs["inproc"].digest:
                raise BenchFailed(f"{n:,} tuples: the vectorized replay emitted other tuples "
                                  f"than the per-tuple one ({runs['vectorized'].outputs:,} "
                                  f"vs {runs['inproc'].outputs:,})")
            if crossover is None and runs["vectorized"].rate > runs["inproc"].rate:
                crossover = n
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()
    print()
    print("  both engines emitted the same tuples at every size")
    print(f"  vectorized faster from: {f'{crossover:,} tuples' if crossover else 'no size tried'}")
    return 0
