"""Frames: messages to bytes and back, sans-IO (no sockets, no asyncio, no clock; h11-style).

Frame layout (big-endian)::

    +-----------+---------+------+---------------------------+
    | length: 4 | version | type | payload: length - 2 bytes |
    +-----------+---------+------+---------------------------+

``length`` counts everything after itself and is at most the receiver's ``max_frame_size``;
``version`` is :data:`VERSION`; ``type`` is a :class:`~protocol.messages.MessageType`; the
payload is the message's positional orjson array, except a Batch's: its stream name and its
tuples as one Arrow IPC stream (:mod:`protocol.payloads`, :mod:`protocol.columns`).

Invariants:

* :func:`encode` raises :class:`LocalProtocolError` for an invalid message or a frame over
  the limit, and whatever it returns decodes back to an equal message.
* Decoding raises nothing but :class:`RemoteProtocolError`, whatever the bytes, with a
  message that says what was wrong.
* Memory is bounded: the length prefix is checked against the limit *before* any of the body
  is buffered, and a :class:`FrameDecoder` never holds more than ``HEADER_SIZE +
  max_frame_size`` bytes. After an error it is poisoned: the caller closes the connection
  (the sender's output buffer replays whatever was in flight, so nothing accepted is lost).
"""

from __future__ import annotations

import struct
from typing import Final

from .errors import LocalProtocolError, RemoteProtocolError
from .messages import Message
from .payloads import decode_payload, encode_payload, is_known_type, show

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "HEADER_SIZE",
    "VERSION",
    "FrameDecoder",
    "decode_frame",
    "encode",
]

#: The protocol version this side speaks (the frame's version byte). Peers of another
#: version are refused on their first frame, with both versions named. 2: HeartbeatRequest
#: carries the sender's acks, HeartbeatResponse each stream's frontier (``protocol/payloads.py``);
#: 3: every connection opens with the authentication handshake (Hello, Challenge, Proof);
#: 4: Subscribe carries the subscriber's ack (``ack_id``: CEC, node/replica/cec.py);
#: 5: the stream state STANDBY (a process pair's secondary, node/replica/pair.py);
#: 6: Subscribe's ``live`` and Unsubscribe's ``release`` (amnesia, node/replica/runtime.py);
#: 7: StandbyCheckpoint and StandbyAck (passive standby, node/replica/standby.py);
#: 8: StandbyCheckpoint's ``leaves`` (upstream backup's restart points as leaf deltas);
#: 9: a Batch's tuples travel as columns, one Arrow IPC stream (protocol/columns.py).
VERSION: Final = 9
#: Default limit on a frame's length field (version + type + payload bytes).
DEFAULT_MAX_FRAME_SIZE: Final = 16 * 1024 * 1024
#: Bytes before the payload: 4-byte length, version byte, message-type byte.
HEADER_SIZE: Final = 6

_PREFIX_SIZE = 4
_LENGTH_LIMIT = 2**32 - 1  # the most a 4-byte length can say
_HEADER = struct.Struct(">IBB")
_LENGTH = struct.Struct(">I")


