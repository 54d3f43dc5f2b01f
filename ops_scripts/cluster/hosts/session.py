"""The hosts of one run, from its start to its end: ``with run_hosts(rd, mode): ...``.

Role: what ``dpc launch``, ``dpc run`` (and so ``dpc torture``, ``dpc soak``, ``dpc sweep``)
do with ``--hosts MODE`` around a run, in one place:

1. place the run's processes (``placement.py``) and rewrite ``RUN_DIR/config.toml`` for
   their hosts; record the placement (``RUN_DIR/hosts.json``);
2. ``netns``: make the namespaces (``netns.py``); ``ssh``: check that every host answers
   (``ssh.py``);
3. after the run, whatever happened: stop any process of the run still alive (by the pids
   it recorded) and remove everything made (:func:`cleanup`, also ``dpc launch --cleanup
   RUN_DIR`` after a crash of the launcher).

Invariant: on leaving the ``with`` block nothing of the run is left on the machine (no
namespace, no control link, no process), and ``hosts.json`` still says where each process
ran (the checker and ``dpc collect`` read it).
"""

from __future__ import annotations

import contextlib
import ipaddress
import signal
import sys
import tomllib
from collections.abc import Iterator
from typing import TextIO

import tomli_w

from node.procs.rundir import RunDir
from ops_scripts.cluster.hosts import netns
from ops_scripts.cluster.hosts.placement import (
    HostsMode,
    Placement,
    place,
    processes_of,
    read_placement,
    run_tag,
)
from ops_scripts.cluster.processes import PidProcess, alive, runs_node
from ops_scripts.errors import HostsError

__all__ = ["cleanup", "run_hosts"]


@contextlib.contextmanager
def run_hosts(rd: RunDir, mode: HostsMode, out: TextIO = sys.stdout) -> Iterator[Placement]:
    """Place the run in ``rd`` (its ``config.toml`` written already) on hosts of ``mode``
    for the length of the block (module docstring)."""
    raw = tomllib.loads(rd.config.read_text(encoding="utf-8"))
    tag = run_tag(rd.path)
    if mode is HostsMode.NETNS:
        why = netns.unusable()
        if why is not None:
            raise HostsError(why)
        with netns.lock():
            placement, placed = place(raw, mode, tag, free_subnet=netns.free_subnet())
            _check_tls(raw, placed)
            net = ipaddress.IPv4Network(f"{placement.control_address}/{placement.prefix}",
                                        strict=False)
            if netns.routed(net):  # the config's own addresses: another run, or a real net
                raise HostsError(f"--hosts netns: {net} (the config's addresses) is routed on "
                                 "this machine already: another run holds it, or it is a real "
                                 "network; give the processes addresses of another /24")
            netns.create(placement)
    else:
        placement, placed = place(raw, mode, tag, ssh=_ssh_table(raw))
    if placed != raw:
        rd.config.write_text(tomli_w.dumps(placed), encoding="utf-8")
    placement.write(rd.path)
    if mode is not HostsMode.LOCAL:
        for name, host in sorted(placement.where.items()):
            h = placement.hosts[host]
            print(f"  host {h.name:<14} {h.address:<15} {name}"
                  + (f"  (netns {h.netns})" if h.netns else f"  (ssh {h.ssh})" if h.ssh else ""),
                  file=out, flush=True)
    try:
        yield placement
    finally:
        removed = cleanup(rd)
        if removed and mode is HostsMode.NETNS:
            print(f"  hosts: removed {len(removed)} namespace(s) and link(s) of run {tag}",
                  file=out, flush=True)


def _ssh_table(raw: dict[str, object]) -> dict[str, str]:
    """``[hosts.ADDRESS] ssh = "user@machine"``: where an address's SSH destination differs."""
    table = raw.get("hosts", {})
    if not isinstance(table, dict):
        return {}
    return {addr: str(t["ssh"]) for addr, t in table.items() if isinstance(t, dict) and "ssh" in t}


def _check_tls(raw: dict[str, object], placed: dict[str, object]) -> None:
    """A TLS cluster's certificate names its hosts: netns cannot give them new addresses."""
    cluster = raw.get("cluster", {})
    if not (isinstance(cluster, dict) and "tls" in cluster):
        return
    before = {n: t.get(k) for n, t, k in processes_of(raw)}
    moved = sorted(n for n, t, k in processes_of(placed) if t.get(k) != before.get(n))
    if moved:
        raise HostsError(f"--hosts netns: the cluster uses TLS, whose certificate must name every "
                         f"host, but {', '.join(moved)} would get new addresses: give every "
                         "process its address (in one /24) in the config and its certificate")


def cleanup(rd: RunDir) -> list[str]:
    """Stop every process of the run still alive (by its recorded pid, only if it is that
    process of that run), then remove the run's namespaces and control link; returns what
    was removed (``dpc launch --cleanup RUN_DIR``)."""
    stopped = []
    if rd.status.is_dir():
        for pid_file in rd.status.glob("*.pid"):
            name = pid_file.stem
            pid = rd.read_pid(name)
            if pid is not None and alive(pid) and runs_node(pid, name, rd):
                PidProcess(pid).send_signal(signal.SIGKILL)
                stopped.append(f"process {name} (pid {pid})")
    placement = read_placement(rd.path)
    if placement is not None and placement.mode is not HostsMode.NETNS:
        return stopped
    if netns.unusable() is not None:
        return stopped
    return stopped + netns.destroy(run_tag(rd.path) if placement is None else placement.tag)
