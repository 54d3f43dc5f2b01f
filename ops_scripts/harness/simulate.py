"""``dpc simulate --seed S --runs N``: the whole cluster in one process, on virtual time.

Role: FoundationDB-style deterministic simulation. The same ``Source``, ``Replica`` and
``Client`` objects that run as processes run here as tasks of one event loop
(:class:`~node.virtual_time.VirtualTimeLoop`), connected by the in-memory transport
(``node/net/memory.py``), with the clock of :mod:`node.clock` set to the loop's virtual time.
Faults come from :func:`~ops_scripts.harness.schedule.random_faults` drawn from the run's seed and
are made as on real processes: cuts, shapes, heals and stalls are the operations
``rules.ActiveRules`` plans (node/faults/ops.py), handed to each replica as the very bodies
``dpc run`` sends to its ``POST /fault`` (``op.to_body()``, read back and applied by
``Replica.apply_fault``, the control plane's path); kills are a crash of the replica's tasks
followed by a restart with recovery from a partner (node/replica/recovery.py), or of a
source's, restarted on the same run directory (it resumes its ids and log).
The schedule is played by the rules ``dpc run`` follows (``timeline.py``: heals counted
from the injection, a kill that would leave a node with no replica holding a state waits).
Each run writes an ordinary run directory (logs, history) and is judged by the same
checker as a real run (``dpc check``).

Theory of operation. Nothing in a run depends on anything but the seed: every random choice
is drawn from ``random.Random(seed)`` (the schedule) or from the config's seeds (the
sources' values); the loop's clock moves only when every task is idle; the transport's
queues are FIFO. So a seed replays exactly, in this process or another one (the CLI pins
``PYTHONHASHSEED``, which orders sets of strings); :func:`simulate_one` returns a digest of
the client log and the history to prove it. A failing seed is run again with logging on
and its schedule printed as a scenario that ``dpc run`` plays on real processes.

Not simulated: pauses (SIGSTOP has no in-process equivalent that keeps connections open;
``dpc torture`` covers them), and clock skews (every process runs on the one virtual clock:
a schedule with a ``skew`` is refused, ``dpc run`` plays it on real processes). Kills in
the simulation cancel the replica's tasks, so its connections end cleanly, where a SIGKILL
lets the kernel reset them.

The test-only mutation switch (``DPC_TEST_MUTATION``, node/streams/mutation.py) is read once, by
:func:`simulate_many`, as ``dpc node`` reads it at its entry, and handed to every replica
and client of every run.

Invariants: a run that raises, deadlocks or does not drain is a failure with the reason,
never a pass; the process's clock and logging are restored after every run.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import logging
import random
import shutil
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from node.clock import now_us, use_clock
from node.config.model import ClusterConfig, ReplicaConfig
from node.errors import ActionError
from node.faults.ops import FaultOp, Heal
from node.flux.controller import Controller, Health, flux_replicas
from node.flux.follow import Fetch
from node.net.auth import authenticated
from node.net.memory import MemoryTransport
from node.procs.client import Client
from node.procs.entry import mutation_from_env
from node.procs.rundir import RunDir
from node.procs.runlog import iter_log
from node.procs.source import Source
from node.replica.runtime import Replica
from node.streams.mutation import Mutation
from node.virtual_time import VirtualTimeLoop
from ops_scripts.errors import ScheduleError
from ops_scripts.examples import EXAMPLES
from ops_scripts.harness import extras
from ops_scripts.harness.history import HistoryWriter, merge_states
from ops_scripts.harness.rules import ActiveRules
from ops_scripts.harness.schedule import (
    Fault,
    crashes_only,
    dump_faults,
    node_of,
    parse_faults,
    random_faults,
)
from ops_scripts.harness.timeline import BLOCKED_LIMIT, Timeline, blocked, recovers_alone
from protocol.tuples import Kind

__all__ = ["SIM_KINDS", "SimOptions", "SimResult", "simulate_many", "simulate_one",
           "simulation_schedule"]

#: The fault kinds the simulation draws (everything but pause, see the module docstring).
SIM_KINDS = ("partition", "kill", "delay", "bandwidth", "slow", "stall")
#: Virtual time 0 as tuple time: a fixed date, so that tuple times repeat run after run.
EPOCH_US = 1_700_000_000_000_000
DEFAULT_CLUSTER = EXAMPLES / "sim.toml"


@dataclass(frozen=True)
class SimOptions:
    """One run's shape: ``settle`` s fault-free, faults drawn within ``duration`` s, a final
    heal of everything, ``quiet`` s, then the drain (at most ``drain_timeout`` s)."""

    faults: int = 4
    duration: float = 6.0
    settle: float = 1.0
    quiet: float = 3.0
    drain_timeout: float = 30.0
    kinds: tuple[str, ...] = SIM_KINDS


@dataclass
class SimResult:
    seed: int
    ok: bool
    faults: list[Fault]
    figures: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)  # invalid / unknown verdicts, errors
    digest: str = ""  # of the client logs and the history: equal for equal seeds
    #: What the run exercised: fault kinds, shapes and cuts; faults that started while a
    #: replica was in STABILIZATION; tentative tuples and UNDOs at the clients.
    coverage: dict[str, int] = field(default_factory=dict)
    run_dir: Path | None = None
    real_seconds: float = 0.0


# ---------------------------------------------------------------- one simulated cluster
class _Cluster:
    """The processes of one run: started, crashed and restarted by name."""

    def __init__(self, config: ClusterConfig, rd: RunDir, tg: asyncio.TaskGroup,
                 mutation: Mutation | None) -> None:
        self.config, self.rd, self.tg = config, rd, tg
        self.mutation = mutation
        self.net = MemoryTransport(queue_size=256)
        self.sources: dict[str, Source] = {}
        self.replicas: dict[str, Replica] = {}
        self.clients: dict[str, Client] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.stops: dict[str, asyncio.Event] = {}
        self.rules = ActiveRules(config)  # the same model as on real processes (rules.py)
        #: The Flux controller (node/flux/controller.py), probing the replicas directly.
        self.controller: Controller | None = None
        self.flux_events: Fetch | None = None
        self.controller_task: asyncio.Task[None] | None = None
        if config.controller is not None:
            node = next(n for n in config.nodes.values() if n.settings.ha == "flux")
            self.controller = Controller(flux_replicas(config), self._probe,
                                         interval=node.settings.heartbeat_interval,
                                         misses=node.settings.heartbeat_misses)
            self.flux_events = self.controller.after

    async def _probe(self, name: str) -> Health | None:
        r = self.replicas.get(name)
        if r is None or self.tasks[name].done():  # (flux pairs: crash-only schedules)
            return None
        return Health(ready=not r.recovering, incarnation=r.started)

    def _run(self, name: str, component: Any) -> None:
        self.stops[name] = stop = asyncio.Event()
        self.tasks[name] = self.tg.create_task(component.run(stop), name=name)

    async def start(self) -> None:
        if self.controller is not None:  # not killed: the harness never draws it
            self.controller_task = self.tg.create_task(self.controller.run(), name="controller")
        for name in self.config.sources:
            self._start_source(name)
        await asyncio.sleep(0.01)  # sources serve before replicas subscribe
        for node in self.config.nodes.values():
            for r in node.replicas:
                self._start_replica(r.name, recover=False)
        await asyncio.sleep(0.01)
        for name in self.config.clients:
            self.clients[name] = c = Client(self.config, name, self.rd, authenticated(self.net.for_process(name), self.config, name),
                                            mutation=self.mutation)
            self._run(name, c)

    def _start_replica(self, name: str, *, recover: bool) -> None:
        r = Replica(self.config, name, self.rd, authenticated(self.net.for_process(name), self.config, name), recover=recover,
                    control=False, ask_state=self._asker(name), mutation=self.mutation,
                    flux_events=self.flux_events)
        self.replicas[name] = r
        self.rules.forget(name)  # a new incarnation holds no rule: it gets them all again
        self._run(name, r)

    def _asker(self, owner: str) -> Any:
        async def ask(partner: ReplicaConfig) -> dict[str, Any] | str:
            r = self.replicas.get(partner.name)
            if r is None or self.tasks[partner.name].done():
                return "unreachable (crashed)"
            try:
                me = self.replicas.get(owner)
                return await r.state_for_partner(
                    {"for": owner, "incarnation": 0 if me is None else me.started})
            except ActionError as e:
                return str(e)
        return ask

    async def kill(self, name: str) -> None:
        """A crash of replica or source ``name``: its tasks end where they are."""
        task = self.tasks[name]
        task.cancel()
        # wait, not `await task` under suppress(CancelledError): that also swallowed the
        # cancellation of the run itself (Ctrl-C) when it came during the kill.
        await asyncio.wait({task})
        if name in self.sources:
            self.sources.pop(name)  # its log holds what it published (flushed before)
        else:
            self.replicas.pop(name)

    def restart(self, name: str) -> None:
        """Start ``name`` again: a replica recovers from a partner's state, a source resumes
        its ids and log from the run directory (node/procs/source.py)."""
        self.rd.clear_ready(name)
        if name in self.config.sources:
            self._start_source(name)
        else:
            self._start_replica(name, recover=True)

    def _start_source(self, name: str) -> None:
        self.sources[name] = s = Source(self.config, name, self.rd,
                                        authenticated(self.net.for_process(name), self.config, name),
                                        flux_events=self.flux_events)
        self._run(name, s)

    def enforce(self) -> None:
        """Bring every live replica to the cuts, shapes and stalls of the faults in force,
        through the same requests ``dpc run`` sends to a replica's ``POST /fault``."""
        for name, ops in self.rules.plan(sorted(self.replicas)).items():
            for op in ops:
                self._send(name, op)
            self.rules.commit(name)

    def heal_all(self) -> None:
        self.rules.clear()  # the model forgets; each replica heals everything (as POST heal all)
        for name in self.replicas:
            self._send(name, Heal())

    def _send(self, name: str, op: FaultOp) -> None:
        """``op`` at replica ``name``, as ``POST /fault`` makes it: the body ``dpc run``
        sends, read back and applied by the replica (a refusal raises: the run fails)."""
        self.replicas[name].apply_fault(op.to_body())

    def drained(self) -> bool:
        """Every client saw the end of its stream and every replica released it."""
        if not all(c.ended for c in self.clients.values()):
            return False
        return all(r.ended for r in self.replicas.values())

    async def stop(self) -> None:
        if self.controller_task is not None:
            self.controller_task.cancel()
        for stop in self.stops.values():
            stop.set()
        if self.tasks:  # a task's error is the task group's to raise (as kill, above)
            await asyncio.wait(self.tasks.values())


