"""The data plane's handshake and identity binding (node/net/auth.py) on both transports.

Each test plays one side honestly (an :class:`AuthTransport`) and the other honestly, with
a wrong token, or as an attacker speaking raw messages over the bare transport. What is
asserted: who got a connection, as whom, what the server's handler saw (nothing, for every
refused peer), and the logged reason.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from node.config.load import load_config
from node.errors import ConfigError, PeerAuthenticationError
from node.net.auth import AuthConnection, AuthLimits, AuthTransport, authenticated
from node.net.memory import MemoryTransport
from node.net.transport import Connection, Server, Transport
from protocol.codec import VERSION
from protocol.errors import RemoteProtocolError
from protocol.handshake import proof
from protocol.messages import Ack, Challenge, Hello, Message, MessageType, Proof
from tests.node.net.test_transport import GUARD, LEAK_FREE, Net, make_net, wait_until
from tests.paths import EXAMPLES

pytestmark = LEAK_FREE

TOKEN = "s3cret"
NAMES = ("n1a", "n1b", "c1", "s1")


def nobody_refuses(peer: str, msg: Message) -> str | None:
    return None


class Side:
    """One process's AuthTransport over ``net``, and what its server's handler saw."""

    def __init__(self, net: Net, me: str, token: str = TOKEN, *,
                 names: dict[tuple[str, int], str] | None = None,
                 limits: AuthLimits | None = None,
                 from_opener: Callable[[str, Message], str | None] = nobody_refuses) -> None:
        self.inner: Transport = net.transport(me)
        self.log = logging.getLogger(f"test.auth.{me}")
        self.auth = AuthTransport(self.inner, me, token, names=names or {}, known=NAMES,
                                  from_opener=from_opener, from_server=nobody_refuses,
                                  limits=limits or AuthLimits(), log=self.log)
        self.seen: list[tuple[str, Message]] = []  # (identity, message) the handler got
        self.served: list[str] = []  # identities of the connections the handler ran for

    async def handler(self, conn: Connection) -> None:
        assert isinstance(conn, AuthConnection)
        self.served.append(conn.identity)
        while (msg := await conn.receive()) is not None:
            self.seen.append((conn.identity, msg))
            await conn.send(msg)


@pytest.fixture(params=["tcp", "memory"])
def net(request: pytest.FixtureRequest) -> Net:
    return make_net(request.param)


async def start(net: Net, side: Side) -> Server:
    return await side.auth.serve(net.host, 0, side.handler)


async def refused(caplog: pytest.LogCaptureFixture, side: Side, words: str) -> None:
    """Wait for ``side``'s server to log a refusal containing ``words``."""
    await wait_until(lambda: any(words in r.getMessage() and "refused" in r.getMessage()
                                 for r in caplog.records if r.name == side.log.name))


async def ended(conn: Connection) -> None:
    """The other end closed ``conn`` (it receives nothing more)."""
    async with asyncio.timeout(GUARD):
        try:
            while await conn.receive() is not None:
                pass
        except (OSError, RemoteProtocolError):
            pass


async def test_a_handshake_binds_each_end_to_the_process_it_proved_to_be(net: Net) -> None:
    server_side = Side(net, "n1a")
    server = await start(net, server_side)
    client = Side(net, "c1", names={(net.host, server.port): "n1a"})
    conn = await client.auth.connect(net.host, server.port)
    try:
        assert isinstance(conn, AuthConnection) and conn.identity == "n1a"
        assert conn.peer.startswith("n1a@")
        await conn.send(Ack("n1.out", "c1", 5))
        async with asyncio.timeout(GUARD):
            assert await conn.receive() == Ack("n1.out", "c1", 5)
        assert server_side.served == ["c1"]
        assert server_side.seen == [("c1", Ack("n1.out", "c1", 5))]
    finally:
        await conn.close()
        await server.close()


