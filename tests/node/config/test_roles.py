"""Who may send what to whom (node/config/roles.py), on examples/chain4.toml: sources s1, s2
-> n1 (n1a, n1b) -> n2 (n2a, n2b) -> n3 -> n4 -> client c1."""

from __future__ import annotations

import pytest

from node.config.load import load_config
from node.config.model import ClusterConfig
from node.config.roles import names, outputs_of, refusal_from_opener, refusal_from_server
from protocol.messages import (
    Ack,
    Batch,
    Challenge,
    ConsistencyState,
    HeartbeatRequest,
    HeartbeatResponse,
    Hello,
    Message,
    Proof,
    ReconcileGrant,
    ReconcileRefuse,
    ReconcileRequest,
    StandbyAck,
    StandbyCheckpoint,
    Subscribe,
    Unsubscribe,
)
from tests.paths import EXAMPLES


@pytest.fixture(scope="module")
def config() -> ClusterConfig:
    return load_config(EXAMPLES / "chain4.toml")


def test_names_and_outputs(config: ClusterConfig) -> None:
    assert {"s1", "s2", "n1a", "n1b", "n4a", "c1"} <= names(config)
    assert outputs_of(config, "s1") == ("s1",)
    assert outputs_of(config, "n2b") == ("n2.out",)
    assert outputs_of(config, "c1") == ()


ACCEPTED: list[tuple[str, str, Message]] = [
    # (me, peer, message): a consumer of me's stream, speaking as itself
    ("n1a", "n2a", Subscribe("n1.out", "n2a", 0, 0)),
    ("n1b", "n2b", Ack("n1.out", "n2b", 7)),
    ("n1a", "n2b", Unsubscribe("n1.out", "n2b")),
    ("s1", "n1b", Subscribe("s1", "n1b", 0, 0)),
    ("n1a", "n2a", HeartbeatRequest("n2a", 3, {"n1.out": 5})),
    ("n1a", "n1b", ReconcileRequest("n1b", "n1", 1, 1)),
    ("n1a", "n1b", HeartbeatRequest("n1b", 4)),  # a process pair's keep-alive
    ("n1b", "n1a", StandbyCheckpoint("n1a", 1, 0, {}, {}, {})),  # passive standby
    # a stream me does not serve: the publisher refuses it, naming the ones it does
    ("n1a", "n2a", Subscribe("nope", "n2a", 0, 0)),
]


@pytest.mark.parametrize(("me", "peer", "msg"), ACCEPTED)
def test_what_each_role_may_send(config: ClusterConfig, me: str, peer: str, msg: Message) -> None:
    assert refusal_from_opener(config, me, peer, msg) is None


REFUSED: list[tuple[str, str, Message, str]] = [
    ("n1a", "n2a", Ack("n1.out", "n2b", 10**9), "authenticated as 'n2a' but sent a Ack as 'n2b'"),
    ("n1a", "n2a", Subscribe("n1.out", "c1", 0, 0), "as 'c1'"),
    ("n1a", "n3a", Subscribe("n1.out", "n3a", 0, 0),
     "'n3a' may not read stream 'n1.out' (its readers: n2a, n2b)"),
    ("n1a", "s1", Ack("n1.out", "s1", 5), "'s1' may not read stream 'n1.out'"),
    ("n1a", "n3a", HeartbeatRequest("n3a", 1), "'n3a' reads no stream of 'n1a'"),
    ("n1a", "n2a", HeartbeatRequest("n2b", 1), "as 'n2b'"),
    ("n1a", "n2a", ReconcileRequest("n2a", "n1", 1, 0), "only another replica of node 'n1' asks 'n1a'"),
    ("n1a", "n2a", ReconcileRequest("n2a", "n2", 1, 0), "only another replica"),
    ("n1a", "n1a", ReconcileRequest("n1a", "n1", 1, 0), "only another replica"),
    ("n1a", "n1b", ReconcileRequest("n1b", "n2", 1, 0), "asked to reconcile node 'n2'"),
    ("s1", "n1a", ReconcileRequest("n1a", "n1", 1, 0), "asked 's1', no node replica"),
    ("n1a", "n1b", ReconcileGrant("n1b", 1), "sent a ReconcileGrant on a connection it opened"),
    ("n1a", "n2a", StandbyCheckpoint("n2a", 1, 0, {}, {}, {}),
     "only the other replica of 'n1a''s node does"),
    ("n1a", "n1b", StandbyAck("n1b", 1, False), "sent a StandbyAck on a connection it opened"),
    ("n1a", "n1b", ReconcileRefuse("n1b", 1, "no"), "on a connection it opened"),
    ("n1a", "n2a", HeartbeatResponse("n2a", 1, ConsistencyState.STABLE, {}, {}),
     "on a connection it opened"),
    ("n1a", "s1", Batch("s1", ()), "sent a Batch on a connection it opened"),
    ("n1a", "n2a", Hello("n2a", "00" * 16), "sent a Hello after the handshake"),
    ("n1a", "n2a", Proof("00"), "sent a Proof after the handshake"),
]


@pytest.mark.parametrize(("me", "peer", "msg", "why"), REFUSED)
def test_what_each_role_may_not_send(config: ClusterConfig, me: str, peer: str, msg: Message,
                                     why: str) -> None:
    problem = refusal_from_opener(config, me, peer, msg)
    assert problem is not None and why in problem, problem


def test_answers_on_a_connection_we_opened_must_come_from_its_process() -> None:
    ok = HeartbeatResponse("n1a", 1, ConsistencyState.STABLE, {}, {})
    assert refusal_from_server("n1a", ok) is None
    assert refusal_from_server("n1a", Batch("n1.out", ())) is None
    assert refusal_from_server("n1b", ReconcileGrant("n1b", 2)) is None
    forged = HeartbeatResponse("n1b", 1, ConsistencyState.STABLE, {}, {})
    assert refusal_from_server("n1a", forged) == (
        "authenticated as 'n1a' but sent a HeartbeatResponse as 'n1b'")
    assert "after the handshake" in (refusal_from_server("n1a", Challenge("n1a", "", "")) or "")
