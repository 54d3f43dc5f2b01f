"""Message payloads: each message as a positional orjson array (a Batch as columns), and
the checks both ways.

:mod:`protocol.codec` wraps these payloads in frames; this module knows what is inside one.
A payload is an orjson array of the message's fields in declaration order (positional:
dicts would halve decode speed), except a Batch's:

* a Batch is binary (protocol version 9): a 2-byte big-endian length, the stream name in
  UTF-8, then its tuples as one Arrow IPC stream (:mod:`protocol.columns`, which validates
  it); elsewhere a tuple is ``[kind, id, time, tmax, [values...]]``;
* a HeartbeatResponse is ``[replica, seq, state, [[stream, state, frontier], ...]]``,
  states as their integer values, each stream at most once, frontiers >= 0 (protocol
  version 2: version 1 had no frontiers);
* a HeartbeatRequest is ``[sender, seq, [[stream, acked id], ...]]`` (protocol version 2:
  version 1 had no acks), each stream at most once, ids >= 0;
* a StandbyCheckpoint is ``[replica, seq, base, {operator: snapshot}, [[stream, stable id,
  tentative id], ...], [[stream, [tuple, ...]], ...], {operator: [[leaf index, leaf],
  ...]}]`` (protocol version 7; the leaf deltas 8), snapshots and leaves any JSON
  (restored, and so checked, by the secondary that takes over);
* every other message is its ``str``, ``int`` and ``bool`` fields, in order.

Invariants:

* :func:`encode_payload` accepts exactly the messages that decode back to an equal message;
  anything else (wrong field types, bools for ints, non-scalar or non-finite values, ints
  beyond 64 bits, lone surrogates) raises :class:`LocalProtocolError` naming the field.
* :func:`decode_payload` raises nothing but :class:`RemoteProtocolError`, whatever the bytes,
  and says what was wrong and where. Every field is type-checked; ints are never bools.
* Batch decoding is the hot path: no per-tuple work at all (the columns are views of the
  frame, checked column by column); its tuples are built only if a reader asks for them.
"""

from __future__ import annotations

import reprlib
import struct
from collections.abc import Callable, Mapping
from itertools import chain
from math import isfinite
from operator import itemgetter
from typing import Any, get_type_hints

import orjson

from .columns import decode_columns, encode_columns
from .errors import LocalProtocolError, RemoteProtocolError
from .messages import (
    MESSAGE_CLASSES,
    MESSAGE_TYPES,
    Ack,
    Batch,
    Challenge,
    ConsistencyState,
    HeartbeatRequest,
    HeartbeatResponse,
    Hello,
    Message,
    MessageType,
    Proof,
    ReconcileGrant,
    ReconcileRefuse,
    ReconcileRequest,
    StandbyAck,
    StandbyCheckpoint,
    Subscribe,
    Unsubscribe,
)
from .tuples import KINDS, Kind, Tuple

__all__ = ["decode_payload", "encode_payload", "is_known_type", "show"]

_new = tuple.__new__
# A dict, not ``KINDS[k]``: a negative code must miss, not wrap around to the last kind.
_KIND_OF: dict[int, Kind] = dict(enumerate(KINDS))
_STATE_OF: dict[int, ConsistencyState] = {s.value: s for s in ConsistencyState}
# What orjson can produce besides list and dict; attribute values must be one of these.
_SCALARS = frozenset({str, int, float, bool, type(None)})
_TUPLE_LAYOUT = "[kind, id, time, tmax, values]"
_WHAT = {str: "a string", int: "an integer", bool: "a boolean"}
_values_of = itemgetter(4)

_NAME_LENGTH = struct.Struct(">H")  # a Batch's stream name length
_MAX_STREAM_NAME = 2**16 - 1
_repr = reprlib.Repr()  # bounded: a peer's 16 MiB string must not become our log line
_repr.maxstring = _repr.maxother = 60
_repr.maxlist = _repr.maxdict = 6
_repr.maxlevel = 3


def show(x: object) -> str:
    """A short repr of ``x`` for an error message, however large ``x`` is."""
    return _repr.repr(x)


def encode_payload(msg: Message) -> tuple[MessageType, bytes]:
    """The wire code and the orjson payload of ``msg``; :class:`LocalProtocolError` if it
    is not a valid message."""
    entry = _ENCODERS.get(type(msg))
    if entry is None:
        raise LocalProtocolError(f"cannot encode {show(msg)}: not a protocol message")
    code, to_json = entry
    return code, to_json(msg)


