"""Each way a frame or a message can be wrong gets an error that names what was wrong.

Remote garbage raises RemoteProtocolError (and poisons the decoder); a local misuse raises
LocalProtocolError.
"""

from __future__ import annotations

import datetime
import struct
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from protocol import (
    DEFAULT_MAX_FRAME_SIZE,
    VERSION,
    Ack,
    Batch,
    ConsistencyState,
    FrameDecoder,
    HeartbeatRequest,
    HeartbeatResponse,
    Kind,
    LocalProtocolError,
    MessageType,
    ReconcileRefuse,
    RemoteProtocolError,
    Subscribe,
    Tuple,
    decode_frame,
    encode,
    make_tuple,
)


def frame(code: int, payload: Any, *, version: int = VERSION) -> bytes:
    body = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    return struct.pack(">IBB", len(body) + 2, version, code) + body


def refused(data: bytes, **kw: Any) -> str:
    """Feed ``data`` in one chunk and return the RemoteProtocolError's message."""
    with pytest.raises(RemoteProtocolError) as info:
        decoder = FrameDecoder(**kw)
        decoder.feed(data)
        decoder.eof()
    return str(info.value)


GOOD_ROW = [0, 1, 10, 10, [1, "a", 2.5]]


def batch_frame(*rows: Any, stream: Any = "quotes") -> bytes:
    return frame(MessageType.BATCH, [stream, list(rows)])


# ------------------------------------------------------------------ frame level


def test_oversized_length_is_refused_from_the_header_alone() -> None:
    decoder = FrameDecoder()
    with pytest.raises(RemoteProtocolError) as info:
        decoder.feed(struct.pack(">I", 20_000_000))
    assert str(info.value) == "frame of 20000000 bytes exceeds the limit of 16777216"
    assert decoder.buffered == 0


def test_oversized_length_is_refused_before_buffering_a_body_in_the_same_chunk() -> None:
    decoder = FrameDecoder(max_frame_size=1000)
    with pytest.raises(
        RemoteProtocolError, match="frame of 100002 bytes exceeds the limit of 1000"
    ):
        decoder.feed(frame(MessageType.BATCH, b"x" * 100_000))
    assert decoder.buffered == 0


def test_oversized_length_is_refused_when_the_prefix_arrives_split() -> None:
    decoder = FrameDecoder()
    prefix = struct.pack(">I", 2**32 - 1)
    assert decoder.feed(prefix[:3]) == []
    with pytest.raises(RemoteProtocolError, match=f"exceeds the limit of {DEFAULT_MAX_FRAME_SIZE}"):
        decoder.feed(prefix[3:])


@pytest.mark.parametrize("length", [0, 1])
def test_length_too_short_for_version_and_type(length: int) -> None:
    assert f"frame of {length} bytes is too short" in refused(
        struct.pack(">I", length) + b"\x01\x01"
    )


def test_unknown_version() -> None:
    msg = refused(frame(MessageType.ACK, ["s", "c", 1], version=99))
    assert msg == f"unknown protocol version 99 (this side speaks {VERSION})"


def test_a_peer_of_the_version_before_the_heartbeat_acks_is_refused_by_version() -> None:
    old = frame(MessageType.HEARTBEAT_REQUEST, ["c1", 1], version=1)
    assert refused(old) == f"unknown protocol version 1 (this side speaks {VERSION})"


def test_heartbeat_acks_round_trip_in_order() -> None:
    msg = HeartbeatRequest("c1", 7, {"n1.out": 41, "n1.aux": 0})
    data = encode(msg)
    assert orjson.loads(data[6:]) == ["c1", 7, [["n1.out", 41], ["n1.aux", 0]]]
    assert decode_frame(data) == msg
    assert decode_frame(encode(HeartbeatRequest("c1", 8))) == HeartbeatRequest("c1", 8, {})


def test_heartbeat_frontiers_round_trip_beside_each_stream_state() -> None:
    up, stable = ConsistencyState.UP_FAILURE, ConsistencyState.STABLE
    msg = HeartbeatResponse(
        "n1b", 9, up, {"n1.out": up, "n1.aux": stable}, {"n1.out": 1_700_000_004_450_000, "n1.aux": 0}
    )
    data = encode(msg)
    assert orjson.loads(data[6:]) == [
        "n1b", 9, 1, [["n1.out", 1, 1_700_000_004_450_000], ["n1.aux", 0, 0]]
    ]
    assert decode_frame(data) == msg
    # Largest unsigned 64-bit time: still an int on the way back.
    big = HeartbeatResponse("r", 1, stable, {"s": stable}, {"s": 2**64 - 1})
    assert decode_frame(encode(big)) == big
    empty = HeartbeatResponse("r", 2, stable, {}, {})
    assert decode_frame(encode(empty)) == empty


