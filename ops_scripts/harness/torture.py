"""``dpc torture --seed S --runs N``: random fault schedules on real processes, each checked.

Role: Jepsen-style randomized testing of the whole runtime. Run ``i`` draws its schedule
from ``random.Random(S + i)`` only (:func:`torture_schedule`), writes it as a
self-contained scenario (``RUN_DIR/seed-<s>/scenario.toml``, replayable with ``dpc run``),
plays it with the runner (``runner.play_scenario``) and reports the checker's verdict and
figures. Defaults: ``examples/basic.toml`` with X = 1 s, alpha = 0.7 and every source at
300 tuples/s; 4 random faults starting within 8 s (a run takes 20-30 s).

:func:`torture_schedule` adds to ``schedule.random_faults`` what a uniform draw rarely
gives, each with its own probability:

* **a fault during STABILIZATION**: a source cut from a node's replicas for 1.5-2.5 X
  (longer than alpha*X: tentative results, then a reconciliation); a stall of one of those
  replicas from just before the heal (its replay holds mid-way: the run then uses one
  bucket per replay step); and a new source cut on the same node while the stall lasts;
* **kills of both replicas of a node in turn**, never at once: the second kill starts
  3 s after the first one's restart, and the runner waits, if need be, until the first
  replica has rejoined (``Nemesis.blocked``).

Invariants: a run's schedule depends only on its seed and the options (cluster, faults,
duration); the exit code is 0 iff every run was valid (2: a bad cluster or option). On a
failure the seed and the commands that replay it are printed.
"""

from __future__ import annotations

import dataclasses
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from node.config.model import ClusterConfig
from ops_scripts.errors import ScenarioError, ScheduleError
from ops_scripts.examples import EXAMPLES
from ops_scripts.harness.runner import RunOutcome, describe_delay, describe_figures, play_scenario
from ops_scripts.harness.scenario import Scenario, load_scenario
from ops_scripts.harness.schedule import Fault, parse_faults, random_faults

__all__ = ["DEFAULT_CLUSTER", "TortureOptions", "run_torture", "torture_schedule"]

DEFAULT_CLUSTER = EXAMPLES / "basic.toml"
SETTINGS = {"x": 1.0, "alpha": 0.7}
SOURCE_RATE = 300.0
SETTLE, QUIET = 1.5, 3.0
P_STABILIZATION = 0.5  # probability of a fault during STABILIZATION in a run
P_KILLS_IN_TURN = 0.35  # probability of kills of both replicas of a node in turn
RECOVERY_GAP = 3.0  # seconds between a restart and the partner's kill


@dataclasses.dataclass(frozen=True)
class TortureOptions:
    seed: int = 1
    runs: int = 1
    cluster: Path = DEFAULT_CLUSTER
    run_dir: Path | None = None
    faults: int = 4
    duration: float = 8.0


def _stabilization(config: ClusterConfig, rng: random.Random, duration: float,
                   ) -> list[dict[str, Any]]:
    """A long source cut, a stall across its heal, a new fault during the stall."""
    fed = [(n, s) for n in config.nodes.values() for s in n.inputs if s in config.sources
           if len(n.replicas) >= 2]
    if not fed:
        return []
    node, source = rng.choice(fed)
    x = node.settings.x / 1e6
    replicas = [r.name for r in node.replicas]
    long = round(rng.uniform(1.5, 2.5) * x, 3)
    at = round(rng.uniform(0.0, max(duration - long, 0.1)), 3)
    stalled = rng.choice(replicas)
    second = rng.choice([s for s in node.inputs if s in config.sources])
    return [
        {"at": at, "for": long, "fault": "partition", "shape": "source", "source": source,
         "replicas": replicas, "cut": rng.choice(("blackhole", "reset"))},
        {"at": round(at + long - 0.3, 3), "for": round(0.3 + 1.5 * x, 3), "fault": "stall",
         "process": stalled},
        {"at": round(at + long + 0.3, 3), "for": round(rng.uniform(0.5, 1.5) * x, 3),
         "fault": "partition", "shape": "source", "source": second,
         "replicas": rng.choice([[stalled], replicas]), "cut": "blackhole"},
    ]


def _kills_in_turn(config: ClusterConfig, rng: random.Random, duration: float,
                   ) -> list[dict[str, Any]]:
    nodes = [n for n in config.nodes.values() if len(n.replicas) >= 2]
    if not nodes:
        return []
    first, second = rng.sample([r.name for r in rng.choice(nodes).replicas], 2)
    d1, d2 = round(rng.uniform(0.5, 1.5), 3), round(rng.uniform(0.5, 1.5), 3)
    at = round(rng.uniform(0.0, max(duration - d1 - RECOVERY_GAP, 0.1)), 3)
    return [{"at": at, "for": d1, "fault": "kill", "process": first},
            {"at": round(at + d1 + RECOVERY_GAP, 3), "for": d2, "fault": "kill",
             "process": second}]