async def _play(config: ClusterConfig, faults: Sequence[Fault], rd: RunDir, opts: SimOptions,
                history: HistoryWriter, mutation: Mutation | None) -> None:
    loop = asyncio.get_running_loop()
    async with asyncio.TaskGroup() as tg:
        cluster = _Cluster(config, rd, tg, mutation)
        await cluster.start()
        history.record("start", config=str(config.path), name="simulation")
        started = loop.time()
        while not all(c.received for c in cluster.clients.values()):
            if loop.time() - started > opts.drain_timeout:
                history.record("note", text="a client received nothing after the start")
                break
            await asyncio.sleep(0.01)  # virtual time: costs one loop turn
        history.record("ready")
        await asyncio.sleep(opts.settle)
        t0 = loop.time()
        timeline = Timeline(faults)
        nodes = node_of(config)
        alone = recovers_alone(config)
        down: dict[str, str] = {}

        def state_of(name: str) -> str | None:
            r = cluster.replicas.get(name)
            return None if r is None else r.state

        while timeline:
            at, i, what = timeline.next()
            await asyncio.sleep(max(0.0, t0 + at - loop.time()))
            f = faults[i]
            if what == "heal":
                history.record("heal", id=i)
                if f.kind == "kill":
                    down.pop(f.params["process"])
                    cluster.restart(f.params["process"])
                else:
                    cluster.rules.remove(i)
            elif (why := blocked(f, nodes, down, state_of, alone)) is not None:
                if not timeline.wait(i, loop.time() - t0):
                    history.record("note", text=f"fault #{i} ({f.describe()}) not injected: "
                                                f"waited {BLOCKED_LIMIT:g} s, and still {why}")
                continue
            else:
                history.fault(i, f, config)
                timeline.injected(i, loop.time() - t0)
                if f.kind == "kill":
                    down[f.params["process"]] = "killed"
                    await cluster.kill(f.params["process"])
                else:
                    cluster.rules.add(i, f)
            cluster.enforce()
        cluster.heal_all()
        history.record("heal_all")
        await asyncio.sleep(opts.quiet)
        for s in cluster.sources.values():
            s.end_stream()
        deadline = loop.time() + opts.drain_timeout
        while not cluster.drained():
            if loop.time() > deadline:
                history.record("note", text=f"not drained {opts.drain_timeout:g} s after the end "
                                            "of the sources' streams")
                break
            await asyncio.sleep(0.1)
        for name, r in sorted(cluster.replicas.items()):
            history.record("digest", process=name, node=r.node.name, state=r.state,
                           hashes=r.state_hashes())
        await cluster.stop()


