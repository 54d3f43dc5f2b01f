"""``dpc run SCENARIO.toml``: play a scenario's fault schedule on a real cluster, then judge it.

Role: the real-process harness (Jepsen's split, STYLE.md 12): the nemesis injects and heals
(``nemesis.py``), the run writes a history (``history.py``), and ``dpc check`` judges the
logs. Steps, each printed as it happens:

1. the run directory (default ``runs/<name>-<time>``): ``config.toml`` (the scenario's
   effective cluster, every port a free one), ``scenario.toml`` (self-contained: ``dpc run
   RUN_DIR/scenario.toml`` replays it), ``history.jsonl``;
2. ``start``; the cluster starts (``launch.start_cluster``: pid files in ``status/``);
3. ``settle`` seconds of fault-free running; then schedule time 0;
4. the schedule on the wall clock: at each fault's time, ``fault`` is recorded and the
   fault injected; ``for`` seconds later (counted from when it was injected) it is healed
   and ``heal`` recorded. A kill or pause that would leave a node with no replica holding
   a state waits for one (``Nemesis.blocked``), at most ``BLOCKED_LIMIT`` seconds (the
   timeline's rules, ``timeline.py``, which ``dpc simulate`` plays too);
5. heal of everything (``heal_all``), ``quiet`` seconds, the drain (the sources end their
   streams; every client sees the end), each replica's ``digest`` once all are STABLE (or
   after ``STABLE_TIMEOUT``), every process stopped by pid, ``end``, under ``--hosts ssh``
   the hosts' files gathered (``dpc collect``), the replicas' state changes merged into
   the history;
6. ``dpc check`` on the run directory, and a summary of its figures.

A fault is recorded before it is injected and its heal after it is healed, so the
history's intervals cover every effect. Exit code: 0 if the checker found every property
valid and every injection was made; 2 for a bad scenario (or run directory); 1 otherwise
(a refused injection is recorded as a ``note``, printed, and fails the run, whatever the
checker says). Ctrl-C stops every process by pid (paused ones are continued first): 130.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from node.config.load import load_config
from node.config.model import ClusterConfig
from node.procs.rundir import RunDir
from ops_scripts.check.compose import run_check
from ops_scripts.cluster.hosts.placement import HostsMode
from ops_scripts.cluster.hosts.session import run_hosts
from ops_scripts.cluster.hosts.ssh import SshProcess, connect_hosts, gather
from ops_scripts.cluster.launch import (
    Launched,
    drain_streams,
    progress,
    start_cluster,
    stop_cluster,
    wait_until,
    watch,
)
from ops_scripts.cluster.processes import read_cpu_seconds
from ops_scripts.cluster.status import fetch_status
from ops_scripts.errors import FaultError, HostsError, InjectError, ProcessError, ScenarioError
from ops_scripts.harness.fault import post_action
from ops_scripts.harness.history import HistoryWriter, merge_states
from ops_scripts.harness.nemesis import Nemesis
from ops_scripts.harness.scenario import Scenario, load_scenario
from ops_scripts.harness.schedule import Fault
from ops_scripts.harness.timeline import BLOCKED_LIMIT, Timeline

__all__ = [
    "FIRST_RESULTS_TIMEOUT",
    "RunOutcome",
    "default_run_dir",
    "describe_delay",
    "describe_figures",
    "figures_of",
    "play_scenario",
    "run_scenario",
    "start_recorded",
]

STABLE_TIMEOUT = 30.0  # seconds to wait for every replica to be STABLE before the digests


def now_us() -> int:
    """The cluster's clock (wall clock, microseconds): tuple times and arrivals use it."""
    return time.time_ns() // 1000


@dataclass
class RunOutcome:
    """What a played scenario gave: the exit code and the figures to report."""

    code: int
    run_dir: Path
    injected: int = 0
    problems: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    verdict: str = "not checked"


def default_run_dir(name: str) -> Path:
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def figures_of(rd: RunDir) -> dict[str, Any]:
    """The checker's figures from ``check.json`` (``figures``), or what its availability
    report gives when the checker writes none: tuples received, worst Delay_new, bound."""
    try:
        report = json.loads(rd.check_json.read_text())
    except (OSError, ValueError):
        return {}
    figures = report.get("figures")
    if isinstance(figures, dict):
        return figures
    avail = [a for a in report.get("availability", []) if isinstance(a, dict)]
    if not avail:
        return {}
    return {"tuples_received": sum(a.get("received", 0) for a in avail),
            "worst_delay_us": max(a.get("delay_new_us", 0) for a in avail),
            "bound_us": max(a.get("bound_us", 0) for a in avail)}


