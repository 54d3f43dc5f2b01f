"""Where each process of a run lives: its host, that host's address, and how it is reached.

Role: the one model of a run's hosts (pure: no I/O but :meth:`Placement.write` /
:func:`read_placement`). ``dpc launch / run / torture --hosts MODE`` places every process:

* ``local``: where the config says, on this machine (today's behaviour; nothing changes);
* ``netns``: each host is a network namespace of this machine (``netns.py`` makes them).
  A config whose processes all sit on loopback (the examples) gets **one host per
  process**, each with its own address in a /24 of the benchmarking range 198.18.0.0/15
  (RFC 2544: no one's network); a config that names real addresses keeps them (one host
  per distinct address, all in one /24), and its loopback processes get hosts of their
  own beside them. The run's config is rewritten with those addresses, and every control
  plane binds on its process's own host (``control_address``);
* ``ssh``: each host is a machine reached over SSH (``ssh.py``); the config's addresses are
  used as they are, with ``[hosts.ADDRESS] ssh = "user@machine"`` where the SSH
  destination is not the address itself.

The placement is written to ``RUN_DIR/hosts.json`` so that whoever starts a process of the
run later (``dpc inject restart``, the supervisor) starts it on its host, and whoever cuts
a link (``ops_scripts/harness/kernel.py``) knows the addresses. The launching process is the *control node*
(Jepsen's term): in ``netns`` mode it has an address of its own on the run's bridge, from
which it reaches every control plane; no fault ever cuts it.

Invariants: every process of the config is placed exactly once; two hosts never share an
address; namespace names carry the run's tag (:func:`run_tag`, from the run directory's
path) so that ``dpc launch --cleanup RUN_DIR`` finds a crashed run's leftovers by name.
"""

from __future__ import annotations

import copy
import hashlib
import ipaddress
import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from ops_scripts.errors import HostsError

__all__ = ["HOSTS_FILE", "TEST_RANGE", "Host", "HostsMode", "Placement", "place",
           "processes_of", "read_placement", "run_tag"]

HOSTS_FILE = "hosts.json"
#: RFC 2544's benchmarking range: addresses that are no one's network.
TEST_RANGE = ipaddress.IPv4Network("198.18.0.0/15")
_FIRST_HOST = 10  # a netns run's processes get .10, .11, ... (the control node .1)
_LOOPBACK = {"localhost", "::1"}


class HostsMode(Enum):
    LOCAL = "local"
    NETNS = "netns"
    SSH = "ssh"


@dataclass(frozen=True, slots=True)
class Host:
    """One host of a run."""

    name: str  # the process's name (one host per process) or the address
    address: str
    netns: str | None = None  # its network namespace (netns mode)
    ssh: str | None = None  # its SSH destination (ssh mode)


@dataclass(frozen=True, slots=True)
class Placement:
    mode: HostsMode
    tag: str  # the run's tag: namespace and interface names carry it
    hosts: Mapping[str, Host] = field(default_factory=dict)  # host name -> host
    where: Mapping[str, str] = field(default_factory=dict)  # process -> host name
    control_address: str | None = None  # the control node's (netns: on the run's bridge)
    prefix: int = 24

    def host_of(self, process: str) -> Host | None:
        """``process``'s host (None: not placed, i.e. local mode)."""
        name = self.where.get(process)
        return None if name is None else self.hosts[name]

    def netns_of(self, process: str) -> str | None:
        host = self.host_of(process)
        return None if host is None else host.netns

    @property
    def bridge_netns(self) -> str:
        """The namespace of the run's bridge (netns mode)."""
        return f"dpc-{self.tag}"

    @property
    def control_link(self) -> str:
        """The control node's interface on this machine (at most 15 characters)."""
        return f"dpc{self.tag}"

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode.value, "tag": self.tag, "prefix": self.prefix,
                "control_address": self.control_address,
                "hosts": [asdict(h) for h in self.hosts.values()], "where": dict(self.where)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Placement:
        hosts = {h["name"]: Host(**h) for h in data["hosts"]}
        return cls(HostsMode(data["mode"]), data["tag"], hosts, dict(data["where"]),
                   data.get("control_address"), int(data.get("prefix", 24)))

    def write(self, run_dir: Path) -> None:
        (run_dir / HOSTS_FILE).write_text(json.dumps(self.to_json(), indent=1))


def read_placement(run_dir: Path) -> Placement | None:
    """The placement a run recorded (None: none, a local run of before ``--hosts``)."""
    path = run_dir / HOSTS_FILE
    if not path.is_file():
        return None
    try:
        return Placement.from_json(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError) as e:
        raise HostsError(f"{path}: not a placement ({type(e).__name__}: {e})") from None