def _leaves(e: BaseException) -> list[BaseException]:
    if isinstance(e, BaseExceptionGroup):
        return [leaf for sub in e.exceptions for leaf in _leaves(sub)]
    return [e]


@contextlib.contextmanager
def _virtual_process(rd: RunDir, verbose: bool) -> Iterator[asyncio.Runner]:
    """Install the virtual clock and quiet (or file) logging for one run; restore both.
    The run's loop is an :class:`asyncio.Runner`'s, as asyncio.run's is: Ctrl-C cancels the
    run's task and raises KeyboardInterrupt once it is done, and closing cancels and awaits
    what is left (a loop closed by hand under pending tasks printed their tracebacks)."""
    runner = asyncio.Runner(loop_factory=VirtualTimeLoop)
    loop = runner.get_loop()
    use_clock(lambda: EPOCH_US + int(loop.time() * 1_000_000))
    root = logging.getLogger()
    handler: logging.Handler | None = None
    if verbose:
        handler = logging.FileHandler(rd.process_log("simulation"))
        # Each line starts with the virtual seconds since the run began: a failing seed's
        # log read beside its history and its client's arrivals (µs from EPOCH_US).
        handler.setFormatter(logging.Formatter("%(vt)11.6f %(name)s %(levelname)s: %(message)s"))

        def stamp(record: logging.LogRecord) -> bool:
            record.vt = loop.time()
            return True

        handler.addFilter(stamp)
        root.addHandler(handler)
        old_level = root.level
        root.setLevel(logging.INFO)
    else:
        logging.disable(logging.CRITICAL)
    try:
        yield runner
    finally:
        runner.close()
        use_clock(None)
        if handler is not None:
            root.removeHandler(handler)
            handler.close()
            root.setLevel(old_level)
        else:
            logging.disable(logging.NOTSET)


