"""Who may send what to whom on the data plane, from the cluster config (pure: no I/O).

After the handshake (protocol/handshake.py, node/net/auth.py) a connection speaks for one
process of the config, the one it authenticated as. Each message it then sends is checked
here, and refused with the reason this module gives (the connection is then closed, and
the message has no effect):

* a message that names its sender (:func:`~protocol.messages.sender_of`) names the
  connection's process, on either end of the connection;
* on a connection the peer opened to ``me`` (``me`` serves it):

  - ``Subscribe``, ``Unsubscribe``, ``Ack`` of stream S: S is an output of ``me`` and the
    peer reads it (:meth:`~node.config.model.ClusterConfig.consumers_of`: a replica of a
    node that takes S as input, or a client of S);
  - ``HeartbeatRequest``: the peer reads at least one output of ``me`` (a downstream
    process; the acks it carries are checked stream by stream by the publisher), or is
    another replica of ``me``'s node (a process pair's keep-alive);
  - ``ReconcileRequest``: ``me`` and the peer are two replicas of one node, the node the
    request names;
  - ``StandbyCheckpoint``: ``me`` and the peer are two replicas of one node (a process
    pair in passive standby: the primary's checkpoints to its secondary);
  - nothing else (batches, answers, a second handshake);

* on a connection ``me`` opened: answers (``Batch``, ``HeartbeatResponse``,
  ``ReconcileGrant``, ``ReconcileRefuse``, ``StandbyAck``) and no second handshake (what each answer
  means is its reader's business: a link refuses a stream it did not ask for).
"""

from __future__ import annotations

from protocol.messages import (
    Ack,
    Batch,
    Challenge,
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
    sender_of,
)

from .model import ClusterConfig

__all__ = ["names", "outputs_of", "refusal_from_opener", "refusal_from_server"]

_HANDSHAKE = (Hello, Challenge, Proof)
_ANSWERS = (Batch, HeartbeatResponse, ReconcileGrant, ReconcileRefuse, StandbyAck)


def names(config: ClusterConfig) -> frozenset[str]:
    """Every process the config names: the only identities a handshake may claim."""
    replicas = (r.name for n in config.nodes.values() for r in n.replicas)
    return frozenset([*config.sources, *replicas, *config.clients])


def outputs_of(config: ClusterConfig, name: str) -> tuple[str, ...]:
    """The streams process ``name`` serves (none for a client)."""
    if name in config.sources:
        return (name,)
    for node in config.nodes.values():
        if any(r.name == name for r in node.replicas):
            return tuple(node.outputs)
    return ()


def _node_of(config: ClusterConfig, name: str) -> str | None:
    return next((n.name for n in config.nodes.values()
                 if any(r.name == name for r in n.replicas)), None)


def _claim(peer: str, msg: Message) -> str | None:
    claimed = sender_of(msg)
    if claimed is not None and claimed != peer:
        return f"authenticated as {peer!r} but sent a {type(msg).__name__} as {claimed!r}"
    return None


def refusal_from_opener(config: ClusterConfig, me: str, peer: str, msg: Message) -> str | None:
    """What is wrong with ``msg`` from ``peer`` on a connection ``peer`` opened to ``me``
    (None: nothing)."""
    name = type(msg).__name__
    if isinstance(msg, _HANDSHAKE):
        return f"sent a {name} after the handshake"
    if isinstance(msg, _ANSWERS):
        return f"sent a {name} on a connection it opened (consumers send requests)"
    if (problem := _claim(peer, msg)) is not None:
        return problem
    if isinstance(msg, Subscribe | Unsubscribe | Ack):
        if msg.stream not in outputs_of(config, me):
            return None  # an unknown stream: the publisher refuses it, naming the ones it serves
        readers = config.consumers_of(msg.stream)
        if peer not in readers:
            return (f"{peer!r} may not read stream {msg.stream!r} (its readers: "
                    f"{', '.join(readers) or 'none'})")
        return None
    if isinstance(msg, HeartbeatRequest):
        node = _node_of(config, me)
        if node is not None and peer != me and _node_of(config, peer) == node:
            return None  # a process pair's keep-alive (node/replica/keepalive.py)
        if not any(peer in config.consumers_of(s) for s in outputs_of(config, me)):
            return f"{peer!r} reads no stream of {me!r}: it has no heartbeat to ask for"
        return None
    if isinstance(msg, ReconcileRequest):
        node = _node_of(config, me)
        if node is None:
            return f"{peer!r} asked {me!r}, no node replica, for permission to reconcile"
        if peer == me or _node_of(config, peer) != node or msg.node != node:
            return (f"{peer!r} asked to reconcile node {msg.node!r}, but only another replica "
                    f"of node {node!r} asks {me!r} for permission")
        return None
    if isinstance(msg, StandbyCheckpoint):
        node = _node_of(config, me)
        if node is None or peer == me or _node_of(config, peer) != node:
            return (f"{peer!r} sent {me!r} a standby checkpoint, but only the other replica of "
                    f"{me!r}'s node does (passive standby, node/replica/standby.py)")
        return None
    return f"sent an unexpected {name}"


def refusal_from_server(peer: str, msg: Message) -> str | None:
    """What is wrong with ``msg`` from ``peer`` on a connection this process opened to it
    (None: nothing)."""
    if isinstance(msg, _HANDSHAKE):
        return f"sent a {type(msg).__name__} after the handshake"
    return _claim(peer, msg)