def run_tag(run_dir: Path) -> str:
    """Eight hex digits naming a run's namespaces and interfaces (from its directory)."""
    return hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:8]


def processes_of(raw: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any], str]]:
    """Every process table of a config: (name, its table, the key holding its host)."""
    for name, t in raw.get("sources", {}).items():
        yield name, t, "host"
    for node in raw.get("nodes", {}).values():
        for r in node.get("replicas", []):
            yield r["name"], r, "host"
    for name, t in raw.get("clients", {}).items():
        yield name, t, "host"
    if isinstance(raw.get("controller"), dict):
        yield "controller", raw["controller"], "host"


def _loopback(host: str) -> bool:
    if host in _LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def place(raw: Mapping[str, Any], mode: HostsMode, tag: str, *,
          free_subnet: int = 0, ssh: Mapping[str, str] | None = None,
          ) -> tuple[Placement, dict[str, Any]]:
    """The placement of the config ``raw`` in ``mode``, and the config rewritten for it
    (netns: every process at its host's address, control planes on their own hosts).
    ``free_subnet`` is the /24 of the test range a netns run of a loopback config takes
    (its index: ``netns.free_subnet`` finds one no other run uses); ``ssh`` maps an
    address to its SSH destination. :class:`HostsError` for what cannot be placed."""
    out = copy.deepcopy(dict(raw))
    if mode is HostsMode.LOCAL:
        return Placement(mode, tag), out
    if mode is HostsMode.SSH:
        return _place_ssh(out, tag, ssh or {})
    return _place_netns(out, tag, free_subnet)


def _place_netns(raw: dict[str, Any], tag: str, free_subnet: int) -> tuple[Placement, dict[str, Any]]:
    procs = list(processes_of(raw))
    given: dict[str, list[str]] = {}  # address -> its processes
    for name, t, key in procs:
        host = str(t.get(key, "127.0.0.1"))
        if not _loopback(host):
            given.setdefault(host, []).append(name)
    subnets = set()
    for address in given:
        try:
            ip = ipaddress.IPv4Address(address)
        except ValueError:
            raise HostsError(f"--hosts netns: host {address!r} (of {', '.join(given[address])}) "
                             "is not an IPv4 address: a namespace host is made with the "
                             "address the config gives it") from None
        subnets.add(ipaddress.IPv4Network(f"{ip}/24", strict=False))
    if len(subnets) > 1:
        raise HostsError("--hosts netns: the config's addresses must lie in one /24 (one "
                         f"bridge), found {', '.join(sorted(map(str, subnets)))}")
    net = subnets.pop() if subnets else list(TEST_RANGE.subnets(new_prefix=24))[free_subnet]
    taken = {ipaddress.IPv4Address(a) for a in given}
    pool = (ip for ip in net.hosts() if ip not in taken and int(ip) - int(net.network_address) >= _FIRST_HOST)
    hosts: dict[str, Host] = {}
    where: dict[str, str] = {}
    for address, names in given.items():
        hname = names[0] if len(names) == 1 else address
        hosts[hname] = Host(hname, address, f"dpc-{tag}-{hname}")
        where.update((n, hname) for n in names)
    for name, t, key in procs:
        if name not in where:
            try:
                address = str(next(pool))
            except StopIteration:
                raise HostsError(f"--hosts netns: more processes than addresses in {net}") from None
            hosts[name] = Host(name, address, f"dpc-{tag}-{name}")
            where[name] = name
        t[key] = hosts[where[name]].address
        if _loopback(str(t.get("control_host", ""))):
            del t["control_host"]  # its control plane binds on its own host
    cluster = raw.get("cluster", {})
    if _loopback(str(cluster.get("control_host", ""))):
        del cluster["control_host"]
    control = next(ip for ip in net.hosts() if ip not in taken
                   and str(ip) not in {h.address for h in hosts.values()})
    return Placement(HostsMode.NETNS, tag, hosts, where, str(control), net.prefixlen), raw


def _place_ssh(raw: dict[str, Any], tag: str, ssh: Mapping[str, str]) -> tuple[Placement, dict[str, Any]]:
    hosts: dict[str, Host] = {}
    where: dict[str, str] = {}
    for name, t, key in processes_of(raw):
        address = str(t.get(key, "127.0.0.1"))
        hosts.setdefault(address, Host(address, address, ssh=ssh.get(address, address)))
        where[name] = address
    return Placement(HostsMode.SSH, tag, hosts, where), raw