#: Probability of a kill of one of three replicas across a failure of the others' input.
P_KILL_DURING_FAILURE = 0.3
P_KILLS_AT_ONCE = 0.5  # of every replica of a CEC node killed at once (CEC clusters only)
#: Of a failure of one replica after the rest (``extras.subset_failure``): what the masking
#: property judges (issue 46; other faults overlap too often for it to judge theirs).
P_SUBSET_FAILURE = 0.8


def simulation_schedule(config: ClusterConfig, rng: random.Random, opts: SimOptions,
                        ) -> list[Fault]:
    """A run's faults, drawn from ``rng`` only: ``opts.faults`` random ones of
    ``opts.kinds`` and, with kills among them and a node of three replicas, sometimes a kill
    of one of them across a source cut from the others (``extras.kill_during_failure``);
    then, with ``P_SUBSET_FAILURE``, a failure of one replica of a node after everything
    healed (``extras.subset_failure``: what the masking property judges)."""
    faults = random_faults(config, rng, duration=opts.duration, count=opts.faults,
                           kinds=opts.kinds)
    if "kill" in opts.kinds and not crashes_only(config) and rng.random() < P_KILL_DURING_FAILURE:
        tables = extras.kill_during_failure(config, rng, opts.duration)
        if tables:
            with contextlib.suppress(ScheduleError):  # clashes with a random kill: skip it
                faults = parse_faults([*(f.table() for f in faults), *tables], config)
    # A CEC node's replicas all killed at once (no draw on other clusters: their seeds
    # replay as before).
    if "kill" in opts.kinds and extras.cec_nodes(config) and rng.random() < P_KILLS_AT_ONCE:
        with contextlib.suppress(ScheduleError):
            faults = parse_faults([*(f.table() for f in faults),
                                   *extras.kills_at_once(config, rng, opts.duration)], config)
    # Last, so that every draw above stays what it was for a seed: a failure of one replica
    # after everything healed, for the masking property (not on a process pair's cluster).
    if not crashes_only(config) and rng.random() < P_SUBSET_FAILURE:
        last = max((f.heal_at for f in faults), default=0.0)
        tables = extras.subset_failure(config, rng, last, opts.kinds)
        if tables:
            with contextlib.suppress(ScheduleError):  # (none expected: all healed by then)
                faults = parse_faults([*(f.table() for f in faults), *tables], config)
    return faults


