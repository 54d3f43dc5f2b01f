"""This process's data-plane traffic: bytes sent per message type and bytes received, over
every TCP connection (node/net/tcp.py counts them). ``/status`` reports them
(``traffic``); ``dpc bench ha`` reads a process pair's bandwidth from them.

One counter per process, like its clock (node/clock.py): the bytes belong to the process,
whatever object sent them. Plain integers, increased from the event loop only.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

__all__ = ["TRAFFIC", "Traffic"]


class Traffic:
    """Bytes on the wire: ``sent`` by message type name, ``received`` in all."""

    __slots__ = ("received", "sent")

    def __init__(self) -> None:
        self.sent: Counter[str] = Counter()
        self.received = 0

    def status(self) -> dict[str, Any]:
        """Plain data: bytes sent per message type, their total, bytes received."""
        return {"sent": dict(self.sent), "sent_total": sum(self.sent.values()),
                "received": self.received}


#: This process's counters.
TRAFFIC = Traffic()
