"""Fault injection for one process: cuts and shaped links between it and named peers.

A replica process owns one :class:`Faults`; the operations it is asked for (node/faults/ops.py:
the vocabulary and its wire form) become calls of ``cut``, ``shape`` and ``heal``
(``Replica.apply_fault``). Its :class:`FaultyTransport` wraps each connection in a :class:`FaultyConnection`
(node/faults/connection.py: the data path; node/faults/shaping.py: shapes and the pumps' mailbox).
Every connection of a cluster has a replica at one end, so faults made there cover them all.

Theory of operation. Each peer has at most one cut rule (:class:`CutRule`) and one shape
(:class:`~node.faults.shaping.LinkShape`); a later ``cut`` or ``shape`` of a peer replaces its rule,
``heal`` removes both. Rules are looked up per message, so they act on open connections and
new ones alike. An accepting end learns its peer's name from the first message that carries
one (a subscribe, an ack, a heartbeat or permission request); until then the connection is
unknown and nothing applies to it.

* A **blackhole** cut models a partition, not a crash: silence on connections that stay
  open. Direction ``in``: what the peer sends is read and discarded (reading goes on, else
  TCP back-pressure would stall the peer's writer and its other readers); ``out``: what this
  process sends to the peer is dropped (``send`` returns); ``both``: both. A message is
  judged when it crosses: handed over, or leaving after its delay (one in flight is lost).
  A connect to the peer under ``both`` or ``out`` gets no answer, like a lost SYN:
  ``TimeoutError`` after ``connect_timeout``, unless the rule goes or changes first. Under
  ``in`` the connect succeeds: a cut acts on messages, and refusing the handshake (the lost
  SYN-ACK) would make ``in`` the same as ``both`` for every connection this process opens.
* A **reset** cut models a peer that crashed or a firewall that rejects, and is both ways by
  nature: every connection to the peer is torn down at once (the inner connection is aborted
  where the transport can: TCP sends a RST, memory resets both ends; else closed), so the
  remote end sees a reset or the end of the stream, and here ``receive`` and ``send`` raise
  ``ConnectionResetError`` naming the fault. A connect is refused at once
  (``ConnectionRefusedError``), and a connection accepted from the peer is torn down as
  soon as its name is known.
* A **shape** adds latency (``delay``: a message from the peer is handed over no earlier
  than ``delay`` after it was read; one to the peer leaves no earlier than ``delay`` after
  ``send``), paces each direction to ``bandwidth`` bytes/s of frames (the next message
  waits size/bandwidth after the start of the previous one) and reads the peer's messages
  at most one per ``slow`` seconds (after reading one, the next read waits the larger of
  ``slow`` and its size/bandwidth; an idle link's first message is not held). Pacing waits,
  so back-pressure reaches the sender: the peer's when this end reads slowly (a full TCP
  buffer blocks its writer's drain, a full memory queue its ``send``), this process's own
  ``send`` when it sends. Under a delay a connection gets pumps, tasks of its own: one reads
  ahead into a bounded mailbox and one sends behind ``send``, so that order is kept and a
  delay is latency, not a pause per message (up to 1024 messages in flight per direction).

Invariants:

* A stream never skips, and a dropped message leaves a gap: ``heal`` closes every
  connection that was open to a healed peer while a blackhole rule applied to it, whose
  users reconnect and resubscribe from their ids. From the heal on it delivers and sends
  nothing, even before its inner connection has finished closing. A heal of a shape closes
  nothing (nothing was lost); other connections are untouched.
* Determinism: the registry of connections is a dict in the order they were wrapped; heal
  and reset act on them in that order. No set order, randomness or wall clock decides
  anything (time is the event loop's), so a simulation replays exactly from its seed.
* Nothing leaks: a connection leaves the registry when closed, healed or reset. Its tasks
  (pumps, the close of its inner connection after a heal or reset) belong to it and its
  ``close`` cancels or awaits them; ``close`` first lets delayed sends leave, for at most
  a grace period after the last one is due (as TCP flushes on close).
* A refused call (bad name, direction, kind or shape: :class:`~node.errors.NodeError`
  naming the key) changes nothing.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from node.errors import NodeError
from node.faults.connection import FaultyConnection
from node.faults.ops import CutKind, Direction, checked_cut
from node.faults.shaping import LinkShape
from node.net.transport import Connection, Handler, Server, Transport

__all__ = ["CutRule", "Faults", "FaultyConnection", "FaultyTransport"]


@dataclass(frozen=True, slots=True)
class CutRule:
    """The cut rule for one peer."""

    direction: Direction = Direction.BOTH
    kind: CutKind = CutKind.BLACKHOLE

    @property
    def drops_in(self) -> bool:
        return self.kind is CutKind.BLACKHOLE and self.direction is not Direction.OUT

    @property
    def drops_out(self) -> bool:
        return self.kind is CutKind.BLACKHOLE and self.direction is not Direction.IN

    def as_dict(self) -> dict[str, str]:
        return {"direction": self.direction.value, "kind": self.kind.value}


class Faults:
    """The cut rules and shapes of one process, and every connection it wrapped."""

    def __init__(self, owner: str, *, log: logging.Logger) -> None:
        self.owner = owner
        self._log = log
        self._rules: dict[str, CutRule] = {}
        self._shapes: dict[str, LinkShape] = {}
        self._conns: dict[int, FaultyConnection] = {}  # by wrap order: heals replay exactly
        self._keys = itertools.count()
        self._changed = asyncio.Event()  # set, then replaced, when the cut rules change
        self._counts = dict.fromkeys(
            ("dropped_in", "dropped_out", "closed_on_heal", "reset", "refused"), 0
        )

    def _names(self, peers: Iterable[str], action: str, *, others: bool = True) -> list[str]:
        if isinstance(peers, str):  # iterable too: cut("n1a") would cut "n", "1" and "a"
            raise NodeError(f"cannot {action}: expected a list of names, got the string {peers!r}")
        names = list(dict.fromkeys(peers))  # deduplicated, in the caller's order
        for bad in (name for name in names if not isinstance(name, str)):
            kind = type(bad).__name__
            raise NodeError(f"cannot {action}: a process name must be a str, got {bad!r} ({kind})")
        if others and self.owner in names:
            raise NodeError(f"cannot {action.split()[0]} process {self.owner!r} from itself")
        return names

    # ------------------------------------------------------------------ rules
    def cut(
        self,
        peers: Iterable[str],
        *,
        direction: Direction | str = Direction.BOTH,
        kind: CutKind | str = CutKind.BLACKHOLE,
    ) -> None:
        """Cut this process from ``peers`` (replacing their cut rules) until healed."""
        action = f"cut {self.owner!r}"
        names = self._names(peers, action)
        rule = CutRule(*checked_cut(direction, kind, action))
        for name in names:
            self._rules[name] = rule
        wanted = set(names)
        for conn in [c for c in self._conns.values() if c.peer_name in wanted]:
            self._apply(conn, rule)
        self._notify()
        self._log.warning("fault injection: %s is cut from %s (%s, %s)", self.owner, names,
                          rule.kind.value, rule.direction.value)

    def shape(
        self,
        peers: Iterable[str],
        *,
        delay: float = 0.0,
        bandwidth: float | None = None,
        slow: float = 0.0,
    ) -> None:
        """Shape the links between this process and ``peers`` (replacing their shapes)."""
        action = f"shape {self.owner!r}"
        names = self._names(peers, action)
        shape = LinkShape.checked(delay=delay, bandwidth=bandwidth, slow=slow, action=action)
        for name in names:
            self._shapes[name] = shape
        self._log.warning("fault injection: %s shapes its links to %s: %s", self.owner, names,
                          shape.as_dict())

    def heal(self, peers: Iterable[str] | None = None) -> list[str]:
        """Remove the cut rules and shapes of ``peers`` (``None``: all), close the
        connections to them that may have gaps, and return the names healed."""
        if peers is None:
            wanted = list(dict.fromkeys([*self._rules, *self._shapes]))
        else:
            wanted = self._names(peers, f"heal {self.owner!r}", others=False)
        cut = [name for name in wanted if self._rules.pop(name, None) is not None]
        shaped = [name for name in wanted if self._shapes.pop(name, None) is not None]
        if not cut and not shaped:
            return []
        uncut = set(cut)
        closing = [c for c in self._conns.values() if c._gappy and c.peer_name in uncut]
        for conn in closing:
            conn._end("closed on heal of a cut", reset=False)
        self._counts["closed_on_heal"] += len(closing)
        if cut:
            self._notify()  # wakes the connects waiting for these peers
        msg = "fault injection: %s healed from %s; closed %d connection(s) that may have gaps"
        self._log.warning(msg, self.owner, sorted(uncut | set(shaped)), len(closing))
        return sorted(uncut | set(shaped))

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _apply(self, conn: FaultyConnection, rule: CutRule) -> None:
        """What ``rule`` does to ``conn``, an open connection to the peer it names."""
        if rule.kind is CutKind.RESET:
            self._counts["reset"] += 1
            conn._end(f"reset by fault injection ({self.owner} resets {conn.peer_name})",
                      reset=True)
        else:
            conn._gappy = True  # may lose messages from now until the heal closes it

    # ------------------------------------------------------------------ queries
    def rule(self, peer: str | None) -> CutRule | None:
        """The cut rule for ``peer`` (``None``: unknown or not cut)."""
        return None if peer is None else self._rules.get(peer)

    def shape_of(self, peer: str | None) -> LinkShape | None:
        return None if peer is None else self._shapes.get(peer)

    def blocks(self, peer: str | None) -> bool:
        """Whether any cut rule applies to ``peer``."""
        return self.rule(peer) is not None

    @property
    def cut_peers(self) -> list[str]:
        return sorted(self._rules)

    def status(self) -> dict[str, Any]:
        return {
            "cut": self.cut_peers,
            "rules": {p: self._rules[p].as_dict() for p in sorted(self._rules)},
            "shapes": {p: self._shapes[p].as_dict() for p in sorted(self._shapes)},
            **self._counts,
        }

    # ------------------------------------------------------------------ connections
    def wrap(self, conn: Connection, peer: str | None = None) -> FaultyConnection:
        """``conn`` under these faults; ``peer`` is its process name, if already known."""
        key = next(self._keys)
        faulty = FaultyConnection(conn, self, peer, key)
        self._conns[key] = faulty
        if (rule := self.rule(peer)) is not None:
            # A connection accepted from a peer cut by a reset is torn down at once: an
            # authenticated one names its peer here, and no later message would (it once
            # served a client an isolated replica, tests/node/faults/test_cuts.py).
            self._apply(faulty, rule)
        return faulty

    def _learned(self, conn: FaultyConnection) -> None:
        """``conn`` just learned its peer's name: a rule for that peer applies from now."""
        if (rule := self.rule(conn.peer_name)) is not None:
            self._apply(conn, rule)


