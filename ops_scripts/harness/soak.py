"""``dpc soak CLUSTER.toml``: memory and buffers over a long run under load and faults.

Role: DESIGN.md section 6, property 7 (bounded resources), on real processes: does any
process's memory, or any output buffer, grow steadily while a cluster runs for a long time
under steady load, with a fault now and then? The rule is ``growth.py``'s (a pure function
with unit tests, stated there and printed with every report):

    each series (one process incarnation's RSS; one buffer at one replica incarnation: a
    restart starts a new series) ignores its first ``--warmup`` minutes (default min(5,
    M/3)), from the soak's start or from its restart; a least-squares line is fitted to
    the rest; it grows steadily when slope x judged span exceeds both an absolute floor
    (RSS: 16 MiB; a buffer: 2 s of its stream's rate, in tuples) and 10 % of its median;
    a soak passes when no series grows steadily (and one series was judged).

Steps:

1. **The run** is a ``dpc run`` of a scenario built here (``runner.play_scenario``, so the
   run directory, the free ports, the start-up record, the nemesis, the history and the
   drain are the runner's): the cluster with every source at ``--rate`` (default: the
   config's rates); no settle; one random fault every ``--fault-every`` seconds
   (:func:`soak_schedule`: ``schedule.random_faults`` of the kinds partition, kill of a
   replica (healed by a restart with ``--recover``), pause and delay, each at most
   min(3 X, half the interval) long, so healed before the next); then quiet until the
   ``--minutes`` are over, heal all, drain, digests, stop. The run is not checked here (a
   long run's reference evaluation is a job of its own): ``dpc check RUN_DIR`` judges it,
   since its history is a ``dpc run``'s.
2. **The samples** (:class:`Sampler`, a thread beside the runner): from the moment every
   process is ready, every ``--sample`` seconds for ``--minutes``: each process's RSS
   (``/proc/PID/status`` VmRSS of the pid in ``RUN_DIR/status/NAME.pid``, so a restarted
   incarnation is sampled under its new pid) and each replica's output buffers (its
   ``/status``: the publisher's ``buffered``, and the stable output count for the stream's
   rate), one JSON line per sample in ``RUN_DIR/soak.jsonl`` (format: ``growth.py``; the
   first line holds the soak's settings and ``t0_us``, the wall clock at ``t = 0``), and a
   progress line (elapsed, RSS per process, buffered tuples per replica). Sources have no
   control plane: their buffers show only in their RSS.
3. **The report** (``soakreport.py``): the rule, one row per series (growth per minute
   after the warm-up, the threshold, PASS / FAIL / short), a verdict for memory, one for
   buffers, the overall one; ``RUN_DIR/soak.svg`` plots every series with the warm-up
   and the faults.

Exit code: 0 iff the soak passes and the harness met no problem (a refused injection, a
process that died unasked, a drain that timed out: the runner's problems); 1 otherwise; 2
for a bad config or option; 130 on Ctrl-C (the samples so far are reported).
"""

from __future__ import annotations

import dataclasses
import json
import random
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from node.config.load import load_config
from node.config.model import ClusterConfig
from node.procs.rundir import RunDir
from ops_scripts.cluster.hosts.placement import HostsMode
from ops_scripts.cluster.processes import alive, read_rss, runs_node
from ops_scripts.cluster.status import fetch_status
from ops_scripts.errors import HostsError, ScenarioError, ScheduleError
from ops_scripts.harness.growth import MIB, default_warmup
from ops_scripts.harness.runner import RunOutcome, play_scenario
from ops_scripts.harness.scenario import Scenario
from ops_scripts.harness.schedule import Fault, parse_faults, random_faults
from ops_scripts.harness.soakreport import print_report

__all__ = ["SOAK_KINDS", "Sampler", "SoakOptions", "run_soak", "soak_schedule"]

#: The fault kinds a soak draws (the others shape links for good or stall reconciliation).
SOAK_KINDS = ("partition", "kill", "pause", "delay")
#: Seconds of quiet after the soak's minutes before the drain (the sampler is done by then).
QUIET_MARGIN = 2.0