@pytest.mark.parametrize("code", [0, 15, 42, 255])
def test_unknown_message_type(code: int) -> None:
    assert refused(frame(code, [])) == f"unknown message type {code}"


@pytest.mark.parametrize("payload", [b"", b"[1,", b"\xff\xfe", b"[NaN]", b"[1] [2]"])
def test_payload_not_json(payload: bytes) -> None:
    assert refused(frame(MessageType.ACK, payload)).startswith("Ack: payload is not valid JSON: ")


def test_eof_in_the_middle_of_a_frame() -> None:
    whole = encode(ReconcileRefuse("r", 1, "x" * 104))
    assert len(whole) == 120
    for cut in (3, 4, 5, 6, 119):
        decoder = FrameDecoder()
        assert decoder.feed(whole[:cut]) == []
        with pytest.raises(RemoteProtocolError) as info:
            decoder.eof()
        assert str(info.value) == (
            f"connection closed in the middle of a frame (got {cut} of 120 bytes)"
            if cut >= 4
            else f"connection closed in the middle of a frame (got {cut} bytes, "
            "not even its 4-byte length)"
        )


def test_eof_between_frames_is_clean() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(encode(Ack("s", "c", 1))) == [Ack("s", "c", 1)]
    decoder.eof()
    with pytest.raises(LocalProtocolError, match="after eof"):
        decoder.feed(b"")


def test_decoder_is_poisoned_after_an_error() -> None:
    decoder = FrameDecoder()
    with pytest.raises(RemoteProtocolError) as first:
        decoder.feed(frame(42, []))
    good = encode(Ack("s", "c", 1))
    for later in (lambda: decoder.feed(good), decoder.eof):
        with pytest.raises(RemoteProtocolError) as again:
            later()
        assert again.value is first.value
    assert decoder.buffered == 0


def test_decode_frame_wants_exactly_one_whole_frame() -> None:
    good = encode(Ack("s", "c", 1))
    assert decode_frame(good) == Ack("s", "c", 1)
    assert "expected exactly one frame, got 2" in _remote(lambda: decode_frame(good + good))
    assert "expected exactly one frame, got 0" in _remote(lambda: decode_frame(b""))
    assert "got 5 of " in _remote(lambda: decode_frame(good[:5]))
    assert "got 3 bytes, not even its 4-byte length" in _remote(
        lambda: decode_frame(good + good[:3])
    )


def _remote(f: Any) -> str:
    with pytest.raises(RemoteProtocolError) as info:
        f()
    return str(info.value)


@pytest.mark.parametrize("limit", [0, 1, 2**32, "16"])
def test_bad_max_frame_size_is_a_local_error(limit: Any) -> None:
    with pytest.raises(LocalProtocolError, match="max_frame_size"):
        FrameDecoder(max_frame_size=limit)


# ------------------------------------------------------------------ Batch payloads
# A Batch is binary (protocol version 9): the stream's name, then its tuples as one Arrow
# IPC stream (protocol/columns.py). These build hostile IPC streams with pyarrow itself.

KEYS = [("kind", pa.int8()), ("id", pa.int64()), ("time", pa.int64()), ("tmax", pa.int64())]


def ipc_stream(arrays: list[Any], fields: list[pa.Field], **options: Any) -> bytes:
    batch = pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, batch.schema, options=ipc.IpcWriteOptions(**options)) as w:
        w.write_batch(batch)
    return sink.getvalue().to_pybytes()


def batch_payload(body: bytes, stream: bytes = b"quotes") -> bytes:
    return frame(MessageType.BATCH, struct.pack(">H", len(stream)) + stream + body)