def is_known_type(code: int) -> bool:
    """Whether ``code`` (a frame's message-type byte) names a message this side decodes."""
    return code == MessageType.BATCH or (0 <= code < len(_DECODERS)
                                         and _DECODERS[code] is not None)


def _dumps(name: str, obj: Any) -> bytes:
    try:
        return orjson.dumps(obj)
    except orjson.JSONEncodeError as exc:  # ints beyond 64 bits, lone surrogates
        raise LocalProtocolError(f"cannot encode {name}: {exc}") from None


def _encode_batch(msg: Batch) -> bytes:
    """``[u16 stream length][stream, UTF-8][the tuples as one Arrow IPC stream]``: the one
    binary payload (protocol version 9; protocol/columns.py)."""
    stream = msg.stream
    if type(stream) is not str:
        raise LocalProtocolError(
            f"cannot encode Batch: field 'stream' must be a string, got {show(stream)}"
        )
    try:
        name = stream.encode()
    except UnicodeEncodeError:
        raise LocalProtocolError("cannot encode Batch: the stream name is not valid UTF-8 "
                                 f"({show(stream)})") from None
    if len(name) > _MAX_STREAM_NAME:
        raise LocalProtocolError(f"cannot encode Batch: a stream name of {len(name)} bytes "
                                 f"(at most {_MAX_STREAM_NAME})")
    try:
        columns = msg.columns
    except LocalProtocolError as e:
        raise LocalProtocolError(f"cannot encode Batch: {e} (stream {show(stream)})") from None
    return _NAME_LENGTH.pack(len(name)) + name + encode_columns(columns)


def _tuple_rows(stream: str, tuples: Any) -> tuple[list[tuple[Any, ...]], bool]:
    """The rows of ``tuples`` (a tuple of Tuple) as orjson encodes them, and whether a value
    is a float (non-finite floats are the caller's to catch: orjson writes them as null)."""
    if type(tuples) is not tuple:
        raise LocalProtocolError(
            f"cannot encode Batch: field 'tuples' must be a tuple of Tuple, got {show(tuples)}"
        )
    rows: list[tuple[Any, ...]] = []
    append = rows.append
    try:
        for t in tuples:
            k, i, tm, m, v = t
            if not (
                type(t) is Tuple
                and type(k) is Kind
                and type(i) is type(tm) is type(m) is int
                and type(v) is tuple
            ):
                raise TypeError
            append((k, i, tm, m, v))  # a plain tuple: orjson does not encode NamedTuples
    except (TypeError, ValueError):
        raise _local_batch_error(stream, tuples) from None
    # orjson would also accept datetimes, UUIDs, enums, ... and nested containers, which do
    # not come back equal: only exact JSON scalar types may go out.
    types = set(map(type, chain.from_iterable(map(_values_of, rows))))
    if not types <= _SCALARS:
        raise _local_batch_error(stream, tuples)
    return rows, float in types


def _local_batch_error(stream: str, tuples: tuple[Any, ...]) -> LocalProtocolError:
    for n, t in enumerate(tuples):
        problem = _local_tuple_problem(t)
        if problem is not None:
            return LocalProtocolError(
                f"cannot encode Batch tuple {n}: {problem} (stream {show(stream)})"
            )
    return LocalProtocolError(f"cannot encode Batch: invalid tuples (stream {show(stream)})")


def _local_tuple_problem(t: Any) -> str | None:
    if type(t) is not Tuple:
        return f"must be a protocol.tuples.Tuple, got {type(t).__name__} {show(t)}"
    if len(t) != 5:
        return f"must have 5 fields {_TUPLE_LAYOUT}, got {show(t)}"
    k, i, tm, m, v = t
    if type(k) is not Kind:
        return f"field 'kind' must be a Kind, got {show(k)}"
    for field, x in (("id", i), ("time", tm), ("tmax", m)):
        if type(x) is not int:
            return f"field {field!r} must be an integer, got {show(x)}"
    if type(v) is not tuple:
        return f"field 'values' must be a tuple, got {show(v)}"
    for j, x in enumerate(v):
        if type(x) not in _SCALARS:
            return f"value {j} must be a str, int, float, bool or None, got {type(x).__name__} {show(x)}"
        if type(x) is float and not isfinite(x):
            return f"value {j} must be a finite float (JSON has no NaN or infinity), got {x!r}"
    return None


