"""Bad input on a real TCP data port (DESIGN.md 6.5): each kind of bad peer gets a clear
error naming it in the log and loses its connection, while a well-behaved subscriber on
another connection keeps receiving the complete, correct stream."""

from __future__ import annotations

import asyncio
import logging
import struct

import pytest

from protocol.codec import VERSION, encode
from protocol.messages import Batch, MessageType, Subscribe
from tests.node.net.test_transport import (
    GUARD,
    LEAK_FREE,
    MAX_FRAME,
    make_net,
    wait_until,
)
from tests.node.streams.test_publisher import LOG, Producer, S, make_link, running, stable

pytestmark = LEAK_FREE

HELLO_TIMEOUT = 0.2
SUBSCRIBE = encode(Subscribe("s", "x", 0, 0))

#: case -> (bytes the bad peer sends, whether it then hangs up, what the error says)
CASES: dict[str, tuple[bytes, bool, str]] = {
    "garbage": (b"GET / HTTP/1.1\r\nHost: dpc\r\n\r\n", False, "exceeds the limit"),
    "zeros": (bytes(64), False, "too short"),
    "unknown version": (
        struct.pack(">IBB", 4, VERSION + 1, MessageType.ACK) + b"[]",
        False,
        f"unknown protocol version {VERSION + 1}",
    ),
    "unknown type": (struct.pack(">IBB", 4, VERSION, 200) + b"[]", False, "unknown message type 200"),
    "bad payload": (
        struct.pack(">IBB", 7, VERSION, MessageType.SUBSCRIBE) + b"{oops",
        False,
        "sent bad data",
    ),
    "oversized frame": (
        struct.pack(">IBB", MAX_FRAME + 1, VERSION, MessageType.BATCH),
        False,
        f"exceeds the limit of {MAX_FRAME}",
    ),
    "unknown stream": (encode(Subscribe("nope", "x", 0, 0)), False, "unknown stream 'nope'"),
    "batch from a consumer": (encode(Batch("s", (S(1),))), False, "sent a Batch"),
    "subscribe then garbage": (SUBSCRIBE + b"\xff" * 10, False, "sent bad data"),
    "silent": (b"", False, f"connected but said nothing for {HELLO_TIMEOUT:g} s"),
    "disconnect mid-frame": (SUBSCRIBE[:9], True, "closed in the middle of a frame"),
}



async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    """True once the server closed: EOF, or a reset when it left our bytes unread."""
    try:
        while await reader.read(4096):
            pass
    except ConnectionResetError:
        pass
    return True


@pytest.mark.parametrize("case", list(CASES))
async def test_a_bad_peer_is_logged_and_closed_and_others_lose_nothing(
    case: str, caplog: pytest.LogCaptureFixture
) -> None:
    data, hang_up, says = CASES[case]
    caplog.set_level(logging.INFO, logger=LOG.name)
    net = make_net("tcp")
    prod = await Producer(net, hello_timeout=HELLO_TIMEOUT).start()
    link, sink = make_link(net, [prod.address], name="good")
    async with running(link.run()):
        await prod.publish(stable(1, 100))
        await wait_until(lambda: link.last_stable_id == 100)

        reader, writer = await asyncio.open_connection("127.0.0.1", prod.port)
        host, port = writer.get_extra_info("sockname")[:2]
        peer = f"{host}:{port}"
        try:
            writer.write(data)
            await writer.drain()
            if hang_up:
                writer.close()
            else:
                async with asyncio.timeout(GUARD):
                    assert await closed_by_server(reader)

            def logged() -> list[str]:
                return [
                    r.getMessage()
                    for r in caplog.records
                    if r.levelno == logging.ERROR and peer in r.getMessage()
                ]

            await wait_until(lambda: bool(logged()))
            assert says in logged()[0] and "closing the connection" in logged()[0]
            assert len(prod.conns) == 2  # the good link's and the bad peer's, no more
            await wait_until(lambda: list(prod.subscribers()) == ["good"])
        finally:
            writer.close()
            await writer.wait_closed()

        await prod.publish(stable(101, 200))  # the stream goes on for the good subscriber
        await wait_until(lambda: link.last_stable_id == 200)
    assert sink.ids() == list(range(1, 201))
    assert [t.id for t in sink.raw] == list(range(1, 201)) and link.reconnects == 0
    if case == "subscribe then garbage":  # what came before the garbage was served
        assert any(f"peer {peer} subscribed 'x'" in r.getMessage() for r in caplog.records)
    await prod.stop()


async def test_bad_peers_in_a_crowd_while_the_stream_flows(
    caplog: pytest.LogCaptureFixture,
) -> None:
    net = make_net("tcp")
    prod = await Producer(net, hello_timeout=HELLO_TIMEOUT, max_batch=10).start()
    link, sink = make_link(net, [prod.address], name="good")
    bad_cases = [c for c in CASES if c != "silent"]

    async def produce() -> None:
        for i in range(1, 2001, 20):
            await prod.publish(stable(i, i + 19))
            await asyncio.sleep(0)

    async def misbehave(data: bytes, hang_up: bool) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", prod.port)
        try:
            writer.write(data)
            await writer.drain()
            if not hang_up:
                await closed_by_server(reader)
        finally:
            writer.close()
            await writer.wait_closed()

    async with running(link.run()):
        await wait_until(lambda: link.connected)
        async with running(produce()) as (producer,):
            async with asyncio.timeout(GUARD):
                await asyncio.gather(*(misbehave(*CASES[c][:2]) for c in bad_cases))
                await producer
        await wait_until(lambda: link.last_stable_id == 2000)
    assert [t.id for t in sink.raw] == list(range(1, 2001)) and link.reconnects == 0

    def errors() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]

    await wait_until(lambda: len(errors()) == len(bad_cases))  # one each, none for "good"
    for case in bad_cases:
        assert any(CASES[case][2] in e for e in errors()), (case, errors())
    await prod.stop()
