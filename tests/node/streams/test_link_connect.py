"""The input link while it connects: a switch does not wait for a connect that gets no
answer (over every transport, through the fault wrapper's blackhole cut)."""

from __future__ import annotations

import asyncio

import pytest

from node.faults.rules import Faults, FaultyTransport
from node.net.transport import Connection, Handler, Server, Transport
from node.streams.link import InputLink
from tests.node.net.test_transport import GUARD, LEAK_FREE, Net, make_net, wait_until
from tests.node.streams.test_publisher import LOG, Producer, Sink, running, stable

pytestmark = LEAK_FREE


@pytest.fixture(params=["tcp", "memory", "memory-codec"])
def net(request: pytest.FixtureRequest) -> Net:
    return make_net(request.param)


class Watched:
    """A transport around ``inner`` that counts the connects under way and the ones
    cancelled: what the test waits on, instead of a sleep."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.pending = 0
        self.cancelled = 0

    async def serve(self, host: str, port: int, handler: Handler) -> Server:
        return await self.inner.serve(host, port, handler)

    async def connect(self, host: str, port: int) -> Connection:
        self.pending += 1
        try:
            return await self.inner.connect(host, port)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.pending -= 1


async def test_a_switch_abandons_a_connect_that_gets_no_answer(net: Net) -> None:
    """Simulate seed 1724: n2's monitor moved its link to n1b, dead behind a blackhole
    partition, so the connect got no answer; the monitor then declared n1b failed and
    switched the link back to n1a, but the link waited for its connect timeout first, and a
    tentative result reached the client 2.085 s after its input (bound k*X = 2 s). Here the
    connect to b would wait ten guards: told to switch to a meanwhile, the link subscribes
    there at once, and the stream goes on without a gap or a duplicate."""
    a, b = await Producer(net, name="a").start(), await Producer(net, name="b").start()
    faults = Faults("c1", log=LOG)
    watched = Watched(FaultyTransport(net.transport("c1"), faults, {b.address: "b"},
                                      connect_timeout=10 * GUARD))
    sink = Sink()
    link = InputLink(watched, "s", "c1", [a.address, b.address], sink.on_batch, log=LOG,
                     retry_interval=0.01, ack_interval=0.01)
    sink.link = link
    async with running(link.run()):
        for p in (a, b):
            await p.publish(stable(1, 20))
        await wait_until(lambda: link.last_stable_id == 20)
        faults.cut(["b"])  # a blackhole: a connect to b gets no answer
        link.switch_to(b.address)
        await wait_until(lambda: watched.pending == 1 and not a.subscribers())
        link.switch_to(a.address)
        await wait_until(lambda: link.producer == f"{net.host}:{a.port}")
        assert watched.cancelled == 1 and watched.pending == 0
        for p in (a, b):
            await p.publish(stable(21, 40))
        await wait_until(lambda: link.last_stable_id == 40)
        assert not b.subscribers() and link.failures == 0 and link.connects == 2
    assert [t.id for t in sink.raw] == list(range(1, 41))
    for p in (a, b):
        await p.stop()
