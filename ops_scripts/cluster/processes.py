"""Processes of a run known by pid: liveness, identity, and a handle on one that is not ours.

Role: ``dpc inject RUN_DIR`` (``inject.py``) signals processes it did not start, knowing only
the pid the launcher recorded in ``RUN_DIR/status/<name>.pid`` (``node/procs/rundir.py``), and
``dpc launch`` adopts a replica that ``dpc inject RUN_DIR restart`` started again
(``launch.py``). :class:`PidProcess` is the part of ``subprocess.Popen`` those callers use
(``pid``, ``poll``, ``wait``, ``send_signal``), for a process that is not our child.

Invariants: :func:`find_pid` returns a pid only if it is alive and, where ``/proc`` tells,
runs ``dpc node ... NAME --run-dir RUN_DIR``: a stale pid file whose pid the OS reused for
another program is refused, so a signal never reaches a stranger. A zombie counts as dead
(it has exited; only its parent's wait is missing). A :class:`PidProcess` cannot learn its
exit code (only a parent can): once gone, its ``returncode`` is 0.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import time
from pathlib import Path

from node.procs.rundir import RunDir
from ops_scripts.errors import ProcessError

__all__ = ["PidProcess", "alive", "find_pid", "read_cpu_seconds", "read_rss", "runs_node"]


def alive(pid: int) -> bool:
    """True while ``pid`` exists and has not exited (a zombie has exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's: it exists
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (or it just went): trust kill(0)
    state = stat.rsplit(")", 1)[-1].split()[:1]  # the field after "(comm)"
    return state not in (["Z"], ["X"])


def read_rss(pid: int) -> int | None:
    """``pid``'s resident set size in bytes (``/proc/PID/status`` VmRSS); None once it has
    gone (or is a zombie, which has no VmRSS)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024  # in kB
    return None



def read_cpu_seconds(pid: int) -> float | None:
    """CPU seconds ``pid`` has used so far (user + system, ``/proc/PID/stat`` fields 14 and
    15, in clock ticks); None once it has gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: count after it.
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    args = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    if len(args) == 1 and " " in args[0]:
        # A forked node names itself by one string, its command line shell-quoted
        # (ops_scripts/cluster/spawn.py: setproctitle writes no separators).
        with contextlib.suppress(ValueError):
            return shlex.split(args[0])
    return args


def runs_node(pid: int, name: str, rd: RunDir) -> bool:
    """Whether ``pid`` runs ``dpc node CONFIG NAME --run-dir RD`` (True where the command
    line cannot be read: there is nothing to check it against)."""
    args = _cmdline(pid)
    if args is None:
        return True
    if "node" not in args or name not in args or "--run-dir" not in args:
        return False
    i = args.index("--run-dir")
    given = Path(args[i + 1]) if i + 1 < len(args) else None
    if given is None:
        return False
    try:
        return given.resolve() == rd.path.resolve()
    except OSError:
        return False


def find_pid(rd: RunDir, name: str) -> int:
    """The pid of ``name``'s running incarnation in run ``rd``; :class:`ProcessError` saying
    why not (no pid file, a dead pid, a pid that runs something else)."""
    path = rd.pid_file(name)
    pid = rd.read_pid(name)
    if pid is None:
        raise ProcessError(f"{path}: missing: no pid recorded for {name!r} (was the cluster "
                           f"started by dpc launch or dpc run with run dir {rd.path}?)")
    if not alive(pid):
        raise ProcessError(f"{name}: pid {pid} (from {path}) is not running")
    if not runs_node(pid, name, rd):
        raise ProcessError(f"{name}: pid {pid} (from {path}) is not `dpc node ... {name} "
                           f"--run-dir {rd.path}` (a stale pid file?): refusing to signal it")
    return pid


class PidProcess:
    """A ``Popen``-like handle on a process that is not our child (see the module
    docstring: its exit code reads 0 once it is gone)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not alive(self.pid):
            self.returncode = 0
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired([f"pid {self.pid}"], timeout or 0.0)
            time.sleep(0.05)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                self.returncode = 0

    def __repr__(self) -> str:
        return f"PidProcess({self.pid})"