def describe_delay(figures: dict[str, Any]) -> str | None:
    """``worst delay 0.83 s vs k*X = 1.00 s (kept)``, if the figures say."""
    if "worst_delay_us" not in figures or "bound_us" not in figures:
        return None
    worst, bound = figures["worst_delay_us"] / 1e6, figures["bound_us"] / 1e6
    return (f"worst delay {worst:.2f} s vs k*X = {bound:.2f} s "
            f"({'kept' if worst <= bound else 'EXCEEDED'})")


def describe_figures(figures: dict[str, Any]) -> str:
    """One line of a run's figures (tuples checked, or received, and the worst delay)."""
    parts = []
    if "tuples_checked" in figures:
        parts.append(f"{figures['tuples_checked']:,} tuples checked")
    elif "tuples_received" in figures:
        parts.append(f"{figures['tuples_received']:,} tuples received")
    if (delay := describe_delay(figures)) is not None:
        parts.append(delay)
    return ", ".join(parts) or "no figures"


#: How long start-up may take: until every client holds a first result.
FIRST_RESULTS_TIMEOUT = 30.0
#: Seconds a replica whose replay engine is ``spark`` may take to start its session (a JVM
#: and a Python worker: 20 s on 2 loaded cores) before the schedule starts without it.
SPARK_READY_TIMEOUT = 180.0


def start_recorded(config: ClusterConfig, rd: RunDir, history: HistoryWriter,
                   out: TextIO, procs: list[Launched], **start: Any) -> bool:
    """Start the cluster with its start-up in the history, as every harness must: ``start``
    (with ``start``'s fields) before the first process, ``ready`` once every client logged a
    tuple. The checker excuses what precedes ``ready`` (``ops_scripts/check/paths.py``): no
    run may judge start-up delay against k*X. False if a client received nothing within
    :data:`FIRST_RESULTS_TIMEOUT` (``ready`` is recorded then all the same)."""
    history.record("start", config=str(rd.config), **start)
    start_cluster(config, rd, out, procs)
    w = watch(rd)  # the run directory, or the clients' hosts (--hosts ssh)
    got = wait_until(lambda: all(w.client_rows(c) for c in config.clients),
                     FIRST_RESULTS_TIMEOUT)
    history.record("ready")
    return got


