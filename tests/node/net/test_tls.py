"""TLS on the data plane ([cluster.tls], node/net/tls.py, node/net/tcp.py): mutual TLS with
the cluster's CA, the server checked against the host the opener dialled, and the token
handshake inside it. Certificates come from a throwaway CA (trustme)."""

from __future__ import annotations

import asyncio
import socket
import ssl
from pathlib import Path

import pytest
import trustme

from node.config.load import load_config
from node.config.model import TlsFiles
from node.errors import ConfigError
from node.net.auth import AuthConnection, AuthTransport
from node.net.tcp import TcpTransport
from node.net.transport import Connection
from protocol.codec import encode
from protocol.messages import Ack, Hello, Message
from tests.node.net.test_auth import ended
from tests.node.net.test_transport import GUARD, LEAK_FREE
from tests.paths import EXAMPLES

pytestmark = LEAK_FREE


def write_tls(dir: Path, *hosts: str, ca: trustme.CA | None = None) -> TlsFiles:
    """PEM files of a certificate for ``hosts`` signed by ``ca`` (a new CA if None)."""
    ca = ca or trustme.CA()
    cert = ca.issue_cert(*hosts)
    dir.mkdir(parents=True, exist_ok=True)
    ca.cert_pem.write_to_path(str(dir / "ca.pem"))
    cert.private_key_pem.write_to_path(str(dir / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(dir / "cert.pem"))
    return TlsFiles(dir / "cert.pem", dir / "key.pem", dir / "ca.pem")


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


async def echo(conn: Connection) -> None:
    while (msg := await conn.receive()) is not None:
        await conn.send(msg)


async def test_messages_cross_a_tls_connection_and_the_handshake_runs_inside(
        tmp_path: Path, ca: trustme.CA) -> None:
    files = write_tls(tmp_path, "127.0.0.1", ca=ca)
    seen: list[tuple[str, Message]] = []

    async def handler(conn: Connection) -> None:
        assert isinstance(conn, AuthConnection)
        while (msg := await conn.receive()) is not None:
            seen.append((conn.identity, msg))
            await conn.send(msg)

    def side(me: str) -> AuthTransport:
        return AuthTransport(TcpTransport(tls=files), me, "t", names={}, known=("n1a", "c1"),
                             from_opener=lambda p, m: None, from_server=lambda p, m: None)

    server = await side("n1a").serve("127.0.0.1", 0, handler)
    conn = await side("c1").connect("127.0.0.1", server.port)
    try:
        await conn.send(Ack("n1.out", "c1", 4))
        async with asyncio.timeout(GUARD):
            assert await conn.receive() == Ack("n1.out", "c1", 4)
        assert seen == [("c1", Ack("n1.out", "c1", 4))]
    finally:
        await conn.close()
        await server.close()


async def test_a_plain_peer_reaches_nothing_behind_tls(tmp_path: Path, ca: trustme.CA) -> None:
    files = write_tls(tmp_path, "127.0.0.1", ca=ca)
    ran: list[str] = []

    async def handler(conn: Connection) -> None:
        ran.append(conn.peer)

    server = await TcpTransport(tls=files).serve("127.0.0.1", 0, handler)
    loop = asyncio.get_running_loop()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.setblocking(False)
    try:
        await loop.sock_sendall(sock, encode(Hello("c1", "ab" * 16)))
        async with asyncio.timeout(GUARD):
            while await loop.sock_recv(sock, 4096):  # a TLS alert at most, then the end
                pass
        assert ran == []
    finally:
        sock.close()
        await server.close()


async def test_a_certificate_of_another_ca_is_refused_both_ways(tmp_path: Path,
                                                                ca: trustme.CA) -> None:
    ours = write_tls(tmp_path / "ours", "127.0.0.1", ca=ca)
    theirs = write_tls(tmp_path / "theirs", "127.0.0.1")  # a CA of their own
    server = await TcpTransport(tls=ours).serve("127.0.0.1", 0, echo)
    try:
        with pytest.raises(ssl.SSLError):  # we do not trust their CA's certificate
            await TcpTransport(tls=theirs).connect("127.0.0.1", server.port)
        # Trusting our CA but presenting their certificate: the server refuses it.
        mixed = TlsFiles(theirs.cert, theirs.key, ours.ca)
        try:
            conn = await TcpTransport(tls=mixed).connect("127.0.0.1", server.port)
        except (ssl.SSLError, ConnectionError):
            return  # refused during the handshake (TLS 1.2 and some 1.3 stacks)
        try:  # TLS 1.3: the client's certificate is judged after its handshake returns
            await conn.send(Ack("s", "c1", 1))
            await ended(conn)
        finally:
            await conn.close()
    finally:
        await server.close()


async def test_a_server_whose_certificate_does_not_name_the_host_is_refused(
        tmp_path: Path, ca: trustme.CA) -> None:
    files = write_tls(tmp_path, "n1a.example.org", ca=ca)
    server = await TcpTransport(tls=files).serve("127.0.0.1", 0, echo)
    try:
        with pytest.raises(ssl.SSLCertVerificationError, match=r"127\.0\.0\.1"):
            await TcpTransport(tls=files).connect("127.0.0.1", server.port)
    finally:
        await server.close()


def test_the_config_names_three_pem_files_relative_to_itself(tmp_path: Path) -> None:
    write_tls(tmp_path / "pki", "127.0.0.1")
    text = (EXAMPLES / "basic.toml").read_text()
    table = '\n[cluster.tls]\ncert = "pki/cert.pem"\nkey = "pki/key.pem"\nca = "pki/ca.pem"\n'
    good = tmp_path / "good.toml"
    good.write_text(text.replace("[defaults]", table + "\n[defaults]", 1))
    config = load_config(good)
    assert config.tls == TlsFiles(tmp_path / "pki/cert.pem", tmp_path / "pki/key.pem",
                                  tmp_path / "pki/ca.pem")
    assert load_config(EXAMPLES / "basic.toml").tls is None
    missing = tmp_path / "missing.toml"
    missing.write_text(good.read_text().replace("pki/ca.pem", "pki/nope.pem"))
    with pytest.raises(ConfigError, match=r"cluster\.tls\.ca.*cannot read .*nope\.pem"):
        load_config(missing)
    (tmp_path / "pki" / "junk.pem").write_text("not a certificate\n")
    junk = tmp_path / "junk.toml"
    junk.write_text(good.read_text().replace("pki/key.pem", "pki/junk.pem"))
    with pytest.raises(ConfigError, match=r"cluster\.tls\.key.*not a PEM file"):
        load_config(junk)
    typo = tmp_path / "typo.toml"
    typo.write_text(good.read_text().replace('ca = "pki/ca.pem"', 'cafile = "pki/ca.pem"'))
    with pytest.raises(ConfigError, match=r"cluster\.tls"):
        load_config(typo)