def _encode_heartbeat_response(msg: HeartbeatResponse) -> bytes:
    name = "cannot encode HeartbeatResponse"
    _check_local(name, "replica", msg.replica, str)
    _check_local(name, "seq", msg.seq, int)
    if type(msg.state) is not ConsistencyState:
        raise LocalProtocolError(
            f"{name}: field 'state' must be a ConsistencyState, got {show(msg.state)}"
        )
    for field in ("streams", "frontiers"):
        if not isinstance(getattr(msg, field), Mapping):
            raise LocalProtocolError(
                f"{name}: field {field!r} must be a mapping, got {show(getattr(msg, field))}"
            )
    if msg.frontiers.keys() != msg.streams.keys():
        raise LocalProtocolError(
            f"{name}: field 'frontiers' must have exactly the streams of field 'streams' "
            f"({show(sorted(map(str, msg.streams)))}), got {show(sorted(map(str, msg.frontiers)))}"
        )
    streams = []
    for stream, state in msg.streams.items():
        if type(stream) is not str or type(state) is not ConsistencyState:
            raise LocalProtocolError(
                f"{name}: field 'streams' must map stream names to ConsistencyState, "
                f"got {show(stream)}: {show(state)}"
            )
        frontier = msg.frontiers[stream]
        if type(frontier) is not int or frontier < 0:
            raise LocalProtocolError(
                f"{name}: field 'frontiers' must map stream names to tuple times >= 0, "
                f"got {show(stream)}: {show(frontier)}"
            )
        streams.append((stream, state.value, frontier))
    return _dumps("HeartbeatResponse", (msg.replica, msg.seq, msg.state.value, streams))


def _encode_standby_checkpoint(msg: StandbyCheckpoint) -> bytes:
    name = "cannot encode StandbyCheckpoint"
    _check_local(name, "replica", msg.replica, str)
    _check_local(name, "seq", msg.seq, int)
    _check_local(name, "base", msg.base, int)
    for field in ("parts", "inputs", "outputs", "leaves"):
        if not isinstance(getattr(msg, field), Mapping):
            raise LocalProtocolError(
                f"{name}: field {field!r} must be a mapping, got {show(getattr(msg, field))}")
    if not all(type(k) is str for k in msg.parts):
        raise LocalProtocolError(f"{name}: field 'parts' must map operator names to snapshots")
    for op, delta in msg.leaves.items():
        if type(op) is not str or _leaves_problem(delta) is not None:
            raise LocalProtocolError(f"{name}: field 'leaves' must map operator names to "
                                     f"[[leaf index >= 0, leaf], ...], got {show(op)}: "
                                     f"{show(delta)}")
    inputs = []
    for stream, ids in msg.inputs.items():
        if (type(stream) is not str or type(ids) is not tuple or len(ids) != 2
                or not all(type(i) is int and i >= 0 for i in ids)):
            raise LocalProtocolError(
                f"{name}: field 'inputs' must map stream names to (stable id, tentative id) "
                f">= 0, got {show(stream)}: {show(ids)}")
        inputs.append((stream, *ids))
    outputs = []
    for stream, tuples in msg.outputs.items():
        if type(stream) is not str:
            raise LocalProtocolError(f"{name}: field 'outputs' must map stream names to "
                                     f"tuples, got key {show(stream)}")
        rows, has_float = _tuple_rows(stream, tuples)
        if has_float and any(type(x) is float and not isfinite(x) for t in tuples for x in t[4]):
            raise _local_batch_error(stream, tuples)
        outputs.append((stream, rows))
    # Snapshots are plain data (state/checkpoint.py): what orjson cannot encode is refused.
    return _dumps("StandbyCheckpoint",
                  (msg.replica, msg.seq, msg.base, msg.parts, inputs, outputs, msg.leaves))


def _leaves_problem(delta: Any) -> str | None:
    """What is wrong with ``delta`` as a leaf delta (state/leaves.py), if anything."""
    if type(delta) is not list:
        return f"must be a list, got {show(delta)}"
    for e in delta:
        if type(e) is not list or len(e) != 2 or type(e[0]) is not int or e[0] < 0:
            return f"each entry must be [leaf index >= 0, leaf], got {show(e)}"
    return None


