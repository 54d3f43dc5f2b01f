"""The nemesis: faults injected into a live cluster, and always healed (STYLE.md 12).

Role: the one home of fault injection on real processes, for ``dpc run`` / ``dpc torture``
(``runner.py``) and ``dpc inject`` (``inject.py``). A :class:`Nemesis` holds the process
handles of a run (``launch.Launched``) and the model of the rules in force at each replica
(``rules.ActiveRules``), and turns each ``schedule.Fault`` into actions:

=========  ==========================================  =========================================
kind       inject                                      heal
=========  ==========================================  =========================================
partition  a ``Cut`` at the replica end(s)             a ``Heal`` of those peers, then
delay,     a ``Shape`` at the replica end(s)           whatever other faults in force still
bandwidth  (``rules.py``)                              want on them, again (``rules.py``)
slow       a ``Shape`` with ``slow`` at the reader
kill       SIGKILL by pid                              ``launch.restart_process`` (a replica
                                                       --recover, a source resumes its log),
                                                       then the rules in force at it, again
pause      SIGSTOP by pid                              SIGCONT, then the rules changed meanwhile
stall      a ``Stall``                                 an ``Unstall``
skew       ``RunDir.write_skew``, then SIGUSR2 (the    an offset of 0, then SIGUSR2
           process reads its skew file: node/procs/
           entry.py)
=========  ==========================================  =========================================

When the run's hosts are network namespaces (``--hosts netns``), a partition is made by
the kernel instead (``kernel.py``: nftables drop or reject rules in the hosts' namespaces;
its heal recomputes them from the partitions still in force), and the history names the
mechanism (``"net": "kernel"`` or ``"process"``: :attr:`Nemesis.net`). Shapes and stalls
stay at the replicas either way.

Cut, Shape, Heal, Stall and Unstall are the operations of the fault vocabulary
(node/faults/ops.py); ``rules.ActiveRules.plan`` computes them and ``fault.send_fault`` makes
each at its replica (``POST /fault`` with ``op.to_body()``). Nothing here knows the body.

Invariants: a refused or failed request is never ignored: :class:`InjectError` says which
fault, which replica and what it answered (the caller records it and fails the run). A
kill or pause of a node's replica waits (:meth:`Nemesis.blocked`) while no other replica
of the node is up with a state to recover from (a partner still RECOVERING has none).
Requests go only to replicas that are neither killed nor paused; what they miss is made
up when they come back.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import TextIO

from node.config.model import ClusterConfig
from node.faults.ops import Heal
from node.procs.rundir import RunDir
from ops_scripts.cluster.hosts.placement import HostsMode, read_placement
from ops_scripts.cluster.launch import Launched, restart_process
from ops_scripts.cluster.status import fetch_status
from ops_scripts.errors import FaultError, HostsError, InjectError, ProcessError
from ops_scripts.harness.fault import send_fault
from ops_scripts.harness.kernel import KernelCuts
from ops_scripts.harness.rules import ActiveRules
from ops_scripts.harness.schedule import Fault, node_of
from ops_scripts.harness.timeline import blocked, recovers_alone

__all__ = ["Nemesis", "kernel_cuts"]

KILL_WAIT = 10.0  # seconds for a SIGKILLed process to be gone


def kernel_cuts(config: ClusterConfig, rd: RunDir | None) -> KernelCuts | None:
    """The kernel's cuts for a run whose hosts are network namespaces (its placement says),
    else None; :class:`HostsError` if the kernel cannot cut here (no ``nft``)."""
    placement = None if rd is None else read_placement(rd.path)
    if placement is None or placement.mode is not HostsMode.NETNS:
        return None
    return KernelCuts(config, placement)


def _apply(kernel: KernelCuts) -> None:
    """The kernel's rules brought to the partitions in force; a refusal is the fault's."""
    try:
        kernel.apply()
    except HostsError as e:
        raise InjectError(str(e)) from None


# ---------------------------------------------------------------- the nemesis
class Nemesis:
    """Injects and heals faults in the cluster of ``config`` whose processes are ``procs``
    (the list is updated in place: a killed replica leaves it, its restart joins it); ``rd``
    is the run directory (None: no restarts, they need one)."""

    def __init__(self, config: ClusterConfig, rd: RunDir | None, procs: list[Launched],
                 out: TextIO = sys.stdout) -> None:
        self.config, self.rd, self.procs, self.out = config, rd, procs, out
        self.rules = ActiveRules(config)
        self.active: dict[int, Fault] = {}
        self.down: dict[str, str] = {}  # process (replica or source) -> "killed" | "paused"
        self._node_of = node_of(config)
        #: Partitions in the kernel when the run's hosts are namespaces (kernel.py), else
        #: None: at the replicas' fault rules, in the processes.
        self.kernel = kernel_cuts(config, rd)

    @property
    def net(self) -> str:
        """How partitions are made: "kernel" (nftables between hosts) or "process" (the
        replicas' fault rules); the run's history names it with each partition."""
        return "process" if self.kernel is None else "kernel"

    @property
    def replicas(self) -> list[str]:
        return list(self._node_of)

    def reachable(self) -> list[str]:
        """Replicas whose control planes answer (neither killed nor paused by us)."""
        return [r for r in self._node_of if r not in self.down]

    def handle(self, name: str) -> Launched:
        found = next((p for p in self.procs if p.name == name), None)
        if found is None:
            raise InjectError(f"no running process {name!r} in this run")
        return found

    # -------------------------------------------------------- faults
    def blocked(self, fault: Fault) -> str | None:
        """Why ``fault`` must wait, if it must (``timeline.blocked``: a kill or pause that
        would leave a node with no replica holding a state); states from ``/status``."""
        def state_of(r: str) -> str | None:
            st = fetch_status(self.config, r)
            return None if st is None else str(st.get("state"))
        return blocked(fault, self._node_of, self.down, state_of, recovers_alone(self.config))

    def inject(self, fid: int, fault: Fault) -> None:
        """Put ``fault`` (number ``fid``) in force; :class:`InjectError` if refused."""
        self.active[fid] = fault
        try:
            if fault.kind in ("kill", "pause"):
                name = fault.params["process"]
                p = self.handle(name)
                if fault.kind == "kill":
                    p.proc.send_signal(signal.SIGKILL)
                    try:
                        p.proc.wait(KILL_WAIT)
                    except subprocess.TimeoutExpired:
                        raise InjectError(f"{name} (pid {p.proc.pid}) still runs {KILL_WAIT:g} s "
                                          "after SIGKILL") from None
                    self.procs.remove(p)
                    self.down[name] = "killed"
                else:
                    p.proc.send_signal(signal.SIGSTOP)
                    self.down[name] = "paused"
            elif fault.kind == "skew":
                self.skew(fault.params["process"], fault.params["seconds"])
            elif fault.kind == "partition" and self.kernel is not None:
                self.kernel.add(fid, fault)
                _apply(self.kernel)
            else:
                self.rules.add(fid, fault)
                self.sync()
        except InjectError as e:
            raise InjectError(f"fault #{fid} ({fault.describe()}): {e}") from None

    def heal(self, fid: int) -> None:
        """End fault ``fid`` (and bring back what the faults still in force want)."""
        fault = self.active.pop(fid, None)
        if fault is None:
            return
        try:
            if fault.kind == "kill":
                self.restart(fault.params["process"])
            elif fault.kind == "pause":
                self.resume(fault.params["process"])
            elif fault.kind == "skew":
                self.skew(fault.params["process"], 0.0)
            elif fault.kind == "partition" and self.kernel is not None:
                self.kernel.remove(fid)
                _apply(self.kernel)
            else:
                self.rules.remove(fid)
                self.sync()
        except InjectError as e:
            raise InjectError(f"heal of fault #{fid} ({fault.describe()}): {e}") from None

    def restart(self, name: str) -> None:
        """Start killed replica (``--recover``) or source ``name`` again; a replica gets the
        rules in force."""
        if self.rd is None:
            raise InjectError(f"cannot restart {name}: a restart needs the run directory")
        try:
            self.procs.append(restart_process(self.config, self.rd, name, self.out))
        except ProcessError as e:
            raise InjectError(str(e)) from None
        self.down.pop(name, None)
        self.rules.forget(name)
        self.sync([name])

    def skew(self, name: str, seconds: float) -> None:
        """Offset ``name``'s clock by ``seconds`` (0: none): its skew file, then SIGUSR2, on
        which it reads the file (node/procs/entry.py). A killed process gets no signal: its
        restart reads the file; a paused one gets it when continued."""
        if self.rd is None:
            raise InjectError(f"cannot skew {name}: the process reads its skew from the run "
                              "directory")
        placement = read_placement(self.rd.path)
        if placement is not None and placement.mode is HostsMode.SSH:
            # Its skew file would be written here, and the process reads its host's.
            raise InjectError(f"cannot skew {name}: under --hosts ssh its run directory is on "
                              "its host (a clock fault over SSH is not built yet)")
        self.rd.write_skew(name, seconds)
        if self.down.get(name) != "killed":
            self.handle(name).proc.send_signal(signal.SIGUSR2)

    def resume(self, name: str) -> None:
        """SIGCONT ``name``; a replica then gets what changed while it was stopped."""
        self.handle(name).proc.send_signal(signal.SIGCONT)
        if self.down.pop(name, None) is not None:
            self.sync([name])

    def sync(self, only: Sequence[str] | None = None) -> None:
        """Make the requests that bring reachable replicas (or ``only`` those) to the rules
        in force; every failure is collected into one :class:`InjectError`."""
        targets = [r for r in self.reachable() if only is None or r in only]
        problems = []
        for replica, ops in self.rules.plan(targets).items():
            try:
                for op in ops:
                    send_fault(self.config, replica, op)
            except FaultError as e:
                problems.append(str(e))
                continue
            self.rules.commit(replica)
        if problems:
            raise InjectError("; ".join(problems))

    def heal_all(self) -> list[str]:
        """Set every skewed clock true, resume every paused process, heal everything at
        every replica, restart every killed one; returns what failed (empty: all healed)."""
        problems: list[str] = []
        for f in [f for f in self.active.values() if f.kind == "skew"]:  # clocks true again
            try:
                self.skew(f.params["process"], 0.0)
            except InjectError as e:
                problems.append(f"unskew of {f.params['process']}: {e}")
        for name, how in list(self.down.items()):
            if how == "paused":
                self.handle(name).proc.send_signal(signal.SIGCONT)
                del self.down[name]
        for p in self.procs:  # and anything stopped by hand meanwhile
            if p.proc.poll() is None:
                p.proc.send_signal(signal.SIGCONT)
        for r in self.reachable():
            try:
                send_fault(self.config, r, Heal())
            except FaultError as e:
                problems.append(str(e))
        if self.kernel is not None:
            self.kernel.clear()
            try:
                self.kernel.apply(everywhere=True)
            except HostsError as e:
                problems.append(str(e))
        self.rules.clear()
        self.active.clear()
        for name in [n for n, how in self.down.items() if how == "killed"]:
            try:
                self.restart(name)
            except InjectError as e:
                problems.append(f"restart of {name}: {e}")
        return problems
