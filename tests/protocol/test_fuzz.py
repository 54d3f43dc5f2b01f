"""Fuzzing the decoder: whatever the bytes, the only failure is a RemoteProtocolError.

Over 10,000 seeded cases of random bytes and of mutated valid frames (bit flips, inserted,
deleted and overwritten bytes, wrong length prefixes, truncations, structural changes to the
JSON payload, frames glued together), each fed in random chunk sizes. Checked for each case:

* nothing but RemoteProtocolError escapes ``feed`` or ``eof``;
* after an error the decoder is poisoned (the same error again) and holds no buffer;
* the decoder never buffers more than HEADER_SIZE + max_frame_size bytes;
* every message it does return is valid: it re-encodes, and decodes back equal.

The case mix is asserted too, so that the fuzzer cannot silently degrade into testing only
one error path.
"""

from __future__ import annotations

import random
import struct
from collections import Counter
from collections.abc import Callable
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import (
    HEADER_SIZE,
    Ack,
    Batch,
    ConsistencyState,
    FrameDecoder,
    HeartbeatRequest,
    HeartbeatResponse,
    Kind,
    Message,
    ReconcileGrant,
    ReconcileRefuse,
    ReconcileRequest,
    RemoteProtocolError,
    Subscribe,
    Unsubscribe,
    decode_frame,
    encode,
    make_tuple,
)

CASES = 12_000
SEED = 20240521


def random_value(rng: random.Random) -> Any:
    return rng.choice(
        [
            None,
            rng.random() < 0.5,
            rng.randint(-(2**63), 2**64 - 1),
            rng.randint(-5, 5),
            rng.uniform(-1e6, 1e6),
            "".join(rng.choice('ab[]{}"\\é0 ') for _ in range(rng.randint(0, 6))),
        ]
    )


def batch(rng: random.Random, name: str) -> Batch:
    """A valid Batch: its data tuples of one arity (one stream, one schema), its control
    tuples without values."""
    arity = rng.randint(0, 4)
    out = []
    for _ in range(rng.randint(0, 12)):
        kind = rng.choice(list(Kind))
        data = kind in (Kind.STABLE, Kind.TENTATIVE)
        out.append(make_tuple(kind, rng.randint(0, 10**6), rng.randint(-(10**9), 10**9),
                              rng.randint(0, 10**9),
                              tuple(random_value(rng) for _ in range(arity)) if data else ()))
    return Batch(name, tuple(out))


def random_message(rng: random.Random) -> Message:
    name = rng.choice(["", "s", "quotes", "n[0]", "é"])
    states = list(ConsistencyState)

    def heartbeat_response() -> HeartbeatResponse:
        outputs = [f"o{i}" for i in range(rng.randint(0, 3))]
        return HeartbeatResponse(
            name,
            rng.randint(0, 99),
            rng.choice(states),
            {o: rng.choice(states) for o in outputs},
            {o: rng.randint(0, 2**52) for o in outputs},
        )

    makers: list[Callable[[], Message]] = [
        lambda: batch(rng, name),
        lambda: Subscribe(name, "c", rng.randint(0, 99), rng.randint(0, 99)),
        lambda: Unsubscribe(name, "c"),
        lambda: HeartbeatRequest(
            name, rng.randint(0, 2**40), {f"o{i}": rng.randint(0, 99) for i in range(rng.randint(0, 3))}
        ),
        heartbeat_response,
        lambda: Ack(name, "c", rng.randint(0, 99)),
        lambda: ReconcileRequest(name, "n", 1, 0),
        lambda: ReconcileGrant(name, 1),
        lambda: ReconcileRefuse(name, 1, "busy"),
    ]
    # Batch, the hot path with the most structure, is made as often as all the others
    return rng.choice(makers[:1] * (len(makers) - 1) + makers[1:])()


