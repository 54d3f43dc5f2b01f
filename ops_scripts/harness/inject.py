"""``dpc inject CLUSTER.toml|RUN_DIR ACTION ...``: one fault, or its heal, in a running cluster.

Role: the by-hand nemesis. Every action is validated as a ``schedule.Fault`` (the names,
the kinds, what a fault may target) and performed by ``nemesis.Nemesis``, the same code
that plays ``dpc run`` schedules. Actions::

    partition --shape link A B [--one-way]      A <-> B (one way: only A -> B)
    partition --shape isolate P                  P from every other process
    partition --shape split A,B [C,D]            side A,B from side C,D (default: everyone else)
    partition --shape bridge A,B C,D --bridge P  the sides cut, P reaches both
    partition --shape source S [R ...]           source S from replicas R (default: all)
              [--cut blackhole|reset]            silence (default) or connections torn down
    heal --all | NAMES                           every cut, shape, stall and skew / those
                                                 naming NAMES
    kill NAME, restart NAME                      SIGKILL a replica or source; start it again
                                                 (a replica --recover, a source resumes its log)
    pause NAME, resume NAME                      SIGSTOP / SIGCONT a replica or a source
    delay A B SECONDS, bandwidth A B BYTES_PER_S a slower link (at its replica ends)
    slow READER WRITER SECONDS                   READER reads WRITER at most 1 message / SECONDS
    stall NAME, unstall NAME                     hold / release NAME's reconciliations mid-replay
    skew NAME OFFSET                             offset the clock of NAME (a source, replica
                                                 or client) by +2s (ahead), -1.5s (behind),
                                                 2 (seconds); heal NAME sets it true again

Given a run directory (``dpc launch`` or ``dpc run`` made it), processes are found by the
pids the launcher recorded (``status/<name>.pid``), and every action is appended to the
run's ``history.jsonl`` (``fault`` with the next id, ``heal`` of the faults it ends, or
``heal_all``). kill, restart, pause, resume and skew need a run directory (a skew is
written to the process's ``status/<name>.skew``, then it is sent SIGUSR2:
node/procs/entry.py); the other actions take a cluster config too. Invariants: nothing is
signalled but a live pid that runs that process of that run (``processes.find_pid``); an
unknown name, a missing pid file, a dead pid, a bad OFFSET or a refused request exits 2 with
a message naming it; exit 0 means done.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from node.config.load import load_config
from node.config.model import ClusterConfig
from node.faults.ops import Heal, Unstall
from node.procs.rundir import RunDir
from ops_scripts.cluster.launch import Launched
from ops_scripts.cluster.processes import PidProcess, alive, find_pid
from ops_scripts.errors import FaultError, HostsError, InjectError, ProcessError, ScheduleError
from ops_scripts.harness.fault import send_fault
from ops_scripts.harness.history import HistoryWriter, fault_effects, next_fault_id, open_faults
from ops_scripts.harness.nemesis import Nemesis
from ops_scripts.harness.schedule import CUTS, SHAPES, Fault, parse_faults
from protocol.errors import DPCError

__all__ = ["add_inject_parser", "parse_offset", "run_inject"]

_NEEDS_PIDS = ("kill", "restart", "pause", "resume", "skew")
#: A skew's OFFSET: seconds, signed, with an optional ``s``: ``+2s``, ``-1.5s``, ``2``.
_OFFSET = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)s?")


def add_inject_parser(sub: Any) -> None:
    """Register ``dpc inject`` and its actions on the ``dpc`` subparsers ``sub``."""
    p = sub.add_parser("inject", help="inject one fault (or heal) in a running cluster")
    p.add_argument("target", type=Path, metavar="CLUSTER.toml|RUN_DIR",
                   help="a run directory (pids, history) or a cluster config")
    acts = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    part = acts.add_parser("partition", help="cut processes off from each other")
    part.add_argument("--shape", choices=SHAPES, required=True)
    part.add_argument("targets", nargs="+", metavar="NAMES",
                      help="link: A B; isolate: P; split/bridge: A,B [C,D]; source: S [R ...]")
    part.add_argument("--cut", choices=CUTS, default="blackhole",
                      help="blackhole: silence (default); reset: connections torn down")
    part.add_argument("--one-way", action="store_true", help="link: only A -> B is cut")
    part.add_argument("--bridge", default=None, help="bridge: the process that reaches both sides")
    heal = acts.add_parser("heal", help="heal cuts, shapes and skews (and stalls, paused "
                                        "processes: --all)")
    heal.add_argument("--all", action="store_true", help="everything, everywhere")
    heal.add_argument("names", nargs="*",
                      help="every cut and shape naming these processes, and their skews")
    for action, what in (("kill", "SIGKILL a replica or source"),
                         ("restart", "start a killed replica (--recover) or source again"),
                         ("pause", "SIGSTOP a replica or source"), ("resume", "SIGCONT it"),
                         ("stall", "hold a replica's reconciliations mid-replay"),
                         ("unstall", "release them")):
        acts.add_parser(action, help=what).add_argument("name", metavar="NAME")
    for action, unit in (("delay", "SECONDS"), ("bandwidth", "BYTES_PER_S")):
        a = acts.add_parser(action, help=f"a slower link A <-> B: {unit} each way")
        a.add_argument("a", metavar="A")
        a.add_argument("b", metavar="B")
        a.add_argument("value", type=float, metavar=unit)
    skew = acts.add_parser("skew", help="offset NAME's clock by OFFSET seconds (+2s, -1.5s)")
    skew.add_argument("name", metavar="NAME")
    # REMAINDER: "-1.5s" is the offset, not an option (heal NAME ends the skew).
    skew.add_argument("offset", nargs=argparse.REMAINDER, metavar="OFFSET")
    slow = acts.add_parser("slow", help="READER reads WRITER's messages at most one per SECONDS")
    slow.add_argument("a", metavar="READER")
    slow.add_argument("b", metavar="WRITER")
    slow.add_argument("value", type=float, metavar="SECONDS")


def _target(target: Path) -> tuple[ClusterConfig, RunDir | None]:
    if target.is_dir():
        rd = RunDir(target)
        if not rd.config.is_file():
            raise InjectError(f"{target} is not a run directory (no config.toml)")
        return load_config(rd.config), rd
    if not target.is_file():
        raise InjectError(f"{target}: no such cluster config or run directory")
    return load_config(target), None


def parse_offset(words: list[str]) -> float:
    """A skew's OFFSET argument in seconds (``+2s``, ``-1.5s``, ``2``); :class:`InjectError`
    for anything else, for 0 (no skew: ``heal NAME`` ends one), or for more words."""
    if len(words) != 1 or not _OFFSET.fullmatch(words[0]):
        raise InjectError(f"skew NAME OFFSET: OFFSET is seconds like +2s, -1.5s or 2; got "
                          f"{' '.join(words) or 'nothing'!r}")
    seconds = float(words[0].removesuffix("s"))
    if seconds == 0:
        raise InjectError("skew NAME OFFSET: an offset of 0 is no skew (`dpc inject RUN_DIR "
                          "heal NAME` ends one)")
    return seconds


def _table(args: argparse.Namespace) -> dict[str, Any]:
    """The fault's TOML table (without at / for) from the command line."""
    a = args.action
    if a in ("kill", "pause", "stall"):
        return {"fault": a, "process": args.name}
    if a == "skew":
        return {"fault": a, "process": args.name, "seconds": parse_offset(args.offset)}
    if a in ("delay", "bandwidth"):
        key = "seconds" if a == "delay" else "bytes_per_second"
        return {"fault": a, "between": [args.a, args.b], key: args.value}
    if a == "slow":
        return {"fault": a, "reader": args.a, "writer": args.b, "seconds": args.value}
    t: dict[str, Any] = {"fault": "partition", "shape": args.shape, "cut": args.cut}
    names = args.targets
    count = {"link": (2, 2), "isolate": (1, 1), "split": (1, 2), "bridge": (2, 2),
             "source": (1, 99)}[args.shape]
    if not count[0] <= len(names) <= count[1]:
        raise InjectError(f"partition --shape {args.shape}: expected {count[0]}"
                          f"{'' if count[0] == count[1] else f' to {count[1]}'} name argument(s), "
                          f"got {names}")
    if args.one_way and args.shape != "link":
        raise InjectError("--one-way is for --shape link")
    if (args.bridge is None) != (args.shape != "bridge"):
        raise InjectError("--bridge P goes with --shape bridge (and only with it)")
    match args.shape:
        case "link":
            t["between"] = names
            if args.one_way:
                t["one_way"] = True
        case "isolate":
            t["process"] = names[0]
        case "split" | "bridge":
            t["sides"] = [n.split(",") for n in names]
            if args.bridge is not None:
                t["bridge"] = args.bridge
        case "source":
            t["source"] = names[0]
            if names[1:]:
                t["replicas"] = names[1:]
    return t


