"""The HTTP client of the replicas' control planes: fault operations and other actions.

Every fault is made at a replica; every connection in a cluster has a replica at one end, so
making it there covers them all. :func:`send_fault` hands a replica one operation of the
fault vocabulary (node/faults/ops.py) as the body of its ``POST /fault``
(``op.to_body()``); the replica reads it back with ``from_body`` and applies it
(node/faults/rules.py says what a cut or a shape does):

* cut a source from one replica: ``send_fault(config, "n1a", Cut(("s3",)))``; from all:
  once per replica. The default is a blackhole both ways (a partition: silence, connections
  stay open); ``Direction.IN`` drops only what the peers send to the replica, ``OUT`` only
  what the replica sends them (a connect from the replica then times out; under ``IN`` it
  succeeds); ``CutKind.RESET`` tears the connections down at once and refuses new ones
  (both ways);
* shape the links between a replica and processes: ``Shape(("s3",), delay=0.2,
  bandwidth=50_000, slow=0.01)``; heal named processes (``Heal(("s3",))``) or everything,
  stalls too (``Heal()``); stall a replica's reconciliations mid-replay (``Stall()`` /
  ``Unstall()``).

Kills, pauses and restarts are signals to processes: ``nemesis.py``. :func:`post_action` is
the one request of every ``POST`` (``/fault``, ``/digest``, ...). A refused request
(unknown name, bad value) or an unreachable control plane raises :class:`FaultError` with
the replica's reason.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from node.config.model import ClusterConfig
from node.faults.ops import FaultOp
from node.net.tls import control_url, url_context
from ops_scripts.errors import FaultError

__all__ = ["post_action", "send_fault"]


def post_action(config: ClusterConfig, replica: str, action: str, body: dict[str, Any]) -> dict[str, Any]:
    """``POST /<action>`` with ``body`` to ``replica``'s control plane (the cluster's token);
    its JSON answer, or :class:`FaultError` naming the replica, the action and the reason."""
    r = config.replica(replica)
    req = urllib.request.Request(
        control_url(config, r, action), data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {config.token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=5, context=url_context(config)) as resp:
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


def send_fault(config: ClusterConfig, replica: str, op: FaultOp) -> dict[str, Any]:
    """Make ``op`` at ``replica`` (``POST /fault``); its answer (the rules it now holds)."""
    return post_action(config, replica, "fault", op.to_body())