@dataclass(frozen=True)
class SoakOptions:
    cluster: Path
    minutes: float = 30.0
    warmup: float | None = None  # minutes; None: default_warmup(minutes)
    fault_every: float = 60.0
    sample: float = 10.0
    rate: float | None = None
    seed: int = 1
    run_dir: Path | None = None
    hosts: HostsMode = HostsMode.LOCAL  # where the processes live (--hosts)

    @property
    def seconds(self) -> float:
        return self.minutes * 60

    @property
    def warmup_minutes(self) -> float:
        return default_warmup(self.minutes) if self.warmup is None else self.warmup

    def problems(self) -> list[str]:
        """What is wrong with these options (empty: nothing)."""
        bad = []
        if self.minutes <= 0:
            bad.append("--minutes must be > 0")
        if not 0 <= self.warmup_minutes < self.minutes:
            bad.append("--warmup must be >= 0 and shorter than --minutes")
        if self.fault_every < 1:
            bad.append("--fault-every must be >= 1 second")
        if self.sample <= 0:
            bad.append("--sample must be > 0 seconds")
        if self.rate is not None and self.rate <= 0:
            bad.append("--rate must be > 0 tuples/s")
        return bad


# ---------------------------------------------------------------- the schedule
def soak_schedule(config: ClusterConfig, rng: random.Random, *, seconds: float,
                  every: float) -> list[Fault]:
    """One random fault (:data:`SOAK_KINDS`) at each multiple of ``every`` seconds whose
    fault is healed within ``seconds``; each at most min(3 X, every / 2) long (X of the
    slowest node), so it heals before the next starts. Drawn from ``rng`` only."""
    x = max(n.settings.x for n in config.nodes.values()) / 1e6
    longest = min(3 * x, every / 2)
    faults: list[Fault] = []
    k = 1
    while k * every + longest <= seconds:
        (f,) = random_faults(config, rng, duration=0.1, count=1, kinds=SOAK_KINDS,
                             max_fault=longest)
        faults.append(dataclasses.replace(f, at=round(k * every, 3)))
        k += 1
    return parse_faults([f.table() for f in faults], config)


