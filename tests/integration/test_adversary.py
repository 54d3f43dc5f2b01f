"""An attacker against a live cluster (issue 14): real processes, one attack per test.

One run of examples/basic.toml (``dpc run``'s runner, in a thread) is attacked by every test
of this module in turn, while it serves its client. Its one fault kills n1b for most of the
run, so that an impostor can sit on n1b's data port. Each attack must be refused with a
logged reason; the last test waits for the run to end and asserts that ``dpc check`` found
every property valid (nothing lost, nothing wrong at the client).

The attacker knows the addresses (the config is no secret) but not the token, except
where it plays an *insider*: a process of the config (source s1) that holds the token and
tries to speak for another process or beyond its role (node/config/roles.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import random
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from node.config.load import load_config
from node.config.model import ClusterConfig
from node.errors import PeerAuthenticationError
from node.net.auth import authenticated
from node.net.tcp import TcpTransport
from node.procs.rundir import RunDir
from node.procs.runlog import count_rows
from ops_scripts.cluster.status import fetch_status
from ops_scripts.harness.runner import RunOutcome, play_scenario
from ops_scripts.harness.scenario import load_scenario
from protocol.codec import encode
from protocol.handshake import proof
from protocol.messages import (
    Ack,
    Challenge,
    ConsistencyState,
    HeartbeatResponse,
    Hello,
    Proof,
    ReconcileGrant,
    ReconcileRequest,
    Subscribe,
)
from tests.integration.test_cluster import wait_for
from tests.paths import EXAMPLES

SCENARIO = """\
[scenario]
name = "attacked"
cluster = "{cluster}"
settle = 1.5
quiet = 2.0
source_rate = 300.0

[scenario.settings]
x = 1.0
alpha = 0.7

[[faults]]
at = 0.0
# The attacks take 7-11 s: 25 s leaves them twice that and more (at 40 s, the last test
# waited 30 s for the run to end).
for = 25.0
fault = "kill"
process = "n1b"
"""
#: How long a refusal may take to reach a log: a bound on a wait, never asserted on.
WAIT = 30.0


@dataclass
class Attacked:
    config: ClusterConfig
    rd: RunDir
    thread: threading.Thread
    outcome: dict[str, RunOutcome] = field(default_factory=dict)

    def address(self, name: str) -> tuple[str, int]:
        return next((h, p) for (h, p), n in self.config.addresses().items() if n == name)

    def log(self, name: str) -> str:
        return self.rd.process_log(name).read_text(errors="replace")

    def mark(self, name: str) -> int:
        """Where ``name``'s log ends now: :meth:`logged` looks only after it."""
        return len(self.log(name))

    def logged(self, name: str, *words: str, since: int) -> None:
        """Wait until ``name``'s log has, after ``since``, a line holding every one of
        ``words`` (an earlier attack's line does not count for this one)."""
        def found() -> bool:
            lines = self.log(name)[since:].splitlines()
            return any(all(w in line for w in words) for line in lines)
        wait_for(found, WAIT, f"{name}'s log to say {words}")

    def alive(self) -> None:
        assert self.thread.is_alive(), "the attacked run ended before the attack"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Attacked]:
    base = tmp_path_factory.mktemp("attacked")
    file = base / "attacked.toml"
    file.write_text(SCENARIO.format(cluster=EXAMPLES / "basic.toml"))
    scenario = load_scenario(file)
    rd = RunDir(base / "run")
    out = io.StringIO()
    box: dict[str, RunOutcome] = {}

    def play() -> None:
        box["outcome"] = play_scenario(scenario, rd.path, out)

    thread = threading.Thread(target=play, name="attacked run", daemon=True)
    thread.start()
    wait_for(lambda: rd.history.exists() and '"event": "fault"' in rd.history.read_text(),
             120, "the run to start and kill n1b")
    attacked = Attacked(load_config(rd.config), rd, thread, box)
    yield attacked
    thread.join(timeout=600)  # the run ends by itself: its schedule, the drain, the check
    print(out.getvalue())


# ---------------------------------------------------------------- the attacker's tools
def raw(addr: tuple[str, int], *frames: bytes, silent: bool = False) -> bytes:
    """Connect without a handshake, send ``frames`` and end the sending side (unless
    ``silent``: then say nothing and keep it open), and read until the server closes (it
    must: a connection that is not closed fails the wait)."""
    with socket.create_connection(addr, timeout=WAIT) as s:
        try:
            for f in frames:
                s.sendall(f)
            if not silent:  # an incomplete frame is refused at once, not at the timeout
                s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # closed already: refused at an earlier frame
        got = b""
        try:
            while chunk := s.recv(65536):
                got += chunk
        except ConnectionResetError:
            pass
        return got