def columns(kinds: list[Any], *values: tuple[pa.Field, list[Any]],
            key_types: list[Any] | None = None, ids: list[Any] | None = None) -> bytes:
    n = len(kinds)
    types = key_types or [t for _, t in KEYS]
    keys = [pa.array(kinds, types[0]), pa.array(ids or list(range(1, n + 1)), types[1]),
            pa.array([10] * n, types[2]), pa.array([10] * n, types[3])]
    fields = [pa.field(name, typ) for (name, _), typ in zip(KEYS, types, strict=True)]
    arrays = keys + [pa.array(v, f.type) for f, v in values]
    return ipc_stream(arrays, fields + [f for f, _ in values])


def good_columns() -> bytes:
    return columns([0, 0, 3], (pa.field("v0", pa.int64()), [1, None, None]))


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (columns([0, 8, 0]), "row 1: unknown tuple kind 8"),
        (columns([0, -1]), "row 1: unknown tuple kind -1"),
        (columns([0], key_types=[pa.int8(), pa.float64(), pa.int64(), pa.int64()], ids=[1.5]),
         "column 'id' must be int64, got double"),
        (columns([0, 0], ids=[1, None]), "column 'id' has nulls"),
        (columns([0, 3], (pa.field("v0", pa.int64()), [1, 2])), "row 1: a BOUNDARY carries values"),
        (columns([0], (pa.field("v0", pa.float64()), [float("nan")])), "holds a NaN or an infinity"),
        (columns([0], (pa.field("v0", pa.float64()), [float("-inf")])), "holds a NaN or an infinity"),
        (columns([0], (pa.field("v1", pa.int64()), [1])), "column 4 must be named 'v0', got 'v1'"),
        (columns([0], (pa.field("v0", pa.int32()), [1])), "column 'v0' has type int32"),
        (columns([0], (pa.field("v0", pa.list_(pa.int64())), [[1]])), "column 'v0' has type list"),
        (columns([0], (pa.field("v0", pa.binary(), metadata={"dpc": "json"}), [b"[1]"])),
         "row 0: a list, not a scalar"),
        (columns([0], (pa.field("v0", pa.binary(), metadata={"dpc": "json"}), [b"{"])),
         "row 0: not JSON text"),
        (columns([0], (pa.field("v0", pa.binary(), metadata={"dpc": "json"}), [b"NaN"])),
         "row 0: not JSON text"),
        (columns([0], (pa.field("v0", pa.binary(), metadata={"x": "y"}), [b"1"])),
         "unknown metadata"),
        (ipc_stream([pa.array([0], pa.int8())], [pa.field("kind", pa.int8())]),
         "expected the columns kind, id, time, tmax first, got kind"),
        (ipc_stream([pa.array([0], pa.int8()), pa.array([1]), pa.array([1]), pa.array([1])],
                    [pa.field(n, t) for n, t in KEYS], compression="zstd"),
         "a compressed record batch"),
        (good_columns() + b"junk", "12 bytes after the record batch"),
        (good_columns()[:-30], "not a valid Arrow IPC stream"),
        (b"", "not a valid Arrow IPC stream"),
        (b"\xff\xff\xff\xff" + b"\x10\x00\x00\x00" + b"\x00" * 16, "not a valid Arrow IPC stream"),
    ],
)
def test_bad_columns_in_a_batch(body: bytes, expected: str) -> None:
    msg = refused(batch_payload(body))
    assert msg.startswith("Batch (stream 'quotes'): columns: "), msg
    assert expected in msg, msg


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b"", "Batch: a payload of 0 bytes has no stream name"),
        (b"\x00", "Batch: a payload of 1 bytes has no stream name"),
        (b"\x00\x09abc", "Batch: a stream name of 9 bytes in a payload of 5"),
        (b"\x00\x02\xff\xfe", "Batch: the stream name is not UTF-8"),
    ],
)
def test_bad_batch_shape(payload: bytes, expected: str) -> None:
    assert refused(frame(MessageType.BATCH, payload)) == expected


def test_a_good_hand_made_batch_is_accepted() -> None:
    """The test above refuses what is wrong, not everything hand-made."""
    msg = decode_frame(batch_payload(good_columns()))
    assert msg == Batch("quotes", (make_tuple(Kind.STABLE, 1, 10, 10, (1,)),
                                   make_tuple(Kind.STABLE, 2, 10, 10, (None,)),
                                   make_tuple(Kind.BOUNDARY, 3, 10, 10, ())))