def _encode_heartbeat_request(msg: HeartbeatRequest) -> bytes:
    name = "cannot encode HeartbeatRequest"
    _check_local(name, "sender", msg.sender, str)
    _check_local(name, "seq", msg.seq, int)
    if not isinstance(msg.acks, Mapping):
        raise LocalProtocolError(f"{name}: field 'acks' must be a mapping, got {show(msg.acks)}")
    acks = []
    for stream, tuple_id in msg.acks.items():
        if type(stream) is not str or type(tuple_id) is not int or tuple_id < 0:
            raise LocalProtocolError(
                f"{name}: field 'acks' must map stream names to tuple ids >= 0, "
                f"got {show(stream)}: {show(tuple_id)}"
            )
        acks.append((stream, tuple_id))
    return _dumps("HeartbeatRequest", (msg.sender, msg.seq, acks))


def _check_local(name: str, field: str, x: object, typ: type) -> None:
    if type(x) is not typ:
        raise LocalProtocolError(f"{name}: field {field!r} must be {_WHAT[typ]}, got {show(x)}")


# Messages made only of str, int and bool fields share one encoder and one decoder, driven by the
# dataclass annotations: the class definition is the single source of the wire layout.
_Spec = tuple[tuple[str, type], ...]
_SIMPLE: dict[type[Message], _Spec] = {
    cls: tuple(get_type_hints(cls).items())
    for cls in (
        Subscribe,
        Unsubscribe,
        Ack,
        ReconcileRequest,
        ReconcileGrant,
        ReconcileRefuse,
        Hello,
        Challenge,
        Proof,
        StandbyAck,
    )
}


def _simple_encoder(cls: type[Message], spec: _Spec) -> Callable[[Any], bytes]:
    name = f"cannot encode {cls.__name__}"

    def to_json(msg: Any) -> bytes:
        payload = [getattr(msg, field) for field, _ in spec]
        for (field, typ), x in zip(spec, payload, strict=True):
            _check_local(name, field, x, typ)
        return _dumps(cls.__name__, payload)

    return to_json


_ENCODERS: dict[type, tuple[MessageType, Callable[[Any], bytes]]] = {
    cls: (MESSAGE_TYPES[cls], _simple_encoder(cls, spec)) for cls, spec in _SIMPLE.items()
}
_ENCODERS[Batch] = (MessageType.BATCH, _encode_batch)
_ENCODERS[HeartbeatResponse] = (MessageType.HEARTBEAT_RESPONSE, _encode_heartbeat_response)
_ENCODERS[HeartbeatRequest] = (MessageType.HEARTBEAT_REQUEST, _encode_heartbeat_request)
_ENCODERS[StandbyCheckpoint] = (MessageType.STANDBY_CHECKPOINT, _encode_standby_checkpoint)


# ---------------------------------------------------------------- decoding (remote side)

_Raw = bytes | bytearray
_Decoder = Callable[[Any, _Raw], Message]


def _decode_batch(raw: _Raw) -> Batch:
    if len(raw) < _NAME_LENGTH.size:
        raise RemoteProtocolError(f"Batch: a payload of {len(raw)} bytes has no stream name")
    size = _NAME_LENGTH.unpack_from(raw)[0]
    end = _NAME_LENGTH.size + size
    if len(raw) < end:
        raise RemoteProtocolError(f"Batch: a stream name of {size} bytes in a payload of "
                                  f"{len(raw)}")
    try:
        stream = bytes(raw[_NAME_LENGTH.size:end]).decode()
    except UnicodeDecodeError:
        raise RemoteProtocolError("Batch: the stream name is not UTF-8") from None
    try:
        columns = decode_columns(memoryview(raw)[end:])
    except RemoteProtocolError as e:
        raise RemoteProtocolError(f"Batch (stream {show(stream)}): {e}") from None
    return Batch(stream, columns=columns)


def _remote_batch_error(stream: str, rows: list[Any]) -> RemoteProtocolError:
    for n, row in enumerate(rows):
        problem = _remote_tuple_problem(row)
        if problem is not None:
            return RemoteProtocolError(f"Batch tuple {n}: {problem} (stream {show(stream)})")
    return RemoteProtocolError(f"Batch: invalid tuples (stream {show(stream)})")