def torture_schedule(config: ClusterConfig, rng: random.Random, *, duration: float,
                     count: int) -> tuple[list[Fault], bool]:
    """``count`` random faults (``schedule.random_faults``) and, each with its probability,
    the extensions of the module docstring; returns the schedule and whether it holds a
    stall across a reconciliation (the run then replays one bucket per step)."""
    faults = random_faults(config, rng, duration=duration, count=count)
    stalls = False
    extras = [("stabilization", P_STABILIZATION, _stabilization),
              ("kills", P_KILLS_IN_TURN, _kills_in_turn)]
    for what, p, draw in extras:
        if rng.random() >= p:
            continue
        try:
            faults = parse_faults([*(f.table() for f in faults), *draw(config, rng, duration)],
                                  config)
            stalls = stalls or what == "stabilization"
        except ScheduleError:
            continue  # clashes with a random fault (e.g. a kill at the same time): skip it
    return faults, stalls


def _replay(opts: TortureOptions, seed: int, run_dir: Path) -> list[str]:
    cmd = f"dpc torture --seed {seed} --runs 1"
    if opts.cluster != DEFAULT_CLUSTER:
        cmd += f" --cluster {opts.cluster}"
    if opts.faults != TortureOptions.faults:
        cmd += f" --faults {opts.faults}"
    if opts.duration != TortureOptions.duration:
        cmd += f" --duration {opts.duration:g}"
    return [cmd, f"dpc run {run_dir / 'scenario.toml'}"]


def run_torture(opts: TortureOptions, out: TextIO | None = None) -> int:
    """``dpc torture``: 0 iff every run is valid; 2 for a bad cluster or option."""
    out = sys.stdout if out is None else out  # read at call time: capture may replace it
    if opts.runs < 1 or opts.faults < 0 or opts.duration <= 0:
        print("dpc torture: error: --runs must be >= 1, --faults >= 0, --duration > 0",
              file=sys.stderr)
        return 2
    try:
        base = Scenario.of_cluster(opts.cluster, name="torture", settle=SETTLE, quiet=QUIET,
                                   source_rate=SOURCE_RATE, settings=SETTINGS)
        config = base.config()
    except ScenarioError as e:
        print(f"dpc torture: error: {e}", file=sys.stderr)
        return 2
    root = opts.run_dir or Path("runs") / f"torture-{time.strftime('%Y%m%d-%H%M%S')}"
    results: list[tuple[int, RunOutcome, int]] = []
    for i in range(opts.runs):
        seed = opts.seed + i
        faults, stalls = torture_schedule(config, random.Random(seed), duration=opts.duration,
                                          count=opts.faults)
        settings = {**base.settings, **({"replay_step": 1} if stalls else {})}
        scenario = dataclasses.replace(base, name=f"torture-{seed}", faults=tuple(faults),
                                       settings=settings, seed=seed)
        rd = root / f"seed-{seed}"
        rd.mkdir(parents=True, exist_ok=True)
        (rd / "scenario.toml").write_text(scenario.dump(inline=True))
        print(f"\n=== dpc torture: run {i + 1}/{opts.runs}, seed {seed}: {len(faults)} "
              f"faults ===", file=out, flush=True)
        started = time.monotonic()
        try:
            outcome = play_scenario(load_scenario(rd / "scenario.toml"), rd, out)
        except ScenarioError as e:  # a schedule we drew and cannot play: our bug
            print(f"dpc torture: error: seed {seed}: {e}", file=sys.stderr)
            return 2
        results.append((seed, outcome, len(faults)))
        print(f"=== run {i + 1}/{opts.runs} seed {seed}: {len(faults)} faults "
              f"({outcome.injected} injected), {outcome.verdict}"
              f"{'' if not outcome.problems else ', HARNESS PROBLEMS'}; "
              f"{describe_figures(outcome.figures)} ({time.monotonic() - started:.0f} s)",
              file=out, flush=True)
        if outcome.code == 130:
            break
    return _totals(opts, results, out)


def _totals(opts: TortureOptions, results: Sequence[tuple[int, RunOutcome, int]],
            out: TextIO) -> int:
    ok = [r for r in results if r[1].code == 0]
    figures = [r[1].figures for r in results]
    what = "checked" if all("tuples_checked" in f for f in figures) else "received"
    tuples = sum(f.get(f"tuples_{what}", 0) for f in figures)
    print(f"\ndpc torture: {len(results)} run(s), {len(ok)} valid; "
          f"{sum(r[1].injected for r in results)} faults injected; {tuples:,} tuples {what}",
          file=out)
    worst = max(results, key=lambda r: r[1].figures.get("worst_delay_us", -1), default=None)
    if worst is not None and (delay := describe_delay(worst[1].figures)) is not None:
        print(f"dpc torture: over all runs, {delay} (seed {worst[0]})", file=out)
    for seed, outcome, _ in results:
        if outcome.code != 0:
            why = "; ".join(outcome.problems) or f"checker: {outcome.verdict}"
            print(f"dpc torture: FAILED seed {seed} ({why}); replay with:", file=out)
            for cmd in _replay(opts, seed, outcome.run_dir):
                print(f"    {cmd}", file=out)
    return 0 if len(ok) == len(results) == opts.runs else 1