def test_brackets_and_braces_inside_strings_are_fine() -> None:
    msg = Batch("[{", (make_tuple(Kind.STABLE, 1, 2, 3, ("[[", "{", "]}", None)),))
    assert decode_frame(encode(msg)) == msg


def test_error_messages_stay_short_however_large_the_garbage() -> None:
    body = columns([0], (pa.field("v" * 100_000, pa.int64()), [1]))
    msg = refused(batch_payload(body, stream=b"q" * 60_000))
    assert len(msg) < 300, msg
    assert "column 4 must be named 'v0'" in msg


# ------------------------------------------------------------------ other payloads


@pytest.mark.parametrize(
    ("code", "payload", "expected"),
    [
        (
            MessageType.SUBSCRIBE,
            ["s", "c", True, 0, -1, False],
            "Subscribe: field 'last_stable_id' must be an integer, got True",
        ),
        (
            MessageType.SUBSCRIBE,
            ["s", "c", 1],
            "Subscribe: payload must be a list of 6 fields "
            "[stream, subscriber, last_stable_id, last_tentative_id, ack_id, live], "
            "got ['s', 'c', 1]",
        ),
        (
            MessageType.SUBSCRIBE,
            ["s", "c", 1, 1, -1, 0],
            "Subscribe: field 'live' must be a boolean, got 0",
        ),
        (MessageType.UNSUBSCRIBE, {"stream": "s"}, "Unsubscribe: payload must be a list of 3"),
        (
            MessageType.UNSUBSCRIBE,
            ["s", "c", "yes"],
            "Unsubscribe: field 'release' must be a boolean, got 'yes'",
        ),
        (
            MessageType.STANDBY_CHECKPOINT,
            ["n1a", 1, 0, [], [], [], {}],
            "StandbyCheckpoint: field 'parts' must be an object, got []",
        ),
        (
            MessageType.STANDBY_CHECKPOINT,
            ["n1a", 1, 0, {}, [["s1", -1, 0]], [], {}],
            "StandbyCheckpoint input 0: must be a list [stream name, stable id, tentative id]",
        ),
        (
            MessageType.STANDBY_CHECKPOINT,
            ["n1a", 1, 0, {}, [], [["o", [[0, 1, 2]]]], {}],
            "StandbyCheckpoint output 0 tuple 0: must be a list of 5 fields",
        ),
        (
            MessageType.STANDBY_CHECKPOINT,
            ["n1a", 1, 0, {}, [], []],
            "StandbyCheckpoint: payload must be a list of 7 fields",
        ),
        (
            MessageType.STANDBY_CHECKPOINT,
            ["n1a", 2, 1, {}, [], [], {"u": [[-1, 5]]}],
            "StandbyCheckpoint: leaves of operator 'u': each entry must be [leaf index >= 0",
        ),
        (
            MessageType.STANDBY_CHECKPOINT,
            ["n1a", 2, 1, {}, [], [], {"u": {"0": 5}}],
            "StandbyCheckpoint: leaves of operator 'u': must be a list",
        ),
        (MessageType.STANDBY_ACK, ["n1b", 1, 1], "StandbyAck: field 'whole' must be a boolean"),
        (
            MessageType.HEARTBEAT_REQUEST,
            [None, 1, []],
            "HeartbeatRequest: field 'sender' must be a string, got None",
        ),
        (
            MessageType.HEARTBEAT_REQUEST,
            ["c1", 1],  # version 1's layout, under version 2's byte
            "HeartbeatRequest: payload must be a list of 3 fields [sender, seq, acks], "
            "got ['c1', 1]",
        ),
        (
            MessageType.HEARTBEAT_REQUEST,
            ["c1", 1, {"s": 3}],
            "HeartbeatRequest: field 'acks' must be a list, got {'s': 3}",
        ),
        (
            MessageType.HEARTBEAT_REQUEST,
            ["c1", 1, [["s", 3], ["t"]]],
            "HeartbeatRequest ack 1: must be a list [stream name, tuple id], got ['t']",
        ),
        (
            MessageType.HEARTBEAT_REQUEST,
            ["c1", 1, [[3, "s"]]],
            "HeartbeatRequest ack 0: must be a list [stream name, tuple id], got [3, 's']",
        ),
        (
            MessageType.HEARTBEAT_REQUEST,
            ["c1", 1, [["s", 3], ["s", 4]]],
            "HeartbeatRequest ack 1: stream 's' appears twice",
        ),
        (
            MessageType.HEARTBEAT_REQUEST,
            ["c1", 1, [["s", -1]]],
            "HeartbeatRequest ack 0: the tuple id of stream 's' must be an integer >= 0, got -1",
        ),
        (
            MessageType.HEARTBEAT_REQUEST,
            ["c1", 1, [["s", True]]],
            "HeartbeatRequest ack 0: the tuple id of stream 's' must be an integer >= 0, got True",
        ),
        (
            MessageType.HEARTBEAT_REQUEST,
            ["c1", 1, [["s", 2.0]]],
            "HeartbeatRequest ack 0: the tuple id of stream 's' must be an integer >= 0, got 2.0",
        ),
        (MessageType.ACK, ["s", "c", 2.0], "Ack: field 'tuple_id' must be an integer, got 2.0"),
        (
            MessageType.RECONCILE_REQUEST,
            ["r", 5, 1, 0],
            "ReconcileRequest: field 'node' must be a string, got 5",
        ),
        (
            MessageType.RECONCILE_GRANT,
            [],
            "ReconcileGrant: payload must be a list of 2 fields [replica, request]",
        ),
        (
            MessageType.RECONCILE_REFUSE,
            ["r", 1, ["busy"]],
            "ReconcileRefuse: field 'reason' must be a string",
        ),
        (
            MessageType.HEARTBEAT_RESPONSE,
            ["r", 1, 4, []],
            "HeartbeatResponse: field 'state' must be a consistency state code 0..3, got 4",
        ),
        (
            MessageType.HEARTBEAT_RESPONSE,
            ["r", 1, True, []],
            "HeartbeatResponse: field 'state' must be a consistency state code 0..3, got True",
        ),
        (
            MessageType.HEARTBEAT_RESPONSE,
            ["r", 1, 0, {"s": 0}],
            "HeartbeatResponse: field 'streams' must be a list, got {'s': 0}",
        ),
        (
            MessageType.HEARTBEAT_RESPONSE,
            ["r", 1, 0, [["s", 0, 5], ["t"]]],
            "HeartbeatResponse stream 1: must be a list [stream name, state, frontier], "
            "got ['t']",
        ),
        (
            # Version 1's layout, without the frontier.
            MessageType.HEARTBEAT_RESPONSE,
            ["r", 1, 0, [["s", 0]]],
            "HeartbeatResponse stream 0: must be a list [stream name, state, frontier], "
            "got ['s', 0]",
        ),
        (
            MessageType.HEARTBEAT_RESPONSE,
            ["r", 1, 0, [["s", 0, 5, 6]]],
            "HeartbeatResponse stream 0: must be a list [stream name, state, frontier], "
            "got ['s', 0, 5, 6]",
        ),
        (
            MessageType.HEARTBEAT_RESPONSE,
            ["r", 1, 0, [["s", 0, 1], ["s", 1, 2]]],
            "HeartbeatResponse stream 1: stream 's' appears twice",
        ),
        (
            MessageType.HEARTBEAT_RESPONSE,
            ["r", 1, 0, [["s", "STABLE", 0]]],
            "HeartbeatResponse stream 0: state must be a consistency state code 0..3, got 'STABLE'",
        ),
        (
            MessageType.HEARTBEAT_RESPONSE,
            ["r", 1, 0, [["s", 0, -1]]],
            "HeartbeatResponse stream 0: the frontier of stream 's' must be a tuple time "
            "(an integer >= 0), got -1",
        ),
        (
            MessageType.HEARTBEAT_RESPONSE,
            ["r", 1, 0, [["s", 0, True]]],
            "HeartbeatResponse stream 0: the frontier of stream 's' must be a tuple time "
            "(an integer >= 0), got True",
        ),
        (
            MessageType.HEARTBEAT_RESPONSE,
            ["r", 1, 0, [["s", 0, 2.5]]],
            "HeartbeatResponse stream 0: the frontier of stream 's' must be a tuple time "
            "(an integer >= 0), got 2.5",
        ),
        (
            MessageType.HEARTBEAT_RESPONSE,
            ["r", 1, 0, [["s", 0, None]]],
            "HeartbeatResponse stream 0: the frontier of stream 's' must be a tuple time "
            "(an integer >= 0), got None",
        ),
        (
            MessageType.HEARTBEAT_RESPONSE,
            ["r", 1, 0],
            "HeartbeatResponse: payload must be a list of 4",
        ),
    ],
)
def test_bad_control_message(code: int, payload: Any, expected: str) -> None:
    assert refused(frame(code, payload)).startswith(expected)


