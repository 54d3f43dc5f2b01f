"""Authenticated connections: the data plane's handshake, run on any transport.

:class:`AuthTransport` wraps a :class:`~node.net.transport.Transport` (TCP, or the memory
transport of the simulation) for one process, ``me``:

* ``connect`` opens a connection and runs the opener's side of the handshake
  (protocol/handshake.py): ``Hello``, then checks the ``Challenge`` (the server proves it
  holds the cluster token, and is the process the config puts at that address), then sends
  its ``Proof``. A server that fails any of it is treated like one that cannot be reached:
  :class:`PeerAuthenticationError` (a ``ConnectionError``), logged, and the caller retries
  or turns to another replica as it does for a dead one.
* ``serve`` runs the server's side on each accepted connection before the handler sees
  it: the first message must be a ``Hello`` naming a process of the config, and its
  ``Proof`` must hold; anything else, or silence for ``handshake_timeout``, closes the
  connection with a logged reason naming the peer's address, and nothing it sent has any
  effect (the handler never ran).

After the handshake the connection is an :class:`AuthConnection`: its ``identity`` is the
process it authenticated as, its ``peer`` says ``name@address``, and every message it
receives is checked against node/config/roles.py (it may speak only as itself, and only
the messages its role may send): a refused message raises
:class:`~protocol.errors.RemoteProtocolError` from ``receive`` with the reason, which the
reader logs before closing, as for any garbage.

Limits against a hostile peer (:class:`AuthLimits`): handshakes in progress at once (a
flood of connections that never speak evicts its own oldest, so a real peer that
completes its handshake in a round trip still gets in), authenticated connections per
process, the handshake's timeout, and the frame size during the handshake (a few KiB: an
unauthenticated peer cannot make us buffer a 16 MiB frame).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import secrets
import socket
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from node.config import roles
from node.config.model import ClusterConfig
from node.errors import PeerAuthenticationError
from node.net.transport import Connection, Handler, Server, Transport
from protocol.errors import RemoteProtocolError
from protocol.handshake import NONCE_BYTES, check_nonce, check_proof, proof
from protocol.messages import Challenge, Hello, Message, Proof
from protocol.payloads import show

__all__ = ["AuthConnection", "AuthLimits", "AuthTransport", "PeerAuthenticationError",
           "authenticated"]

_log = logging.getLogger(__name__)

#: The token of the examples: fine on loopback, a warning anywhere else.
EXAMPLE_TOKEN = "change-me"


def _ip(host: str) -> str:
    """``host`` as an IP address (a name such as ``localhost`` resolved; one that does not
    resolve counts as not loopback)."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        try:
            return socket.gethostbyname(host)
        except OSError:
            return "0.0.0.0"

#: ``(peer, message)`` -> why the message is refused (None: accepted).
Check = Callable[[str, Message], str | None]


@dataclass(frozen=True, slots=True)
class AuthLimits:
    """Bounds on what an unauthenticated or hostile peer can hold of a server."""

    #: Seconds from accept to a completed handshake (a silent peer is dropped then).
    handshake_timeout: float = 5.0
    #: Handshakes in progress at once; one more evicts the oldest.
    handshakes: int = 64
    #: Authenticated connections one process may hold to this server at once.
    per_peer: int = 64
    #: The largest frame accepted before the handshake completes (bytes).
    handshake_frame: int = 4096


class AuthConnection:
    """A connection after the handshake: speaks for ``identity`` only (module docstring)."""

    __slots__ = ("_check", "_inner", "identity")

    def __init__(self, inner: Connection, identity: str, check: Check) -> None:
        self._inner = inner
        self._check = check
        self.identity = identity

    @property
    def peer(self) -> str:
        return f"{self.identity}@{self._inner.peer}"

    async def send(self, message: Message) -> None:
        await self._inner.send(message)

    async def receive(self) -> Message | None:
        msg = await self._inner.receive()
        if msg is not None and (why := self._check(self.identity, msg)) is not None:
            raise RemoteProtocolError(f"refused: {why}")
        return msg

    def abort(self) -> None:
        if callable(reset := getattr(self._inner, "abort", None)):
            reset()

    async def close(self) -> None:
        await self._inner.close()


