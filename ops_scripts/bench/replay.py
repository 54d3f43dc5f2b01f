"""``dpc bench replay``: a reconciliation's replay per tuple (inproc), vectorized and on Spark.

For each size N, one node of a cluster file (default: the basic example's ``n1``) is run
in process through a failure whose replay re-releases N input tuples: a stable prefix, a
checkpoint, one input stream silent while the others carry N tuples' worth of buckets
(released tentative), the silent stream's tuples coming back late, then the timed part:
``rewind`` to the checkpoint and ``replay`` steps of ``--step`` buckets until the replay
ends, as checkpoint/redo does in a replica. The same input is replayed once per engine,
with the node's ``buffer_memory`` (what does not fit is spilled, as in a replica; the
vectorized engine reads it back as Arrow) and the cyclic GC tuned as the runtime tunes it.
Every engine must emit the same tuples (compared by digest): anything else is a bug, and
the bench exits 1 saying so. Speed is reported as a ratio, never asserted. ``gc s``: of a
replay's seconds, those the cyclic GC took in this process (node/procs/heap.py's
:class:`~node.procs.heap.GcClock`; a Spark replay's executors are not counted).

Spark (node/spark/replay.py, as a replica runs it: jobs of ``--spark-step`` buckets, each
a task over one partition, job and result through files) is timed warm: its session is
started once, before the first size (its start-up is printed); the *cold* row adds that
start-up to the warm replay, which is what a replica pays when its session is not started
ahead of need.

The crossovers (the smallest size tried from which an engine beat every engine below it at
every larger size tried) are stored where replicas read them (node/config/crossovers.py),
unless ``--no-store``; ``replay_engine = "auto"`` then switches at them.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import platform
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from node.config.crossovers import Crossovers, read_crossovers, write_crossovers
from node.config.load import load_config
from node.config.model import ClusterConfig, NodeConfig
from node.procs.generators import make_generator
from node.procs.heap import GcClock, runtime_gc
from operators import QueryNetwork
from ops_scripts.errors import BenchFailed
from protocol.tuples import Kind, Tuple, boundary, make_tuple

if TYPE_CHECKING:
    from node.spark.replay import SparkReplayer

__all__ = ["ENGINES", "ReplayRun", "crossover", "replay_once", "run_replay_bench"]

ENGINES = ("inproc", "vectorized", "spark")
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
    gc_seconds: float  # of ``seconds``, the cyclic GC's collections (this process's)

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
                step: int, spill_dir: Path, spark: SparkReplayer | None = None) -> ReplayRun:
    """Drive ``node``'s network through the failure and time the replay (see above);
    ``spark``: the engine ``spark`` (its steps of ``step`` buckets are Spark jobs)."""
    if (engine == "spark") != (spark is not None):
        raise BenchFailed("the spark engine needs its SparkReplayer (and only it)")
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
    if spark is not None:  # as a replica: the rewind's step is one bucket, here
        net.set_replay_step(1)
    with GcClock() as gc_clock:
        start = time.perf_counter()
        result = net.rewind(point, now)
        net.set_replay_step(step)
        out += result.outputs[node.network.outputs[0]]
        name = node.network.outputs[0]
        while net.replaying:
            call = net.replay(now) if spark is None else net.replay_elsewhere(now, spark.run)
            out += call.outputs[name]
        seconds = time.perf_counter() - start
    spilled = net.spill_stats().written_tuples
    net.close_spill()
    digest = hashlib.sha256(repr([tuple(t) for t in out]).encode()).hexdigest()[:16]
    return ReplayRun(engine, replayed, seconds, len(out), digest, spilled, gc_clock.seconds)


def crossover(sizes: Sequence[int], rate: dict[int, float],
              below: dict[int, float]) -> int | None:
    """The smallest size from which ``rate`` beat ``below`` at every larger size tried."""
    found = None
    for n in sorted(sizes):
        if rate[n] <= below[n]:
            found = None
        elif found is None:
            found = n
    return found


def run_replay_bench(sizes: Sequence[int], config_path: Path, node_name: str | None = None,
                     step: int = 100, engines: Sequence[str] = ENGINES,
                     spark_step: int = 10_000, store: bool = True) -> int:
    config = load_config(config_path)
    if node_name is not None and node_name not in config.nodes:
        raise BenchFailed(f"no node {node_name!r} in {config_path} (nodes: "
                          f"{', '.join(config.nodes)})")
    if step < 1 or spark_step < 1:
        raise BenchFailed(f"--step and --spark-step must be >= 1, got {step}, {spark_step}")
    node = config.nodes[node_name] if node_name else next(iter(config.nodes.values()))
    print(f"dpc bench replay: node {node.name!r} of {config_path} ({len(node.inputs)} inputs, "
          f"{node.settings.bucket / 1000:g} ms buckets), replay steps of {step} buckets "
          f"({spark_step} per Spark job), buffer_memory "
          f"{node.settings.buffer_memory // 2**20} MiB")
    spark = _spark(config) if "spark" in engines else None
    print(f"  {'tuples':>12}{'engine':>12}{'seconds':>10}{'tuples/s':>14}{'outputs':>10}"
          f"{'vs inproc':>11}{'gc s':>8}")
    rates: dict[str, dict[int, float]] = {e: {} for e in engines}
    try:
        with runtime_gc():  # as the node processes run (DESIGN.md 7)
            for n in sizes:
                runs = {}
                for engine in engines:
                    with tempfile.TemporaryDirectory(prefix="dpc-bench-replay-") as d:
                        runs[engine] = r = replay_once(
                            config, node, engine, n, spark_step if engine == "spark" else step,
                            Path(d), spark if engine == "spark" else None)
                    rates[engine][n] = r.rate
                    _row(r.tuples, engine, r.seconds, r.outputs, r.rate / runs["inproc"].rate,
                         r.gc_seconds)
                    if engine == "spark" and spark is not None and spark.start_s is not None:
                        cold = r.seconds + spark.start_s
                        _row(r.tuples, "spark cold", cold, r.outputs,
                             r.tuples / cold / runs["inproc"].rate, r.gc_seconds)
                    if r.digest != runs["inproc"].digest:
                        raise BenchFailed(
                            f"{n:,} tuples: the {engine} replay emitted other tuples than the "
                            f"per-tuple one ({r.outputs:,} vs {runs['inproc'].outputs:,})")
    finally:
        if spark is not None:
            spark.stop()
    print()
    print(f"  every engine ({', '.join(engines)}) emitted the same tuples at every size")
    stored = read_crossovers()
    vec = crossover(sizes, rates["vectorized"], rates["inproc"]) if "vectorized" in engines \
        else (stored.vectorized_from if stored else None)
    best = {n: max(rates[e][n] for e in engines if e != "spark") for n in sizes}
    spk = crossover(sizes, rates["spark"], best) if "spark" in engines \
        else (stored.spark_from if stored else None)
    for label, value in (("vectorized", vec), ("spark (warm)", spk)):
        if label.split()[0] in engines:
            print(f"  {label} faster from: "
                  f"{f'{value:,} tuples' if value is not None else 'no size tried'}")
    if store:
        sizes_text = ",".join(f"{n:g}" for n in sizes)
        path = write_crossovers(Crossovers(vec, spk, f"dpc bench replay on {platform.node()} "
                                           f"({os.cpu_count()} cores), {time.strftime('%Y-%m-%d')}, "
                                           f"sizes {sizes_text}, engines {','.join(engines)}"))
        print(f"  crossovers stored in {path} (replay_engine = \"auto\" switches there)")
    return 0


def _row(tuples: int, engine: str, seconds: float, outputs: int, ratio: float,
         gc_seconds: float) -> None:
    rate = tuples / seconds if seconds > 0 else float("inf")
    print(f"  {tuples:>12,}{engine:>12}{seconds:>10.3f}{rate:>14,.0f}{outputs:>10,}"
          f"{ratio:>10.2f}x{gc_seconds:>8.3f}", flush=True)


def _spark(config: ClusterConfig) -> SparkReplayer:
    """A started Spark engine (the cluster's ``[spark]`` settings), its start-up timed."""
    from node.spark.replay import SparkReplayer
    from node.spark.session import java_problem

    problem = java_problem()
    if problem is not None:
        raise BenchFailed(f"{problem} (or leave spark out: --engines inproc,vectorized)")
    work = Path(tempfile.mkdtemp(prefix="dpc-bench-replay-spark-"))
    spark = SparkReplayer(config.spark, work, "dpc bench replay", logging.getLogger("dpc.bench"))
    spark.run([])  # start it now: rows are timed warm
    print(f"  Spark session ({config.spark.get('spark.master', 'local[*]')}) started in "
          f"{spark.start_s:.1f} s")
    return spark
