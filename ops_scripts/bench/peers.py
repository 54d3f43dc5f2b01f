"""``dpc bench peers``: the core query through our operators and through the peers, side by side.

The query of ``dpc bench core``: three streams merged, ``value >= 10``, a 1 s tumbling
window per key (16 keys) with count, sum(price) and max(price). Each engine runs it on one
core, in a child process of its own, over ``--tuples`` tuples:

* **ours**: the ``dpc bench core`` chain (decode wire frames, SUnion -> filter -> aggregate
  -> SOutput), in-process;
* **Bytewax** (when installed): a dataflow of the same tuples, merged in the same order,
  from a TestingSource (Python objects: no decoding), event-time tumbling windows;
* **Flink SQL** through PyFlink (when installed; Java 17): three ``datagen`` tables, rows
  generated inside Flink with no rate limit, a TUMBLE window TVF over their UNION ALL, into
  a ``blackhole`` sink, parallelism 1. Its start-up (seconds) is measured apart: after a
  warm-up job, the rate is ``(n_big - n_small) / (t_big - t_small)`` over two runs, the big
  one of at least ``3 x FLINK_MIN_ROWS`` rows (``--tuples`` sizes ours and Bytewax's).

Peers are an optional extra (``pip install '.[peers]'``); a missing one is reported as
such, never an error. Each rate is printed with our ratio to it. Reported, never asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

__all__ = ["PEERS", "run_peers_bench"]

PEERS = ("ours", "bytewax", "flink")
CHILD_TIMEOUT = 600.0
KEYS = 16


def _ours(tuples: int) -> dict[str, Any]:
    from node.procs.heap import tune_gc
    from ops_scripts.bench.core import chain_loop, make_frames

    frames = make_frames(tuples, 100)
    tune_gc()  # as the node processes run (DESIGN.md 7)
    start = time.perf_counter()
    n = chain_loop(frames)
    return {"tuples": n, "seconds": time.perf_counter() - start}


def _items(tuples: int) -> list[tuple[int, int, float, int]]:
    """(key, value, price, time us) of ``dpc bench core``'s tuples, merged as it merges them."""
    from ops_scripts.bench.core import make_frames
    from protocol.codec import FrameDecoder
    from protocol.messages import Batch
    from protocol.tuples import Kind

    out: list[tuple[int, int, float, int]] = []
    decoder = FrameDecoder()
    for f in make_frames(tuples, 100):
        for msg in decoder.feed(f):
            if not isinstance(msg, Batch):  # make_frames makes Batches only: a bug of ours
                raise TypeError(f"dpc bench peers: expected a Batch frame, got {type(msg).__name__}")
            out.extend((t[4][0], t[4][1], t[4][2], t[2]) for t in msg.tuples if t[0] is Kind.STABLE)
    return out


def _bytewax(tuples: int) -> dict[str, Any]:
    from datetime import UTC, datetime, timedelta

    import bytewax.operators as op
    import bytewax.operators.windowing as win
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    epoch = datetime(2026, 1, 1, tzinfo=UTC)
    items = [(k, v, p, epoch + timedelta(microseconds=t)) for k, v, p, t in _items(tuples)]
    flow = Dataflow("peers")
    inp = op.input("in", flow, TestingSource(items, batch_size=1000))
    kept = op.filter("value", inp, lambda x: x[1] >= 10)
    keyed = op.key_on("key", kept, lambda x: str(x[0]))
    clock = win.EventClock(lambda x: x[3], wait_for_system_duration=timedelta(0))
    windower = win.TumblingWindower(length=timedelta(seconds=1), align_to=epoch)

    def fold(acc: tuple[int, float, float], x: Any) -> tuple[int, float, float]:
        return acc[0] + 1, acc[1] + x[2], max(acc[2], x[2])

    def merge(a: tuple[int, float, float], b: tuple[int, float, float]) -> tuple[int, float, float]:
        return a[0] + b[0], a[1] + b[1], max(a[2], b[2])

    agg = win.fold_window("agg", keyed, clock, windower, lambda: (0, 0.0, float("-inf")),
                          fold, merge)
    results: list[Any] = []
    op.output("out", getattr(agg, "down", agg), TestingSink(results))
    start = time.perf_counter()
    run_main(flow)
    seconds = time.perf_counter() - start
    if not results:
        raise RuntimeError("the Bytewax dataflow produced no window")
    return {"tuples": len(items), "seconds": seconds, "windows": len(results)}


