"""Running a cluster's processes on this machine: start, restart, drain, stop, by pid.

The mechanics under ``dpc launch`` (``ops_scripts/harness/supervisor.py``), ``dpc run`` and
``dpc torture`` (``runner.py``), ``dpc inject`` (``nemesis.py``) and the demo:

* :func:`start_cluster`: sources, then nodes upstream first, then clients, one OS process
  each (``dpc node CLUSTER.toml NAME``), each group waited for until it serves. One that
  does not start stops the start (:class:`~ops_scripts.errors.ProcessError`): what was
  started is stopped, the reason printed (with the end of its log, :func:`log_tail`).
* :func:`restart_process`: a crashed replica again with ``--recover``, a source again
  (it resumes from its own log).
* :func:`progress`: one line of each replica's state and counters, and the clients' counts.
* :func:`drain_streams`: the sources end their streams (SIGUSR1: each publishes the
  end-of-stream boundary and goes on serving replays); wait until every client saw the end.
* :func:`stop_cluster`: SIGTERM every process by its pid and wait (SIGKILL after a grace
  period, reported).

Every process's pid is recorded in ``RUN_DIR/status/<name>.pid`` as it starts, so that
``dpc inject RUN_DIR`` can kill, pause, resume and restart processes of a running cluster.

Under ``--hosts ssh`` each process is started on its machine over SSH and signalled there
(``hosts/ssh.py``), and every wait on a process's files (ready, done, a client's results)
asks its host (:func:`watch`); the local and netns paths read the run directory as before.
Every start, first or again, is on the process's host as the run's placement says
(``RUN_DIR/hosts.json``: ops_scripts/cluster/hosts/).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TextIO

from node.config.model import ClusterConfig
from node.procs.rundir import RunDir
from node.procs.runlog import LogFollower
from ops_scripts.cluster.hosts.placement import HostsMode, read_placement
from ops_scripts.cluster.hosts.ssh import HostWatch, SshProcess, start_node
from ops_scripts.cluster.spawn import spawn_node
from ops_scripts.cluster.status import fetch_status
from ops_scripts.errors import BenchFailed, ProcessError

__all__ = [
    "Launched",
    "ProcessHandle",
    "RunWatch",
    "drain_streams",
    "log_tail",
    "progress",
    "restart_process",
    "start_cluster",
    "stop_cluster",
    "wait_until",
    "watch",
]

READY_TIMEOUT = 30.0
DRAIN_TIMEOUT = 60.0
STOP_GRACE = 10.0


class ProcessHandle(Protocol):
    """What is used of a process: ``subprocess.Popen`` for our children,
    :class:`ops_scripts.cluster.processes.PidProcess` for an adopted one."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...


@dataclass
class Launched:
    name: str
    kind: str  # "controller" | "source" | "replica" | "client"
    proc: ProcessHandle


def _start(config_path: Path, name: str, kind: str, rd: RunDir, *, recover: bool = False) -> Launched:
    """``dpc node CONFIG NAME --run-dir RD``, forked from the warm fork server
    (ops_scripts/cluster/spawn.py), its output in ``logs/NAME.out``; on its host, where the
    run placed it (``RUN_DIR/hosts.json``: ops_scripts/cluster/hosts/); under ``--hosts ssh``
    on its machine over SSH (hosts/ssh.py: the pid recorded is the remote one)."""
    placement = read_placement(rd.path)
    if placement is not None and placement.mode is HostsMode.SSH:
        proc: ProcessHandle = start_node(rd, placement, config_path, name, recover=recover)
        rd.write_pid(name, proc.pid)
        return Launched(name, kind, proc)
    argv = ["node", str(config_path), name, "--run-dir", str(rd.path)] + ["--recover"] * recover
    netns = None if placement is None else placement.netns_of(name)
    proc = spawn_node(argv, rd.path / "logs" / f"{name}.out", netns=netns)
    rd.write_pid(name, proc.pid)
    return Launched(name, kind, proc)


class RunWatch(Protocol):
    """What the launcher's waits read of a run: the processes' markers (node/procs/rundir.py)
    and how many rows the clients' logs hold (node/procs/runlog.py)."""

    def is_ready(self, process: str) -> bool: ...

    def is_done(self, process: str) -> bool: ...

    def clear_ready(self, process: str) -> None: ...

    def client_rows(self, client: str) -> int: ...


class _LocalWatch:
    """The run directory's own files (local and netns runs: one filesystem)."""

    def __init__(self, rd: RunDir) -> None:
        self.rd = rd

    def is_ready(self, process: str) -> bool:
        return self.rd.is_ready(process)

    def is_done(self, process: str) -> bool:
        return self.rd.is_done(process)

    def clear_ready(self, process: str) -> None:
        self.rd.clear_ready(process)

    def client_rows(self, client: str) -> int:
        """Rows in the client's log so far, read incrementally: each question scans the
        records written since the last one (a long run's progress lines stay cheap)."""
        path = self.rd.client_log(client)
        follower = _FOLLOWERS.get(path)
        if follower is None or (path.exists() and path.stat().st_size < follower.offset):
            # First asked, or the path holds another log now (a new run at the same path).
            follower = _FOLLOWERS[path] = LogFollower(path)
        return follower.skip()


