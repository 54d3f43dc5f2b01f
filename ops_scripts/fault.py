"""``dpc fault``: inject and heal faults in a running cluster through the replicas' control planes.

A cut is made at a replica (``POST /fault``): the replica goes silent towards the named
processes in both directions, as in a network partition (node/faults.py). Every connection
in a cluster has a replica at one end, so cutting at the replica covers them all:

* cut a source from one replica: ``cut(config, "n1a", ["s3"])``; from all: once per replica;
* cut the link between two processes: at the replica end (either replica, for two);
* kill a replica: SIGKILL by its pid (``Launched.proc``); restart it, recovering from a
  partner (node/recovery.py): ``launch.restart_replica(config, rd, name)``;
* stall a replica's reconciliations mid-replay (a slow reconciliation, so that a new
  failure can start during STABILIZATION): ``stall(config, "n1a")`` / ``unstall``;
* heal everything: ``heal_all(config)`` (also ends stalls).

These are the hooks the fault-schedule harness grows from (issue 5).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from node.config import ClusterConfig

__all__ = ["FaultError", "cut", "heal", "heal_all", "post_action", "stall", "unstall"]


class FaultError(RuntimeError):
    """A control plane refused or could not be reached."""


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


def cut(config: ClusterConfig, replica: str, peers: Sequence[str]) -> dict[str, Any]:
    return post_action(config, replica, "fault", {"cut": list(peers)})


def heal(config: ClusterConfig, replica: str, peers: Sequence[str] | None = None) -> dict[str, Any]:
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