def simulate_one(config: ClusterConfig, seed: int, run_dir: Path, opts: SimOptions = SimOptions(),
                 *, verbose: bool = False, faults: Sequence[Fault] | None = None,
                 mutation: Mutation | None = None) -> SimResult:
    """One run: draw the schedule from ``seed`` (or play ``faults``) on the simulated
    cluster, then check it. ``mutation``: a test-only breakage of every input link. A skew
    (in ``faults`` or ``opts.kinds``) raises :class:`ScheduleError`."""
    from ops_scripts.check.compose import run_check

    started = time.perf_counter()
    if "skew" in opts.kinds or any(f.kind == "skew" for f in faults or ()):
        # One virtual clock for every process (node/clock.py): no process can be skewed.
        raise ScheduleError("skew needs real processes (dpc run): the simulation runs every "
                            "process on one virtual clock")
    if faults is None:
        faults = simulation_schedule(config, random.Random(seed), opts)
    if run_dir.exists():
        shutil.rmtree(run_dir)
    rd = RunDir(run_dir).ensure()
    shutil.copyfile(config.path, rd.config)
    (rd.path / "scenario.toml").write_text(scenario_text(config, seed, faults, opts))
    result = SimResult(seed, False, list(faults), run_dir=rd.path)
    with _virtual_process(rd, verbose) as runner, HistoryWriter(rd.history, now_us) as history:
        try:
            runner.run(_play(config, faults, rd, opts, history, mutation))
        except BaseException as e:  # a crash of the simulated program is a failure
            if isinstance(e, KeyboardInterrupt):
                raise
            leaves = _leaves(e)
            result.failures.append("the simulated cluster crashed: " + "; ".join(
                f"{type(x).__name__}: {x}" for x in leaves))
        history.record("end")
    merge_states(rd, config)
    out = io.StringIO()
    code = run_check(rd.path, out=out)
    report = json.loads(rd.check_json.read_text()) if rd.check_json.exists() else {}
    result.figures = dict(report.get("figures", {}))
    result.figures.setdefault("faults", len(faults))
    for v in report.get("verdicts", []):
        if v["status"] != "valid":
            result.failures.append(f"{v['property']} {v['subject']}: {v['status']}: {v['evidence']}")
    if code != 0 and not result.failures:
        result.failures.append(f"dpc check exited {code}:\n{out.getvalue()}")
    events = [json.loads(line) for line in rd.history.read_text().splitlines()]
    result.failures += [f"harness: {e['text']}" for e in events if e["event"] == "note"]
    result.coverage = _coverage(config, rd, faults, events)
    result.ok = not result.failures
    h = hashlib.sha256()
    for c in sorted(config.clients):
        if rd.client_log(c).exists():  # (not if the simulated cluster crashed before)
            h.update(rd.client_log(c).read_bytes())
    h.update(rd.history.read_bytes())
    result.digest = h.hexdigest()[:16]
    result.real_seconds = time.perf_counter() - started
    return result