# ------------------------------------------------------------------ local misuse


def t(*values: Any, kind: Any = Kind.STABLE, id: Any = 1) -> Tuple:
    return make_tuple(kind, id, 10, 10, values)


@pytest.mark.parametrize(
    ("msg", "expected"),
    [
        ({"stream": "s"}, "cannot encode {'stream': 's'}: not a protocol message"),
        (Batch(1, ()), "cannot encode Batch: field 'stream' must be a string, got 1"),
        (Batch("s", [t(1), 5]), "cannot encode Batch: tuple 1 must be a Tuple"),
        (
            Batch("s", (t(1), (0, 1, 2, 3, ()))),
            "cannot encode Batch: tuple 1 must be a Tuple (Kind, int, int, int, tuple)",
        ),
        (Batch("s", (t(1, kind=0),)), "cannot encode Batch: tuple 0 must be a Tuple"),
        (Batch("s", (t(1, id=True),)), "cannot encode Batch: tuple 0 must be a Tuple"),
        (Batch("s", (t(1, id=1.0),)), "cannot encode Batch: tuple 0 must be a Tuple"),
        (Batch("s", (t(1, id=2**63),)), "cannot encode Batch: tuple 0 must be a Tuple"),
        (Batch("s", (make_tuple(Kind.STABLE, 1, 2, 3, [1]),)), "tuple 0 must be a Tuple"),
        (Batch("s", (t(1), t(1, 2))), "tuple 1 has 2 values, the batch's data tuples before "
                                      "it 1: one stream, one schema"),
        (Batch("s", (make_tuple(Kind.UNDO, 1, 2, 3, (1,)),)), "tuple 0: a UNDO carries no values"),
        (
            Batch("s", (t(1, (2,)),)),
            "value 1 must be a str, int, float, bool or None, got tuple (2,)",
        ),
        (
            Batch("s", (t(datetime.date(2024, 1, 1)),)),
            "value 0 must be a str, int, float, bool or None, got date",
        ),
        (Batch("s", (t(Kind.UNDO),)), "value 0 must be a str, int, float, bool or None, got Kind"),
        (
            Batch("s", (t(None, 1.0, float("nan")),)),
            "value 2 must be a finite float (the wire carries no NaN or infinity)",
        ),
        (
            Batch("s", (t(float("-inf")),)),
            "value 0 must be a finite float (the wire carries no NaN or infinity)",
        ),
        (Batch("s", (t(2**64),)), "cannot encode Batch: value 0: an int beyond 64 bits"),
        (Batch("s", (t("\ud800"),)), "cannot encode Batch: value 0: "),
        (Batch("\ud800", ()), "cannot encode Batch: the stream name is not valid UTF-8"),
        (
            Subscribe("s", "c", 1, False),
            "cannot encode Subscribe: field 'last_tentative_id' must be an integer, got False",
        ),
        (
            Subscribe("s", "c", 1, 1, -1, 1),  # type: ignore[arg-type]
            "cannot encode Subscribe: field 'live' must be a boolean, got 1",
        ),
        (
            HeartbeatRequest("a", "1"),
            "cannot encode HeartbeatRequest: field 'seq' must be an integer, got '1'",
        ),
        (
            HeartbeatRequest("a", 1, [("s", 1)]),  # type: ignore[arg-type]
            "cannot encode HeartbeatRequest: field 'acks' must be a mapping",
        ),
        (
            HeartbeatRequest("a", 1, {"s": -1}),
            "cannot encode HeartbeatRequest: field 'acks' must map stream names to tuple ids "
            ">= 0, got 's': -1",
        ),
        (
            HeartbeatRequest("a", 1, {"s": False}),
            "field 'acks' must map stream names to tuple ids >= 0, got 's': False",
        ),
        (
            HeartbeatRequest("a", 1, {1: 2}),  # type: ignore[dict-item]
            "field 'acks' must map stream names to tuple ids >= 0, got 1: 2",
        ),
        (
            ReconcileRefuse("r", 1, None),
            "cannot encode ReconcileRefuse: field 'reason' must be a string, got None",
        ),
        (
            HeartbeatResponse("r", 1, "STABLE", {}, {}),  # type: ignore[arg-type]
            "cannot encode HeartbeatResponse: field 'state' must be a ConsistencyState",
        ),
        (
            HeartbeatResponse(
                "r", 1, ConsistencyState.STABLE, [("s", ConsistencyState.STABLE)], {"s": 0}  # type: ignore[arg-type]
            ),
            "field 'streams' must be a mapping",
        ),
        (
            HeartbeatResponse("r", 1, ConsistencyState.STABLE, {"s": 0}, {"s": 0}),  # type: ignore[dict-item]
            "field 'streams' must map stream names to ConsistencyState, got 's': 0",
        ),
        (
            HeartbeatResponse("r", 1, ConsistencyState.STABLE, {}, [("s", 0)]),  # type: ignore[arg-type]
            "cannot encode HeartbeatResponse: field 'frontiers' must be a mapping",
        ),
        (
            HeartbeatResponse("r", 1, ConsistencyState.STABLE, {"s": ConsistencyState.STABLE}, {}),
            "cannot encode HeartbeatResponse: field 'frontiers' must have exactly the streams "
            "of field 'streams' (['s']), got []",
        ),
        (
            HeartbeatResponse("r", 1, ConsistencyState.STABLE, {}, {"t": 3}),
            "field 'frontiers' must have exactly the streams of field 'streams' ([]), got ['t']",
        ),
        (
            HeartbeatResponse("r", 1, ConsistencyState.STABLE, {"s": ConsistencyState.STABLE},
                              {"s": -1}),
            "field 'frontiers' must map stream names to tuple times >= 0, got 's': -1",
        ),
        (
            HeartbeatResponse("r", 1, ConsistencyState.STABLE, {"s": ConsistencyState.STABLE},
                              {"s": True}),
            "field 'frontiers' must map stream names to tuple times >= 0, got 's': True",
        ),
        (
            HeartbeatResponse("r", 1, ConsistencyState.STABLE, {"s": ConsistencyState.STABLE},
                              {"s": 2**64}),
            "cannot encode HeartbeatResponse",  # beyond 64 bits: orjson refuses it
        ),
    ],
)
def test_encoding_an_invalid_message_is_a_local_error(msg: Any, expected: str) -> None:
    with pytest.raises(LocalProtocolError) as info:
        encode(msg)
    assert str(info.value).startswith(expected) or expected in str(info.value), str(info.value)


