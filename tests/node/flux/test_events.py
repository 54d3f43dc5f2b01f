"""The Flux controller's detector and event log (node/flux/events.py), its loop on an
injected probe (node/flux/controller.py) and a follower (node/flux/follow.py): fail after
``misses`` silent intervals, on a not-ready answer or a new incarnation; avail when a failed
replica is ready again; one order, each event once, history skipped by a new follower."""

from __future__ import annotations

import asyncio

import pytest

from node.flux.controller import Controller, Health
from node.flux.events import Detector, Event, EventLog, Kind, apply
from node.flux.follow import follow
from tests.node.net.test_transport import wait_until

F, A = Kind.FAIL, Kind.AVAIL


def test_a_replica_fails_when_silent_too_long_and_is_available_when_ready_again() -> None:
    d = Detector(["a", "b"], interval=100, misses=3)
    assert d.observe("a", 0, ready=True) == [] and d.observe("b", 0, ready=True) == []  # start
    assert d.tick(300) == []  # 3 intervals: not more than misses
    d.observe("b", 250, ready=True)
    assert d.tick(301) == [(F, "a", 0)]
    assert d.tick(900) == [(F, "b", 0)] and d.tick(1000) == []  # once per failure
    assert d.observe("a", 1000, ready=False) == []  # restarted, recovering: still failed
    assert d.observe("a", 1100, ready=True) == [(A, "a", 0)]
    assert d.observe("a", 1200, ready=True) == []


def test_a_restart_faster_than_the_detection_still_fails_then_avails() -> None:
    d = Detector(["a"], interval=100, misses=3)
    d.observe("a", 0, ready=True, incarnation=1)
    assert d.observe("a", 50, ready=False, incarnation=2) == [(F, "a", 1)]  # the old one
    assert d.observe("a", 90, ready=True, incarnation=2) == [(A, "a", 2)]
    d2 = Detector(["a"], interval=100, misses=3)
    d2.observe("a", 0, ready=True, incarnation=1)
    assert d2.observe("a", 50, ready=True, incarnation=2) == [(F, "a", 1), (A, "a", 2)]
    d2.tick(1000)
    assert d2.observe("a", 1100, ready=False, incarnation=3) == []  # failed (2) already


def test_a_joining_incarnation_that_dies_or_is_replaced_fails_too() -> None:
    """A failed replica's new incarnation, answering not ready, is catching up: if it goes
    silent, or a newer one answers, that incarnation failed (its partner stops waiting)."""
    d = Detector(["a"], interval=100, misses=3)
    d.observe("a", 0, ready=True, incarnation=1)
    assert d.tick(400) == [(F, "a", 1)]
    assert d.observe("a", 500, ready=False, incarnation=2) == [] and "a" in d.joining
    assert d.tick(801) == [(F, "a", 2)] and d.tick(2000) == []  # died during its catch-up
    assert d.observe("a", 2100, ready=False, incarnation=3) == []
    assert d.observe("a", 2200, ready=False, incarnation=4) == [(F, "a", 3)]
    assert d.observe("a", 2300, ready=True, incarnation=4) == [(A, "a", 4)]
    assert not d.joining


def test_a_replica_never_seen_has_no_event_and_the_log_numbers_in_order() -> None:
    d = Detector(["a"], interval=100, misses=3)
    assert d.tick(10_000) == []
    log = EventLog()
    events = apply(log, [(F, "x", 1), (A, "x", 2), (F, "y", 1)])
    assert [e.seq for e in events] == [1, 2, 3] and log.after(1) == events[1:]
    assert Event.from_json(events[2].to_json()) == events[2]
    with pytest.raises(ValueError, match="not a Flux event"):
        Event.from_json([1, "crash", "x", 1])
    with pytest.raises(ValueError, match="not a Flux event"):
        Event.from_json([1, "fail", "x"])


async def test_the_controller_orders_what_it_probes_and_a_follower_applies_each_once() -> None:
    alive = {"a": True, "b": True}

    async def probe(name: str) -> Health | None:
        return Health(True, 1) if alive[name] else None

    c = Controller(["a", "b"], probe, interval=10_000, misses=2)
    seen: list[Event] = []
    async with asyncio.TaskGroup() as tg:
        loop = tg.create_task(c.run())
        await wait_until(lambda: c.detector.seen == {"a", "b"})
        follower = tg.create_task(follow(c.after, seen.append))
        alive["a"] = False
        await wait_until(lambda: len(seen) == 1)
        alive["a"] = True
        await wait_until(lambda: len(seen) == 2)
        loop.cancel()
        follower.cancel()
    assert [(e.seq, e.kind, e.replica, e.incarnation) for e in seen] == [(1, F, "a", 1),
                                                                          (2, A, "a", 1)]
    assert c.status()["replicas"] == {"a": "up", "b": "up"}


async def test_a_new_follower_takes_the_history_as_it_is() -> None:
    c = Controller(["a"], lambda name: asyncio.sleep(0, None), interval=10_000, misses=2)
    c.record([(F, "a", 1), (A, "a", 2)])
    seen: list[Event] = []
    read: list[int] = []

    async def fetch(after: int, wait: float) -> list[Event]:
        read.append(after)
        return await c.after(after, wait)

    task = asyncio.create_task(follow(fetch, seen.append))
    await wait_until(lambda: len(read) >= 2)  # the history read, now waiting after it
    c.record([(F, "a", 2)])
    await wait_until(lambda: bool(seen))
    task.cancel()
    assert read[:2] == [0, 2]
    assert [e.seq for e in seen] == [3]
