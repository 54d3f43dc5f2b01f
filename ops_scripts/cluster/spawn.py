"""Starting a local cluster's processes: forked from a warm fork server, not exec'd cold.

Every process of a cluster run on this machine (``dpc launch``, ``dpc run``, the benches,
the suite's clusters) is ``dpc node CLUSTER.toml NAME --run-dir DIR``. Started as a fresh
interpreter, each paid half a second of CPU importing the runtime before doing anything
(aiohttp alone 0.2 s: its import builds two TLS contexts); a cluster of ten starts spent
five CPU-seconds, and the test suite, which starts some 400, minutes of its 15. Here they
are forked from a fork server (multiprocessing's ``forkserver``) that imported the runtime
once, per launching process: a start costs a fork.

A child is the very same ``dpc node`` (``ops_scripts.cli.main`` with those arguments): in a
session of its own (``stop_cluster`` signals its group), its stdout and stderr appended to
its ``.out`` file, in the launcher's working directory with the launcher's environment at
the time of the start (not the fork server's, which was the launcher's when it began), and
named as that command line (``setproctitle``: ``/proc/PID/cmdline``, which
ops_scripts/cluster/processes.py reads before it signals a pid), and, under ``--hosts
netns``, inside its host's network namespace (``setns`` before it opens a socket:
ops_scripts/cluster/hosts/). :class:`Forked` is the
``Popen``-like handle ``ops_scripts.cluster.launch`` keeps.

A child outlives its launcher, as a ``Popen`` child does: ``dpc inject restart`` starts a
replica that the cluster's ``dpc launch`` adopts, and exits. multiprocessing would join (or,
daemonic, terminate) the children it started when the launcher's interpreter exits; each is
taken off its list of children once started (``multiprocessing.process._children``: no
public call does it; tests/integration/test_launch.py restarts through ``dpc inject``).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from multiprocessing.context import ForkServerContext
from pathlib import Path

__all__ = ["Forked", "spawn_node"]

#: What the fork server imports once: everything a node process imports to run.
PRELOAD = ["ops_scripts.cli", "node.procs.entry", "node.replica.runtime", "node.procs.source",
           "node.procs.client", "node.procs.looplag", "uvloop"]

_context: ForkServerContext | None = None


def _server() -> ForkServerContext:
    global _context
    if _context is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        _context = ctx
    return _context


def command_line(argv: Sequence[str]) -> list[str]:
    """The command a cold start of ``dpc`` with ``argv`` runs (and a forked one shows)."""
    return [sys.executable, "-m", "ops_scripts.cli", *argv]


def _child(argv: list[str], out: str, cwd: str, env: dict[str, str], netns: str | None) -> None:
    """In the forked process: become ``dpc node ...`` (inside network namespace ``netns``,
    its host's under ``--hosts netns``) and run it to its exit code."""
    import setproctitle  # (before the environment changes: it finds argv's memory by it)

    if netns is not None:  # before any socket: every one it opens is its host's
        from pyroute2.netns import setns

        setns(netns, flags=0)  # flags 0: the namespace must exist (never made here)

    setproctitle.setproctitle(shlex.join(command_line(argv)))
    os.setsid()
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["ops_scripts.cli", *argv]
    from ops_scripts.cli import main

    sys.exit(main(argv))


class Forked:
    """A ``Popen``-like handle on a forked ``dpc node`` (pid, poll, wait, send_signal)."""

    def __init__(self, proc: multiprocessing.process.BaseProcess, argv: Sequence[str]) -> None:
        self._proc = proc
        self.args = command_line(argv)
        if proc.pid is None:
            raise RuntimeError(f"{self.args}: not started")
        self.pid: int = proc.pid

    def poll(self) -> int | None:
        """Its exit code (negative: the signal that ended it), or None while it runs."""
        return self._proc.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._proc.join(timeout)
        code = self._proc.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it ended since
                os.kill(self.pid, sig)


def spawn_node(argv: Sequence[str], out: Path, netns: str | None = None) -> Forked:
    """Start ``dpc`` with ``argv`` (``node CLUSTER.toml NAME ...``), forked, its output
    appended to ``out``; inside network namespace ``netns`` if given."""
    proc = _server().Process(target=_child, args=(list(argv), str(out), os.getcwd(),
                                                  dict(os.environ), netns))
    proc.start()
    multiprocessing.process._children.discard(proc)  # type: ignore[attr-defined]
    return Forked(proc, argv)