class _Player:
    """One run of one scenario (the steps of the module docstring)."""

    def __init__(self, scenario: Scenario, rd: RunDir, out: TextIO,
                 progress_every: float | None = None) -> None:
        self.scenario, self.rd, self.out = scenario, rd, out
        self.progress_every = progress_every
        self.last_progress = time.monotonic()
        self.procs: list[Launched] = []
        self.problems: list[str] = []
        self.injected = 0
        self.t0 = time.monotonic()
        self.history = HistoryWriter(rd.history, now_us)
        self.config: ClusterConfig = load_config(rd.config)
        self.nemesis = Nemesis(self.config, rd, self.procs, out)

    def say(self, text: str) -> None:
        print(f"  t={time.monotonic() - self.t0:5.1f}s  {text}", file=self.out, flush=True)

    def problem(self, text: str) -> None:
        self.problems.append(text)
        self.history.record("note", text=text)
        self.say(f"PROBLEM: {text}")

    def wait_until(self, deadline: float) -> None:
        """Sleep until ``deadline`` (monotonic), watching for processes that die unasked,
        with a progress line every ``progress_every`` seconds (when set)."""
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, self.progress_every or 0.5, 0.5))  # pacing, not a test wait
            every = self.progress_every
            if every is not None and time.monotonic() - self.last_progress >= every:
                self.last_progress = time.monotonic()
                progress(self.config, self.rd, self.last_progress - self.t0, self.out)
            dead = [p for p in self.procs if p.proc.poll() is not None]
            for p in dead:
                self.procs.remove(p)
                self.problem(f"{p.kind} {p.name} died unasked (exit {p.proc.poll()})")

    def run(self) -> None:
        s, rd = self.scenario, self.rd
        if not start_recorded(self.config, rd, self.history, self.out, self.procs,
                              name=s.name, seed=s.seed, scenario=str(s.path)):
            self.problem(f"a client received nothing {FIRST_RESULTS_TIMEOUT:g} s after the start")
        self.wait_for_spark()
        self.t0 = time.monotonic() + s.settle
        print(f"  settling {s.settle:g} s", file=self.out, flush=True)
        self.wait_until(self.t0)
        self.history.record("schedule")
        progress(self.config, rd, 0.0, self.out)
        self.play_schedule()
        self.say("heal all")
        self.problems += [f"heal all: {p}" for p in self.nemesis.heal_all()]
        self.history.record("heal_all")
        self.say(f"quiet for {s.quiet:g} s")
        self.wait_until(time.monotonic() + s.quiet)
        progress(self.config, rd, time.monotonic() - self.t0, self.out)
        if not drain_streams(self.procs, rd, out=self.out):
            self.problem("the drain timed out: a client did not see the end of its stream")
        self.digests()
        self.stop()

    def wait_for_spark(self) -> None:
        """A replica whose replay engine is ``spark`` starts its Spark session in the
        background when it starts; the schedule begins once every such session is up (a
        failure before would make the replay wait for it: seconds no liveness bound
        allows). ``auto`` replicas start theirs during a long failure: not waited for."""
        names = [r.name for n in self.config.nodes.values() for r in n.replicas
                 if (r.replay_engine or n.settings.replay_engine) == "spark"]
        if not names:
            return
        self.say(f"waiting for the Spark sessions of {', '.join(names)}")

        def session(r: str) -> str | None:
            st = fetch_status(self.config, r) or {}
            spark = st.get("consistency", {}).get("replay", {}).get("spark") or {}
            return spark.get("session")

        if not wait_until(lambda: all(session(r) == "ready" for r in names),
                          SPARK_READY_TIMEOUT):
            states = {r: session(r) for r in names}
            self.problem(f"Spark sessions not ready after {SPARK_READY_TIMEOUT:g} s: {states}")

    def play_schedule(self) -> None:
        timeline = Timeline(self.scenario.faults)
        waiting: set[int] = set()
        while timeline:
            at, fid, action = timeline.next()
            self.wait_until(self.t0 + at)
            fault = timeline.faults[fid]
            if action == "heal":
                self.heal(fid, fault)
                continue
            why = self.nemesis.blocked(fault)
            if why is None:
                self.inject(fid, fault)
                timeline.injected(fid, time.monotonic() - self.t0)
            elif timeline.wait(fid, time.monotonic() - self.t0):
                if fid not in waiting:
                    waiting.add(fid)
                    self.say(f"fault #{fid} waits: {why}")
            else:
                self.problem(f"fault #{fid} ({fault.describe()}) not injected: waited "
                             f"{BLOCKED_LIMIT:g} s, and still {why}")

    def inject(self, fid: int, fault: Fault) -> None:
        self.say(f"fault #{fid}: {fault.describe()}")
        self.history.fault(fid, fault, self.config, net=self.nemesis.net)
        try:
            self.nemesis.inject(fid, fault)
            self.injected += 1
        except InjectError as e:
            self.problem(f"refused: {e}")

    def heal(self, fid: int, fault: Fault) -> None:
        self.say(f"heal  #{fid}: {fault.describe().rsplit(' for ', 1)[0]}")
        try:
            self.nemesis.heal(fid)
        except InjectError as e:
            self.problem(f"refused: {e}")
        self.history.record("heal", id=fid)

    def digests(self) -> None:
        replicas = [r for r in self.nemesis.replicas if r not in self.nemesis.down]
        # STABLE and past the end of stream: a replica that did not feed the client may still
        # be closing the last windows when the client saw the end.
        if not wait_until(lambda: all((st := fetch_status(self.config, r) or {}).get("state") == "STABLE"
                                 and st.get("ended") for r in replicas), STABLE_TIMEOUT):
            states = {r: (fetch_status(self.config, r) or {}).get("state", "unreachable")
                      for r in replicas}
            self.history.record("note", text=f"not every replica STABLE before the digests: {states}")
            self.say(f"not every replica is STABLE after {STABLE_TIMEOUT:g} s: {states}")
        by_node: dict[str, set[str]] = {}
        for r in replicas:
            try:
                d = post_action(self.config, r, "digest", {})
            except FaultError as e:
                self.history.record("note", text=f"no digest of {r}: {e}")
                continue
            node = self.config.replica(r).node
            # CPU time from this machine's /proc: a process on another host (--hosts ssh)
            # has a pid of that host's, which would name someone else's here.
            pid = next((p.proc.pid for p in self.procs
                        if p.name == r and not isinstance(p.proc, SshProcess)), None)
            self.history.record("digest", process=r, node=node, state=d["state"],
                                hashes=d["state_hashes"],
                                cpu_s=None if pid is None else read_cpu_seconds(pid))
            by_node.setdefault(node, set()).add(json.dumps(d["state_hashes"], sort_keys=True))
        for node, hashes in by_node.items():
            self.say(f"digests of node {node}: {'equal' if len(hashes) == 1 else 'DIFFERENT'}")

    def stop(self) -> None:
        for p in self.procs:  # a stopped process cannot act on SIGTERM
            if p.proc.poll() is None:
                p.proc.send_signal(signal.SIGCONT)
        if self.procs and not stop_cluster(self.procs, self.rd, drain=False, out=self.out):
            self.history.record("note", text="a process did not stop cleanly (see above)")
        self.procs.clear()