class FaultyTransport:
    """A :class:`~node.net.transport.Transport` whose connections obey ``faults``; ``names``
    maps the ``(host, port)`` each process listens on to its name."""

    def __init__(
        self,
        inner: Transport,
        faults: Faults,
        names: Mapping[tuple[str, int], str],
        *,
        connect_timeout: float = 1.0,
    ) -> None:
        self._inner = inner
        self._faults = faults
        self._names = names
        self._connect_timeout = connect_timeout

    async def serve(self, host: str, port: int, handler: Handler) -> Server:
        faults = self._faults

        async def wrapped(conn: Connection) -> None:
            # An authenticated connection (node/net/auth.py) names its process at once;
            # otherwise the first message that names its sender does.
            faulty = faults.wrap(conn, getattr(conn, "identity", None))
            try:
                await handler(faulty)
            finally:
                await faulty.close()  # prunes the registry and awaits its tasks

        return await self._inner.serve(host, port, wrapped)

    def _refused(self, peer: str, host: str, port: int) -> ConnectionRefusedError:
        self._faults._counts["refused"] += 1
        return ConnectionRefusedError(
            errno.ECONNREFUSED,
            f"connect to {peer} at {host}:{port} refused: {self._faults.owner} resets its "
            f"connections to {peer} (fault injection)",
        )

    async def connect(self, host: str, port: int) -> FaultyConnection:
        faults, peer = self._faults, self._names.get((host, port))
        if peer is None:  # nobody's name: no rule can name it
            return faults.wrap(await self._inner.connect(host, port))
        deadline = asyncio.get_running_loop().time() + self._connect_timeout
        while (rule := faults.rule(peer)) is not None and rule.direction is not Direction.IN:
            if rule.kind is CutKind.RESET:
                raise self._refused(peer, host, port)
            try:  # a blackhole: the handshake gets no answer, unless the rule goes first
                async with asyncio.timeout_at(deadline):
                    await faults._changed.wait()
            except TimeoutError:
                raise TimeoutError(
                    f"connect to {peer} at {host}:{port} timed out: "
                    f"{faults.owner} and {peer} are cut by fault injection"
                ) from None
        conn = await self._inner.connect(host, port)
        if (rule := faults.rule(peer)) is not None and rule.kind is CutKind.RESET:
            # reset while the handshake ran
            if callable(reset := getattr(conn, "abort", None)):
                reset()
            await conn.close()
            raise self._refused(peer, host, port)
        return faults.wrap(conn, peer)