def _flink_once(rows_per_stream: int) -> float:
    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    env.get_config().set("parallelism.default", "1")
    for s in ("s1", "s2", "s3"):
        env.execute_sql(f"""
            CREATE TABLE {s} (
              k INT, v INT, price DOUBLE, seq BIGINT,
              ts AS TO_TIMESTAMP_LTZ(seq, 3),
              WATERMARK FOR ts AS ts
            ) WITH (
              'connector' = 'datagen', 'rows-per-second' = '1000000000',
              'number-of-rows' = '{rows_per_stream}',
              'fields.k.min' = '0', 'fields.k.max' = '{KEYS - 1}',
              'fields.v.min' = '0', 'fields.v.max' = '99',
              'fields.price.min' = '0', 'fields.price.max' = '100',
              'fields.seq.kind' = 'sequence', 'fields.seq.start' = '1',
              'fields.seq.end' = '{rows_per_stream}'
            )""")
    env.execute_sql("CREATE TEMPORARY VIEW merged AS "
                    "SELECT * FROM s1 UNION ALL SELECT * FROM s2 UNION ALL SELECT * FROM s3")
    env.execute_sql("CREATE TABLE sink (k INT, ws TIMESTAMP(3), n BIGINT, total DOUBLE, "
                    "high DOUBLE) WITH ('connector' = 'blackhole')")
    start = time.perf_counter()
    env.execute_sql("""
        INSERT INTO sink
        SELECT k, window_start, COUNT(*), SUM(price), MAX(price)
        FROM TABLE(TUMBLE(TABLE merged, DESCRIPTOR(ts), INTERVAL '1' SECOND))
        WHERE v >= 10
        GROUP BY k, window_start, window_end""").wait()
    return time.perf_counter() - start


#: Rows per stream of Flink's big run at least: at millions of rows/s, fewer would leave
#: the difference of the two runs inside the noise of a job's start-up (about a second).
FLINK_MIN_ROWS = 5_000_000


def _flink(tuples: int) -> dict[str, Any]:
    small = max(tuples // 30, 1000)  # per stream
    big = max(tuples // 3, FLINK_MIN_ROWS, 2 * small)
    _flink_once(small)  # warm-up: the first job in a JVM also loads and compiles classes
    t_small, t_big = _flink_once(small), _flink_once(big)
    if t_big - t_small < 0.2 * t_big:
        raise SystemExit(f"Flink's big run ({3 * big:,} rows, {t_big:.2f} s) took not clearly "
                         f"longer than its small one ({3 * small:,} rows, {t_small:.2f} s): "
                         "start-up noise, no rate")
    return {"tuples": 3 * (big - small), "seconds": t_big - t_small, "start_seconds": t_small}


CHILDREN = {"ours": _ours, "bytewax": _bytewax, "flink": _flink}
INSTALL = {"bytewax": "bytewax", "flink": "pyflink"}


def _child(peer: str, tuples: int) -> None:
    """In the child process: run ``peer`` and print its figures as one JSON line."""
    module = INSTALL.get(peer)
    if module is not None:
        try:
            __import__(module)
        except ImportError:
            print(json.dumps({"missing": True}))
            return
    print(json.dumps(CHILDREN[peer](tuples)))


def _run(peer: str, tuples: int) -> dict[str, Any]:
    code = f"from ops_scripts.bench.peers import _child; _child({peer!r}, {tuples})"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=CHILD_TIMEOUT, check=False, start_new_session=True)
    last = r.stdout.strip().splitlines()[-1:] if r.stdout.strip() else []
    if r.returncode != 0 or not last:
        tail = "\n      ".join((r.stderr or r.stdout).strip().splitlines()[-8:])
        return {"error": f"exit {r.returncode}:\n      {tail}"}
    figures: dict[str, Any] = json.loads(last[0])
    return figures


def run_peers_bench(tuples: int = 600_000) -> int:
    """Print each engine's rate and our ratio to it: 0 when ours was measured, 1 when our
    own run failed, 2 for nonsense arguments. A peer that is missing or fails is reported."""
    if tuples < 3_000:
        print("dpc bench peers: need --tuples >= 3000")
        return 2
    print(f"dpc bench peers: the core query (3 streams merged, value >= 10, 1 s tumbling window "
          f"per key: count, sum, max) over {tuples:,} tuples, each engine on one core in its own "
          "process", flush=True)
    rates: dict[str, float] = {}
    for peer in PEERS:
        print(f"  {peer} ...", flush=True)
        fig = _run(peer, tuples)
        if fig.get("missing"):
            print(f"  {peer:<8} not installed (pip install '.[peers]')")
        elif "error" in fig:
            if peer == "ours":
                print(f"dpc bench peers: FAILED: our own run: {fig['error']}", file=sys.stderr)
                return 1
            print(f"  {peer:<8} failed: {fig['error']}")
        else:
            rates[peer] = fig["tuples"] / fig["seconds"]
            extra = (f" (after a {fig['start_seconds']:.1f} s start, not counted)"
                     if "start_seconds" in fig else "")
            print(f"  {peer:<8} {rates[peer]:>12,.0f} tuples/s{extra}", flush=True)
    ours = rates["ours"]
    print()
    for peer, rate in rates.items():
        if peer != "ours":
            print(f"  ours / {peer:<8} = {ours / rate:.2f}")
    return 0
