"""Partitions made by the kernel: nftables rules in each host's namespace (``--hosts netns``).

Role: the kernel's half of the nemesis (Jepsen's way: the packet filter cuts real links).
Under ``--hosts netns`` every partition a scenario names (a link, one way or both, an
isolated host, a split, a bridge, a source cut) is made here instead of by the replicas'
fault rules; delays, bandwidth limits and slow readers stay in the processes (the kernel
here has no netem), as do stalls. A cut is:

* **blackhole** (silence): messages from A to B vanish: ``ip daddr B drop`` in A's output
  hook and ``ip saddr A drop`` in B's input hook. TCP then does what it does on a real
  network: retransmissions into the void, half-open connections, SYNs that never return;
* **reset**: both ways, and TCP is refused at once: ``reject with tcp reset`` on both
  hosts (a connect fails with ECONNREFUSED, an open connection with ECONNRESET).

:class:`KernelCuts` keeps the partitions in force (by fault id, they overlap) and
:func:`rulesets` renders, purely, each host's whole ruleset: one table ``inet dpc`` that
each apply replaces atomically (``nft -f``: delete and define in one transaction). So a heal
removes exactly what its fault added and nothing another fault still wants, and healing
everything deletes the table.

Invariants: only namespaces of the run are touched; a cut between two processes of one
host cannot be made by addresses and is refused (:class:`HostsError`); the control node's
address is never cut (the launcher always reaches every control plane).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from node.config.model import ClusterConfig
from ops_scripts.cluster.hosts.placement import Placement
from ops_scripts.errors import HostsError
from ops_scripts.harness.schedule import Fault, cut_pairs

__all__ = ["HostRules", "KernelCuts", "rulesets", "unusable"]

_TABLE = "dpc"


def unusable() -> str | None:
    """Why the kernel cannot cut links here (None: it can)."""
    if shutil.which("nft") is None:
        return "kernel partitions need nftables' `nft` (apt-get install nftables)"
    return None


@dataclass
class HostRules:
    """What one host drops or refuses: peers' addresses, per hook."""

    drop_in: set[str] = field(default_factory=set)  # from these: silence
    drop_out: set[str] = field(default_factory=set)  # to these: silence
    reset: set[str] = field(default_factory=set)  # to and from these: refused

    def script(self) -> str:
        """The nft script that makes this host's table hold exactly these rules."""
        head = f"table inet {_TABLE}\ndelete table inet {_TABLE}\n"
        if not (self.drop_in or self.drop_out or self.reset):
            return head

        def chain(hook: str, key: str, drop: set[str]) -> str:
            lines = [f"  chain {hook} {{", f"    type filter hook {hook} priority filter; policy accept;"]
            if self.reset:
                peers = ", ".join(sorted(self.reset))
                lines.append(f"    ip {key} {{ {peers} }} meta l4proto tcp reject with tcp reset")
            if drop | self.reset:
                lines.append(f"    ip {key} {{ {', '.join(sorted(drop | self.reset))} }} drop")
            return "\n".join([*lines, "  }"])

        return (head + f"table inet {_TABLE} {{\n" + chain("input", "saddr", self.drop_in) + "\n"
                + chain("output", "daddr", self.drop_out) + "\n}\n")


def rulesets(faults: Iterable[Fault], config: ClusterConfig,
             placement: Placement) -> dict[str, HostRules]:
    """Each host namespace of ``placement`` -> the rules the partitions ``faults`` put there
    (every host appears, with empty rules where nothing is cut)."""
    out = {h.netns: HostRules() for h in placement.hosts.values() if h.netns is not None}
    for fault in faults:
        if fault.kind != "partition":
            continue
        reset = fault.params.get("cut") == "reset"
        for a, b in cut_pairs(fault, config):
            ha, hb = placement.host_of(a), placement.host_of(b)
            if ha is None or hb is None or ha.netns is None or hb.netns is None:
                raise HostsError(f"cannot cut {a} from {b} in the kernel: "
                                 f"{a if ha is None else b} has no host of its own here")
            if ha.name == hb.name:
                raise HostsError(f"cannot cut {a} from {b} in the kernel: both run on host "
                                 f"{ha.address} (give them hosts of their own)")
            if reset:
                out[ha.netns].reset.add(hb.address)
                out[hb.netns].reset.add(ha.address)
            else:
                out[ha.netns].drop_out.add(hb.address)
                out[hb.netns].drop_in.add(ha.address)
    return out


class KernelCuts:
    """The partitions in force in a netns run, applied as nftables rules (module docstring)."""

    def __init__(self, config: ClusterConfig, placement: Placement) -> None:
        why = unusable()
        if why is not None:
            raise HostsError(why)
        self.config, self.placement = config, placement
        self.faults: dict[int, Fault] = {}
        self._applied: dict[str, str] = {}  # netns -> the script last applied there

    def add(self, fid: int, fault: Fault) -> None:
        self.faults[fid] = fault

    def remove(self, fid: int) -> None:
        self.faults.pop(fid, None)

    def clear(self) -> None:
        self.faults.clear()

    def apply(self, *, everywhere: bool = False) -> None:
        """Bring every host's table to the partitions in force: those whose rules changed
        since this model last applied them, and every host it has not applied yet (a model
        made by ``dpc inject`` does not know what an earlier one left there), or all of
        them with ``everywhere``."""
        wanted = rulesets(self.faults.values(), self.config, self.placement)
        for ns, rules in wanted.items():
            script = rules.script()
            if not everywhere and self._applied.get(ns) == script:
                continue
            _nft(ns, script)
            self._applied[ns] = script

    def describe(self) -> Mapping[str, HostRules]:
        return rulesets(self.faults.values(), self.config, self.placement)


def _nft(netns: str, script: str) -> None:
    cmd = ["ip", "netns", "exec", netns, "nft", "-f", "-"]
    done = subprocess.run(cmd, input=script, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise HostsError(f"nft in {netns} refused the rules: {done.stderr.strip()}\n{script}")
