"""``dpc fault``: inject and heal faults in a running cluster through the replicas' control planes.

Every fault is made at a replica (``POST /fault``, node/faults/rules.py); every connection in a
cluster has a replica at one end, so making it there covers them all:

* cut a source from one replica: ``cut(config, "n1a", ["s3"])``; from all: once per replica.
  The default is a blackhole both ways (a partition: silence, connections stay open);
  ``direction="in"`` drops only what the peers send to the replica, ``"out"`` only what the
  replica sends them (a connect from the replica then times out; under ``"in"`` it succeeds);
  ``kind="reset"`` tears the connections down at once and refuses new ones (both ways);
* cut the link between two processes: at the replica end (either replica, for two);
* shape the links between a replica and processes: ``shape(config, "n1a", ["s3"],
  delay=0.2, bandwidth=50_000, slow=0.01)``: one-way latency in seconds, bytes/s each way,
  and a slow reader (seconds between two reads of their messages); a later shape replaces it;
* kill a replica: SIGKILL by its pid (``Launched.proc``); restart it, recovering from a
  partner (node/replica/recovery.py): ``launch.restart_replica(config, rd, name)``;
* stall a replica's reconciliations mid-replay (a slow reconciliation, so that a new
  failure can start during STABILIZATION): ``stall(config, "n1a")`` / ``unstall``;
* heal named processes at a replica (their cuts and shapes): ``heal(config, "n1a", ["s3"])``;
  heal everything: ``heal_all(config)`` (also ends stalls).

A refused request (unknown name, bad value) raises :class:`FaultError` with the replica's
reason. These are the hooks the fault-schedule harness grows from (issue 5).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from node.config.model import ClusterConfig
from ops_scripts.errors import FaultError

__all__ = ["cut", "heal", "heal_all", "post_action", "shape", "stall", "unstall"]


def post_action(config: ClusterConfig, replica: str, action: str, body: dict[str, Any]) -> dict[str, Any]:
    r = config.replica(replica)
    req = urllib.request.Request(
        f"http://{config.control_host}:{r.control_port}/{action}", data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {config.token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            data: dict[str, Any] = json.load(resp)
            return data
    except urllib.error.HTTPError as exc:
        raw = exc.read().decode(errors="replace")
        try:
            reason = json.loads(raw).get("error", raw)
        except (ValueError, AttributeError):
            reason = raw
        raise FaultError(f"{replica} /{action} {body}: HTTP {exc.code}: {reason}") from None
    except OSError as exc:
        raise FaultError(f"{replica} /{action}: control plane unreachable: {exc}") from None


def cut(config: ClusterConfig, replica: str, peers: Sequence[str], *, direction: str = "both",
        kind: str = "blackhole") -> dict[str, Any]:
    """Cut ``replica`` from ``peers``: ``direction`` "both" | "in" | "out", ``kind``
    "blackhole" | "reset" (a reset is both ways)."""
    body = {"cut": list(peers), "direction": direction, "kind": kind}
    return post_action(config, replica, "fault", body)


def shape(config: ClusterConfig, replica: str, peers: Sequence[str], *, delay: float = 0.0,
          bandwidth: float | None = None, slow: float = 0.0) -> dict[str, Any]:
    """Shape the links between ``replica`` and ``peers``: ``delay`` seconds of one-way
    latency, at most ``bandwidth`` bytes/s each way, one read of their messages per ``slow``
    seconds at most."""
    body: dict[str, Any] = {"shape": list(peers), "delay": delay, "slow": slow}
    if bandwidth is not None:
        body["bandwidth"] = bandwidth
    return post_action(config, replica, "fault", body)


def heal(config: ClusterConfig, replica: str, peers: Sequence[str] | None = None) -> dict[str, Any]:
    """Remove the cuts and shapes of ``peers`` at ``replica`` (``None``: all, and end a stall)."""
    return post_action(config, replica, "fault", {"heal": "all" if peers is None else list(peers)})


def stall(config: ClusterConfig, replica: str) -> dict[str, Any]:
    return post_action(config, replica, "fault", {"stall": "replay"})


def unstall(config: ClusterConfig, replica: str) -> dict[str, Any]:
    return post_action(config, replica, "fault", {"unstall": "replay"})


def heal_all(config: ClusterConfig, skip: Sequence[str] = ()) -> None:
    """Heal every cut at every replica (``skip``: replicas known to be down)."""
    for node in config.nodes.values():
        for r in node.replicas:
            if r.name not in skip:
                heal(config, r.name)