def _coverage(config: ClusterConfig, rd: RunDir, faults: Sequence[Fault],
              events: Sequence[dict[str, Any]]) -> dict[str, int]:
    cov: Counter[str] = Counter()
    for f in faults:
        cov[f.kind] += 1
        if f.kind == "partition":
            cov[f"shape:{f.params['shape']}"] += 1
            cov[f"cut:{f.params['cut']}"] += 1
    states: dict[str, str] = {}
    for e in events:
        if e["event"] == "state":
            states[e["process"]] = e["state"]
        elif e["event"] == "fault" and "STABILIZATION" in states.values():
            cov["during_stabilization"] += 1
    for c in config.clients:
        if not rd.client_log(c).exists():  # the simulated cluster crashed before it wrote
            continue
        for batch in iter_log(rd.client_log(c)):
            kinds = batch.columns.kinds()
            cov["tentative"] += int((kinds == Kind.TENTATIVE).sum())
            cov["undo"] += int((kinds == Kind.UNDO).sum())
    return dict(cov)


def scenario_text(config: ClusterConfig, seed: int, faults: Sequence[Fault], opts: SimOptions) -> str:
    """The run as a scenario for ``dpc run`` (real processes): same cluster, same faults."""
    head = [
        f"# dpc simulate --seed {seed} --runs 1  (replay on real processes: dpc run THIS_FILE)",
        "[scenario]",
        f'name = "simulate-seed-{seed}"',
        f'cluster = "{Path(config.path).resolve()}"',
        f"settle = {opts.settle:g}",
        f"quiet = {opts.quiet:g}",
        "",
    ]
    return "\n".join(head) + dump_faults(faults)


# ---------------------------------------------------------------- many runs
def _worker(args: tuple[Path, int, Path, SimOptions, bool, Mutation | None]) -> SimResult:
    from node.config.load import load_config

    config_path, seed, base, opts, keep, mutation = args
    result = simulate_one(load_config(config_path), seed, base / f"seed-{seed}", opts,
                          mutation=mutation)
    if not result.ok:  # run it again with logs: the same run, by determinism
        again = simulate_one(load_config(config_path), seed, base / f"seed-{seed}", opts,
                             verbose=True, mutation=mutation)
        if again.digest != result.digest:
            result.failures.append(f"NOT DETERMINISTIC: digest {result.digest} then {again.digest}")
    elif not keep:
        shutil.rmtree(base / f"seed-{seed}", ignore_errors=True)
        result.run_dir = None
    return result