async def test_a_server_without_the_token_gets_no_connection(net: Net,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """The opener checks the server's proof first: a process listening at n1a's address
    without the token (an impostor on a dead replica's port) is refused before any message
    of it is read."""
    impostor = Side(net, "n1a", token="guess")
    server = await start(net, impostor)
    client = Side(net, "c1", names={(net.host, server.port): "n1a"})
    try:
        with pytest.raises(PeerAuthenticationError, match="failed to prove, as 'n1a'"):
            await client.auth.connect(net.host, server.port)
        assert any("refusing" in r.getMessage() and "holds the cluster token" in r.getMessage()
                   for r in caplog.records if r.name == client.log.name)
        assert impostor.served == []
    finally:
        await server.close()


async def test_a_server_answering_as_another_process_is_refused(net: Net) -> None:
    other = Side(net, "n1b")  # holds the token, but is not who the config puts there
    server = await start(net, other)
    client = Side(net, "c1", names={(net.host, server.port): "n1a"})
    try:
        with pytest.raises(PeerAuthenticationError, match=r"answered as 'n1b'.*'n1a' there"):
            await client.auth.connect(net.host, server.port)
    finally:
        await server.close()


async def test_a_server_answering_as_a_process_the_config_does_not_name_is_refused(net: Net) -> None:
    stranger = Side(net, "mallory")  # holds the token; the opener has no name for its address
    server = await start(net, stranger)
    client = Side(net, "c1")
    try:
        with pytest.raises(PeerAuthenticationError, match="'mallory', which the config does not name"):
            await client.auth.connect(net.host, server.port)
    finally:
        await server.close()


async def test_a_message_before_the_handshake_is_refused_and_has_no_effect(
        net: Net, caplog: pytest.LogCaptureFixture) -> None:
    """The forged ack of issue 14: an Ack claiming to be c1, with no handshake."""
    side = Side(net, "n1a")
    server = await start(net, side)
    raw = await net.transport("attacker").connect(net.host, server.port)
    try:
        await raw.send(Ack("n1.out", "c1", 10**9))
        await ended(raw)
        await refused(caplog, side, "sent a Ack before the handshake")
        assert side.seen == [] and side.served == []
    finally:
        await raw.close()
        await server.close()


async def attack(net: Net, port: int, hello: Hello, answer: Proof | None) -> Challenge:
    """Open a raw connection, send ``hello``, read the Challenge, send ``answer``, and
    check that the server then closes the connection."""
    raw = await net.transport("attacker").connect(net.host, port)
    try:
        await raw.send(hello)
        async with asyncio.timeout(GUARD):
            challenge = await raw.receive()
        assert isinstance(challenge, Challenge)
        if answer is not None:
            await raw.send(answer)
            await raw.send(Ack("n1.out", hello.name, 10**9))
        await ended(raw)
        return challenge
    finally:
        await raw.close()


async def test_a_wrong_proof_or_an_unknown_name_is_refused(net: Net,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    side = Side(net, "n1a")
    server = await start(net, side)
    try:
        await attack(net, server.port, Hello("c1", "ab" * 16), Proof("00" * 32))
        await refused(caplog, side, "failed to prove, as 'c1', that it holds the cluster token")
        raw = await net.transport("attacker").connect(net.host, server.port)
        try:
            await raw.send(Hello("mallory", "ab" * 16))
            await ended(raw)
        finally:
            await raw.close()
        await refused(caplog, side, "claims to be 'mallory', which the config does not name")
        assert side.served == [] and side.seen == []
    finally:
        await server.close()


async def test_a_replayed_handshake_is_refused(net: Net, caplog: pytest.LogCaptureFixture) -> None:
    """An attacker that recorded c1's whole handshake (its Hello and its Proof) replays it
    on a new connection: the server's nonce is new, so the old proof fails."""
    side = Side(net, "n1a")
    server = await start(net, side)
    try:
        hello = Hello("c1", "cd" * 16)
        raw = await net.transport("c1").connect(net.host, server.port)
        try:  # the recorded, honest handshake
            await raw.send(hello)
            async with asyncio.timeout(GUARD):
                first = await raw.receive()
            assert isinstance(first, Challenge)
            recorded = Proof(proof(TOKEN.encode(), "client", "c1", hello.nonce, "n1a", first.nonce))
            await raw.send(recorded)
            await wait_until(lambda: side.served == ["c1"])
        finally:
            await raw.close()
        second = await attack(net, server.port, hello, recorded)
        assert second.nonce != first.nonce
        await refused(caplog, side, "failed to prove, as 'c1'")
        assert side.served == ["c1"] and side.seen == []
    finally:
        await server.close()


async def test_a_silent_connection_is_dropped_and_a_flood_does_not_lock_out_real_peers(
        net: Net, caplog: pytest.LogCaptureFixture) -> None:
    """Forty connections that never speak, against room for eight handshakes: the oldest
    make room for the newest, each silent one is dropped at the timeout, and a real peer
    that connects in the middle of the flood completes its handshake."""
    side = Side(net, "n1a", limits=AuthLimits(handshake_timeout=1.0, handshakes=8))
    server = await start(net, side)
    silent = [await net.transport("flood").connect(net.host, server.port) for _ in range(40)]
    client = Side(net, "c1")
    try:
        conn = await client.auth.connect(net.host, server.port)
        await conn.close()
        await wait_until(lambda: side.served == ["c1"])
        await wait_until(lambda: side.auth.refused["evicted"] >= 32)
        await wait_until(lambda: side.auth.refused["timeout"] >= 1)
        await refused(caplog, side, "no handshake within 1 s")
        for c in silent:
            await ended(c)
    finally:
        for c in silent:
            await c.close()
        await server.close()


async def test_connections_per_process_are_bounded(net: Net, caplog: pytest.LogCaptureFixture) -> None:
    side = Side(net, "n1a", limits=AuthLimits(per_peer=2))
    server = await start(net, side)
    client = Side(net, "c1")
    conns = [await client.auth.connect(net.host, server.port) for _ in range(3)]
    try:
        await ended(conns[2])
        await refused(caplog, side, "'c1' already holds 2 connections here")
        for c in conns[:2]:  # the first two still serve
            await c.send(Ack("n1.out", "c1", 1))
            async with asyncio.timeout(GUARD):
                assert await c.receive() == Ack("n1.out", "c1", 1)
    finally:
        for c in conns:
            await c.close()
        await server.close()


async def test_after_the_handshake_each_message_is_checked(net: Net) -> None:
    """The server's check (node/config/roles.py in a process) refuses a message: the
    handler's receive raises with the reason, and the message never reaches it."""
    def only_acks_as_yourself(peer: str, msg: Message) -> str | None:
        return None if isinstance(msg, Ack) and msg.subscriber == peer else "no"

    side = Side(net, "n1a", from_opener=only_acks_as_yourself)
    failures: list[BaseException] = []

    async def handler(conn: Connection) -> None:
        try:
            await side.handler(conn)
        except RemoteProtocolError as exc:
            failures.append(exc)

    server = await side.auth.serve(net.host, 0, handler)
    client = Side(net, "c1")
    conn = await client.auth.connect(net.host, server.port)
    try:
        await conn.send(Ack("n1.out", "c1", 3))
        await conn.send(Ack("n1.out", "c2", 10**9))
        await ended(conn)
        assert side.seen == [("c1", Ack("n1.out", "c1", 3))]
        assert [str(e) for e in failures] == ["refused: no"]
    finally:
        await conn.close()
        await server.close()


async def test_an_unauthenticated_peer_cannot_send_a_big_frame(caplog: pytest.LogCaptureFixture) -> None:
    """Before its handshake a TCP peer may send frames of a few KiB only: a header that
    announces a megabyte is refused at once, before any of it is buffered."""
    net = make_net("tcp")
    side = Side(net, "n1a")
    server = await start(net, side)
    loop = asyncio.get_running_loop()
    sock = socket.create_connection((net.host, server.port))
    sock.setblocking(False)
    try:
        await loop.sock_sendall(sock, struct.pack(">IBB", 1 << 20, VERSION, MessageType.HELLO))
        async with asyncio.timeout(GUARD):
            assert await loop.sock_recv(sock, 1) == b""  # closed by the server
        await refused(caplog, side, "exceeds the limit of 4096")
        assert side.served == []
    finally:
        sock.close()
        await server.close()


# ---------------------------------------------------------------- a process's transport
def test_a_process_gets_the_transport_its_config_asks_for(caplog: pytest.LogCaptureFixture) -> None:
    config = load_config(EXAMPLES / "basic.toml")
    inner = MemoryTransport()
    t = authenticated(inner, config, "n1a")
    assert isinstance(t, AuthTransport) and t.me == "n1a"
    assert not caplog.records  # the examples' token on loopback: no warning
    assert authenticated(inner, dataclasses.replace(config, authenticate=False), "n1a") is inner
    assert "the data plane is NOT authenticated" in caplog.text
    remote = dataclasses.replace(config, sources={
        n: dataclasses.replace(s, host="10.1.2.3") for n, s in config.sources.items()})
    assert isinstance(authenticated(inner, remote, "n1a"), AuthTransport)
    assert "uses the examples' token 'change-me' on an address that is not loopback" in caplog.text


def test_authenticate_is_a_boolean_of_the_cluster_table(tmp_path: Path) -> None:
    text = (EXAMPLES / "basic.toml").read_text()
    off = tmp_path / "off.toml"
    off.write_text(text.replace("[cluster]\n", "[cluster]\nauthenticate = false\n", 1))
    assert load_config(off).authenticate is False
    assert load_config(EXAMPLES / "basic.toml").authenticate is True
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("[cluster]\n", '[cluster]\nauthenticate = "yes"\n', 1))
    with pytest.raises(ConfigError, match=r"cluster\.authenticate.*true or false"):
        load_config(bad)
