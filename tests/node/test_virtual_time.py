"""The virtual-time event loop (node/virtual_time.py) and the process clock (node/clock.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from node.clock import now_us, use_clock
from node.errors import SimulationDeadlock
from node.virtual_time import VirtualTimeLoop


def _run(coro):  # type: ignore[no-untyped-def]
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(coro)


def test_idle_time_is_skipped_and_timers_fire_in_order() -> None:
    async def main() -> tuple[float, list[tuple[str, float]]]:
        loop = asyncio.get_running_loop()
        fired: list[tuple[str, float]] = []

        async def at(name: str, delay: float) -> None:
            await asyncio.sleep(delay)
            fired.append((name, loop.time()))

        await asyncio.gather(at("c", 30.0), at("a", 10.0), at("b", 20.0))
        return loop.time(), fired

    started = time.perf_counter()
    end, fired = _run(main())
    assert end == 30.0
    assert fired == [("a", 10.0), ("b", 20.0), ("c", 30.0)]
    assert time.perf_counter() - started < 5.0  # an hour would be a hang, not a speed check


def test_timeouts_use_virtual_time() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(3600):
                await asyncio.Event().wait()
        return loop.time()

    assert _run(main()) == 3600.0


def test_waiting_for_nothing_is_a_deadlock_not_a_hang() -> None:
    async def main() -> None:
        await asyncio.Event().wait()

    with pytest.raises(SimulationDeadlock):
        _run(main())


def test_the_process_clock_can_be_replaced_and_restored() -> None:
    use_clock(lambda: 42)
    try:
        assert now_us() == 42
    finally:
        use_clock(None)
    assert abs(now_us() - time.time_ns() // 1000) < 10_000_000


def test_a_busy_wait_is_a_livelock_not_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    import node.virtual_time as vt

    monkeypatch.setattr(vt, "SPIN_LIMIT", 1000)

    async def main() -> None:
        while True:  # noqa: ASYNC110  the busy wait is what the loop must catch as a livelock
            await asyncio.sleep(0)

    with pytest.raises(SimulationDeadlock, match="livelock"):
        _run(main())


def test_a_ctrl_c_while_the_loop_is_built_leaves_a_whole_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The defect (a fresh clone's suite, `dpc simulate` interrupted): a Ctrl-C landing
    inside the loop's constructor left a half-built loop whose __del__ failed at exit
    ("'VirtualTimeLoop' object has no attribute '_ssock'"). Here SIGINT arrives while the
    loop's selector is made: it must come out as KeyboardInterrupt once the loop is whole,
    and the loop must be collected without an error."""
    import gc
    import selectors
    import signal
    import sys

    real = selectors.DefaultSelector

    def selector_with_ctrl_c() -> selectors.BaseSelector:
        signal.raise_signal(signal.SIGINT)
        return real()

    unraisable: list[object] = []
    monkeypatch.setattr(selectors, "DefaultSelector", selector_with_ctrl_c)
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            VirtualTimeLoop()
    finally:
        signal.signal(signal.SIGINT, before)
    gc.collect()
    assert not unraisable, [getattr(u, "exc_value", u) for u in unraisable]