async def until_closed(conn: Any) -> None:
    """Wait until the other end closes ``conn`` (it must, within WAIT)."""
    async with asyncio.timeout(WAIT):
        try:
            while await conn.receive() is not None:
                pass
        except OSError:
            pass


async def handshake_then(addr: tuple[str, int], hello: Hello, answer: Any, *after: Any) -> Challenge:
    """A raw handshake: ``hello``, the server's Challenge, then ``answer(challenge)`` and
    the messages ``after``; returns the Challenge once the server closed the connection."""
    conn = await TcpTransport().connect(*addr)
    try:
        await conn.send(hello)
        challenge = await conn.receive()
        assert isinstance(challenge, Challenge), challenge
        for msg in (answer(challenge), *after):
            await conn.send(msg)
        await until_closed(conn)
        return challenge
    finally:
        await conn.close()


async def insider(run: Attacked, target: str, *messages: Any) -> None:
    """Source s1, with the token, sends ``messages`` to ``target`` on a connection it opens,
    and waits until ``target`` closes it."""
    transport = authenticated(TcpTransport(), run.config, "s1")
    conn = await transport.connect(*run.address(target))
    try:
        for msg in messages:
            await conn.send(msg)
        await until_closed(conn)
    finally:
        await conn.close()


def c1_acked(run: Attacked, replica: str) -> Any:
    st = fetch_status(run.config, replica, timeout=5)
    assert st is not None, f"{replica} does not answer /status"
    return st["outputs"]["n1.out"]["consumers"]["c1"]["acked"]


FORGED = 10**9


# ---------------------------------------------------------------- the attacks
def test_a_forged_ack_without_a_handshake_trims_nothing(run: Attacked) -> None:
    run.alive()
    mark = run.mark("n1a")
    raw(run.address("n1a"), encode(Ack("n1.out", "c1", FORGED)))
    run.logged("n1a", "refused a connection from 127.0.0.1:", "sent a Ack before the handshake", since=mark)
    assert c1_acked(run, "n1a") != FORGED


def test_a_proof_without_the_token_is_refused(run: Attacked) -> None:
    run.alive()
    mark = run.mark("n1a")
    guess = b"change-me-not"
    asyncio.run(handshake_then(
        run.address("n1a"), Hello("c1", "ab" * 16),
        lambda ch: Proof(proof(guess, "client", "c1", "ab" * 16, ch.name, ch.nonce)),
        Ack("n1.out", "c1", FORGED)))
    run.logged("n1a", "failed to prove, as 'c1', that it holds the cluster token", since=mark)
    # And a process with the wrong token refuses the real n1a, which cannot prove it holds
    # that token: no connection either way.
    wrong = dataclasses.replace(run.config, token="change-me-not")
    with pytest.raises(PeerAuthenticationError, match="failed to prove, as 'n1a'"):
        asyncio.run(authenticated(TcpTransport(), wrong, "c1").connect(*run.address("n1a")))
    assert c1_acked(run, "n1a") != FORGED


def test_a_replayed_handshake_is_refused(run: Attacked) -> None:
    """An attacker recorded c1's whole handshake with n1a (played here with the token, as
    c1 would) and replays its Hello and Proof: n1a's nonce is new, the old proof fails."""
    run.alive()
    mark = run.mark("n1a")
    token, hello = run.config.token.encode(), Hello("c1", "cd" * 16)
    recorded: list[Proof] = []

    def honest(ch: Challenge) -> Proof:
        recorded.append(Proof(proof(token, "client", "c1", hello.nonce, ch.name, ch.nonce)))
        return recorded[-1]

    async def record_then_replay() -> None:
        conn = await TcpTransport().connect(*run.address("n1a"))
        try:
            await conn.send(hello)
            ch = await conn.receive()
            assert isinstance(ch, Challenge)
            await conn.send(honest(ch))
        finally:
            await conn.close()
        await handshake_then(run.address("n1a"), hello, lambda ch: recorded[0],
                             Ack("n1.out", "c1", FORGED))

    asyncio.run(record_then_replay())
    run.logged("n1a", "failed to prove, as 'c1'", since=mark)
    assert c1_acked(run, "n1a") != FORGED


def test_a_forged_reconcile_request_and_a_forged_grant_are_refused(run: Attacked) -> None:
    run.alive()
    mark = run.mark("n1a")
    # Without the token, claiming to be n1b (dead meanwhile: its partner would listen).
    asyncio.run(handshake_then(run.address("n1a"), Hello("n1b", "ef" * 16),
                               lambda ch: Proof("00" * 32), ReconcileRequest("n1b", "n1", 1, 0)))
    run.logged("n1a", "failed to prove, as 'n1b'", since=mark)
    # An insider speaking for n1b, then as itself beyond its role, then granting.
    asyncio.run(insider(run, "n1a", ReconcileRequest("n1b", "n1", 1, 0)))
    run.logged("n1a", "authenticated as 's1' but sent a ReconcileRequest as 'n1b'", since=mark)
    asyncio.run(insider(run, "n1a", ReconcileRequest("s1", "n1", 1, 0)))
    run.logged("n1a", "'s1' asked to reconcile node 'n1', but only another replica of node "
               "'n1' asks 'n1a'", since=mark)
    asyncio.run(insider(run, "n1a", ReconcileGrant("s1", 1)))
    run.logged("n1a", "sent a ReconcileGrant on a connection it opened", since=mark)