def play_scenario(scenario: Scenario, run_dir: Path, out: TextIO | None = None, *,
                  check: bool = True, progress_every: float | None = None,
                  hosts: HostsMode = HostsMode.LOCAL) -> RunOutcome:
    """Play ``scenario`` in ``run_dir`` (created; new, or holding only a scenario.toml,
    which is replaced by the self-contained dump of ``scenario``) and check the run
    (``check=False``: leave that to ``dpc check RUN_DIR``, as ``dpc soak`` does: a long
    run's reference evaluation is a job of its own). ``hosts``: where the processes live
    (ops_scripts/cluster/hosts/; under ``netns`` the kernel makes the partitions)."""
    out = sys.stdout if out is None else out  # read at call time: capture may replace it
    rd = RunDir(run_dir)
    if rd.path.exists() and any(p.name != "scenario.toml" for p in rd.path.iterdir()):
        raise ScenarioError(f"run dir {rd.path} is not empty (a run is there already): "
                            "pick another --run-dir")
    rd.ensure()
    rd.config.write_text(scenario.effective_config_text("free"))
    (rd.path / "scenario.toml").write_text(scenario.dump(inline=True))
    n = len(scenario.faults)
    print(f"dpc run: scenario {scenario.name!r}: {n} fault(s) over "
          f"{round(scenario.schedule_length, 3):g} s, settle {scenario.settle:g} s, quiet "
          f"{scenario.quiet:g} s; run dir {rd.path}", file=out, flush=True)
    outcome = RunOutcome(0, rd.path)
    with run_hosts(rd, hosts, out) as placement:
        connect_hosts(placement, out)  # --hosts ssh: every host answers (hosts/ssh.py)
        player = _Player(scenario, rd, out, progress_every)
        try:
            player.run()
        except KeyboardInterrupt:
            print("  interrupted: stopping every process", file=out, flush=True)
            player.history.record("note", text="interrupted (Ctrl-C)")
            outcome.code = 130
        except ProcessError:  # start_cluster: a process did not start (it printed why, stopped all)
            player.procs.clear()
            player.problem("the cluster did not start")
            outcome.code = 1
        finally:
            player.stop()
            player.history.record("end")
            player.history.close()
            if not gather(rd, out):  # --hosts ssh: the hosts' files into the run directory
                player.problems.append("the hosts' files were not all gathered (see above)")
    outcome.injected, outcome.problems = player.injected, player.problems
    if outcome.code in (1, 130):
        return outcome
    merge_states(rd, player.config)
    if not check:
        outcome.code = 1 if player.problems else 0
        return outcome
    code = run_check(rd.path, out=out)
    outcome.figures = figures_of(rd)
    outcome.verdict = "valid" if code == 0 else "INVALID" if code == 1 else "unusable"
    outcome.code = 0 if code == 0 and not player.problems else 1
    return outcome


def run_scenario(path: Path, run_dir: Path | None = None, out: TextIO | None = None,
                 hosts: HostsMode = HostsMode.LOCAL) -> int:
    """``dpc run SCENARIO.toml [--run-dir DIR] [--hosts MODE]``: the exit code (module
    docstring)."""
    out = sys.stdout if out is None else out  # read at call time: capture may replace it
    try:
        scenario = load_scenario(path)
        outcome = play_scenario(scenario, run_dir or default_run_dir(scenario.name), out,
                                hosts=hosts)
    except (ScenarioError, HostsError) as e:
        print(f"dpc run: error: {e}", file=sys.stderr)
        return 2
    if outcome.code == 130:
        print(f"dpc run: interrupted; run dir {outcome.run_dir}", file=out)
        return 130
    print(f"\ndpc run: {scenario.name}: {outcome.injected} of {len(scenario.faults)} fault(s) "
          f"injected; checker: {outcome.verdict}; {describe_figures(outcome.figures)}",
          file=out)
    for p in outcome.problems:
        print(f"dpc run: FAILED: {p}", file=out)
    print(f"dpc run: {'PASS' if outcome.code == 0 else 'FAIL'}; run dir {outcome.run_dir}",
          file=out)
    return outcome.code
