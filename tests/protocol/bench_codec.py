"""Codec throughput against its raw limit: ``python -m tests.protocol.bench_codec``.

Not a test (pytest does not collect it): a measurement to rerun after touching the hot path.
It decodes 100-tuple Batch payloads with values (int, str, float) and compares
decode + validate (:func:`protocol.payloads.decode_payload`, and the full
:class:`~protocol.codec.FrameDecoder`) with bare ``orjson.loads`` of the same bytes, and
:func:`~protocol.codec.encode` with bare ``orjson.dumps``. Best of 5 runs, results dropped
as they come (a consumer's steady state).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import orjson

from protocol import KINDS, Batch, FrameDecoder, MessageType, encode, make_tuple
from protocol.payloads import decode_payload

__all__ = ["main"]

BATCHES = 5_000
PER_BATCH = 100


def best_rate(run: Callable[[], None], repeats: int = 5) -> float:
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = max(best, BATCHES * PER_BATCH / (time.perf_counter() - start))
    return best


def main() -> None:
    tuples = tuple(
        make_tuple(KINDS[i % 2], i + 1, i * 10, i * 10, (i, f"sym{i}", i * 1.5))
        for i in range(PER_BATCH)
    )
    batch = Batch("quotes", tuples)
    frame = encode(batch)
    payload = frame[6:]
    rows = ["quotes", [list(t) for t in tuples]]

    def raw_loads() -> None:
        for _ in range(BATCHES):
            orjson.loads(payload)

    def decode() -> None:
        for _ in range(BATCHES):
            decode_payload(MessageType.BATCH, payload)

    def feed() -> None:
        decoder = FrameDecoder()
        for _ in range(BATCHES):
            decoder.feed(frame)

    def raw_dumps() -> None:
        for _ in range(BATCHES):
            orjson.dumps(rows)

    def enc() -> None:
        for _ in range(BATCHES):
            encode(batch)

    for gc_on in (True, False):
        (gc.enable if gc_on else gc.disable)()
        print(f"gc {'on ' if gc_on else 'off'}  (tuples/s, {PER_BATCH} per batch)")
        for label, run in [
            ("orjson.loads (raw limit)", raw_loads),
            ("decode_payload (decode + validate)", decode),
            ("FrameDecoder.feed (+ framing)", feed),
            ("orjson.dumps (raw limit)", raw_dumps),
            ("encode (validate + frame)", enc),
        ]:
            print(f"  {label:<38}{best_rate(run):>14,.0f}")
    gc.enable()


if __name__ == "__main__":
    main()
