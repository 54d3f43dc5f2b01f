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

This is a replica's own consistency manager and state machine (``node/replica/``) around the
query network, on a virtual clock (``node/virtual_time.py``), with the input links replaced
by a feeder: deterministic and quick, it shows the protocol without the processes. The node
has no partner replica, so it grants its reconciliation to itself.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node.net.memory import MemoryTransport
from node.replica import consistency as cm
from node.replica.manager import Manager
from node.virtual_time import VirtualTimeLoop
from operators import NetworkOutput, QueryNetwork
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
#: The real-process demo: seconds between the final heal and the drain (both replicas
#: reconcile meanwhile), and between two progress lines.
DEMO_QUIET = 6.0
DEMO_PROGRESS = 0.5


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
    """One node's run on a virtual clock: the replica's own consistency manager
    (``node/replica/manager.py``, the machine of ``node/replica/consistency.py``) drives the
    network; only the links are replaced by a feeder that pushes each source's tuples when
    they are due, waiting while the manager holds new input (a replay)."""
    # asyncio.Runner, as asyncio.run: Ctrl-C cancels the run and leaves no task pending.
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(_simulate(seed, method, cut))


_STATE_TEXT = {
    cm.State.UP_FAILURE: "UP_FAILURE: alpha*X expired, releasing tentative results",
    cm.State.STABILIZATION: "STABILIZATION: every input corrected, reconciling by {method}/redo",
    cm.State.STABLE: "STABLE",
}


async def _simulate(seed: int, method: str, cut: tuple[int, int] | None) -> DemoRun:
    loop = asyncio.get_running_loop()

    def now() -> int:
        return int(loop.time() * SECOND)

    net = QueryNetwork(demo_spec(method))
    run = DemoRun()
    run.timeline.append((0, "STABLE"))

    def emit(result: NetworkOutput, at: int) -> None:
        run.received.extend((at, t) for t in result.outputs.get("out", ()))
        if result.signals:
            manager.on_signals(result.signals, at)

    def on_state(state: cm.State, since: int) -> None:
        run.timeline.append((since, _STATE_TEXT[state].format(method=method)))

    quiet = logging.getLogger("dpc.demo.n1")  # the timeline tells the story
    quiet.propagate = False
    quiet.addHandler(logging.NullHandler())
    policy = cm.Policy(method=cm.Method(method), checkpoint_interval=CHECKPOINT_EVERY)
    manager = Manager("n1", "n1", policy, net, (), MemoryTransport(), emit, now, log=quiet,
                      on_state=on_state)
    timers = asyncio.ensure_future(manager.run())
    logs = source_tuples(seed)
    sent = dict.fromkeys(STREAMS, 0)
    for tick in range(TICK, DURATION + 2 * SECOND, TICK):
        await asyncio.sleep((tick - now()) / SECOND)
        await manager.input_open.wait()  # a replay owns the network meanwhile
        at = now()
        if cut is not None and tick == cut[0]:
            run.timeline.append((at, "s3 cut off from the node (its source keeps logging)"))
        if cut is not None and tick == cut[1]:
            run.timeline.append((at, "s3 reconnects: its source replays what the node missed"))
        for s in STREAMS:
            if s == "s3" and cut is not None and cut[0] <= tick < cut[1]:
                continue
            log, i = logs[s], sent[s]
            j = i
            while j < len(log) and log[j].time < at:
                j += 1
            if j > i:
                sent[s] = j
                emit(net.push(s, log[i:j], at), at)
        manager.wake()  # the network's next deadline may have moved
    timers.cancel()
    await asyncio.wait({timers})  # not `await` under suppress: Ctrl-C must not be swallowed
    return run


def run_demo(seed: int = 7, method: str = "checkpoint", cluster_seconds: float = 3.0,
             failure_seconds: float = 5.0) -> int:
    """``make demo``: examples/basic.toml as real processes (3 sources, 2 replicas, a
    client), STABLE for ``cluster_seconds``; then s3 is cut off from both replicas for
    ``failure_seconds`` (longer than alpha*X = 2.7 s: tentative results), healed (both
    replicas reconcile, one after the other), drained and judged by ``dpc check``.

    It is a scenario played by the harness of ``dpc run`` (``ops_scripts/harness/runner.py``),
    with a progress line every half second: the run's history then holds the start-up and
    the cut, so that ``dpc check`` judges the delays with both excused (a demo that
    recorded neither was judged on no history, and printed "Delay_new ... EXCEEDED" for
    its start-up in a run that passed)."""
    from node.config.load import load_config
    from ops_scripts.harness.runner import play_scenario
    from ops_scripts.harness.scenario import Scenario
    from ops_scripts.harness.schedule import parse_faults

    del seed  # the real cluster's sources have their own seeds (examples/basic.toml)
    rd = Path("runs") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    (cut,) = parse_faults([{"at": 0.0, "for": failure_seconds, "fault": "partition",
                            "shape": "source", "source": "s3"}],
                          load_config(EXAMPLES / "basic.toml"))
    scenario = Scenario.of_cluster(EXAMPLES / "basic.toml", name="demo", faults=[cut],
                                   settle=cluster_seconds, quiet=DEMO_QUIET,
                                   settings={"reconciliation": method})
    print(f"dpc demo: examples/basic.toml as real processes, reconciliation = {method}/redo: "
          f"s3 is cut off from both replicas for {failure_seconds:g} s (longer than alpha*X = "
          "2.7 s: results go tentative), then heals: both replicas reconcile, one after the "
          "other, and dpc check judges the run\n")
    outcome = play_scenario(scenario, rd, progress_every=DEMO_PROGRESS)
    return outcome.code


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
