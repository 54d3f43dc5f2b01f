"""A run's hosts as network namespaces of this machine, joined by a bridge (``--hosts netns``).

Role: make and remove what a :class:`~ops_scripts.cluster.hosts.placement.Placement` of
mode ``netns`` names, with iproute2's ``ip`` (the image has it; no hand-written netlink):

* the run's bridge in a namespace of its own, ``dpc-TAG`` (bridge ``br0``);
* per host a namespace ``dpc-TAG-HOST`` with ``lo`` up and ``eth0``, one end of a veth
  pair whose other end is a port of the bridge, at the host's address;
* the control node: a veth pair from this machine's own namespace (``dpcTAG``, at the
  placement's ``control_address``) to the bridge, so that the launcher, ``dpc status`` and
  ``dpc inject`` reach every control plane. Only addresses of the test range made here
  are routed through it.

Processes are started inside their host's namespace by ``spawn.py`` (``setns`` in the forked
child, through pyroute2).

Invariants: everything made carries the run's tag and is removed by :func:`destroy` (also
after a crash of the launcher: ``dpc launch --cleanup RUN_DIR``); :func:`create` removes
what it made if it fails half way; two runs never take the same /24 (:func:`free_subnet`
under a lock); every ``ip`` failure is a :class:`HostsError` with the command and its
message.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from ops_scripts.cluster.hosts.placement import TEST_RANGE, Placement
from ops_scripts.errors import HostsError

__all__ = ["create", "destroy", "free_subnet", "leftovers", "lock", "routed", "unusable"]

_LOCK = Path("/run/lock/dpc-netns.lock")


def unusable() -> str | None:
    """Why namespaces cannot be made here (None: they can): the one-line reason a test
    prints when it skips, and the error ``--hosts netns`` gives."""
    if not sys.platform.startswith("linux"):
        return "--hosts netns needs Linux (network namespaces)"
    if os.geteuid() != 0:
        return "--hosts netns needs root (it makes network namespaces): run it with sudo"
    if shutil.which("ip") is None:
        return "--hosts netns needs iproute2's `ip` (apt-get install iproute2)"
    try:
        subprocess.run(["ip", "netns", "list"], check=True, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return f"--hosts netns: `ip netns list` failed here ({e})"
    return None


def _ip(*args: str, check: bool = True) -> str:
    cmd = ["ip", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise HostsError(f"`{' '.join(cmd)}` failed: {done.stderr.strip() or done.returncode}")
    return done.stdout


@contextlib.contextmanager
def lock() -> Iterator[None]:
    """Held while a run picks its subnet and makes its links (runs starting together)."""
    _LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(_LOCK, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def routed(net: ipaddress.IPv4Network) -> bool:
    """Whether a route of this machine's namespace (not the default one) covers part of
    ``net``: another run's control link, or a real network. Call under :func:`lock`."""
    for line in _ip("-4", "-o", "route", "show").splitlines():
        dest = line.split()[0] if line.split() else ""
        with contextlib.suppress(ValueError):
            route = ipaddress.IPv4Network(dest, strict=False)
            if route.prefixlen > 0 and route.overlaps(net):
                return True
    return False


def free_subnet() -> int:
    """The index of the first /24 of the test range that no route here covers (another
    run's control link holds one): call under :func:`lock`."""
    for i, net in enumerate(TEST_RANGE.subnets(new_prefix=24)):
        if not routed(net):
            return i
    raise HostsError(f"--hosts netns: every /24 of {TEST_RANGE} is taken by a route here")


def create(p: Placement) -> None:
    """Make the namespaces, bridge and links of ``p`` (module docstring); on a failure,
    remove what was made and raise :class:`HostsError`."""
    try:
        _create(p)
    except BaseException:
        destroy(p.tag)
        raise


def _create(p: Placement) -> None:
    br, plen = p.bridge_netns, p.prefix
    if p.control_address is None:
        raise HostsError("a netns placement has a control node address")
    _ip("netns", "add", br)
    _ip("-n", br, "link", "add", "br0", "type", "bridge")
    _ip("-n", br, "link", "set", "br0", "up")
    for i, host in enumerate(p.hosts.values()):
        if host.netns is None:
            raise HostsError(f"host {host.name} has no namespace")
        port = f"v{i}"
        _ip("netns", "add", host.netns)
        _ip("-n", host.netns, "link", "set", "lo", "up")
        _ip("-n", host.netns, "link", "add", "eth0", "type", "veth", "peer", "name", port,
            "netns", br)
        _ip("-n", host.netns, "addr", "add", f"{host.address}/{plen}", "dev", "eth0")
        _ip("-n", host.netns, "link", "set", "eth0", "up")
        _ip("-n", br, "link", "set", port, "master", "br0", "up")
    _ip("link", "add", p.control_link, "type", "veth", "peer", "name", "ctl", "netns", br)
    _ip("-n", br, "link", "set", "ctl", "master", "br0", "up")
    _ip("addr", "add", f"{p.control_address}/{plen}", "dev", p.control_link)
    _ip("link", "set", p.control_link, "up")


def leftovers(tag: str) -> list[str]:
    """The namespaces of run ``tag`` that exist now."""
    names = [line.split()[0] for line in _ip("netns", "list").splitlines() if line.split()]
    return sorted(n for n in names if n == f"dpc-{tag}" or n.startswith(f"dpc-{tag}-"))


def destroy(tag: str, netns: Sequence[str] | None = None) -> list[str]:
    """Remove run ``tag``'s namespaces and its control link (what exists of them); returns
    what it removed. A process still inside a namespace keeps it alive, unnamed: stop the
    run's processes first (``dpc launch --cleanup`` does)."""
    removed = []
    for name in leftovers(tag) if netns is None else netns:
        _ip("netns", "del", name, check=False)
        removed.append(name)
    link = f"dpc{tag}"
    if _ip("link", "show", link, check=False):
        _ip("link", "del", link, check=False)
        removed.append(link)
    return removed