def simulate_many(config_path: Path, seed: int, runs: int, base: Path, *, jobs: int = 1,
                  opts: SimOptions = SimOptions(), keep: bool = False,
                  out: TextIO = sys.stdout) -> list[SimResult]:
    """Runs ``seed .. seed+runs-1`` on ``jobs`` processes; prints progress and failures.
    Ctrl-C stops the runs: what finished is returned (fewer than ``runs``), the workers are
    stopped, and no worker prints a traceback (they ignore SIGINT: the parent decides)."""
    mutation = mutation_from_env()  # once, for every run (the workers get it with the work)
    work = [(config_path, s, base, opts, keep, mutation) for s in range(seed, seed + runs)]
    results: list[SimResult] = []
    started = time.perf_counter()
    step = max(1, runs // 20)

    def note(r: SimResult) -> None:
        results.append(r)
        if not r.ok:
            print(f"  seed {r.seed}: FAILED ({len(r.faults)} faults), run dir {r.run_dir}", file=out)
            for why in r.failures[:5]:
                print(f"    {why}", file=out)
        if len(results) % step == 0 or len(results) == runs:
            bad = sum(not x.ok for x in results)
            print(f"  {len(results)}/{runs} runs, {bad} failed, "
                  f"{time.perf_counter() - started:.0f} s", file=out, flush=True)

    try:
        if jobs <= 1:
            for w in work:
                note(_worker(w))
        else:
            import multiprocessing

            ctx = multiprocessing.get_context("spawn")
            # multiprocessing's pool, not concurrent.futures': on Ctrl-C it can stop workers
            # in the middle of their chunk (terminate), instead of letting them finish it.
            with ctx.Pool(jobs, initializer=_ignore_sigint) as pool:
                chunk = max(1, min(50, runs // (jobs * 8)))
                for r in pool.imap_unordered(_worker, work, chunksize=chunk):
                    note(r)
    except KeyboardInterrupt:
        print(f"  interrupted (Ctrl-C) after {len(results)}/{runs} runs", file=out, flush=True)
    return sorted(results, key=lambda r: r.seed)


def _ignore_sigint() -> None:
    """A worker's start: Ctrl-C reaches the whole process group, and only the parent acts."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_simulate(config_path: Path, seed: int, runs: int, base: Path | None, *, jobs: int,
                 opts: SimOptions = SimOptions(), keep: bool = False,
                 out: TextIO | None = None) -> int:
    """``dpc simulate``: the runs, then the figures; 0 iff every run is valid. Runs go to
    worker processes started with ``PYTHONHASHSEED=0``, so that a seed replays exactly in
    any later process too."""
    import os
    import tempfile

    from node.config.load import load_config

    out = sys.stdout if out is None else out  # read now: pytest's capture replaces it

    config = load_config(config_path)  # a bad config fails here, once, with its file and key
    base = base if base is not None else Path(tempfile.mkdtemp(prefix="dpc-simulate-"))
    base.mkdir(parents=True, exist_ok=True)
    kinds = ("kill of a node replica (a process pair: crashes only)" if crashes_only(config)
             else ", ".join(opts.kinds))
    print(f"dpc simulate: {runs} run(s) from seed {seed} on {config_path} ({jobs} worker(s)); "
          f"{opts.faults} faults within {opts.duration:g} s each, kinds: {kinds}; "
          f"run dirs under {base}", file=out, flush=True)
    os.environ["PYTHONHASHSEED"] = "0"  # inherited by the spawned workers
    started = time.perf_counter()
    results = simulate_many(config_path, seed, runs, base, jobs=max(1, jobs), opts=opts,
                            keep=keep, out=out)
    _print_figures(results, time.perf_counter() - started, out)
    bad = [r for r in results if not r.ok]
    for r in bad[:10]:
        print(f"\nseed {r.seed} FAILED: replay with `dpc simulate --seed {r.seed} --runs 1`; on "
              f"real processes: `dpc run {r.run_dir}/scenario.toml`", file=out)
        print("  schedule:\n    " + dump_faults(r.faults).replace("\n", "\n    "), file=out)
    if len(results) < runs:  # Ctrl-C: the figures above are of the runs that finished
        print(f"\ndpc simulate: interrupted, {runs - len(results)} of {runs} runs not done",
              file=out)
        return 1 if bad else 130
    return 0 if results and not bad else 1


def _print_figures(results: Sequence[SimResult], seconds: float, out: TextIO) -> None:
    figs = [r.figures for r in results]
    tuples = sum(int(f.get("tuples_checked", 0)) for f in figs)
    faults = sum(len(r.faults) for r in results)
    worst = max((f for f in figs if f.get("worst_delay_us") is not None),
                key=lambda f: f["worst_delay_us"] / max(f.get("bound_us") or 1, 1), default=None)
    print(f"\ndpc simulate: {len(results)} runs, {sum(r.ok for r in results)} valid, "
          f"{len(results) - sum(r.ok for r in results)} failed; {faults} faults injected; "
          f"{tuples} tuples checked; {seconds:.0f} s real", file=out)
    if worst is not None:
        print(f"dpc simulate: worst delay of a new result {worst['worst_delay_us'] / 1e6:.3f} s "
              f"vs k*X = {worst['bound_us'] / 1e6:.3f} s", file=out)