def _fault(table: dict[str, Any], config: ClusterConfig) -> Fault:
    try:
        (fault,) = parse_faults([{"at": 0.0, "for": 1.0, **table}], config)
    except ScheduleError as e:
        raise InjectError(str(e).removeprefix("faults[0]: ")) from None
    return fault


def _describe(fault: Fault) -> str:
    """A fault's description without its duration (by hand: until healed)."""
    return fault.describe().rsplit(" for ", 1)[0]


def _names_of(event: dict[str, Any]) -> set[str]:
    """The processes a fault event names: its effects', and its own ``process`` (a skew
    or a stall has no effects)."""
    pairs = [*event.get("cut", []), *event.get("impaired", [])]
    own = event["fault"].get("process") if isinstance(event.get("fault"), dict) else None
    return ({x for pair in pairs for x in pair} | set(event.get("down", []))
            | ({own} if isinstance(own, str) else set()))


class _Injector:
    def __init__(self, config: ClusterConfig, rd: RunDir | None, out: TextIO) -> None:
        self.config, self.rd, self.out = config, rd, out
        self.procs: list[Launched] = []
        self.nemesis = Nemesis(config, rd, self.procs, out)
        self.history = HistoryWriter(rd.history, lambda: time.time_ns() // 1000) if rd else None
        self.processes = [*config.sources, *self.nemesis.replicas, *config.clients]
        if self.nemesis.kernel is not None and rd is not None:
            # The kernel's rules are the run's partitions in force, which this process did
            # not make: the history's open ones (each apply renders them all).
            for fid, e in open_faults(rd).items():
                if e["fault"].get("fault") == "partition":
                    self.nemesis.kernel.add(fid, _fault(dict(e["fault"]), config))

    def run_dir(self) -> RunDir:
        """The run directory, whose pid files find the processes to signal (``run_inject``
        refuses those actions without one first)."""
        if self.rd is None:
            raise InjectError("this action needs a RUN_DIR: it finds the process by the pid "
                              "the launcher recorded")
        return self.rd

    def adopt(self, name: str) -> None:
        kind = ("replica" if name in self.nemesis.replicas
                else "client" if name in self.config.clients else "source")
        self.procs.append(Launched(name, kind, PidProcess(find_pid(self.run_dir(), name))))

    def healed(self, ids: list[int]) -> None:
        if self.history is not None:
            for fid in ids:
                self.history.record("heal", id=fid)

    def open_ids(self, fault: str, names: set[str]) -> list[int]:
        if self.rd is None:
            return []
        return sorted(fid for fid, e in open_faults(self.rd).items()
                      if e["fault"].get("fault") == fault and _names_of(e) & names)

    def fault(self, fault: Fault, table: dict[str, Any]) -> None:
        if fault.kind in ("kill", "pause"):
            why = self.nemesis.blocked(fault)
            if why is not None:
                raise InjectError(f"refused: {why}")
            self.adopt(fault.params["process"])
        if fault.kind == "skew":
            name = fault.params["process"]
            if not self.run_dir().is_ready(name):  # until then SIGUSR2 may find no handler
                raise InjectError(f"{name} is not up (no {self.run_dir().status / name}.ready)")
            if self.run_dir().read_skew(name):
                raise InjectError(f"{name} is skewed already ({self.run_dir().read_skew(name):+g} "
                                  f"s): `heal {name}` first")
            self.adopt(name)
        fid = next_fault_id(self.rd) if self.rd is not None else 0
        if self.history is not None and self.rd is not None:
            how = {"net": self.nemesis.net} if fault.kind == "partition" else {}
            self.history.record("fault", id=fid, fault=table, describe=_describe(fault),
                                **fault_effects(fault, self.config), **how)
        try:
            self.nemesis.inject(fid, fault)
        except InjectError as e:
            if self.history is not None:
                self.history.record("note", text=f"refused: {e}")
            raise

    def restart(self, name: str) -> None:
        rd = self.run_dir()
        restartable = [*self.config.sources, *self.nemesis.replicas]
        if name not in restartable:
            raise InjectError(f"{name!r} is not a source or replica; they are: "
                              f"{', '.join(restartable)}")
        pid = rd.read_pid(name)
        if pid is not None and alive(pid):
            raise InjectError(f"{name} is running (pid {pid}): kill it first")
        self.nemesis.restart(name)
        self.healed(self.open_ids("kill", {name}))

    def resume(self, name: str) -> None:
        if name not in self.processes:
            raise InjectError(f"no process {name!r}; known: {', '.join(self.processes)}")
        self.adopt(name)
        self.procs[-1].proc.send_signal(signal.SIGCONT)
        self.healed(self.open_ids("pause", {name}))

    def heal(self, names: list[str], everything: bool) -> None:
        if everything == bool(names):
            raise InjectError("heal takes --all or process names (not both)")
        unknown = [n for n in names if n not in self.processes]
        if unknown:
            raise InjectError(f"unknown process(es) {unknown}; known: {', '.join(self.processes)}")
        problems = []
        for r in self.nemesis.replicas:
            peers = None if everything else tuple(
                [p for p in self.processes if p != r] if r in names else [n for n in names if n != r])
            try:
                send_fault(self.config, r, Heal(peers))
            except FaultError as e:
                problems.append(str(e))
        if self.rd is not None:  # clocks true again (everything: every skewed one)
            for name in self.processes if everything else names:
                if self.rd.read_skew(name):
                    self.rd.write_skew(name, 0.0)
                    pid = self.rd.read_pid(name)
                    if pid is not None and alive(pid):
                        PidProcess(pid).send_signal(signal.SIGUSR2)
        kernel = self.nemesis.kernel
        if kernel is not None:
            if everything:
                kernel.clear()
            for fid in self.open_ids("partition", set(names)):
                kernel.remove(fid)
            try:
                kernel.apply(everywhere=everything)
            except HostsError as e:
                problems.append(str(e))
        if everything and self.rd is not None:
            for name in self.processes:  # continue whatever was paused
                pid = self.rd.read_pid(name)
                if pid is not None and alive(pid):
                    PidProcess(pid).send_signal(signal.SIGCONT)
        if self.history is not None:
            if everything:
                self.history.record("heal_all")
            else:
                ids = [fid for kind in ("partition", "delay", "bandwidth", "slow", "skew")
                       for fid in self.open_ids(kind, set(names))]
                self.healed(sorted(ids))
        if problems:
            raise InjectError("; ".join(problems))

    def close(self) -> None:
        if self.history is not None:
            self.history.close()


def run_inject(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """``dpc inject``: 0 if done; 2 with a message naming what went wrong."""
    out = sys.stdout if out is None else out  # read at call time: capture may replace it
    try:
        config, rd = _target(args.target)
        if args.action in _NEEDS_PIDS and rd is None:
            raise InjectError(f"{args.action} needs a RUN_DIR (it finds the process by the pid "
                              f"the launcher recorded), not the cluster config {args.target}")
        inj = _Injector(config, rd, out)
        try:
            if args.action == "heal":
                inj.heal(args.names, args.all)
                what = "healed everything" if args.all else f"healed {', '.join(args.names)}"
            elif args.action == "restart":
                inj.restart(args.name)
                what = (f"restarted {args.name} "
                        f"({'resuming from its log' if args.name in config.sources else 'recovering'})")
            elif args.action == "resume":
                inj.resume(args.name)
                what = f"resumed {args.name}"
            elif args.action == "unstall":
                replica = _fault({"fault": "stall", "process": args.name}, config).params["process"]
                send_fault(config, replica, Unstall())
                inj.healed(inj.open_ids("stall", {args.name}))
                what = f"unstalled {args.name}"
            else:
                table = _table(args)
                fault = _fault(table, config)
                inj.fault(fault, table)
                what = _describe(fault)
        finally:
            inj.close()
    except (InjectError, ProcessError, FaultError) as e:
        print(f"dpc inject: error: {e}", file=sys.stderr)
        return 2
    except DPCError as e:
        print(f"dpc inject: error: {e}", file=sys.stderr)
        return 2
    print(f"dpc inject: {what}", file=out)
    return 0