def random_json(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth < 2 and roll < 0.15:
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if depth < 2 and roll < 0.2:
        return {"k": random_json(rng, depth + 1)}
    return random_value(rng)


def mutate_structure(rng: random.Random, node: Any) -> Any:
    """Replace, drop or add one item somewhere in a decoded JSON payload."""
    if not isinstance(node, list) or not node or rng.random() < 0.1:
        return random_json(rng)
    node = list(node)
    i = rng.randrange(len(node))
    roll = rng.random()
    if roll < 0.6:
        node[i] = mutate_structure(rng, node[i])
    elif roll < 0.8:
        del node[i]
    else:
        node.insert(i, random_json(rng))
    return node


def mutate(rng: random.Random, frame: bytes) -> bytes:
    data = bytearray(frame)
    op = rng.randrange(9)
    if op == 0 and data:  # flip one bit
        i = rng.randrange(len(data))
        data[i] ^= 1 << rng.randrange(8)
    elif op == 1:  # insert bytes
        i = rng.randint(0, len(data))
        data[i:i] = rng.randbytes(rng.randint(1, 4))
    elif op == 2 and data:  # delete bytes
        i = rng.randrange(len(data))
        del data[i : i + rng.randint(1, 4)]
    elif op == 3 and data:  # overwrite a byte
        data[rng.randrange(len(data))] = rng.randrange(256)
    elif op == 4:  # wrong length prefix: near the truth, or anything
        true = max(len(frame) - 4, 3)
        wrong = rng.choice([true + rng.randint(-3, 3), rng.randrange(2**32), 0, 1, 2])
        data[0:4] = struct.pack(">I", wrong)
    elif op == 5:  # truncate
        del data[rng.randint(0, len(data)) :]
    elif op == 6 and len(data) >= 6:  # the version or the type byte
        data[4 + rng.randrange(2)] = rng.randrange(256)
    elif len(frame) > 6:  # a structural change to the payload, re-framed with a correct length
        try:
            payload = orjson.loads(frame[6:])
        except orjson.JSONDecodeError:  # already mutated into non-JSON: leave it at that
            return frame
        body = orjson.dumps(mutate_structure(rng, payload))
        data = bytearray(struct.pack(">IBB", len(body) + 2, frame[4], frame[5]) + body)
    return bytes(data)


def make_case(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.1:
        return rng.randbytes(rng.randint(0, 64))
    frames = [encode(random_message(rng)) for _ in range(rng.randint(1, 3))]
    k = rng.randrange(len(frames))
    if roll < 0.95:
        frames[k] = mutate(rng, frames[k])
        if rng.random() < 0.3:  # sometimes a second mutation
            frames[k] = mutate(rng, frames[k])
    return b"".join(frames)


def classify(error: str) -> str:
    for key in (
        "exceeds the limit",
        "too short",
        "unknown protocol version",
        "unknown message type",
        "not valid JSON",
        "connection closed",
        "columns:",
    ):
        if key in error:
            return key
    return "other payload error"


def run_case(rng: random.Random, data: bytes, outcomes: Counter[str]) -> None:
    limit = rng.choice([64, 1024, 16 * 1024 * 1024, 16 * 1024 * 1024])
    decoder = FrameDecoder(max_frame_size=limit)
    got: list[Message] = []
    pos = 0
    try:
        while pos < len(data):
            n = rng.randint(1, 40)
            got.extend(decoder.feed(data[pos : pos + n]))
            pos += n
            assert decoder.buffered <= HEADER_SIZE + limit
        decoder.eof()
    except RemoteProtocolError as exc:
        outcomes[classify(str(exc))] += 1
        assert decoder.buffered == 0
        try:
            decoder.feed(b"\x00")
        except RemoteProtocolError as again:
            assert again is exc
        else:
            raise AssertionError("a poisoned decoder accepted more bytes") from exc
    else:
        outcomes["accepted"] += 1
    for msg in got:  # whatever came out is a valid message
        assert decode_frame(encode(msg)) == msg


def test_fuzz_mutated_frames_and_random_bytes() -> None:
    rng = random.Random(SEED)
    outcomes: Counter[str] = Counter()
    for case in range(CASES):
        data = make_case(rng)
        try:
            run_case(rng, data, outcomes)
        except Exception as exc:  # name the case so that it can be replayed
            raise AssertionError(f"case {case} (seed {SEED}): {data!r}") from exc
    assert sum(outcomes.values()) == CASES
    # every error class was reached, and a good share of cases were accepted or failed deep
    for key in (
        "accepted",
        "exceeds the limit",
        "too short",
        "unknown protocol version",
        "unknown message type",
        "not valid JSON",
        "connection closed",
        "columns:",
        "other payload error",
    ):
        assert outcomes[key] >= 50, outcomes


@given(st.binary(max_size=200), st.integers(min_value=1, max_value=16))
@settings(max_examples=500, deadline=None)
def test_random_bytes_in_fixed_chunks(data: bytes, chunk: int) -> None:
    decoder = FrameDecoder(max_frame_size=128)
    try:
        for i in range(0, len(data), chunk):
            for msg in decoder.feed(data[i : i + chunk]):
                assert decode_frame(encode(msg)) == msg
        decoder.eof()
    except RemoteProtocolError:
        pass