def _remote_tuple_problem(row: Any) -> str | None:
    if type(row) is not list or len(row) != 5:
        return f"must be a list of 5 fields {_TUPLE_LAYOUT}, got {show(row)}"
    k, i, t, m, v = row
    if type(k) is not int or k not in _KIND_OF:
        return f"field 'kind' must be a tuple kind code 0..{len(KINDS) - 1}, got {show(k)}"
    for field, x in (("id", i), ("time", t), ("tmax", m)):
        if type(x) is not int:
            return f"field {field!r} must be an integer, got {show(x)}"
    if type(v) is not list:
        return f"field 'values' must be a list, got {show(v)}"
    for j, x in enumerate(v):
        if type(x) not in _SCALARS:
            return f"value {j} must be a string, number, boolean or null, got {show(x)}"
    return None


def _decode_heartbeat_response(p: Any, raw: _Raw) -> HeartbeatResponse:
    name = "HeartbeatResponse"
    if type(p) is not list or len(p) != 4:
        raise RemoteProtocolError(
            f"{name}: payload must be a list of 4 fields [replica, seq, state, streams], got {show(p)}"
        )
    replica, seq, state, entries = p
    _check_remote(name, "replica", replica, str)
    _check_remote(name, "seq", seq, int)
    own = _remote_state(name, "field 'state'", state)
    if type(entries) is not list:
        raise RemoteProtocolError(f"{name}: field 'streams' must be a list, got {show(entries)}")
    streams: dict[str, ConsistencyState] = {}
    frontiers: dict[str, int] = {}
    for n, entry in enumerate(entries):
        where = f"{name} stream {n}"
        if type(entry) is not list or len(entry) != 3 or type(entry[0]) is not str:
            raise RemoteProtocolError(
                f"{where}: must be a list [stream name, state, frontier], got {show(entry)}"
            )
        stream, code, frontier = entry
        if stream in streams:
            raise RemoteProtocolError(f"{where}: stream {show(stream)} appears twice")
        streams[stream] = _remote_state(where, "state", code)
        if type(frontier) is not int or frontier < 0:
            raise RemoteProtocolError(
                f"{where}: the frontier of stream {show(stream)} must be a tuple time (an "
                f"integer >= 0), got {show(frontier)}"
            )
        frontiers[stream] = frontier
    return HeartbeatResponse(replica, seq, own, streams, frontiers)


def _decode_heartbeat_request(p: Any, raw: _Raw) -> HeartbeatRequest:
    name = "HeartbeatRequest"
    if type(p) is not list or len(p) != 3:
        raise RemoteProtocolError(
            f"{name}: payload must be a list of 3 fields [sender, seq, acks], got {show(p)}"
        )
    sender, seq, entries = p
    _check_remote(name, "sender", sender, str)
    _check_remote(name, "seq", seq, int)
    if type(entries) is not list:
        raise RemoteProtocolError(f"{name}: field 'acks' must be a list, got {show(entries)}")
    acks: dict[str, int] = {}
    for n, entry in enumerate(entries):
        where = f"{name} ack {n}"
        if type(entry) is not list or len(entry) != 2 or type(entry[0]) is not str:
            raise RemoteProtocolError(
                f"{where}: must be a list [stream name, tuple id], got {show(entry)}"
            )
        stream, tuple_id = entry
        if stream in acks:
            raise RemoteProtocolError(f"{where}: stream {show(stream)} appears twice")
        if type(tuple_id) is not int or tuple_id < 0:
            raise RemoteProtocolError(
                f"{where}: the tuple id of stream {show(stream)} must be an integer >= 0, "
                f"got {show(tuple_id)}"
            )
        acks[stream] = tuple_id
    return HeartbeatRequest(sender, seq, acks)