#: Each client log's follower, kept across watches: progress() makes a watch per line.
_FOLLOWERS: dict[Path, LogFollower] = {}


def watch(rd: RunDir) -> RunWatch:
    """Where the waits look: the run directory, or under ``--hosts ssh`` the hosts, where
    each process's files are until ``dpc collect`` (hosts/ssh.py :class:`HostWatch`)."""
    placement = read_placement(rd.path)
    if placement is not None and placement.mode is HostsMode.SSH:
        return HostWatch(rd, placement)
    return _LocalWatch(rd)


def wait_for(cond: Callable[[], bool], what: str, timeout: float,
             procs: Sequence[Launched] = ()) -> None:
    """:func:`wait_until`, or :class:`~ops_scripts.errors.BenchFailed` saying what it waited
    for and which of ``procs`` died (the benches' wait: an outcome or a clear failure)."""
    if not wait_until(cond, timeout, procs):
        dead = [p.name for p in procs if p.proc.poll() is not None]
        raise BenchFailed(f"waiting for {what}: " + (f"{', '.join(dead)} died" if dead
                                                    else f"not within {timeout:g} s"))


def wait_until(cond: Callable[[], bool], timeout: float, procs: Sequence[Launched] = ()) -> bool:
    """Poll ``cond`` until it holds (True), ``timeout`` s pass or one of ``procs`` dies
    (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        dead = [p for p in procs if p.proc.poll() is not None]
        if dead:
            return False
        time.sleep(0.05)
    return cond()


def log_tail(rd: RunDir, name: str, n: int = 15) -> str:
    lines: list[str] = []
    for suffix in (".out",):
        p = rd.path / "logs" / f"{name}{suffix}"
        if p.exists():
            lines += p.read_text(errors="replace").splitlines()[-n:]
    return "\n".join("      " + line for line in lines)


def start_cluster(config: ClusterConfig, rd: RunDir, out: TextIO = sys.stdout,
                  procs: list[Launched] | None = None) -> list[Launched]:
    """Start every process, group by group, each waited for until ready. Started processes
    are appended to ``procs`` as they start, so a caller interrupted meanwhile can stop them.
    When one does not start, prints why (with the end of its log) to ``out``, stops every
    process started and raises :class:`ProcessError`."""
    groups: list[tuple[str, list[str]]] = []
    if config.controller is not None:  # first: flux replicas follow it from their start
        groups.append(("controller", [config.controller.name]))
    groups.append(("source", list(config.sources)))
    groups += [("replica", [r.name for r in n.replicas]) for n in config.nodes.values()]
    groups.append(("client", list(config.clients)))
    procs = [] if procs is None else procs
    w = watch(rd)
    for kind, names in groups:
        started: list[Launched] = []
        for n in names:
            started.append(_start(config.path, n, kind, rd))
            procs.append(started[-1])
            print(f"  started {kind:<8} {n:<12} pid {started[-1].proc.pid}", file=out, flush=True)
        def all_ready(group: list[Launched] = started) -> bool:
            return all(w.is_ready(p.name) for p in group)

        ok = wait_until(all_ready, READY_TIMEOUT, procs)
        if not ok:
            bad = [p for p in procs if p.proc.poll() is not None] or [p for p in started if not w.is_ready(p.name)]
            for p in bad:
                print(f"  {p.kind} {p.name} failed to start (exit {p.proc.poll()}):\n{log_tail(rd, p.name)}", file=out)
            stop_cluster(procs, rd, drain=False, out=out)
            raise ProcessError(f"the cluster did not start: {', '.join(p.name for p in bad)} "
                               f"failed to start (their logs are in {rd.path / 'logs'})")
        if started:
            print(f"  ready: {', '.join(p.name for p in started)}", file=out, flush=True)
    return procs


def restart_process(config: ClusterConfig, rd: RunDir, name: str,
                    out: TextIO = sys.stdout) -> Launched:
    """Start source or replica ``name`` again after a crash; returns once it serves. A
    replica restarts with ``--recover`` (node/replica/recovery.py: it then rebuilds from a
    partner's state and rejoins on its own); a source resumes its ids and its log from what
    it persisted (node/procs/source.py). Raises :class:`ProcessError` when it does not start,
    or when ``name`` is neither."""
    replicas = {r.name for n in config.nodes.values() for r in n.replicas}
    if name not in replicas and name not in config.sources:
        raise ProcessError(f"cannot restart {name!r}: not a source or replica of cluster "
                           f"{config.name!r}")
    kind = "replica" if name in replicas else "source"
    w = watch(rd)
    w.clear_ready(name)
    p = _start(config.path, name, kind, rd, recover=kind == "replica")
    how = "recovering" if kind == "replica" else "resuming from its log"
    print(f"  restarted {kind:<8} {name:<12} pid {p.proc.pid} ({how})", file=out, flush=True)
    if not wait_until(lambda: w.is_ready(name), READY_TIMEOUT, [p]):
        exit_code = p.proc.poll()
        # Stop what was started: left running, a slow start (a source decoding a long log)
        # came up later beside the next restart of the same name (a 30-minute soak: two
        # incarnations of s2, "address already in use", a drain that never ended).
        stop_cluster([p], rd, drain=False, out=out)
        raise ProcessError(f"{kind} {name} did not restart within {READY_TIMEOUT:g} s "
                           f"(exit {exit_code}; stopped):\n{log_tail(rd, name)}")
    return p


def progress(config: ClusterConfig, rd: RunDir, elapsed: float, out: TextIO = sys.stdout) -> None:
    """One progress line: each replica's state, output, tentative / UNDO counts and
    reconciliations (from its /status), and what each client received."""
    parts = []
    for node in config.nodes.values():
        for r in node.replicas:
            st = fetch_status(config, r.name)
            if st is None:
                parts.append(f"{r.name}=unreachable")
                continue
            c = st["counters"]
            parts.append(f"{r.name}={st['state']:<13} out={sum(c['tuples_out'].values()):<7} "
                         f"tentative={sum(c['tentative_out'].values()):<6} "
                         f"undo={sum(c['undo_out'].values())} reconciled={c['reconciliations']}")
    w = watch(rd)
    received = {c: w.client_rows(c) for c in config.clients}
    clients = " ".join(f"{c}={n}" for c, n in received.items())
    print(f"  t={elapsed:5.1f}s  {'  '.join(parts)}  | clients: {clients}", file=out, flush=True)


def drain_streams(procs: list[Launched], rd: RunDir, *, out: TextIO = sys.stdout,
                  clients: list[str] | None = None) -> bool:
    """Ask every source to end its stream (SIGUSR1), then wait until every client saw the
    end (at most ``DRAIN_TIMEOUT``); True if they all did. Every process keeps running."""
    for p in procs:
        if p.kind == "source" and p.proc.poll() is None:
            p.proc.send_signal(signal.SIGUSR1)  # end your stream, keep serving
    names = clients if clients is not None else [p.name for p in procs if p.kind == "client"]
    start = time.monotonic()
    w = watch(rd)
    drained = wait_until(lambda: all(w.is_done(c) for c in names), DRAIN_TIMEOUT, [])
    print(f"  drain: {'every client saw the end of its stream' if drained else 'TIMED OUT'}", file=out)
    # A replica no client read from may still be catching up (a source's restart had it
    # resubscribe behind its partner): stopped now, its output would lack its last tuples
    # and dpc check call it unconverged. Wait, within the same bound, until each running
    # replica released the end of stream too (what `dpc run`'s digests wait for).
    replicas = [p.name for p in procs if p.kind == "replica" and p.proc.poll() is None]
    if drained and replicas and rd.config.exists():
        from node.config.load import load_config

        config = load_config(rd.config)
        left = max(0.0, DRAIN_TIMEOUT - (time.monotonic() - start))
        if not wait_until(lambda: all((fetch_status(config, r) or {}).get("ended")
                                      for r in replicas), left, []):
            print(f"  drain: not every replica released the end of stream ({', '.join(replicas)})",
                  file=out)
    return drained



def stop_cluster(procs: list[Launched], rd: RunDir, *, drain: bool, out: TextIO = sys.stdout,
                 clients: list[str] | None = None) -> bool:
    """Drain (optional), then SIGTERM every process by pid; True if all exited 0 (and drained)."""
    drained = drain_streams(procs, rd, out=out, clients=clients) if drain else True
    order = {"client": 0, "replica": 1, "source": 2, "controller": 3}
    clean = True
    for p in sorted(procs, key=lambda p: order[p.kind]):
        if p.proc.poll() is None:
            p.proc.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            code = p.proc.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            if isinstance(p.proc, SshProcess):  # its pid and group are on its host
                p.proc.kill_group()
            else:
                os.killpg(p.proc.pid, signal.SIGKILL)
            code = p.proc.wait()
            print(f"  {p.kind} {p.name} did not stop within {STOP_GRACE:.0f} s: killed", file=out)
        if code != 0:
            clean = False
            print(f"  {p.kind} {p.name} exited with {code}:\n{log_tail(rd, p.name)}", file=out)
    return clean and drained
