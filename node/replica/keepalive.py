"""A process pair's keep-alives (Hwang et al., section 2): each replica of a pair asks its
partner for a heartbeat every ``interval`` on the partner's data port, and hands what it
learns to the pair's roles (node/replica/pair.py).

The partner's answer is the ``HeartbeatResponse`` it gives downstream: a secondary says
STANDBY on its output streams, a primary anything else. A partner that misses more than
``misses`` requests in a row is declared failed (the :class:`HeartbeatTracker` rules, the
paper's 3 x 100 ms); it is reported once per failure, and again only after it answered.
A recovering replica answers no heartbeat (node/replica/recovery.py): to its partner it is
still down.

Only what a dead peer raises ends a connection here (the transport's contract); the loop
then reconnects every interval. Anything else is a bug and ends the replica, loudly.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable

from node.clock import now_us
from node.net.transport import Connection, Transport
from node.replica.pair import Role
from node.streams.monitor import heartbeat_connection, heartbeat_rounds
from node.streams.upstream import HeartbeatTracker
from protocol.messages import ConsistencyState, HeartbeatRequest, HeartbeatResponse

__all__ = ["KeepAlive", "role_of"]


def role_of(msg: HeartbeatResponse) -> Role:
    """The role a partner's heartbeat answer says it has."""
    standby = ConsistencyState.STANDBY in msg.streams.values()
    return Role.SECONDARY if standby else Role.PRIMARY


class KeepAlive:
    """Keep-alives to one partner; ``answered(role)`` and ``failed()`` are called from the
    event loop, in the order things happen."""

    def __init__(self, owner: str, partner: str, address: tuple[str, int], transport: Transport,
                 *, interval: int, misses: int, answered: Callable[[Role], None],
                 failed: Callable[[], None], log: logging.Logger) -> None:
        self.owner, self.partner, self.address = owner, partner, address
        self.transport = transport
        self.interval = interval
        self.tracker = HeartbeatTracker([partner], interval, misses, start=now_us())
        self._answered, self._failed = answered, failed
        self._log = log
        self._seq = itertools.count(1)
        self._conn: Connection | None = None
        self._down = False  # reported failed, not heard from since

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._keep_connected())
            tg.create_task(self._beat())

    async def _beat(self) -> None:
        await heartbeat_rounds(self.tracker, self._seq, self._send, self._judge)

    async def _send(self, name: str, seq: int) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError):  # the reader notices and reconnects
                await self._conn.send(HeartbeatRequest(self.owner, seq, {}))

    def _judge(self) -> None:
        if not self.tracker.alive(self.partner) and not self._down:
            self._down = True
            self._failed()

    async def _keep_connected(self) -> None:
        await heartbeat_connection(self.transport, self.address, self.interval, self._attach,
                                   self._heard, owner=self.owner, who="partner",
                                   name=self.partner, log=self._log)

    def _attach(self, conn: Connection | None) -> None:
        self._conn = conn

    def _heard(self, msg: HeartbeatResponse) -> None:
        if self.tracker.answered(self.partner, msg.seq, msg.state, msg.streams, msg.frontiers):
            self._down = False
            self._answered(role_of(msg))