def encode(msg: Message, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> bytes:
    """One frame holding ``msg``. Raises :class:`LocalProtocolError` if ``msg`` is invalid
    or its frame would exceed ``max_frame_size`` (which the receiver would refuse)."""
    code, body = encode_payload(msg)
    length = len(body) + 2
    if length > min(max_frame_size, _LENGTH_LIMIT):
        raise LocalProtocolError(
            f"cannot encode {type(msg).__name__}: frame of {length} bytes exceeds the limit "
            f"of {max_frame_size}; send fewer tuples per batch"
        )
    return _HEADER.pack(length, VERSION, code) + body


def _check_header(length: int, version: int, code: int, limit: int) -> None:
    _check_length(length, limit)
    if version != VERSION:
        raise RemoteProtocolError(
            f"unknown protocol version {version} (this side speaks {VERSION})"
        )
    if not is_known_type(code):
        raise RemoteProtocolError(f"unknown message type {code}")


def _check_length(length: int, limit: int) -> None:
    if length > limit:
        raise RemoteProtocolError(f"frame of {length} bytes exceeds the limit of {limit}")
    if length < 2:
        raise RemoteProtocolError(
            f"frame of {length} bytes is too short: it must hold at least its version and type bytes"
        )


class FrameDecoder:
    """Turns the bytes of one connection, in chunks of any size, into messages.

    ``feed`` returns the messages completed by the chunk; ``eof`` says the peer closed. Any
    problem raises :class:`RemoteProtocolError`, and the decoder is then poisoned: every
    later ``feed`` or ``eof`` raises the same error. Messages completed earlier in the
    failing chunk are not lost: they travel on the error as ``err.messages``; the caller
    processes them, then closes the link.
    """

    __slots__ = ("_buf", "_closed", "_code", "_error", "_header", "_limit", "_payload_len")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if type(max_frame_size) is not int or not 2 <= max_frame_size <= _LENGTH_LIMIT:
            raise LocalProtocolError(
                f"max_frame_size must be an integer in 2..{_LENGTH_LIMIT}, got {show(max_frame_size)}"
            )
        self._limit = max_frame_size
        self._header = bytearray()  # a header split across chunks (< HEADER_SIZE bytes)
        self._buf = bytearray()  # a payload split across chunks (< its length)
        self._payload_len = -1  # -1: between frames or inside a header
        self._code = 0
        self._error: RemoteProtocolError | None = None
        self._closed = False

    @property
    def max_frame_size(self) -> int:
        return self._limit

    @max_frame_size.setter
    def max_frame_size(self, limit: int) -> None:
        """Bound the frames decoded from now on (a frame whose header already arrived was
        checked against the limit of its time). A connection lowers it until its peer has
        authenticated (node/net/auth.py)."""
        if type(limit) is not int or not 2 <= limit <= _LENGTH_LIMIT:
            raise LocalProtocolError(
                f"max_frame_size must be an integer in 2..{_LENGTH_LIMIT}, got {show(limit)}"
            )
        self._limit = limit

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame (at most ``HEADER_SIZE + max_frame_size``)."""
        return len(self._header) + len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Message]:
        """The messages completed by ``data``, in order (possibly none)."""
        if self._error is not None:
            raise self._error
        if self._closed:
            raise LocalProtocolError("feed() after eof(): the connection is closed")
        if type(data) is not bytes:
            data = bytes(data)  # our own immutable copy: nothing to lock or alias
        out: list[Message] = []
        try:
            self._feed(data, out)
        except RemoteProtocolError as exc:
            # Frames completed before the bad one were accepted: hand them over with the
            # error, so that the caller processes them before closing the link.
            exc.messages = out
            self._poison(exc)
            raise
        return out

    def eof(self) -> None:
        """The peer closed the connection. Raises if it did so in the middle of a frame."""
        if self._error is not None:
            raise self._error
        self._closed = True
        header = self._header
        if self._payload_len >= 0:
            got, total = HEADER_SIZE + len(self._buf), _PREFIX_SIZE + 2 + self._payload_len
        elif len(header) >= _PREFIX_SIZE:
            got, total = len(header), _PREFIX_SIZE + _LENGTH.unpack_from(header)[0]
        elif header:  # not even the length arrived: the frame's size is unknown
            got, total = len(header), -1
        else:
            return
        of = f"of {total} bytes" if total >= 0 else "bytes, not even its 4-byte length"
        exc = RemoteProtocolError(f"connection closed in the middle of a frame (got {got} {of})")
        self._poison(exc)
        raise exc

    def _poison(self, exc: RemoteProtocolError) -> None:
        self._error = exc
        self._header = bytearray()
        self._buf = bytearray()

    def _feed(self, data: bytes, out: list[Message]) -> None:
        pos, end, limit, header = 0, len(data), self._limit, self._header
        while True:
            if self._payload_len < 0:  # expecting a header
                if pos == end:
                    break
                if not header and end - pos >= HEADER_SIZE:
                    length, version, code = _HEADER.unpack_from(data, pos)
                    pos += HEADER_SIZE
                else:
                    take = data[pos : pos + HEADER_SIZE - len(header)]
                    header += take
                    pos += len(take)
                    if len(header) >= _PREFIX_SIZE:  # refuse a bad length before the rest
                        _check_length(_LENGTH.unpack_from(header)[0], limit)
                    if len(header) < HEADER_SIZE:
                        break
                    length, version, code = _HEADER.unpack(header)
                    header.clear()
                _check_header(length, version, code, limit)
                self._payload_len, self._code = length - 2, code
            need, buf = self._payload_len, self._buf
            if not buf and end - pos >= need:  # the whole payload is in this chunk
                raw: bytes | bytearray = data[pos : pos + need]
                pos += need
            else:
                take = data[pos : pos + need - len(buf)]
                buf += take
                pos += len(take)
                if len(buf) < need:
                    break
                raw, self._buf = buf, bytearray()  # hand the buffer over, no copy
            self._payload_len = -1
            out.append(decode_payload(self._code, raw))


def decode_frame(
    frame: bytes | bytearray | memoryview, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
) -> Message:
    """The message of ``frame``, which must be exactly one whole frame."""
    decoder = FrameDecoder(max_frame_size)
    messages = decoder.feed(frame)
    decoder.eof()
    if len(messages) != 1:
        raise RemoteProtocolError(f"expected exactly one frame, got {len(messages)}")
    return messages[0]
