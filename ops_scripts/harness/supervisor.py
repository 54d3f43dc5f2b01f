"""``dpc launch CLUSTER.toml``: a cluster run by hand, recorded and supervised.

1. Load and validate the config (a bad config exits 2 before anything starts).
2. Start the cluster with its start-up in the run's history (``runner.start_recorded``:
   ``start``, then ``ready`` once every client holds a first result), exactly as ``dpc run``
   does, so that ``dpc inject RUN_DIR ...`` and then ``dpc check RUN_DIR`` never judge the
   cold start against k*X. A process that does not start stops the launch (exit 1).
3. Supervise, once a second, until ``--duration`` passed or Ctrl-C (:class:`Supervisor`):
   progress; a dead process that ``dpc inject RUN_DIR restart`` started again is adopted by
   its pid; one that ``dpc inject`` killed (a kill fault not yet healed in the history) waits
   for that restart; any other dead source or replica *crashed*: it is restarted (a replica
   with ``--recover``, a source resumes its ids and log) and the crash is recorded as a kill
   fault healed by the restart, so that the checker's outage model sees it. A client that
   dies ends the run (its log is the run's evidence).
4. Drain (the sources end their streams), stop every process by pid, ``end``; under
   ``--hosts ssh`` gather the hosts' files into the run directory (``dpc collect``,
   ops_scripts/cluster/hosts/ssh.py); merge the replicas' state logs into the history.

The run directory keeps the config, every process's log, the source, client and replica
logs and the history: ``dpc check RUN_DIR`` judges it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TextIO

from node.config.model import ClusterConfig
from node.config.text import config_text
from node.procs.rundir import RunDir
from operators.network import network_class
from operators.taxonomy import RecoveryType
from ops_scripts.check.paths import node_promise
from ops_scripts.cluster.hosts.placement import HostsMode
from ops_scripts.cluster.hosts.session import cleanup, run_hosts
from ops_scripts.cluster.hosts.ssh import connect_hosts, gather
from ops_scripts.cluster.launch import Launched, log_tail, progress, restart_process, stop_cluster
from ops_scripts.cluster.processes import PidProcess, alive, runs_node
from ops_scripts.errors import HostsError, ProcessError
from ops_scripts.harness.history import HistoryWriter, merge_states, next_fault_id, open_faults
from ops_scripts.harness.runner import FIRST_RESULTS_TIMEOUT, now_us, start_recorded

__all__ = ["RESTART_AFTER", "Supervisor", "launch", "launch_cleanup", "promised"]

#: Seconds a crashed process stays down before ``dpc launch`` restarts it: time for a user
#: who restarts it by hand (``dpc node ... --run-dir``) to be adopted instead.
RESTART_AFTER = 1.0


class Supervisor:
    """Watches the processes of a launched run (``procs``, updated in place)."""

    def __init__(self, config: ClusterConfig, rd: RunDir, procs: list[Launched],
                 history: HistoryWriter, out: TextIO) -> None:
        self.config, self.rd, self.procs, self.history, self.out = config, rd, procs, history, out
        self._dead_since: dict[str, float] = {}
        self._reported: set[str] = set()

    def step(self) -> str | None:
        """Adopt, wait for or restart each dead process; the reason to end the run, if any
        (a client died, or a crashed process could not be restarted)."""
        for i, p in enumerate(list(self.procs)):
            if p.proc.poll() is None:
                continue
            if p.kind == "client":
                return f"client {p.name} died (exit {p.proc.poll()}):\n{log_tail(self.rd, p.name)}"
            pid = self.rd.read_pid(p.name)
            if pid is not None and pid != p.proc.pid and alive(pid) and runs_node(pid, p.name,
                                                                                   self.rd):
                self.procs[i] = Launched(p.name, p.kind, PidProcess(pid))
                self._forget(p.name)
                self._say(f"{p.kind} {p.name} is back (pid {pid}): adopted")
                continue
            if self._killed_on_purpose(p.name):
                if p.name not in self._reported:
                    self._reported.add(p.name)
                    self._say(f"{p.kind} {p.name} was killed by dpc inject; the run goes on "
                              f"(start it again: dpc inject {self.rd.path} restart {p.name})")
                continue
            first = self._dead_since.setdefault(p.name, time.monotonic())
            if time.monotonic() - first >= RESTART_AFTER:
                why = self._restart_crashed(i, p)
                if why is not None:
                    return why
        return None

    def _killed_on_purpose(self, name: str) -> bool:
        return any(e["fault"].get("fault") == "kill" and name in e.get("down", [])
                   for e in open_faults(self.rd).values())

    def _restart_crashed(self, i: int, p: Launched) -> str | None:
        code = p.proc.poll()
        self._say(f"{p.kind} {p.name} crashed (exit {code}): restarting it\n"
                  f"{log_tail(self.rd, p.name)}")
        fid = next_fault_id(self.rd)
        self.history.record("fault", id=fid, fault={"at": 0.0, "for": 0.0, "fault": "kill",
                                                    "process": p.name},
                            describe=f"crash of {p.name} (exit {code}), seen by dpc launch",
                            cut=[], down=[p.name], impaired=[])
        try:
            self.procs[i] = restart_process(self.config, self.rd, p.name, self.out)
        except ProcessError as e:
            return f"{e}"
        self.history.record("heal", id=fid)
        self._forget(p.name)
        return None

    def _forget(self, name: str) -> None:
        self._dead_since.pop(name, None)
        self._reported.discard(name)

    def _say(self, text: str) -> None:
        print(f"  {text}", file=self.out, flush=True)


def promised(config: ClusterConfig, node: str) -> str:
    """The recovery ``node``'s outputs are promised (what ``dpc check`` judges them by:
    ops_scripts/check/paths.py), naming the modes upstream that weaken it: "gap", or
    "gap (amnesia at node n1)" below n1."""
    p = node_promise(config, node)
    upstream = [n for n in p.nodes if n != node]
    if upstream and p.type is not RecoveryType.PRECISE:
        return f"{p.type.label} ({p.who()})"
    return p.type.label


def launch(config_path: Path, duration: float | None, run_dir: Path | None,
           out: TextIO = sys.stdout, hosts: HostsMode = HostsMode.LOCAL) -> int:
    """``dpc launch``: 0 if the cluster ran and stopped cleanly, 1 otherwise. Every process
    runs the run directory's copy of the config, placed on ``hosts``
    (ops_scripts/cluster/hosts/: their namespaces are removed at the end)."""
    from node.config.load import load_config

    config = load_config(config_path)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    rd = RunDir(run_dir if run_dir is not None else Path("runs") / f"{config.name}-{stamp}")
    rd.ensure()
    rd.config.write_text(config_text(config))  # self-contained: its files by absolute path
    (rd.path / "run.json").write_text(json.dumps({"config": str(config_path.resolve()),
                                                  "started": stamp, "hosts": hosts.value}))
    try:
        with run_hosts(rd, hosts, out) as placement:
            connect_hosts(placement, out)  # --hosts ssh: every host answers (hosts/ssh.py)
            return _launch(load_config(rd.config), rd, duration, out)
    except HostsError as e:
        print(f"dpc launch: error: {e}", file=out)
        return 1


def _launch(config: ClusterConfig, rd: RunDir, duration: float | None, out: TextIO) -> int:
    n = (len(config.sources) + sum(len(n.replicas) for n in config.nodes.values())
         + len(config.clients))
    print(f"dpc launch: cluster {config.name!r}, {n} processes, run dir {rd.path}", file=out)
    for node in config.nodes.values():  # what a crash may do to its output (taxonomy.py)
        print(f"  node {node.name}: {len(node.replicas)} replica(s), ha {node.settings.ha}, "
              f"query network {network_class(node.network)}, "
              f"recovery {promised(config, node.name)}", file=out)
    procs: list[Launched] = []
    with HistoryWriter(rd.history, now_us) as history:
        try:
            try:
                if not start_recorded(config, rd, history, out, procs, name="launch"):
                    print(f"  a client received nothing {FIRST_RESULTS_TIMEOUT:g} s after the "
                          "start", file=out, flush=True)
            except ProcessError as e:  # it printed why and stopped what it had started
                print(f"dpc launch: {e}; run dir {rd.path}", file=out)
                gather(rd, out)  # --hosts ssh: the logs that say why, into the run directory
                return 1
            supervisor = Supervisor(config, rd, procs, history, out)
            start = time.monotonic()
            while duration is None or time.monotonic() - start < duration:
                time.sleep(min(1.0, max(0.0, (duration or 1e9) - (time.monotonic() - start))))
                why = supervisor.step()
                if why is not None:
                    print(f"  {why}", file=out, flush=True)
                    break
                progress(config, rd, time.monotonic() - start, out)
        except KeyboardInterrupt:
            print("  interrupted: stopping", file=out)
        print("  stopping: draining sources", file=out, flush=True)
        ok = stop_cluster(procs, rd, drain=True, out=out)
        history.record("end")
    # --hosts ssh: the hosts' files into the run directory, before anything reads them.
    ok = gather(rd, out) and ok
    merge_states(rd, config)
    print(f"dpc launch: {'stopped cleanly' if ok else 'stopped WITH ERRORS'}; run dir {rd.path}",
          file=out)
    return 0 if ok else 1


def launch_cleanup(run_dir: Path, out: TextIO = sys.stdout) -> int:
    """``dpc launch --cleanup RUN_DIR``: stop what a crashed launch left running and remove
    its hosts (namespaces, links); 0 when done (also when nothing was left)."""
    if not run_dir.is_dir():
        print(f"dpc launch: error: {run_dir}: no such run directory", file=out)
        return 2
    removed = cleanup(RunDir(run_dir))
    for what in removed:
        print(f"  removed {what}", file=out)
    print(f"dpc launch: cleanup of {run_dir}: {len(removed) or 'nothing'} removed", file=out)
    return 0