# ---------------------------------------------------------------- sampling
class Sampler(threading.Thread):
    """Samples the processes of a run (module docstring, step 2) until ``seconds`` after
    every process was ready, or :meth:`stop`. A failure of its own is kept in ``error``
    and raised by :meth:`finish` in the caller's thread: never lost."""

    def __init__(self, rd: RunDir, config: ClusterConfig, opts: SoakOptions,
                 out: TextIO) -> None:
        super().__init__(name="soak-sampler", daemon=True)
        self.rd, self.opts, self.out = rd, opts, out
        self.sources, self.clients = list(config.sources), list(config.clients)
        self.replicas = [r.name for n in config.nodes.values() for r in n.replicas]
        self.names = [*self.sources, *self.replicas, *self.clients]
        self.config: ClusterConfig | None = None  # the run's (free ports), once it exists
        self.samples = 0
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def finish(self) -> None:
        """Stop, wait for the thread, and raise what ended it, if anything did."""
        self.stop()
        self.join()
        if self.error is not None:
            raise self.error

    def run(self) -> None:
        try:
            self._sample_all()
        except BaseException as e:  # noqa: BLE001  raised again in the caller by finish()
            self.error = e

    def _sample_all(self) -> None:
        while not all(self.rd.is_ready(n) for n in self.names):
            if self._halt.wait(0.1):
                return
        self.config = load_config(self.rd.config)
        t0, t0_us = time.monotonic(), time.time_ns() // 1000
        o = self.opts
        header = {"cluster": str(o.cluster), "minutes": o.minutes,
                  "warmup_minutes": o.warmup_minutes, "fault_every": o.fault_every,
                  "sample": o.sample, "rate": o.rate, "seed": o.seed, "t0_us": t0_us}
        with open(self.rd.path / "soak.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps({"soak": header}) + "\n")
            k = 0
            while k * o.sample <= o.seconds + 1e-9:
                if self._halt.wait(max(0.0, t0 + k * o.sample - time.monotonic())):
                    return
                record = self.sample(round(time.monotonic() - t0, 3))
                f.write(json.dumps(record) + "\n")
                f.flush()
                self.samples += 1
                self.out.write(progress_line(record, o.seconds) + "\n")
                self.out.flush()
                k += 1

    def _pid(self, name: str) -> int | None:
        pid = self.rd.read_pid(name)
        if pid is None or not alive(pid) or not runs_node(pid, name, self.rd):
            return None
        return pid

    def sample(self, t: float) -> dict[str, Any]:
        """One sample record (``growth.py``'s format) at ``t`` seconds."""
        rss: dict[str, Any] = {}
        for name in self.names:
            pid = self._pid(name)
            size = None if pid is None else read_rss(pid)
            if pid is not None and size is not None:
                rss[name] = {"pid": pid, "bytes": size}
        heap: dict[str, Any] = {}
        buffers: dict[str, Any] = {}
        for name in self.replicas:
            pid = self._pid(name)
            st = None if pid is None or self.config is None else fetch_status(
                self.config, name, timeout=min(1.0, self.opts.sample / 2))
            if pid is None or st is None:
                continue  # down, paused or busy: absent from this sample
            heap[name] = {"pid": pid, "blocks": st["gauges"]["heap_blocks"]}
            out = st["counters"]["tuples_out"]
            buffers[name] = {"pid": pid, "streams": {
                s: {"buffered": o["buffered"], "out": out.get(s, 0)}
                for s, o in st["outputs"].items()}}
        return {"t": t, "rss": rss, "heap": heap, "buffers": buffers}


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def progress_line(record: dict[str, Any], total: float) -> str:
    """``  soak 1:20/30:00  RSS MiB s1 61 ... (total 445)  |  buffered n1a 12 n1b 3400``"""
    rss = record["rss"]
    mem = " ".join(f"{n} {r['bytes'] / MIB:.0f}" for n, r in rss.items())
    total_mib = sum(r["bytes"] for r in rss.values()) / MIB
    buffered = " ".join(f"{n} {sum(s['buffered'] for s in b['streams'].values())}"
                        for n, b in record["buffers"].items())
    return (f"  soak {_clock(record['t'])}/{_clock(total)}  RSS MiB {mem} (total "
            f"{total_mib:.0f})  |  buffered {buffered or '-'}")


# ---------------------------------------------------------------- the command
def soak_scenario(opts: SoakOptions) -> Scenario:
    """The scenario a soak plays (module docstring, step 1); :class:`ScenarioError` for a
    bad cluster."""
    base = Scenario.of_cluster(opts.cluster, name="soak", settle=0.0,
                               source_rate=opts.rate, seed=opts.seed)
    try:
        faults = soak_schedule(base.config(), random.Random(opts.seed), seconds=opts.seconds,
                               every=opts.fault_every)
    except ScheduleError as e:
        raise ScenarioError(f"{opts.cluster}: {e}") from None
    length = max((f.heal_at for f in faults), default=0.0)
    return dataclasses.replace(base, faults=tuple(faults),
                               quiet=round(opts.seconds - length + QUIET_MARGIN, 3))


def run_soak(opts: SoakOptions, out: TextIO | None = None) -> int:
    """``dpc soak``: the exit code of the module docstring."""
    out = sys.stdout if out is None else out  # read at call time: capture may replace it
    if bad := opts.problems():
        print(f"dpc soak: error: {'; '.join(bad)}", file=sys.stderr)
        return 2
    try:
        scenario = soak_scenario(opts)
    except ScenarioError as e:
        print(f"dpc soak: error: {e}", file=sys.stderr)
        return 2
    config = scenario.config()
    run_dir = opts.run_dir or Path("runs") / f"soak-{config.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    rd = RunDir(run_dir)
    rates = sorted({s.rate for s in config.sources.values()})
    print(f"dpc soak: cluster {config.name!r} for {opts.minutes:g} min (warm-up "
          f"{opts.warmup_minutes:.3g} min), sources at {', '.join(f'{r:g}' for r in rates)} "
          f"tuples/s, {len(scenario.faults)} faults (one every {opts.fault_every:g} s, seed "
          f"{opts.seed}), a sample every {opts.sample:g} s; run dir {rd.path}",
          file=out, flush=True)
    sampler = Sampler(rd, config, opts, out)
    sampler.start()
    try:
        outcome = play_scenario(scenario, rd.path, out, check=False, hosts=opts.hosts)
    except (ScenarioError, HostsError) as e:  # a run dir that is not empty; no namespaces
        print(f"dpc soak: error: {e}", file=sys.stderr)
        return 2
    finally:
        sampler.finish()
    return _verdict(rd, opts, outcome, sampler.samples, out)


def _verdict(rd: RunDir, opts: SoakOptions, outcome: RunOutcome, samples: int,
             out: TextIO) -> int:
    if samples == 0:
        print(f"dpc soak: FAIL: no sample taken (the cluster did not start?); run dir "
              f"{rd.path}", file=out)
        return 130 if outcome.code == 130 else 1
    passed = print_report(rd, opts.warmup_minutes * 60, out, faults_injected=outcome.injected)
    for p in outcome.problems:
        print(f"dpc soak: harness problem: {p}", file=out)
    if outcome.code == 130:
        print(f"dpc soak: interrupted; run dir {rd.path}", file=out)
        return 130
    ok = passed and not outcome.problems
    print(f"dpc soak: {'PASS' if ok else 'FAIL'}; plot {rd.path / 'soak.svg'}; the run's "
          f"history and logs: dpc check {rd.path}", file=out)
    return 0 if ok else 1
