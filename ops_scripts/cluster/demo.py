"""``dpc demo``: a replicated cluster run and checked, then DPC through a failure.

``dpc demo`` (:func:`run_demo`, what ``make demo`` runs) launches examples/basic.toml as real
processes, cuts a source off from both replicas for longer than alpha*X, heals, drains and
runs ``dpc check``: live states, tentative counts, reconciliations, and the verdicts.

``dpc demo --simulated-only`` (:func:`run_simulated_demo`) is the same story on one node in
one process with a virtual clock, described below.

Three synthetic sources feed the query ``SUnion -> filter -> 1 s windowed aggregate ->
SOutput``. Source s3 is cut off for longer than alpha*X, then heals. The run shows the
node going STABLE -> UP_FAILURE (tentative results after at most alpha*X) -> STABILIZATION
(UNDO of the tentative suffix, corrected stable results, REC_DONE) -> STABLE, then reports
availability (Delay_new against X) and consistency (tentative tuples; the client's stream
with UNDOs applied against a failure-free run).

This is the pure core driven by a minimal in-process stand-in for a node's consistency
manager (checkpoint while STABLE, reconcile on REC_REQUEST): deterministic and quick, it
shows the operators' side of the protocol without the processes.
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from operators import QueryNetwork
from operators.errors import SpecError
from operators.soutput import SOutput
from operators.sunion import SUnion
from ops_scripts.check.availability import apply_undos, delay_new
from ops_scripts.examples import EXAMPLES
from protocol.tuples import Kind, Tuple, boundary, make_tuple

__all__ = ["DemoRun", "apply_undos", "run_demo", "run_simulated_demo", "simulate"]

SECOND = 1_000_000
X = 3 * SECOND
ALPHA = 0.9
BUCKET = 100_000  # SUnion bucket = source boundary interval: 100 ms (NUMBERS.md)
TICK = 10_000  # the virtual clock advances 10 ms per step
CHECKPOINT_EVERY = 200_000  # 200 ms, only in STABLE (NUMBERS.md)
RATE = 100  # tuples per second per source
DURATION = 20 * SECOND
CUT = (4 * SECOND, 10 * SECOND)  # s3 unreachable for 6 s > alpha*X = 2.7 s
STREAMS = ("s1", "s2", "s3")


def demo_spec(method: str) -> dict[str, Any]:
    return {
        "inputs": {s: ["sensor", "reading"] for s in STREAMS},
        "operators": [
            {"name": "merge", "type": "sunion", "inputs": list(STREAMS), "bucket": BUCKET,
             "wait": int(ALPHA * X), "mode": "process", "recovery": method},
            {"name": "valid", "type": "filter", "inputs": ["merge"], "where": "reading >= 0"},
            {"name": "per_sensor", "type": "aggregate", "inputs": ["valid"], "window": SECOND,
             "group_by": ["sensor"],
             "aggregates": [{"fn": "count", "as": "n"}, {"fn": "avg", "attr": "reading", "as": "mean"},
                            {"fn": "max", "attr": "reading", "as": "peak"}]},
            {"name": "out", "type": "soutput", "inputs": ["per_sensor"]},
        ],
        "outputs": ["out"],
    }


def source_tuples(seed: int) -> dict[str, list[Tuple]]:
    """Each source's whole log: tuples (tmax = time) and a BOUNDARY every bucket."""
    rng = random.Random(seed)
    logs: dict[str, list[Tuple]] = {}
    step = SECOND // RATE
    for k, s in enumerate(STREAMS):
        log: list[Tuple] = []
        for ident, t in enumerate(range(step // (k + 2), DURATION, step), start=1):
            if t % BUCKET < step and t >= BUCKET:
                log.append(boundary(t - t % BUCKET))
            values = (f"sensor-{rng.randrange(4)}", rng.randrange(-5, 100))
            log.append(make_tuple(Kind.STABLE, ident, t, t, values))
        log.append(boundary(DURATION + BUCKET))
        logs[s] = log
    return logs


@dataclass
class DemoRun:
    """What the client received, with arrival times, and the node's state timeline."""

    received: list[tuple[int, Tuple]] = field(default_factory=list)
    timeline: list[tuple[int, str]] = field(default_factory=list)


def simulate(seed: int, method: str, cut: tuple[int, int] | None) -> DemoRun:
    net = QueryNetwork(demo_spec(method))
    merge = net.operator("merge")
    out_op = net.operator("out")
    if not isinstance(merge, SUnion) or not isinstance(out_op, SOutput):
        raise SpecError(f"demo spec: operators 'merge' and 'out' must be an SUnion and an "
                        f"SOutput, found {type(merge).__name__} and {type(out_op).__name__}")
    logs = source_tuples(seed)
    sent = dict.fromkeys(STREAMS, 0)
    run = DemoRun()
    state = "STABLE"
    checkpoint = net.snapshot()
    last_checkpoint = 0
    run.timeline.append((0, "STABLE"))

    def deliver(now: int, result: Any) -> None:
        nonlocal state
        run.received.extend((now, t) for t in result.outputs["out"])
        for _op, sig in result.signals:
            if sig.kind is Kind.UP_FAILURE and state == "STABLE":
                state = "UP_FAILURE"
                run.timeline.append((now, "UP_FAILURE: alpha*X expired, releasing tentative results"))
            elif sig.kind is Kind.REC_REQUEST:
                reconcile(now)

    def reconcile(now: int) -> None:
        nonlocal state, checkpoint, last_checkpoint
        state = "STABILIZATION"
        run.timeline.append((now, f"STABILIZATION: every input corrected, reconciling by {method}/redo"))
        if method == "checkpoint":
            deliver(now, net.rewind(checkpoint, now))
        else:
            deliver(now, net.push(STREAMS[0], [make_tuple(Kind.UNDO_START, 0, now, now, ())], now))
        # In process the replay is synchronous: the node has caught up.
        deliver(now, net.inject("out", out_op.end_reconciliation(now), now))
        state = "UP_FAILURE" if merge.in_failure else "STABLE"
        run.timeline.append((now, state))
        checkpoint, last_checkpoint = net.snapshot(), now
        merge.truncate()

    for now in range(TICK, DURATION + 2 * SECOND, TICK):
        healed = cut is None or not (cut[0] <= now < cut[1])
        if cut is not None and now == cut[0]:
            run.timeline.append((now, "s3 cut off from the node (its source keeps logging)"))
        if cut is not None and now == cut[1]:
            run.timeline.append((now, "s3 reconnects: its source replays what the node missed"))
        for s in STREAMS:
            if s == "s3" and not healed:
                continue
            log, i = logs[s], sent[s]
            j = i
            while j < len(log) and log[j].time < now:
                j += 1
            if j > i:
                sent[s] = j
                deliver(now, net.push(s, log[i:j], now))
        deadline = net.next_deadline()
        if deadline is not None and deadline <= now:
            deliver(now, net.on_timer(now))
        if state == "STABLE" and now - last_checkpoint >= CHECKPOINT_EVERY:
            checkpoint, last_checkpoint = net.snapshot(), now
            merge.truncate()  # buckets released before the checkpoint are never replayed
    return run




def run_demo(seed: int = 7, method: str = "checkpoint", cluster_seconds: float = 3.0,
             failure_seconds: float = 5.0) -> int:
    """``make demo``: examples/basic.toml as real processes (3 sources, 2 replicas, a
    client), STABLE for ``cluster_seconds``; then s3 is cut off from both replicas for
    ``failure_seconds`` (longer than alpha*X = 2.7 s: tentative results), healed (both
    replicas reconcile, one after the other), drained and judged by ``dpc check``."""
    from node.config.load import load_config
    from node.faults.ops import Cut, Heal
    from node.procs.rundir import RunDir
    from ops_scripts.check.compose import run_check
    from ops_scripts.cluster.launch import progress, start_cluster, stop_cluster
    from ops_scripts.cluster.status import fetch_status
    from ops_scripts.errors import ProcessError
    from ops_scripts.harness.fault import send_fault

    rd = RunDir(Path("runs") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}").ensure()
    text = (EXAMPLES / "basic.toml").read_text()
    config_path = rd.path / "config.toml"
    config_path.write_text(text.replace('reconciliation = "checkpoint"', f'reconciliation = "{method}"'))
    config = load_config(config_path)
    replicas = [r.name for r in config.nodes["n1"].replicas]
    print(f"dpc demo: examples/basic.toml as real processes, reconciliation = {method}/redo, "
          f"run directory {rd.path}\n")
    try:
        procs = start_cluster(config, rd)
    except ProcessError as e:  # it printed why and stopped what it had started
        print(f"dpc demo: {e}", file=sys.stderr)
        return 1
    t0 = time.monotonic()

    def show(seconds: float, until: Any = None) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end and not (until is not None and until()):
            time.sleep(0.5)  # the pace of the live lines
            progress(config, rd, time.monotonic() - t0)

    def all_stable() -> bool:
        return all((st := fetch_status(config, r)) is not None and st["state"] == "STABLE"
                   for r in replicas)

    try:
        show(cluster_seconds)
        print(f"\n  -- cutting s3 off from {' and '.join(replicas)} for {failure_seconds:.0f} s "
              "(s3 keeps producing; alpha*X = 2.7 s) --")
        for r in replicas:
            send_fault(config, r, Cut(("s3",)))
        show(failure_seconds)
        print("\n  -- healing: s3 replays what the replicas missed; they reconcile in turn --")
        for r in replicas:
            send_fault(config, r, Heal())
        show(2.0)
        show(15.0, until=all_stable)
        print()
        stopped = stop_cluster(procs, rd, drain=True)
    finally:
        stop_cluster(procs, rd, drain=False)
    print()
    checked = run_check(rd.path)
    return 0 if stopped and checked == 0 else 1


def run_simulated_demo(seed: int = 7, method: str = "checkpoint") -> int:
    print(f"dpc demo: one node, 3 sources x {RATE} tuples/s, X = {X / SECOND:.1f} s, "
          f"alpha*X = {ALPHA * X / SECOND:.1f} s, reconciliation = {method}/redo")
    print("  query: SUnion(s1, s2, s3) -> filter -> 1 s windows per sensor -> SOutput")
    print(f"  failure: s3 cut from {CUT[0] / SECOND:.0f} s to {CUT[1] / SECOND:.0f} s\n")
    reference = simulate(seed, method, cut=None)
    run = simulate(seed, method, cut=CUT)
    for at, what in run.timeline:
        print(f"  t={at / SECOND:6.2f} s  {what}")
    kinds = [t.kind for _, t in run.received]
    n_tent = kinds.count(Kind.TENTATIVE)
    n_undo = kinds.count(Kind.UNDO)
    worst = delay_new(run.received)
    final = apply_undos([t for _, t in run.received])
    expected = apply_undos([t for _, t in reference.received])
    consistent = final == expected and all(t.kind is Kind.STABLE for t in final)
    print()
    print(f"  {'client received':<38}{len(run.received):>8} tuples")
    print(f"  {'tentative tuples (N_tentative)':<38}{n_tent:>8}")
    print(f"  {'UNDOs':<38}{n_undo:>8}")
    print(f"  {'REC_DONEs':<38}{kinds.count(Kind.REC_DONE):>8}")
    print(f"  {'Delay_new (worst new result)':<38}{worst / SECOND:>8.2f} s   (X = {X / SECOND:.1f} s: "
          f"{'kept' if worst <= X else 'EXCEEDED'})")
    print(f"  {'failure-free run delay':<38}{delay_new(reference.received) / SECOND:>8.2f} s")
    print(f"  {'final stable results':<38}{len(final):>8}   (failure-free run: {len(expected)})")
    print(f"\n  eventual consistency: {'OK' if consistent else 'VIOLATED'} -- the client's stream with "
          "UNDOs applied " + ("equals" if consistent else "differs from") + " the failure-free run")
    return 0 if consistent and n_tent > 0 and worst <= X else 1