def test_finite_floats_next_to_nulls_and_null_strings_encode() -> None:
    # orjson writes NaN as null; a real null or the string "null" must not be taken for one
    msg = Batch("null", (t(None, 1.5, "null", -0.0, 1e308),))
    assert decode_frame(encode(msg)) == msg


def test_messages_before_a_bad_frame_are_not_lost() -> None:
    """Good frames completed in the same chunk as a bad one travel on the error."""
    from protocol.codec import FrameDecoder, encode
    from protocol.messages import Unsubscribe

    good = [encode(Unsubscribe(f"s{i}", "c")) for i in range(3)]
    bad = b"\x00\x00\x00\x03\x63\x01{"  # unknown version 99
    decoder = FrameDecoder()
    with pytest.raises(RemoteProtocolError, match="version 99") as err:
        decoder.feed(b"".join(good) + bad)
    assert err.value.messages == [Unsubscribe(f"s{i}", "c") for i in range(3)]
    with pytest.raises(RemoteProtocolError):  # poisoned: the caller closes the link
        decoder.feed(good[0])


def test_a_standby_checkpoint_nested_deeper_than_it_encodes_is_refused() -> None:
    """Found by ``dpc fuzz`` (seed 20240521, frame 89767): orjson decodes deeper nesting than
    it encodes, so a checkpoint's snapshots nested 300 deep decoded into a message that could
    not be sent on; refused at decoding now, saying so."""
    deep = b"[" * 300 + b"0" + b"]" * 300  # orjson would not even write it
    body = b'["n1a", 1, 0, {"u": ' + deep + b"}, [], [], {}]"
    msg = refused(frame(MessageType.STANDBY_CHECKPOINT, body))
    assert msg.startswith("StandbyCheckpoint: field 'parts' does not encode back")