def test_subscribing_as_another_consumer_or_an_unknown_one_is_refused(run: Attacked) -> None:
    run.alive()
    mark = run.mark("n1a")
    asyncio.run(insider(run, "n1a", Subscribe("n1.out", "c1", 0, 0)))
    run.logged("n1a", "authenticated as 's1' but sent a Subscribe as 'c1'", since=mark)
    asyncio.run(insider(run, "n1a", Subscribe("n1.out", "s1", 0, 0)))
    run.logged("n1a", "'s1' may not read stream 'n1.out' (its readers: c1)", since=mark)
    raw(run.address("n1a"), encode(Hello("mallory", "01" * 16)))
    run.logged("n1a", "claims to be 'mallory', which the config does not name", since=mark)


def test_an_impostor_on_a_dead_replicas_port_cannot_answer_heartbeats(run: Attacked) -> None:
    """n1b is dead (the run's fault); an impostor binds its data port and answers every
    connection as n1b, claiming STABLE at once. The client's heartbeats reach it and refuse
    it at the handshake: it cannot prove it holds the token."""
    run.alive()
    since = run.mark("c1")
    host, port = run.address("n1b")

    async def impostor() -> None:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(encode(Challenge("n1b", "99" * 16, "ab" * 32)))
            writer.write(encode(HeartbeatResponse("n1b", 1, ConsistencyState.STABLE,
                                                  {"n1.out": ConsistencyState.STABLE},
                                                  {"n1.out": 2**62})))
            writer.write(encode(ReconcileGrant("n1b", 1)))
            await writer.drain()
            await reader.read()
            writer.close()

        server = None
        async with asyncio.timeout(WAIT):
            while server is None:  # n1b's socket may take a moment to go
                try:
                    server = await asyncio.start_server(answer, host, port)
                except OSError:
                    await asyncio.sleep(0.1)
        try:
            await asyncio.to_thread(
                run.logged, "c1", "refusing", "(n1b)",
                "failed to prove, as 'n1b', that it holds the cluster token", since=since)
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(impostor())


def test_a_connection_that_never_speaks_is_dropped(run: Attacked) -> None:
    run.alive()
    mark = run.mark("n1a")
    assert raw(run.address("n1a"), silent=True) == b""  # returns once n1a closed it
    run.logged("n1a", "refused a connection from 127.0.0.1:", "no handshake within", since=mark)


def test_a_thousand_connections_at_once_do_not_stop_the_replica(run: Attacked) -> None:
    run.alive()
    mark = run.mark("n1a")
    before = count_rows(run.rd.client_log("c1"))
    socks = []
    try:
        for _ in range(1000):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(run.address("n1a"))
            socks.append(s)
        # While they are open, the client keeps receiving and n1a keeps answering.
        wait_for(lambda: count_rows(run.rd.client_log("c1")) > before + 100, WAIT,
                 "c1 to keep receiving during the flood")
        assert fetch_status(run.config, "n1a", timeout=10) is not None
    finally:
        for s in socks:
            s.close()
    run.logged("n1a", "handshakes in progress at once; the oldest makes room", since=mark)


def test_random_bytes_and_mutated_frames_are_refused(run: Attacked) -> None:
    run.alive()
    rng = random.Random(14)
    valid = [encode(m) for m in (Hello("c1", "ab" * 16), Ack("n1.out", "c1", 3),
                                 Subscribe("n1.out", "c1", 0, 0))]
    for i in range(200):
        if i % 2:
            frame = rng.randbytes(rng.randint(1, 64))
        else:
            buf = bytearray(rng.choice(valid))
            for _ in range(rng.randint(1, 4)):
                buf[rng.randrange(len(buf))] = rng.randrange(256)
            frame = bytes(buf)
        raw(run.address("n1a"), frame)
    assert fetch_status(run.config, "n1a", timeout=10) is not None
    assert c1_acked(run, "n1a") != FORGED


def test_the_attacked_run_is_valid(run: Attacked) -> None:
    run.thread.join(timeout=600)
    assert not run.thread.is_alive(), "the attacked run did not end"
    outcome = run.outcome["outcome"]
    assert outcome.code == 0 and not outcome.problems, (outcome.problems, outcome.verdict)
    refusals = [line for line in run.log("n1a").splitlines() if "refused" in line]
    assert len(refusals) >= 200, len(refusals)
