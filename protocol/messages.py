"""Every message that crosses a process boundary (DESIGN.md section 2).

Messages are plain immutable values (``@dataclass(frozen=True, slots=True)``) with no
behaviour: :mod:`protocol.codec` turns them into frames and back, the node decides what they
mean. Each message class has one wire code in :class:`MessageType`; :data:`MESSAGE_TYPES`
maps a class to its code and :data:`MESSAGE_CLASSES` back.

Invariants (enforced by :func:`protocol.codec.encode` on the way out and by the decoder on
the way in, not by the constructors, which stay cheap for the hot path):

* ``str`` fields are ``str``; ``int`` fields are ``int`` and never ``bool``.
* Tuple ids, times and attribute values are those of :mod:`protocol.tuples`; attribute values
  are JSON scalars (``str``, ``int``, ``float`` (finite), ``bool``, ``None``).
* A message decoded from the wire compares equal to the message that was encoded.

Wire codes are part of the protocol: never renumber one, only add new ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Any, TypeAlias

from .columns import Columns
from .tuples import Tuple

__all__ = [
    "MESSAGE_CLASSES",
    "MESSAGE_TYPES",
    "Ack",
    "Batch",
    "Challenge",
    "ConsistencyState",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "Hello",
    "Message",
    "MessageType",
    "Proof",
    "ReconcileGrant",
    "ReconcileRefuse",
    "ReconcileRequest",
    "StandbyAck",
    "StandbyCheckpoint",
    "Subscribe",
    "Unsubscribe",
    "sender_of",
]


class ConsistencyState(Enum):
    """The consistency state of a node replica, or of one of its output streams.

    The integer values are the wire encoding.
    """

    #: Every input is complete; outputs are stable.
    STABLE = 0
    #: An input is missing: the node delays, then produces tentative results.
    UP_FAILURE = 1
    #: The failure healed; the node is correcting its tentative results.
    STABILIZATION = 2
    #: (An output stream only.) The secondary of a process pair (node/replica/pair.py):
    #: it backs the primary up and serves nobody, so no consumer reads it (version 5).
    STANDBY = 3


class MessageType(IntEnum):
    """The wire code of each message class (the frame's message-type byte).

    0 is deliberately unused so that a zeroed frame is refused as an unknown type.
    """

    BATCH = 1
    SUBSCRIBE = 2
    UNSUBSCRIBE = 3
    HEARTBEAT_REQUEST = 4
    HEARTBEAT_RESPONSE = 5
    ACK = 6
    RECONCILE_REQUEST = 7
    RECONCILE_GRANT = 8
    RECONCILE_REFUSE = 9
    HELLO = 10
    CHALLENGE = 11
    PROOF = 12
    STANDBY_CHECKPOINT = 13
    STANDBY_ACK = 14


def _value_types(tuples: Sequence[Tuple]) -> list[tuple[type, ...]]:
    return [tuple(map(type, t[4])) for t in tuples]


class Batch:
    """Consecutive tuples of one stream, in stream order (data and control tuples alike).

    On the wire the tuples are columns (:class:`~protocol.columns.Columns`, protocol
    version 9). A batch holds whichever of the two views it was built with and makes the
    other once, when it is first asked for: a sender that has columns never builds tuples,
    and a receiver reading tuples pays for them once. Immutable by convention (the views
    are never replaced); equal when stream and tuples are equal.
    """

    __slots__ = ("_columns", "_tuples", "stream")

    def __init__(self, stream: str, tuples: Sequence[Tuple] | None = None, *,
                 columns: Columns | None = None) -> None:
        if (tuples is None) == (columns is None):
            raise TypeError("a Batch has tuples or columns, not both and not neither")
        self.stream = stream
        self._tuples = tuples
        self._columns = columns

    @property
    def tuples(self) -> tuple[Tuple, ...]:
        if type(self._tuples) is not tuple:
            self._tuples = tuple(self._tuples if self._tuples is not None
                                 else self._columns.to_tuples())  # type: ignore[union-attr]
        return self._tuples

    @property
    def columns(self) -> Columns:
        """The tuples as columns (:class:`~protocol.errors.LocalProtocolError` if they
        cannot be carried: protocol/columns.py)."""
        if self._columns is None:
            self._columns = Columns.from_tuples(self._tuples)  # type: ignore[arg-type]
        return self._columns

    def __len__(self) -> int:
        return len(self._tuples) if self._tuples is not None else len(self.columns)

    def __eq__(self, other: object) -> bool:
        # Exact: 1, 1.0 and True are equal in Python, not on the wire.
        return (type(other) is Batch and self.stream == other.stream
                and self.tuples == other.tuples
                and _value_types(self.tuples) == _value_types(other.tuples))

    def __hash__(self) -> int:
        return hash((self.stream, self.tuples))

    def __repr__(self) -> str:
        return f"Batch(stream={self.stream!r}, {len(self)} tuples)"


@dataclass(frozen=True, slots=True)
class Subscribe:
    """``subscriber`` asks for ``stream``, resuming after the last ids it already holds.

    The upstream replays from its output buffer every stable tuple after
    ``last_stable_id`` and, if it is itself tentative, the tentative ones after
    ``last_tentative_id`` (0 for either means "nothing received yet"). It also counts as
    the subscriber's ack of ``ack_id`` (see the field).
    """

    stream: str
    subscriber: str
    last_stable_id: int
    last_tentative_id: int
    #: What the subscriber acknowledges with it (the upstream may trim up to there); -1,
    #: the default: ``last_stable_id``, all it holds. Less where the subscriber may ask
    #: for it again after a crash (a replica with CEC checkpoints, node/replica/cec.py).
    ack_id: int = -1
    #: Start at the live end instead (protocol version 6): the upstream ignores both ids
    #: and sends what its buffer holds after its last stable tuple, then everything new;
    #: it counts as the subscriber's ack of that tuple. What a process pair in amnesia
    #: takes over with (Hwang et al., section 4: the new primary processes input "as it
    #: arrives"; what was in flight is lost).
    live: bool = False


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    """``subscriber`` no longer wants ``stream`` from this replica (it switched away).

    With ``release`` (protocol version 6) it also holds nothing of the stream and will ask
    for nothing of it again: it stops holding the upstream's buffer back until its next
    ack or Subscribe (a process pair's parked secondary in amnesia, which restarts empty,
    node/replica/runtime.py; without it, the acks of its earlier life would pin the buffer
    for ever, state/buffer.py).
    """

    stream: str
    subscriber: str
    release: bool = False


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """A liveness and state probe; the answer echoes ``seq``.

    ``acks`` maps each stream the sender reads from the receiver's node to the last stable
    id the sender holds of it (what its link would :class:`Ack`, 0 for nothing yet). A
    heartbeat reaches every replica of the upstream node, the ones the sender does not read
    from too, so that every replica's output buffer trims by what this consumer holds
    (an :class:`Ack` reaches only the producer the link reads). Ids are >= 0. Decoded
    messages carry a plain ``dict`` here: treat it as read-only.
    """

    sender: str
    seq: int
    acks: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    """A replica's answer to a :class:`HeartbeatRequest`.

    ``state`` is the replica's own state; ``streams`` the state of each of its output
    streams (what an HA monitor chooses an upstream replica by); ``frontiers`` the same
    streams' *frontier*: the largest tuple time the stream's output buffer has reached,
    stable or tentative (the ``tmax`` of data tuples, the time of stable boundaries; 0:
    nothing yet). It never decreases. Among replicas that all say UP_FAILURE it tells the
    one that serves fresh tentative data from one that makes no progress (the state alone
    cannot; node/streams/upstream.py). ``frontiers`` has exactly the keys of ``streams``
    and values >= 0 (protocol version 2). Decoded messages carry plain ``dict`` objects
    here: treat them as read-only.
    """

    replica: str
    seq: int
    state: ConsistencyState
    streams: Mapping[str, ConsistencyState]
    frontiers: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Ack:
    """``subscriber`` holds every stable tuple of ``stream`` up to ``tuple_id``: the sender
    may trim its output buffer up to there."""

    stream: str
    subscriber: str
    tuple_id: int


@dataclass(frozen=True, slots=True)
class ReconcileRequest:
    """Replica ``replica`` of ``node`` asks a partner for permission to reconcile now.

    Partners take turns so that downstream always has a replica with fresh data. ``request``
    numbers the requests of one replica (the answer echoes it, so a stale answer is told
    apart); ``rank`` breaks the tie when two requests cross (lower wins).
    """

    replica: str
    node: str
    request: int
    rank: int


@dataclass(frozen=True, slots=True)
class ReconcileGrant:
    """The partner ``replica`` lets the requester reconcile (it postpones its own)."""

    replica: str
    request: int


@dataclass(frozen=True, slots=True)
class ReconcileRefuse:
    """The partner ``replica`` refuses for now (for instance: it is reconciling itself)."""

    replica: str
    request: int
    reason: str


@dataclass(frozen=True, slots=True)
class Hello:
    """The first message on every connection, from the side that opened it: the process
    ``name`` (a name of the cluster config) and a fresh random ``nonce`` (hex).

    The handshake (node/net/auth.py, proofs in :mod:`protocol.handshake`): ``Hello`` ->
    :class:`Challenge` -> :class:`Proof`; nothing else is accepted before it completes."""

    name: str
    nonce: str


@dataclass(frozen=True, slots=True)
class Challenge:
    """The answer to a :class:`Hello`: the serving process's ``name``, its own fresh
    ``nonce``, and its ``proof`` that it holds the cluster token (an HMAC over both names
    and both nonces: the token never crosses the wire)."""

    name: str
    nonce: str
    proof: str


@dataclass(frozen=True, slots=True)
class Proof:
    """The opener's proof that it holds the cluster token, over both names and nonces (a
    replayed proof fails: the server's nonce is new on every connection)."""

    proof: str


@dataclass(frozen=True, slots=True)
class StandbyCheckpoint:
    """A process pair in passive standby or upstream backup (node/replica/standby.py,
    protocol version 7): the primary ``replica`` sends its secondary checkpoint ``seq``, a
    delta on checkpoint ``base`` (0: a whole one). ``parts``: the snapshot of each operator
    that changed since ``base`` (plain data: ``QueryNetwork.snapshot``'s, or a restart
    point's header; every operator when whole); ``inputs``: each input stream's resume ids
    ``(last stable, last tentative)`` at that instant; ``outputs``: each output stream's
    in-force tuples queued since ``base`` (all it holds when whole); ``leaves`` (version 8):
    of an operator not in ``parts``, the leaves that moved since ``base``
    (state/leaves.py: ``[[index, leaf], ...]``). Treat the mappings as read-only."""

    replica: str
    seq: int
    base: int
    parts: Mapping[str, Any]
    inputs: Mapping[str, tuple[int, int]]
    outputs: Mapping[str, tuple[Tuple, ...]]
    leaves: Mapping[str, list[list[Any]]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StandbyAck:
    """The secondary ``replica`` holds checkpoint ``seq`` (its primary may acknowledge its
    input only up to that checkpoint's); ``whole``: it could not apply a delta (it holds no
    base, or another one) and wants a whole checkpoint next."""

    replica: str
    seq: int
    whole: bool


#: Any message of the protocol.
Message: TypeAlias = (
    Batch
    | Subscribe
    | Unsubscribe
    | HeartbeatRequest
    | HeartbeatResponse
    | Ack
    | ReconcileRequest
    | ReconcileGrant
    | ReconcileRefuse
    | Hello
    | Challenge
    | Proof
    | StandbyCheckpoint
    | StandbyAck
)

#: Message class -> wire code.
MESSAGE_TYPES: Mapping[type[Message], MessageType] = {
    Batch: MessageType.BATCH,
    Subscribe: MessageType.SUBSCRIBE,
    Unsubscribe: MessageType.UNSUBSCRIBE,
    HeartbeatRequest: MessageType.HEARTBEAT_REQUEST,
    HeartbeatResponse: MessageType.HEARTBEAT_RESPONSE,
    Ack: MessageType.ACK,
    ReconcileRequest: MessageType.RECONCILE_REQUEST,
    ReconcileGrant: MessageType.RECONCILE_GRANT,
    ReconcileRefuse: MessageType.RECONCILE_REFUSE,
    Hello: MessageType.HELLO,
    Challenge: MessageType.CHALLENGE,
    Proof: MessageType.PROOF,
    StandbyCheckpoint: MessageType.STANDBY_CHECKPOINT,
    StandbyAck: MessageType.STANDBY_ACK,
}

#: Wire code -> message class.
MESSAGE_CLASSES: Mapping[MessageType, type[Message]] = {
    code: cls for cls, code in MESSAGE_TYPES.items()
}


def sender_of(message: Message) -> str | None:
    """The process ``message`` says it comes from (None: it names none). On an
    authenticated connection this must be the process the connection authenticated as
    (node/config/roles.py); fault injection learns a connection's peer by it."""
    match message:
        case Subscribe() | Unsubscribe() | Ack():
            return message.subscriber
        case HeartbeatRequest():
            return message.sender
        case (HeartbeatResponse() | ReconcileRequest() | ReconcileGrant() | ReconcileRefuse()
              | StandbyCheckpoint() | StandbyAck()):
            return message.replica
        case Hello() | Challenge():
            return message.name
    return None