def _decode_standby_checkpoint(p: Any, raw: _Raw) -> StandbyCheckpoint:
    name = "StandbyCheckpoint"
    if type(p) is not list or len(p) != 7:
        raise RemoteProtocolError(
            f"{name}: payload must be a list of 7 fields [replica, seq, base, parts, inputs, "
            f"outputs, leaves], got {show(p)}")
    replica, seq, base, parts, entries, outs, leaves = p
    _check_remote(name, "replica", replica, str)
    _check_remote(name, "seq", seq, int)
    _check_remote(name, "base", base, int)
    if type(parts) is not dict:
        raise RemoteProtocolError(f"{name}: field 'parts' must be an object, got {show(parts)}")
    if type(leaves) is not dict:
        raise RemoteProtocolError(f"{name}: field 'leaves' must be an object, got {show(leaves)}")
    for op, delta in leaves.items():
        if (problem := _leaves_problem(delta)) is not None:
            raise RemoteProtocolError(f"{name}: leaves of operator {show(op)}: {problem}")
    for field, x in (("parts", parts), ("leaves", leaves)):
        try:  # what decodes must encode back: orjson nests less deeply on the way out (fuzz)
            orjson.dumps(x)
        except orjson.JSONEncodeError as exc:
            raise RemoteProtocolError(
                f"{name}: field {field!r} does not encode back: {exc}") from None
    for field, x in (("inputs", entries), ("outputs", outs)):
        if type(x) is not list:
            raise RemoteProtocolError(f"{name}: field {field!r} must be a list, got {show(x)}")
    inputs: dict[str, tuple[int, int]] = {}
    for n, e in enumerate(entries):
        if (type(e) is not list or len(e) != 3 or type(e[0]) is not str or e[0] in inputs
                or not all(type(i) is int and i >= 0 for i in e[1:])):
            raise RemoteProtocolError(
                f"{name} input {n}: must be a list [stream name, stable id, tentative id] "
                f"(ids >= 0, each stream once), got {show(e)}")
        inputs[e[0]] = (e[1], e[2])
    outputs: dict[str, tuple[Tuple, ...]] = {}
    for n, e in enumerate(outs):
        if type(e) is not list or len(e) != 2 or type(e[0]) is not str or e[0] in outputs \
                or type(e[1]) is not list:
            raise RemoteProtocolError(
                f"{name} output {n}: must be a list [stream name, tuples] (each stream once), "
                f"got {show(e)}")
        for k, row in enumerate(e[1]):
            problem = _remote_tuple_problem(row)
            if problem is not None:
                raise RemoteProtocolError(f"{name} output {n} tuple {k}: {problem}")
        outputs[e[0]] = tuple(_new(Tuple, (_KIND_OF[r[0]], r[1], r[2], r[3], tuple(r[4])))
                              for r in e[1])
    return StandbyCheckpoint(replica, seq, base, parts, inputs, outputs, leaves)


def _remote_state(where: str, what: str, code: Any) -> ConsistencyState:
    if type(code) is int and code in _STATE_OF:
        return _STATE_OF[code]
    raise RemoteProtocolError(
        f"{where}: {what} must be a consistency state code 0..{len(_STATE_OF) - 1}, got {show(code)}"
    )


def _check_remote(name: str, field: str, x: object, typ: type) -> None:
    if type(x) is not typ:
        raise RemoteProtocolError(f"{name}: field {field!r} must be {_WHAT[typ]}, got {show(x)}")


def _simple_decoder(cls: type[Message], spec: _Spec) -> _Decoder:
    name = cls.__name__
    layout = "[" + ", ".join(field for field, _ in spec) + "]"

    def decode(p: Any, raw: _Raw) -> Message:
        if type(p) is not list or len(p) != len(spec):
            raise RemoteProtocolError(
                f"{name}: payload must be a list of {len(spec)} fields {layout}, got {show(p)}"
            )
        for (field, typ), x in zip(spec, p, strict=True):
            _check_remote(name, field, x, typ)
        return cls(*p)

    return decode


# Indexed by the message-type byte: a list lookup, and None for every unknown code.
_DECODERS: list[_Decoder | None] = [None] * 256
for _cls, _spec in _SIMPLE.items():
    _DECODERS[MESSAGE_TYPES[_cls]] = _simple_decoder(_cls, _spec)
_DECODERS[MessageType.HEARTBEAT_RESPONSE] = _decode_heartbeat_response
_DECODERS[MessageType.HEARTBEAT_REQUEST] = _decode_heartbeat_request
_DECODERS[MessageType.STANDBY_CHECKPOINT] = _decode_standby_checkpoint


def decode_payload(code: int, raw: bytes | bytearray) -> Message:
    """The message of type ``code`` whose orjson payload is ``raw``.

    Raises :class:`RemoteProtocolError` (and nothing else) if ``code`` is unknown or the
    payload is not valid JSON or not a valid message of that type.
    """
    if code == MessageType.BATCH:
        return _decode_batch(raw)
    decoder = _DECODERS[code] if 0 <= code < len(_DECODERS) else None
    if decoder is None:
        raise RemoteProtocolError(f"unknown message type {code}")
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        name = MESSAGE_CLASSES[MessageType(code)].__name__
        raise RemoteProtocolError(f"{name}: payload is not valid JSON: {exc}") from None
    return decoder(obj, raw)