def _limit_frames(conn: Connection, limit: int | None) -> None:
    # Only TCP has frames to bound (the memory transport passes objects); not part of the
    # Connection interface, as ``abort`` is not.
    if callable(set_limit := getattr(conn, "limit_frames", None)):
        set_limit(limit)


class AuthTransport:
    """``inner`` with the handshake on every connection, for process ``me`` (module
    docstring). ``names`` maps each data address to the process the config puts there,
    ``known`` is every process the config names, ``token`` the cluster token;
    ``from_opener`` and ``from_server`` check each message after the handshake, on
    connections peers opened to ``me`` and on those ``me`` opened."""

    def __init__(self, inner: Transport, me: str, token: str, *,
                 names: Mapping[tuple[str, int], str], known: Collection[str],
                 from_opener: Check, from_server: Check, limits: AuthLimits = AuthLimits(),
                 log: logging.Logger = _log) -> None:
        self._inner = inner
        self.me = me
        self._token = token.encode()
        self._names = dict(names)
        self._known = frozenset(known)
        self._from_opener = from_opener
        self._from_server = from_server
        self.limits = limits
        self._log = log
        self._pending: dict[int, Connection] = {}  # handshakes in progress, oldest first
        self._accepted = 0
        self._per_peer: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()  # why connections were refused (kind -> count)

    # ------------------------------------------------------------------ opening
    async def connect(self, host: str, port: int) -> AuthConnection:
        conn = await self._inner.connect(host, port)
        expected = self._names.get((host, port))
        server: str | None = None
        try:
            async with asyncio.timeout(self.limits.handshake_timeout):
                server = await self._open(conn, expected)
        except TimeoutError:
            raise PeerAuthenticationError(
                f"{self.me}: {host}:{port} did not complete the handshake within "
                f"{self.limits.handshake_timeout:g} s") from None
        except (RemoteProtocolError, PeerAuthenticationError) as exc:
            self._log.error("%s: refusing %s:%s (%s): %s", self.me, host, port,
                            expected or "a process the config does not name", exc)
            raise PeerAuthenticationError(f"{self.me}: {host}:{port}: {exc}") from None
        finally:
            if server is None:  # refused, broken or cancelled: the connection goes with it
                await conn.close()
        return AuthConnection(conn, server, self._from_server)

    async def _open(self, conn: Connection, expected: str | None) -> str:
        _limit_frames(conn, self.limits.handshake_frame)  # an impostor's Challenge is small too
        nonce = secrets.token_hex(NONCE_BYTES)
        await conn.send(Hello(self.me, nonce))
        answer = await conn.receive()
        if answer is None:
            raise ConnectionResetError("the server closed the connection during the handshake "
                                       "(it refused us: see its log)")
        if not isinstance(answer, Challenge):
            raise PeerAuthenticationError(
                f"answered the handshake with a {type(answer).__name__}, not a Challenge")
        if answer.name not in self._known:
            raise PeerAuthenticationError(f"answered as {show(answer.name)}, which the config "
                                          "does not name")
        if expected is not None and answer.name != expected:
            raise PeerAuthenticationError(f"answered as {show(answer.name)}, but the config "
                                          f"puts {expected!r} there")
        if (problem := check_nonce(answer.nonce)) is not None:
            raise PeerAuthenticationError(problem)
        want = proof(self._token, "server", self.me, nonce, answer.name, answer.nonce)
        if not check_proof(want, answer.proof):
            raise PeerAuthenticationError(
                f"failed to prove, as {answer.name!r}, that it holds the cluster token")
        await conn.send(Proof(proof(self._token, "client", self.me, nonce, answer.name,
                                    answer.nonce)))
        _limit_frames(conn, None)
        return answer.name

    # ------------------------------------------------------------------ serving
    async def serve(self, host: str, port: int, handler: Handler) -> Server:
        async def handshake_first(conn: Connection) -> None:
            identity = await self._admit(conn)
            if identity is None:
                return  # refused and logged; the transport closes the connection
            self._per_peer[identity] += 1
            try:
                if self._per_peer[identity] > self.limits.per_peer:
                    self._refuse(conn, "too many connections",
                                 f"{identity!r} already holds {self.limits.per_peer} "
                                 "connections here")
                    return
                await handler(AuthConnection(conn, identity, self._from_opener))
            finally:
                self._per_peer[identity] -= 1
                if not self._per_peer[identity]:
                    del self._per_peer[identity]

        return await self._inner.serve(host, port, handshake_first)

    def _refuse(self, conn: Connection, kind: str, why: str) -> None:
        self.refused[kind] += 1
        self._log.error("%s: refused a connection from %s: %s; closing it", self.me,
                        conn.peer, why)

    async def _admit(self, conn: Connection) -> str | None:
        """The server's side of the handshake on ``conn``: the process it authenticated
        as, or None (refused, logged)."""
        self._accepted += 1
        key = self._accepted
        if len(self._pending) >= self.limits.handshakes:
            oldest_key = next(iter(self._pending))
            oldest = self._pending.pop(oldest_key)
            self._refuse(oldest, "evicted", f"{self.limits.handshakes} handshakes in "
                         "progress at once; the oldest makes room")
            _abort(oldest)
        self._pending[key] = conn
        _limit_frames(conn, self.limits.handshake_frame)
        timer = asyncio.timeout(self.limits.handshake_timeout)
        try:
            async with timer:
                return await self._answer(conn)
        except TimeoutError:
            if not timer.expired():
                raise
            self._refuse(conn, "timeout", "no handshake within "
                         f"{self.limits.handshake_timeout:g} s")
        except RemoteProtocolError as exc:
            self._refuse(conn, "handshake", str(exc))
        except OSError as exc:  # the peer went away mid-handshake (or was evicted)
            self.refused["gone"] += 1
            self._log.info("%s: %s left during the handshake: %r", self.me, conn.peer, exc)
        finally:
            self._pending.pop(key, None)
        return None

    async def _answer(self, conn: Connection) -> str | None:
        hello = await conn.receive()
        if hello is None:
            raise ConnectionResetError("closed before the handshake")
        if not isinstance(hello, Hello):
            raise RemoteProtocolError(f"sent a {type(hello).__name__} before the handshake")
        if hello.name not in self._known:
            raise RemoteProtocolError(f"claims to be {show(hello.name)}, which the config "
                                      "does not name")
        if hello.name == self.me:
            raise RemoteProtocolError(f"claims to be {self.me!r}, this very process")
        if (problem := check_nonce(hello.nonce)) is not None:
            raise RemoteProtocolError(problem)
        nonce = secrets.token_hex(NONCE_BYTES)
        await conn.send(Challenge(self.me, nonce, proof(self._token, "server", hello.name,
                                                        hello.nonce, self.me, nonce)))
        answer = await conn.receive()
        if answer is None:
            raise ConnectionResetError("closed during the handshake")
        if not isinstance(answer, Proof):
            raise RemoteProtocolError(f"answered the Challenge with a {type(answer).__name__}")
        want = proof(self._token, "client", hello.name, hello.nonce, self.me, nonce)
        if not check_proof(want, answer.proof):
            raise RemoteProtocolError(f"failed to prove, as {hello.name!r}, that it holds "
                                      "the cluster token")
        _limit_frames(conn, None)
        return hello.name



def _abort(conn: Connection) -> None:
    # Both transports' connections have abort (fault injection's resets use it too).
    if callable(reset := getattr(conn, "abort", None)):
        reset()


def authenticated(inner: Transport, config: ClusterConfig, me: str, *,
                log: logging.Logger = _log) -> Transport:
    """The transport process ``me`` of ``config`` uses: ``inner`` behind the handshake and
    the config's roles, unless the config turns authentication off (``[cluster]
    authenticate = false``: then ``inner`` itself, and a warning)."""
    if not config.authenticate:
        log.warning("%s: the data plane is NOT authenticated ([cluster] authenticate = false "
                    "in %s): anyone who reaches a data port can speak for any process", me,
                    config.path)
        return inner

    if config.token == EXAMPLE_TOKEN and any(
            not ipaddress.ip_address(_ip(host)).is_loopback for host, _ in config.addresses()):
        log.warning("%s: %s uses the examples' token %r on an address that is not loopback: "
                    "anyone who read the examples can speak for any process; set a secret "
                    "[cluster] token (README \"Security\")", me, config.path, EXAMPLE_TOKEN)

    def from_opener(peer: str, msg: Message) -> str | None:
        return roles.refusal_from_opener(config, me, peer, msg)

    return AuthTransport(inner, me, config.token, names=config.addresses(),
                         known=roles.names(config), from_opener=from_opener,
                         from_server=roles.refusal_from_server, log=log)
